"""Concurrent posters on one Channel through the official MCP client: 8 clients posting 200 messages
each get unique, gap-free, increasing seqs, and a reader polling by sinceSeq never skips a message.
The first posts of a team chat, which create it, all land too (docs/decisions/0280)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hadron.team_world import CREW, OPS, start_team_world
from hadron.world import World, as_user

CLIENTS = 8
POSTS = 200


pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None) -> Iterator[World]:
    w, _ = start_team_world(tmp_path_factory.mktemp("hadron-concurrency"), module_database_url)
    yield w
    w.server.stop()


async def test_concurrent_posters_get_gap_free_increasing_seqs_and_a_polling_reader_skips_none(
    world: World,
) -> None:
    async with as_user(world, "alice") as alice:
        made = await alice.ok(
            "hadron_create_channel", memory="hrn:mem:acme.com:crew-team", loc="chats:load", name="load"
        )
    channel = made.data["address"]
    done = asyncio.Event()

    async def poster(client: int) -> list[int]:
        seqs: list[int] = []
        async with as_user(world, "bob" if client % 2 else "alice") as s:
            for i in range(POSTS):
                posted = await s.ok(
                    "hadron_channel_post", channel=channel, body=f"client {client} message {i}"
                )
                seqs.append(posted.data["seq"])
        return seqs

    async def reader() -> list[int]:
        seen: list[int] = []
        async with as_user(world, "erin") as s:  # a READER AppMember: reads the host memory
            while True:
                finished = done.is_set()  # read once more after the last post landed
                page = await s.ok(
                    "hadron_channel_read", channel=channel, sinceSeq=seen[-1] if seen else 0, limit=200
                )
                seen += [m["seq"] for m in page.data["messages"]]
                if finished and not page.data["messages"]:
                    return seen
                await asyncio.sleep(0.01)

    reading = asyncio.create_task(reader())
    results = await asyncio.gather(*(poster(c) for c in range(CLIENTS)))
    done.set()
    seen = await reading
    every = sorted(seq for seqs in results for seq in seqs)
    assert every == list(range(1, CLIENTS * POSTS + 1))  # unique and gap-free
    for seqs in results:
        assert seqs == sorted(seqs)  # each client's own posts are increasing
    assert seen == list(range(1, CLIENTS * POSTS + 1))  # the watermark reader skipped nothing, in order
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        full = await alice.ok("hadron_channel_read", channel=channel, sinceSeq=CLIENTS * POSTS - 3)
        assert full.data["total"] == CLIENTS * POSTS
        bodies = [m["body"] for m in full.data["messages"]]
        assert len(bodies) == 3 and all(b.startswith("client ") for b in bodies)


async def test_concurrent_first_posts_to_a_new_team_chat_all_land_in_one_channel(world: World) -> None:
    # acme.com:ops has a Team Agent and no team chat yet: its first post creates it, so 4 clients racing
    # to post first must all land (before 0280 some were refused with URN_ALREADY_EXISTS).
    async def poster(client: int) -> list[int]:
        async with as_user(world, "alice" if client % 2 else "carol") as s:  # org OWNER, org CONTRIBUTOR
            return [
                (await s.ok("hadron_team_chat_post", app=OPS, body=f"client {client} post {i}")).data["seq"]
                for i in range(2)
            ]

    results = await asyncio.gather(*(poster(c) for c in range(4)))
    assert sorted(seq for seqs in results for seq in seqs) == list(range(1, 9))
    for seqs in results:
        assert seqs == sorted(seqs)
    async with as_user(world, "alice") as alice:
        listed = await alice.ok("hadron_list_channels", app=OPS)
        page = await alice.ok("hadron_team_chat_read", app=OPS, limit=50)
    assert [c["name"] for c in listed.data["channels"]] == ["team"]
    assert [m["seq"] for m in page.data["messages"]] == list(range(1, 9))
