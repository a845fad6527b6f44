"""Hadron team coordination through the official MCP client: workers, worker sessions (holds,
liveness, takeover, handoffs), the roster, whoami after a reconnect, and node attribution."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from contract.test_hadron_clients import MCP1_PYTHON, run_1x
from hadron.team_world import cli, start_team_world
from hadron.world import World, as_app, as_user, user_headers

CREW = "hrn:app:acme.com:crew"
OPS = "hrn:app:acme.com:ops"


pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def team(
    tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None
) -> Iterator[tuple[World, str]]:
    world, crew_key = start_team_world(tmp_path_factory.mktemp("hadron-team"), module_database_url)
    yield world, crew_key
    world.server.stop()


async def test_casting_returns_the_worker_and_its_boot_briefing(team: tuple[World, str]) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        cast = await alice.ok(
            "hadron_cast_worker", name="Iris", role="backend-engineer", promptOverride="Terse."
        )
        worker = cast.data["worker"]
        assert worker["name"] == "Iris" and worker["role"] == "backend-engineer"
        assert worker["urn"] == "hrn:worker:acme.com:crew:iris"
        assert worker["agent"]["urn"] == "hrn:agent:acme.com:crew:backend"
        assert "You are Iris, the backend-engineer of Crew. Ship small PRs." in worker["bootBriefing"]
        assert "## Prompt override\nTerse." in worker["bootBriefing"]
        assert worker["heldBy"] is None and worker["neverDriven"] is True
        assert f"id {worker['id']}" in cast.text


async def test_casting_refuses_without_a_name_a_taken_name_an_app_key_and_a_reader(
    team: tuple[World, str],
) -> None:
    world, crew_key = team
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        await alice.ok("hadron_cast_worker", name="Nova", role="android-engineer")
        unnamed = await alice.refused("hadron_cast_worker", "WORKER_NAME_REQUIRED", role="android-engineer")
        assert unnamed.text.startswith("WORKER_NAME_REQUIRED:")
        await alice.refused("hadron_cast_worker", "WORKER_NAME_REQUIRED", name="  ", role="android-engineer")
        taken = await alice.refused(
            "hadron_cast_worker", "WORKER_NAME_TAKEN", name="nOVA", role="backend-engineer"
        )
        assert taken.data["error"]["data"]["name"] == "nOVA"
        await alice.refused("hadron_cast_worker", "agent_not_found", name="Zed", role="chef")
        await alice.refused(
            "hadron_cast_worker", "agent_not_found", name="Zed", agent="hrn:agent:acme.com:ops:sre"
        )
        await alice.refused("hadron_cast_worker", "BAD_USER_INPUT", name="Zed")  # two role agents: pick one
    async with as_app(world, crew_key) as key:
        refused = await key.refused("hadron_cast_worker", "FORBIDDEN", name="Keyed", role="android-engineer")
        assert "App key" in refused.text
        roster = await key.ok("hadron_list_workers")  # but the App's own key may read its staff
        assert "Nova" in [w["name"] for w in roster.data["workers"]]
    async with as_user(world, "erin") as erin:  # a READER AppMember reads but does not staff
        await erin.ok("hadron_set_active_app", app=CREW)
        await erin.refused("hadron_cast_worker", "FORBIDDEN", name="Erin2", role="android-engineer")
        await erin.ok("hadron_get_worker", workerRef="Nova")
        await erin.refused("hadron_update_worker", "FORBIDDEN", workerRef="Nova", promptOverride="x")
    async with as_user(world, "bob") as bob:  # an org READER sees the twins App but is not on its team
        await bob.refused("hadron_list_workers", "FORBIDDEN", app="hrn:app:acme.com:twins")
        await bob.refused("hadron_cast_worker", "FORBIDDEN", name="Bobby", app="hrn:app:acme.com:twins")
    async with as_user(world, "dave") as dave:  # another organization: the roster is not probeable
        await dave.refused("hadron_list_workers", "app_not_found", app=CREW)
        worker = (await _cast_or_get(world, "Nova"))["id"]
        await dave.refused("hadron_get_worker", "worker_not_found", workerRef=worker)
        await dave.refused("hadron_get_worker", "worker_not_found", workerRef="hrn:worker:acme.com:crew:nova")
        await dave.refused("hadron_cast_worker", "app_not_found", name="Evil", app=CREW)


async def _cast_or_get(
    world: World, name: str, role: str = "backend-engineer", user: str = "alice"
) -> dict[str, Any]:
    async with as_user(world, user) as session:
        await session.ok("hadron_set_active_app", app=CREW)
        got = await session.call("hadron_get_worker", workerRef=name)
        if not got.is_error:
            return got.data["worker"]
        return (await session.ok("hadron_cast_worker", name=name, role=role)).data["worker"]


async def test_update_worker_replaces_or_clears_the_override_and_refuses_a_retired_worker(
    team: tuple[World, str],
) -> None:
    world, _ = team
    await _cast_or_get(world, "Quill")
    async with as_user(world, "bob") as bob:
        await bob.ok("hadron_set_active_app", app=CREW)
        updated = await bob.ok("hadron_update_worker", workerRef="quill", promptOverride="Write tests first.")
        assert updated.data["worker"]["promptOverride"] == "Write tests first."
        assert "Write tests first." in updated.data["worker"]["bootBriefing"]
        same = await bob.ok("hadron_update_worker", workerRef="Quill")  # omitted: nothing changes
        assert same.data["changed"] is False and same.data["worker"]["promptOverride"] == "Write tests first."
        cleared = await bob.ok("hadron_update_worker", workerRef="Quill", promptOverride="")
        assert cleared.data["worker"]["promptOverride"] is None
        await bob.refused("hadron_update_worker", "BAD_USER_INPUT", workerRef="Quill", name="Other")
        cli(world.server.data_dir, "worker", "retire", CREW, "Quill", database_url=world.database_url)
        await bob.refused("hadron_update_worker", "WORKER_RETIRED", workerRef="Quill", promptOverride="x")
        await bob.refused("hadron_cast_worker", "WORKER_NAME_TAKEN", name="QUILL", role="backend-engineer")
        roster = await bob.ok("hadron_list_workers")
        assert "Quill" not in [w["name"] for w in roster.data["workers"]]
        everyone = await bob.ok("hadron_list_workers", includeRetired=True)
        assert "Quill" in [w["name"] for w in everyone.data["workers"]]


async def test_bind_hold_takeover_handoff_and_the_next_bind_inheriting_it(team: tuple[World, str]) -> None:
    world, _ = team
    iris = await _cast_or_get(world, "Iris")
    async with (
        as_user(world, "alice") as alice,
        as_user(world, "alice") as alice2,
        as_user(world, "bob") as bob,
    ):
        for s in (alice, alice2, bob):
            await s.ok("hadron_set_active_app", app=CREW)
        first = await alice.ok(
            "hadron_start_session", description="backend stint", workerRef=iris["id"], repo="acme/api"
        )
        sid = first.data["sessionId"]
        assert "Boot briefing:" in first.text and "No handoff yet" in first.data["bootBriefing"]
        assert first.data["session"]["worker"]["name"] == "Iris"
        # Held by alice: bob is refused, and force does not reach the hold.
        held = await bob.refused("hadron_start_session", "WORKER_HELD", description="x", workerRef="Iris")
        assert held.data["error"]["data"]["heldBy"] == "alice"
        await bob.refused(
            "hadron_start_session", "WORKER_HELD", description="x", workerRef="Iris", force=True
        )
        # alice's own second host: the live session refuses WORKER_TAKEN with who drove it and when.
        taken = await alice2.refused(
            "hadron_start_session", "WORKER_TAKEN", description="y", workerRef="Iris"
        )
        data = taken.data["error"]["data"]
        assert data["sessionId"] == sid and data["drivenBy"] == "alice" and data["lastActiveAt"]
        forced = await alice2.ok("hadron_start_session", description="y", workerRef="Iris", force=True)
        sid2 = forced.data["sessionId"]
        assert forced.data["displacedSessionIds"] == [sid]
        # The displaced session has ended; a post through it refuses SESSION_ENDED.
        await alice.refused("hadron_team_chat_post", "SESSION_ENDED", body="still me?", session=sid)
        ended = await alice2.ok("hadron_end_session", id=sid2, handoff="Migrations half done: run 0042 next.",
                                summary="migrations", turnCount=12, inputTokens=900)  # fmt: skip
        assert ended.data["session"]["endedAt"] and ended.data["session"]["metrics"]["turnCount"] == 12
        await alice2.refused("hadron_end_session", "SESSION_ENDED", id=sid2)
        # Ending does not free the hold.
        await bob.refused("hadron_start_session", "WORKER_HELD", description="x", workerRef="Iris")
        nxt = await alice.ok("hadron_start_session", description="next stint", workerRef="Iris")
        assert "Migrations half done: run 0042 next." in nxt.data["bootBriefing"]
        got = await bob.ok("hadron_get_worker", workerRef="Iris")
        assert "Migrations half done" in got.data["worker"]["bootBriefing"]  # a pure read re-renders it
        await alice.ok("hadron_end_session", id=nxt.data["sessionId"])
        # Only a release frees it; then bob's bind holds it.
        cli(world.server.data_dir, "worker", "release", CREW, "Iris", database_url=world.database_url)
        bobs = await bob.ok("hadron_start_session", description="bob now", workerRef="Iris")
        assert bobs.data["worker"]["heldBy"] == "bob"
        await bob.ok("hadron_end_session", id=bobs.data["sessionId"])
        await alice.refused("hadron_start_session", "WORKER_HELD", description="x", workerRef="Iris")


async def test_session_refusals_and_the_end_gate(team: tuple[World, str]) -> None:
    world, key = team
    async with as_user(world, "alice") as alice, as_user(world, "bob") as bob, as_app(world, key) as app:
        await alice.refused("hadron_start_session", "no_active_app", description="x")
        await alice.refused("hadron_end_session", "no_active_app", id="whatever")
        await alice.ok("hadron_set_active_app", app=CREW)
        await bob.ok("hadron_set_active_app", app=CREW)
        plain = (await alice.ok("hadron_start_session", description="unbound", type="AUTOMATION")).data[
            "sessionId"
        ]
        denied = await bob.refused("hadron_end_session", "FORBIDDEN", id=plain)
        assert denied.text.startswith(f'Forbidden: session "{plain}" belongs to a different App or user')
        await app.refused("hadron_end_session", "FORBIDDEN", id=plain)  # a user's session: not the key's
        unbound = await alice.refused("hadron_end_session", "SESSION_NOT_WORKER_BOUND", id=plain, handoff="h")
        assert "stays open" in unbound.text
        mine = await alice.ok("hadron_whoami")
        assert plain in [s["id"] for s in mine.data["sessions"]]  # still open after the refusal
        await alice.refused("hadron_end_session", "SESSION_NOT_FOUND", id="0" * 32)
        await alice.refused("hadron_start_session", "worker_not_found", description="x", workerRef="Nobody")
        await alice.refused("hadron_start_session", "BAD_USER_INPUT", description="x", type="BATCH")
        await alice.refused("hadron_start_session", "BAD_USER_INPUT", description="x", workerId="x")
        await alice.ok("hadron_end_session", id=plain)
        keyed = (await app.ok("hadron_start_session", description="nightly")).data
        assert keyed["session"]["userHandle"] is None  # a pure App key: no user stamped
        assert keyed["sessionId"] in [s["id"] for s in (await app.ok("hadron_whoami")).data["sessions"]]
        await alice.refused("hadron_end_session", "FORBIDDEN", id=keyed["sessionId"])
        await app.ok("hadron_end_session", id=keyed["sessionId"])


async def test_an_app_key_binds_an_unheld_worker_without_holding_it_and_never_a_held_one(
    team: tuple[World, str],
) -> None:
    world, key = team
    pia = await _cast_or_get(world, "Pia", "android-engineer")
    async with as_app(world, key) as app:
        started = await app.ok("hadron_start_session", description="ci", workerRef=pia["id"])
        assert started.data["worker"]["heldBy"] is None
        await app.ok("hadron_end_session", id=started.data["sessionId"], handoff="CI green.")
        await app.refused("hadron_start_session", "WORKER_HELD", description="ci", workerRef="Iris")


async def test_the_roster_reports_hold_liveness_and_last_driven_separately(team: tuple[World, str]) -> None:
    world, _ = team
    await _cast_or_get(world, "Dara", "backend-engineer")
    await _cast_or_get(world, "Wren", "android-engineer")
    async with as_user(world, "bob") as bob, as_user(world, "alice") as alice:
        await bob.ok("hadron_set_active_app", app=CREW)
        await alice.ok("hadron_set_active_app", app=CREW)
        dara = await bob.ok("hadron_start_session", description="dara", workerRef="Dara")
        await bob.ok("hadron_end_session", id=dara.data["sessionId"])
        live = await alice.ok("hadron_start_session", description="wren", workerRef="Wren")
        roster = await alice.ok("hadron_list_workers")
        lines = {line.split(" (")[0].removeprefix("- "): line for line in roster.text.splitlines()[1:]}
        assert lines["Wren"] == "- Wren (android-engineer) — held by YOU, session live"
        assert lines["Dara"].startswith(
            "- Dara (backend-engineer) — held by bob, no live session, last driven "
        )
        rows = {w["name"]: w for w in roster.data["workers"]}
        assert rows["Wren"]["live"] is True and rows["Wren"]["heldByYou"] is True
        assert (
            rows["Dara"]["live"] is False and rows["Dara"]["lastDrivenAt"] and not rows["Dara"]["neverDriven"]
        )
        never = await _cast_or_get(world, "Juno", "android-engineer")
        roster = await alice.ok("hadron_list_workers")
        assert (
            "- Juno (android-engineer) — unheld — binding it holds it, no live session, never driven"
            in roster.text
        )
        assert never["neverDriven"] is True
        await alice.ok("hadron_end_session", id=live.data["sessionId"])
        paged = await alice.ok("hadron_list_workers", limit=2, offset=1)
        assert len(paged.data["workers"]) == 2 and paged.data["total"] >= 5


async def test_passing_a_session_to_a_read_is_a_heartbeat(team: tuple[World, str]) -> None:
    world, _ = team
    async with as_user(world, "carol") as carol:
        await carol.ok("hadron_set_active_app", app=CREW)
        sid = (await carol.ok("hadron_start_session", description="reads")).data["sessionId"]
        before = (await carol.ok("hadron_whoami")).data["sessions"][0]
        assert before["id"] == sid
        await asyncio.sleep(0.05)
        await carol.ok("hadron_team_chat_read", session=sid)
        after = (await carol.ok("hadron_whoami")).data["sessions"][0]
        assert after["lastActiveAt"] > before["lastActiveAt"] and after["live"] is True
        await asyncio.sleep(0.05)
        await carol.ok("hadron_list_workers", session=sid)
        again = (await carol.ok("hadron_whoami")).data["sessions"][0]
        assert again["lastActiveAt"] > after["lastActiveAt"]
        async with as_user(world, "bob") as bob:  # somebody else's session is not a heartbeat of yours
            denied = await bob.refused("hadron_team_chat_read", "FORBIDDEN", app=CREW, session=sid)
            assert denied.text.startswith(f'Forbidden: session "{sid}"')
        await carol.ok("hadron_end_session", id=sid)


async def test_whoami_and_get_worker_recover_identity_after_a_reconnect(team: tuple[World, str]) -> None:
    world, _ = team
    await _cast_or_get(world, "Mary Jane", "backend-engineer", user="carol")
    async with as_user(world, "carol") as carol:
        await carol.ok("hadron_set_active_app", app=CREW)
        sid = (await carol.ok("hadron_start_session", description="mj", workerRef="mary-jane")).data[
            "sessionId"
        ]
    async with as_user(world, "carol") as fresh:  # a new MCP session: no active App, nothing in context
        who = await fresh.ok("hadron_whoami")
        mine = next(s for s in who.data["sessions"] if s["id"] == sid)
        assert mine["worker"]["name"] == "Mary Jane" and mine["appUrn"] == CREW
        assert sid in who.text and "Mary Jane" in who.text
        await fresh.refused("hadron_get_worker", "no_active_app", workerRef="Mary Jane")
        got = await fresh.ok(
            "hadron_get_worker", workerRef="Mary Jane", session=sid
        )  # the session names its App
        assert "You are Mary Jane, the backend-engineer of Crew." in got.data["worker"]["bootBriefing"]
        assert got.data["worker"]["live"] is True
        await fresh.ok("hadron_set_active_app", app=CREW)
        await fresh.ok("hadron_end_session", id=sid)
        assert sid not in [s["id"] for s in (await fresh.ok("hadron_whoami")).data["sessions"]]
        ended = await fresh.ok("hadron_whoami", includeEnded=True, limit=50)
        assert sid in [s["id"] for s in ended.data["sessions"]]


async def test_nodes_created_inside_a_session_are_attributed_to_it(team: tuple[World, str]) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        await alice.ok("hadron_create_node", loc="hrn:node:acme.com:specs:before", name="Before")
        sid = (await alice.ok("hadron_start_session", description="notes")).data["sessionId"]
        await alice.ok("hadron_create_node", loc="hrn:node:acme.com:specs:during", name="During")
        during = await alice.ok("hadron_get_node", loc="hrn:node:acme.com:specs:during")
        before = await alice.ok("hadron_get_node", loc="hrn:node:acme.com:specs:before")
        assert during.data["sessionId"] == sid and before.data["sessionId"] is None
        await alice.ok("hadron_end_session", id=sid)
        await alice.ok("hadron_create_node", loc="hrn:node:acme.com:specs:after", name="After")
        after = await alice.ok("hadron_get_node", loc="hrn:node:acme.com:specs:after")
        assert after.data["sessionId"] is None


@pytest.mark.skipif(
    not MCP1_PYTHON.exists(), reason="the 1.x client venv is missing: run `python3 tasks.py test`"
)
def test_the_1x_client_binds_a_worker_posts_as_it_and_recovers_after_a_reconnect(
    team: tuple[World, str],
) -> None:
    world, _ = team
    asyncio.run(_cast_or_get(world, "Ember", "android-engineer", user="carol"))
    headers = user_headers("carol")
    first = run_1x(
        world,
        headers,
        [
            ("hadron_set_active_app", {"app": CREW}),
            ("hadron_start_session", {"description": "1.x stint", "workerRef": "Ember"}),
        ],
    )
    assert [r["error"] for r in first] == [False, False]
    sid = str(first[1]["text"]).split()[1]
    second = run_1x(
        world,
        headers,
        [
            ("hadron_whoami", {}),
            ("hadron_team_chat_post", {"body": "from 1.x", "session": sid, "app": CREW}),
            ("hadron_get_worker", {"workerRef": "Ember", "session": sid}),
        ],
    )
    assert [r["error"] for r in second] == [False, False, False]
    assert sid in str(second[0]["text"]) and "Ember" in str(second[0]["text"])
    assert "as Ember (driven by carol)" in str(second[1]["text"])
    assert "Boot briefing:" in str(second[2]["text"])
