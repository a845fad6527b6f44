"""Hadron selections through the official MCP client: memories, apps, organizations, server info,
reconnects with X-Hadron-Client-Id, and the contract's tool list."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from hadron.world import World, admin_of, as_app, as_user, connect, user_headers
from harness import token

from triptych.hadron.tools import TOOLS

# The contract holds on both storage engines.
pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def world(shared_hadron_world: World) -> World:
    """The session's shared world (tests/conftest.py): the listings asserted here are of organizations,
    memories, apps and grants, which the other modules on that world only read (they write nodes,
    edges and objects under locations of their own); the one grant this module takes away it gives
    back. Selections are kept per client id, and every client id here is a fresh one."""
    return shared_hadron_world


async def test_server_info_answers_before_authentication(world: World) -> None:
    async with connect(world) as anonymous:
        info = await anonymous.ok("hadron_server_info")
        assert info.text.startswith(f"server: {world.server.url}")
        assert "capabilities: app-selection" in info.text
        assert "connection: new" in info.text
        refused = await anonymous.refused("hadron_list_memories", "UNAUTHENTICATED")
        assert refused.text.startswith("UNAUTHENTICATED:")


async def test_list_memories_shows_only_what_each_caller_can_reach(world: World) -> None:
    expected = {
        "alice": {
            "hrn:mem:acme.com:specs": "read-write",
            "hrn:mem:acme.com:team": "read-write",
            "hrn:mem:acme.com:botmem": "read-write",
            "hrn:mem:acme.com:catalog": "read-write",
            "hrn:mem:acme.com:vault": "read-write",
            "hrn:mem:alice:journal": "read-write",
        },
        "bob": {
            "hrn:mem:acme.com:specs": "read-only",
            "hrn:mem:acme.com:team": "read-only",
            "hrn:mem:acme.com:botmem": "read-write",
            "hrn:mem:acme.com:catalog": "read-only",
            "hrn:mem:acme.com:vault": "read-only",
            "hrn:mem:alice:journal": "read-only",
        },
        "carol": {
            "hrn:mem:acme.com:specs": "read-write",
            "hrn:mem:acme.com:team": "read-write",
            "hrn:mem:acme.com:catalog": "read-write",
            "hrn:mem:acme.com:vault": "read-write",
            "hrn:mem:globex.com:plans": "read-write",
        },
        "dave": {"hrn:mem:globex.com:plans": "read-write"},
        "erin": {"hrn:mem:erin:notes": "read-write"},
    }
    for user, memories in expected.items():
        async with as_user(world, user) as session:
            listed = await session.ok("hadron_list_memories")
        assert {m["urn"]: m["access"] for m in listed.data["memories"]} == memories, user
    async with as_app(world) as app:
        listed = await app.ok("hadron_list_memories")
    assert {m["urn"]: m["access"] for m in listed.data["memories"]} == {
        "hrn:mem:acme.com:botmem": "read-write",
        "hrn:mem:acme.com:specs": "read-only",
        "hrn:mem:acme.com:catalog": "read-only",
        "hrn:mem:acme.com:vault": "read-only",
    }


async def test_an_unreadable_memory_reads_as_not_found_like_a_missing_one(world: World) -> None:
    async with as_user(world, "dave") as dave:
        foreign = await dave.refused(
            "hadron_set_active_memory", "memory_not_found", memoryUrn="hrn:mem:acme.com:specs"
        )
        missing = await dave.refused(
            "hadron_set_active_memory", "memory_not_found", memoryUrn="hrn:mem:acme.com:nope"
        )
    assert foreign.text.replace("specs", "X") == missing.text.replace("nope", "X")
    async with as_user(world, "alice") as alice:
        await alice.refused("hadron_set_active_memory", "memory_not_found", memoryUrn="hrn:mem:erin:notes")


async def test_unknown_arguments_are_refused_not_dropped(world: World) -> None:
    async with as_user(world, "alice") as alice:
        refused = await alice.refused(
            "hadron_set_active_memory", "BAD_USER_INPUT", memoryUrn="hrn:mem:acme.com:specs", workerRef="x"
        )
    assert "unknown argument 'workerRef'" in refused.text


async def test_registered_tools_equal_the_contracts_tools_for_this_build(world: World) -> None:
    async with as_user(world, "alice") as alice:
        names = await alice.tool_names()
    assert sorted(names) == sorted(TOOLS)


async def test_set_active_app_by_urn_or_unique_name_with_typed_refusals(world: World) -> None:
    async with as_user(world, "carol") as carol:
        apps = await carol.ok("hadron_list_apps")
        assert {a["urn"] for a in apps.data["apps"]} == {
            "hrn:app:acme.com:bot",
            "hrn:app:globex.com:helper",
            "hrn:app:carol:scratch",
        }
        ambiguous = await carol.refused("hadron_set_active_app", "app_identifier_ambiguous", app="Helper")
        assert ambiguous.text.startswith("[app_identifier_ambiguous]")
        assert set(ambiguous.data["error"]["data"]["candidates"]) == {
            "hrn:app:globex.com:helper",
            "hrn:app:carol:scratch",
        }
        await carol.refused("hadron_set_active_app", "app_not_found", app="Nobody")
        chosen = await carol.ok("hadron_set_active_app", app="Acme Bot")
        assert chosen.data["appUrn"] == "hrn:app:acme.com:bot"
        info = await carol.ok("hadron_server_info")
        assert "organization: hrn:org:acme.com (chosen by: active-app)" in info.text
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_set_active_app", "app_not_found", app="hrn:app:acme.com:bot")


async def test_server_info_tells_a_caller_unknown_to_the_server_how_to_become_a_user(world: World) -> None:
    # A bearer for a subject with no Hadron user (with auth off: 'local' before it is created) reaches
    # nothing; server info says who it is and what makes it exist, not ORG_REQUIRED with no memberships.
    async with as_user(world, "ghost") as ghost:
        info = await ghost.ok("hadron_server_info")
        listed = await ghost.ok("hadron_list_memories")
    said = (
        "no user 'ghost' on this server: create it with `triptych hadron user create ghost`, then give it an"
        " organization or memories"
    )
    assert f"organization: none ({said})" in info.text
    assert "ORG_REQUIRED" not in info.text
    # The structured answer is still the resolver's: authenticated, no organization.
    assert info.data["organization"]["urn"] is None
    assert info.data["organization"]["rung"] != "unauthenticated"
    assert listed.text == f"No memories: {said}." and listed.data["memories"] == []


async def test_org_ladder_and_set_active_org(world: World) -> None:
    async with as_user(world, "carol") as carol:
        info = await carol.ok("hadron_server_info")
        assert "ORG_REQUIRED" in info.text and "hrn:org:globex.com" in info.text
        await carol.refused("hadron_set_active_org", "org_not_found", org="hrn:org:initech.com")
        chosen = await carol.ok("hadron_set_active_org", org="hrn:org:globex.com")
        assert chosen.data["orgUrn"] == "hrn:org:globex.com"
        assert (
            "organization: hrn:org:globex.com (chosen by: active-org)"
            in (await carol.ok("hadron_server_info")).text
        )
        await carol.ok("hadron_set_active_org", clear=True)
        assert "ORG_REQUIRED" in (await carol.ok("hadron_server_info")).text
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_set_active_org", "org_not_found", org="hrn:org:acme.com")
        assert "(chosen by: single-membership)" in (await dave.ok("hadron_server_info")).text
    async with as_user(world, "erin") as erin:
        assert "no membership" in (await erin.ok("hadron_server_info")).text
    async with as_app(world) as app:
        await app.refused("hadron_set_active_org", "FORBIDDEN", org="hrn:org:acme.com")
        assert (
            "organization: hrn:org:acme.com (chosen by: app-key)" in (await app.ok("hadron_server_info")).text
        )


async def test_selections_come_back_with_a_client_id_and_not_without(world: World) -> None:
    client_id = "laptop-" + uuid.uuid4().hex[:8]
    async with as_user(world, "carol", client_id) as first:
        await first.ok("hadron_set_active_memory", memoryUrn="hrn:mem:acme.com:team")
        await first.ok("hadron_set_active_app", app="hrn:app:acme.com:bot")
        await first.ok("hadron_set_active_org", org="hrn:org:globex.com")
        assert "connection: new" in (await first.ok("hadron_server_info")).text
    async with as_user(world, "carol", client_id) as second:
        info = await second.ok("hadron_server_info")
        assert "connection: re-established" in info.text
        assert "active memory hrn:mem:acme.com:team" in info.text
        listed = await second.ok("hadron_list_memories")
        assert [m["urn"] for m in listed.data["memories"] if m["active"]] == ["hrn:mem:acme.com:team"]
        assert [a["urn"] for a in (await second.ok("hadron_list_apps")).data["apps"] if a["active"]] == [
            "hrn:app:acme.com:bot"
        ]
    async with as_user(world, "carol") as without:
        assert "connection: new" in (await without.ok("hadron_server_info")).text
        listed = await without.ok("hadron_list_memories")
        assert not [m for m in listed.data["memories"] if m["active"]]
    async with as_user(world, "carol", "x" * 201) as overlong:  # treated as not sent
        listed = await overlong.ok("hadron_list_memories")
        assert not [m for m in listed.data["memories"] if m["active"]]
    async with as_user(world, "dave", client_id) as other_user:  # same id, other user: nothing of carol's
        listed = await other_user.ok("hadron_list_memories")
        assert not [m for m in listed.data["memories"] if m["active"]]


async def test_a_restored_selection_is_reauthorized(world: World, tmp_path: Path) -> None:
    from triptych.hadron.surface import Hadron

    client_id = "desk-" + uuid.uuid4().hex[:8]
    async with as_user(world, "bob", client_id) as first:
        await first.ok("hadron_set_active_memory", memoryUrn="hrn:mem:acme.com:team")
    hadron = Hadron.open(world.server.data_dir / "hadron.db", database_url=world.database_url)
    try:  # bob loses his grant on the team memory
        memory = hadron.tenancy.memory_by_key("acme.com", "team")
        bob = hadron.tenancy.user_by_handle("bob")
        assert memory and bob
        p = hadron.stores.graph.dialect.p
        hadron.tenancy.conn.execute(
            f"DELETE FROM memory_access WHERE memory_id = {p} AND principal_id = {p}", (memory.id, bob.id)
        )
    finally:
        hadron.close()
    try:
        async with as_user(world, "bob", client_id) as second:
            info = await second.ok("hadron_server_info")
            assert "dropped after re-authorization: active memory" in info.text
            assert not [m for m in (await second.ok("hadron_list_memories")).data["memories"] if m["active"]]
    finally:  # the world is shared: bob gets his grant back, as the world was built
        with admin_of(world.server.data_dir, world.database_url) as admin:
            admin.grant("hrn:mem:acme.com:team", "read-only", user="bob")
    async with as_user(world, "bob") as third:
        listed = (await third.ok("hadron_list_memories")).data["memories"]
        assert {m["urn"]: m["access"] for m in listed}["hrn:mem:acme.com:team"] == "read-only"


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_a_revision_without_sessions_is_refused_so_clients_fall_back_to_initialize(world: World) -> None:
    body = {"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": {}}
    headers = {**MCP_HEADERS, "MCP-Protocol-Version": "2026-07-28"}
    response = httpx.post(world.url, json=body, headers=headers)
    assert response.status_code == 400
    error = response.json()
    assert error["id"] == 7 and error["error"]["code"] == -32022
    assert "2025-06-18" in error["error"]["data"]["supported"]


async def test_a_session_replacing_a_lost_one_says_re_established(world: World) -> None:
    headers = {
        **MCP_HEADERS,
        **user_headers("dave"),
        "Mcp-Session-Id": "f" * 32,
        "MCP-Protocol-Version": "2025-06-18",
    }
    lost = httpx.post(world.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert lost.status_code == 404  # e.g. the server restarted: the client must re-initialize
    async with as_user(world, "dave") as dave:
        info = await dave.ok("hadron_server_info")
    assert (
        "connection: re-established (the previous MCP session ended; any active App or active memory"
        in info.text
    )
    async with as_user(world, "dave") as again:  # a fresh, ordinary connection
        assert "connection: new" in (await again.ok("hadron_server_info")).text


def test_bad_bearers_are_401_and_no_bearer_is_anonymous(world: World) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    for bearer in ("hak_not-a-key", "not-a-jwt", token(user="alice", ttl=-30)):
        response = httpx.post(
            world.url, json=body, headers={**MCP_HEADERS, "Authorization": f"Bearer {bearer}"}
        )
        assert response.status_code == 401, bearer
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert httpx.post(world.url, json=body, headers=MCP_HEADERS).status_code == 200


async def test_every_tool_refuses_an_unknown_argument_on_the_wire(world: World) -> None:
    async with as_user(world, "alice") as alice:
        for name in TOOLS:
            refused = await alice.refused(name, "BAD_USER_INPUT", bogusArgument=1)
            assert "unknown argument 'bogusArgument'" in refused.text, name
        await alice.refused("hadron_set_active_org", "BAD_USER_INPUT")
