"""Hadron's team tools on two `triptych serve` processes sharing one PostgreSQL database: they behave
like one server. Each process has its own data directory, so what one sees of the other's writes came
through the database: worker holds and takeovers, one gap-free sequence per Channel under posters on
both, the worklog, and another organization kept out through either."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hadron.team_world import CREW, build_team
from hadron.world import World, as_user, engine
from harness import SECRET, ServerProcess, run_threads
from postgres import PostgresCluster

POSTERS = 6  # split across the two workers
POSTS = 30  # 180 messages: one read page (limit <= 200)


@pytest.fixture(scope="module")
def workers(postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[World]]:
    url = postgres.create_database("team_workers")
    first = tmp_path_factory.mktemp("team-worker0") / "data"
    first.mkdir(parents=True)
    key, other, _ = build_team(first, url)
    env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET, **engine(url)}
    servers = [first, tmp_path_factory.mktemp("team-worker1") / "data"]
    processes = [ServerProcess(data, env) for data in servers]
    errors = run_threads(lambda i: processes[i].start(), 2)
    try:
        assert errors == [], [str(e) for e in errors]
        yield [World(p, key, other, database_url=url) for p in processes]
    finally:
        for process in processes:
            process.stop()


async def test_a_worker_bound_through_one_server_is_taken_and_held_through_the_other(
    workers: list[World],
) -> None:
    a, b = workers
    async with as_user(a, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        await alice.ok("hadron_cast_worker", name="Vega", role="backend-engineer")
        started = await alice.ok("hadron_start_session", description="on a", workerRef="Vega")
    session = started.data["sessionId"]
    async with as_user(b, "alice") as alice_b, as_user(b, "bob") as bob_b:
        await alice_b.ok("hadron_set_active_app", app=CREW)
        await alice_b.refused("hadron_start_session", "WORKER_TAKEN", description="on b", workerRef="Vega")
        await bob_b.ok("hadron_set_active_app", app=CREW)
        await bob_b.refused(
            "hadron_start_session", "WORKER_HELD", description="x", workerRef="Vega", force=True
        )
        mine = await alice_b.ok("hadron_whoami")
        assert session in [s["id"] for s in mine.data["sessions"]]
        taken = await alice_b.ok("hadron_start_session", description="on b", workerRef="Vega", force=True)
    async with as_user(a, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        vega = await alice.ok("hadron_get_worker", workerRef="Vega")
        assert vega.data["worker"]["liveSessionId"] == taken.data["sessionId"]


async def test_posters_on_both_servers_share_one_gap_free_sequence(workers: list[World]) -> None:
    async with as_user(workers[0], "alice") as alice:
        made = await alice.ok(
            "hadron_create_channel", memory="hrn:mem:acme.com:crew-team", loc="chats:both", name="both"
        )
    channel = made.data["address"]

    async def poster(client: int) -> list[int]:
        seqs: list[int] = []
        async with as_user(workers[client % 2], "bob" if client % 3 else "alice") as s:
            for i in range(POSTS):
                posted = await s.ok("hadron_channel_post", channel=channel, body=f"client {client} post {i}")
                seqs.append(posted.data["seq"])
        return seqs

    results = await asyncio.gather(*(poster(c) for c in range(POSTERS)))
    assert sorted(seq for seqs in results for seq in seqs) == list(range(1, POSTERS * POSTS + 1))
    for seqs in results:
        assert seqs == sorted(seqs)
    pages = []
    for world in workers:
        async with as_user(world, "erin") as erin:  # a READER AppMember
            page = await erin.ok("hadron_channel_read", channel=channel, sinceSeq=0, limit=POSTERS * POSTS)
            pages.append(page.data)
    assert pages[0] == pages[1] and pages[0]["total"] == POSTERS * POSTS
    assert [m["seq"] for m in pages[0]["messages"]] == list(range(1, POSTERS * POSTS + 1))


async def test_work_recorded_through_one_server_is_listed_by_the_other(workers: list[World]) -> None:
    a, b = workers
    async with as_user(a, "carol") as carol:
        await carol.ok("hadron_set_active_app", app=CREW)
        await carol.ok("hadron_cast_worker", name="Lyra", role="backend-engineer")
        sid = (await carol.ok("hadron_start_session", description="lyra", workerRef="Lyra")).data["sessionId"]
        for n in (7, 8):
            await carol.ok("hadron_record_work", session=sid, tool="github", kind="pr",
                           ref=f"acme/api#{n}", action="opened")  # fmt: skip
    async with as_user(b, "carol") as carol_b:
        await carol_b.ok("hadron_set_active_app", app=CREW)
        listed = await carol_b.ok("hadron_team_work_items", session=sid)
        assert [i["ref"] for i in listed.data["items"]] == ["acme/api#8", "acme/api#7"]  # newest first
        assert listed.data["total"] == 2


async def test_another_organization_sees_no_team_data_through_either_server(workers: list[World]) -> None:
    async with as_user(workers[0], "alice") as alice:
        made = await alice.ok(
            "hadron_create_channel", memory="hrn:mem:acme.com:crew-team", loc="chats:private", name="private"
        )
        await alice.ok("hadron_channel_post", channel=made.data["address"], body="acme only")
    for world in workers:
        async with as_user(world, "dave") as dave:  # globex.com's ADMIN
            await dave.refused("hadron_list_workers", "app_not_found", app=CREW)
            await dave.refused("hadron_channel_read", "channel_not_found", channel=made.data["address"])
            await dave.refused("hadron_team_chat_post", "app_not_found", body="hi", app=CREW)
            mine = await dave.ok("hadron_list_channels", app="hrn:app:globex.com:helper")
            assert mine.data["channels"] == []
