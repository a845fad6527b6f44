"""Hadron nodes and edges through the official MCP client, with two organizations, users of several
roles and an app key: who can read and write what, revisions, edges, moves and deletes."""

from __future__ import annotations

import pytest
from hadron.world import World, as_app, as_user, fresh, node

SPECS = "hrn:mem:acme.com:specs"
TEAM = "hrn:mem:acme.com:team"
BOTMEM = "hrn:mem:acme.com:botmem"
PLANS = "hrn:mem:globex.com:plans"


# The contract holds on both storage engines: each runs this module against its engine's shared world.
pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")


@pytest.fixture(scope="module")
def world(shared_hadron_world: World) -> World:
    """The session's shared world (tests/conftest.py): every test here works under locations of its own."""
    return shared_hadron_world


async def test_create_get_update_keep_revisions(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_memory", memoryUrn=SPECS)
        created = await alice.ok(
            "hadron_create_node", loc=f"{loc}:intro", name="Intro", content="Hello", data={"a": 1, "b": 2}
        )
        assert created.data["nodeType"] == "info"
        assert created.data["urn"] == node(SPECS, f"{loc}:intro")
        by_urn = await alice.ok("hadron_get_node", loc=node(SPECS, f"{loc}:intro"))
        by_loc = await alice.ok("hadron_get_node", loc=f"{loc}:intro")
        by_id = await alice.ok("hadron_get_node", loc=created.data["id"])
        assert by_urn.data["id"] == by_loc.data["id"] == by_id.data["id"]
        assert by_loc.text.startswith("---\nurn: hrn:node:acme.com:specs:")
        updated = await alice.ok(
            "hadron_update_node", loc=f"{loc}:intro", description="First words", reason="clarify"
        )
        assert updated.data["content"] == "Hello" and updated.data["name"] == "Intro"
        replaced = await alice.ok("hadron_update_node", loc=f"{loc}:intro", data={"c": 3})
        assert replaced.data["data"] == {"c": 3}
        merged = await alice.ok(
            "hadron_update_node_data", nodeUrn=node(SPECS, f"{loc}:intro"), data={"d": {"x": 1}, "c": 4}
        )
        assert merged.data["data"] == {"c": 4, "d": {"x": 1}}
        for bad in ([1, 2], None, 5):
            refused = await alice.refused(
                "hadron_update_node_data", "BAD_USER_INPUT", nodeUrn=created.data["id"], data=bad
            )
            assert "must be a JSON object" in refused.text
        upsert = await alice.ok("hadron_create_node", loc=f"{loc}:intro", name="Intro again")
        assert upsert.text.startswith("Updated (upsert)") and upsert.data["content"] == "Hello"
        history = (await alice.ok("hadron_get_node", loc=f"{loc}:intro")).data["revisions"]
    assert [r["operation"] for r in history] == ["upsert", "update_data", "update", "update", "create"]
    assert history[2]["reason"] is None and history[3]["reason"] == "clarify"
    assert {r["actor"] for r in history} == {"hrn:user:alice"}
    assert [r["revision"] for r in history] == [5, 4, 3, 2, 1]


async def test_tools_without_a_memory_fall_back_to_the_active_memory(world: World) -> None:
    async with as_user(world, "carol") as carol:
        refused = await carol.refused("hadron_create_node", "no_active_memory", loc="a", name="A")
        assert refused.text.startswith("[no_active_memory]")
        loc = fresh()
        made = await carol.ok("hadron_create_node", loc=loc, name="A", memoryId=TEAM)
        assert made.data["memoryUrn"] == TEAM
        await carol.ok("hadron_set_active_memory", memoryUrn=TEAM)
        assert (await carol.ok("hadron_get_node", loc=loc)).data["id"] == made.data["id"]
        bad = await carol.refused("hadron_get_node", "BAD_USER_INPUT", loc="a b")
        assert "invalid-charset" in bad.text


async def test_who_can_read_and_write_nodes(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(SPECS, loc), name="Spec")
    async with as_user(world, "bob") as bob:  # acme READER: reads knowledge, cannot write it
        assert (await bob.ok("hadron_get_node", loc=node(SPECS, loc))).data["name"] == "Spec"
        forbidden = await bob.refused("hadron_update_node", "FORBIDDEN", loc=node(SPECS, loc), name="Mine")
        assert forbidden.text.startswith("FORBIDDEN: read-only access")
        await bob.refused(
            "hadron_create_node", "FORBIDDEN", loc=node(TEAM, loc), name="x"
        )  # team: read-only grant
        await bob.ok("hadron_create_node", loc=node(BOTMEM, loc), name="Bot note")  # app CONTRIBUTOR
    async with as_user(world, "dave") as dave:  # globex: acme's memories read as missing
        for tool, args in [
            ("hadron_get_node", {"loc": node(SPECS, loc)}),
            ("hadron_update_node", {"loc": node(SPECS, loc), "name": "x"}),
            ("hadron_create_node", {"loc": node(SPECS, fresh()), "name": "x"}),
            ("hadron_delete_node", {"urn": node(SPECS, loc)}),
            ("hadron_list_nodes", {"memoryUrn": SPECS}),
            ("hadron_update_node_data", {"nodeUrn": node(SPECS, loc), "data": {}}),
            ("hadron_move_node", {"urn": node(SPECS, loc), "targetUrn": node(PLANS, loc)}),
        ]:
            refused = await dave.refused(tool, "memory_not_found", **args)
            assert "acme.com" in refused.text
        by_id = await dave.refused("hadron_get_node", "node_not_found", loc=(await _id(world, loc)))
        assert by_id.code == "node_not_found"
    async with as_app(world) as app:  # the bot's key: its own memory rw, its org's knowledge ro
        await app.ok("hadron_create_node", loc=node(BOTMEM, fresh()), name="From the bot")
        assert (await app.ok("hadron_get_node", loc=node(SPECS, loc))).data["name"] == "Spec"
        await app.refused("hadron_create_node", "FORBIDDEN", loc=node(SPECS, fresh()), name="x")
        await app.refused("hadron_get_node", "memory_not_found", loc=node(TEAM, loc))
    async with as_app(world, world.other_app_key) as other:  # globex's app key
        await other.refused("hadron_get_node", "memory_not_found", loc=node(SPECS, loc))
    async with as_user(world, "erin") as erin:
        await erin.refused("hadron_get_node", "memory_not_found", loc=node(SPECS, loc))


async def _id(world: World, loc: str) -> str:
    async with as_user(world, "alice") as alice:
        return str((await alice.ok("hadron_get_node", loc=node(SPECS, loc))).data["id"])


async def test_edges_append_idempotently_dangle_and_gate_cross_memory_targets(world: World) -> None:
    loc = fresh()
    async with as_user(world, "carol") as carol:
        await carol.ok("hadron_create_node", loc=node(TEAM, f"{loc}:a"), name="A")
        await carol.ok("hadron_create_node", loc=node(TEAM, f"{loc}:b"), name="B")
        first = await carol.ok(
            "hadron_create_edge",
            sourceUrn=node(TEAM, f"{loc}:a"),
            targetUrn=node(TEAM, f"{loc}:b"),
            name="next",
        )
        again = await carol.ok(
            "hadron_create_edge",
            sourceUrn=node(TEAM, f"{loc}:a"),
            targetUrn=node(TEAM, f"{loc}:b"),
            name="next",
        )
        assert first.data["created"] and not again.data["created"]
        dangling = await carol.ok(
            "hadron_create_edge", sourceUrn=node(TEAM, f"{loc}:a"), targetUrn=node(TEAM, f"{loc}:later")
        )
        assert dangling.data["edge"]["dangling"]
        cross = await carol.ok(
            "hadron_create_edge", sourceUrn=node(TEAM, f"{loc}:a"), targetUrn=node(PLANS, "x"), loc="plan"
        )
        assert cross.data["edge"]["target"]["urn"] == node(PLANS, "x")
        await carol.refused(
            "hadron_create_edge", "URN_NOT_QUALIFIED", sourceUrn=f"{loc}:a", targetUrn=node(TEAM, f"{loc}:b")
        )
        edges = (await carol.ok("hadron_get_node", loc=node(TEAM, f"{loc}:a"))).data["edges"]
        assert [e["loc"] for e in edges] == [f"{loc}:b", f"{loc}:later", "plan"]
        await carol.ok("hadron_create_node", loc=node(TEAM, f"{loc}:later"), name="Later")
        edges = (await carol.ok("hadron_get_node", loc=node(TEAM, f"{loc}:a"))).data["edges"]
        assert not edges[1]["dangling"]
        replaced = await carol.ok(
            "hadron_update_node", loc=node(TEAM, f"{loc}:a"), edges=[{"targetLoc": f"{loc}:b"}]
        )
        assert [e["loc"] for e in replaced.data["edges"]] == [f"{loc}:b"]
        await carol.refused(
            "hadron_update_node", "BAD_USER_INPUT", loc=node(TEAM, f"{loc}:a"), edges=[{"name": "no target"}]
        )
        await carol.ok(
            "hadron_create_edge", sourceUrn=node(TEAM, f"{loc}:a"), targetUrn=node(PLANS, "x"), loc="plan"
        )
    async with as_user(world, "alice") as alice:  # alice owns acme but cannot read globex: target hidden
        edges = (await alice.ok("hadron_get_node", loc=node(TEAM, f"{loc}:a"))).data["edges"]
        assert [e["target"] for e in edges if e["loc"] == "plan"] == [None]
        await alice.refused(
            "hadron_create_edge",
            "memory_not_found",
            sourceUrn=node(TEAM, f"{loc}:a"),
            targetUrn=node(PLANS, "x"),
            loc="p2",
        )


async def test_next_node_by_seq_and_list_nodes_by_depth(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_memory", memoryUrn=SPECS)
        await alice.ok("hadron_create_parent_node", loc=loc, name="Flow", description="Stages")
        for name, seq in (("third", 3), ("first", 1), ("second", 2)):
            await alice.ok("hadron_create_node", loc=f"{loc}:{name}", name=name.title(), seq=seq)
        await alice.ok("hadron_create_node", loc=f"{loc}:first:detail", name="Detail")
        first = await alice.ok("hadron_get_next_node", parent=loc)
        second = await alice.ok("hadron_get_next_node", parent=loc, current=f"{loc}:first")
        third = await alice.ok("hadron_get_next_node", parent=loc, current="second")
        last = await alice.ok("hadron_get_next_node", parent=loc, current=f"{loc}:third")
        assert [r.data["node"]["name"] if r.data["node"] else None for r in (first, second, third, last)] == [
            "First",
            "Second",
            "Third",
            None,
        ]
        shallow = await alice.ok("hadron_list_nodes", parentRel=loc)
        deep = await alice.ok("hadron_list_nodes", parentRel=loc, depth=2)
        assert [n["loc"] for n in shallow.data["nodes"]] == [f"{loc}:first", f"{loc}:second", f"{loc}:third"]
        assert len(deep.data["nodes"]) == 4 and "Detail" in deep.text
        top = await alice.ok("hadron_list_nodes", memoryUrn=SPECS)
        assert any(n["loc"] == loc and n["description"] == "Stages" for n in top.data["nodes"])
        await alice.refused("hadron_list_nodes", "BAD_USER_INPUT", parentRel=loc, depth=11)


async def test_move_subtree_within_a_memory(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_memory", memoryUrn=SPECS)
        root = await alice.ok("hadron_create_node", loc=f"{loc}:services:db", name="Database helper")
        await alice.ok("hadron_create_node", loc=f"{loc}:services:db:pool", name="Pool")
        await alice.ok(
            "hadron_create_node",
            loc=f"{loc}:other",
            name="Other",
            edges=[{"targetLoc": f"{loc}:services:db:pool"}],
        )
        await alice.ok("hadron_create_node", loc=f"{loc}:taken", name="Taken")
        collision = await alice.refused(
            "hadron_move_node",
            "URN_ALREADY_EXISTS",
            urn=node(SPECS, f"{loc}:services:db"),
            targetUrn=node(SPECS, f"{loc}:taken"),
        )
        assert node(SPECS, f"{loc}:taken") in collision.text
        moved = await alice.ok(
            "hadron_move_node",
            urn=node(SPECS, f"{loc}:services:db"),
            targetUrn=node(SPECS, f"{loc}:lib:db-helper"),
        )
        assert moved.data["moved"] == 2
        after = await alice.ok("hadron_get_node", loc=f"{loc}:lib:db-helper")
        assert after.data["id"] == root.data["id"] and after.data["name"] == "Database helper"
        assert (await alice.ok("hadron_get_node", loc=f"{loc}:lib:db-helper:pool")).data["name"] == "Pool"
        await alice.refused("hadron_get_node", "node_not_found", loc=f"{loc}:services:db")
        edge = (await alice.ok("hadron_get_node", loc=f"{loc}:other")).data["edges"][0]
        assert (
            edge["target"]["urn"] == node(SPECS, f"{loc}:lib:db-helper:pool")
            and edge["loc"] == f"{loc}:services:db:pool"
        )
        over = await alice.ok(
            "hadron_move_node",
            urn=f"{loc}:lib:db-helper",
            targetUrn=f"{loc}:taken",
            overwrite=True,
            renameToLeaf=True,
        )
        assert over.data["moved"] == 2
        assert (await alice.ok("hadron_get_node", loc=f"{loc}:taken")).data["name"] == "taken"
        await alice.refused(
            "hadron_move_node", "BAD_USER_INPUT", urn=f"{loc}:taken", targetUrn=f"{loc}:taken:inside"
        )


async def test_cross_memory_moves_and_their_refusals(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:doc"), name="Doc")
        await alice.ok(
            "hadron_create_node",
            loc=node(SPECS, f"{loc}:doc:part"),
            name="Part",
            edges=[
                {"targetLoc": f"{loc}:doc"},
                {"targetLoc": f"{loc}:stay"},
                {"targetLoc": f"{loc}:doc:future"},
            ],
        )
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:stay"), name="Stays")
        moved = await alice.ok(
            "hadron_move_node", urn=node(SPECS, f"{loc}:doc"), targetUrn=node(TEAM, f"{loc}:doc")
        )
        assert moved.data["crossMemory"] and moved.data["moved"] == 2
        part = await alice.ok("hadron_get_node", loc=node(TEAM, f"{loc}:doc:part"))
        targets = [e["target"]["urn"] for e in part.data["edges"]]
        assert targets == [
            node(TEAM, f"{loc}:doc"),  # moved with it
            node(SPECS, f"{loc}:stay"),  # left behind: now a cross-memory edge
            node(TEAM, f"{loc}:doc:future"),  # a dangling target inside the subtree follows it
        ]
        assert part.data["revisions"][0]["operation"] == "move"
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:secret"), name="S")
        enc = await alice.refused(
            "hadron_move_node",
            "BAD_USER_INPUT",
            urn=node(SPECS, f"{loc}:secret"),
            targetUrn=node("hrn:mem:acme.com:vault", "s"),
        )
        assert enc.data["error"]["data"]["reason"] == "encrypted_memory"
        await alice.ok(
            "hadron_create_node",
            loc=node(SPECS, f"{loc}:chat"),
            name="Chat",
            nodeType="chat",
            data={"scope": "shared"},
        )
        chat = await alice.refused(
            "hadron_move_node",
            "BAD_USER_INPUT",
            urn=node(SPECS, f"{loc}:chat"),
            targetUrn=node(TEAM, f"{loc}:chat"),
        )
        assert chat.data["error"]["data"]["reason"] == "chat_root"
        await alice.ok(
            "hadron_create_node",
            loc=node(SPECS, f"{loc}:rival"),
            name="Rival",
            objectType="competitor",
            properties={"price": "cheap"},
        )
        schema = await alice.refused(
            "hadron_move_node",
            "SCHEMA_VIOLATION",
            urn=node(SPECS, f"{loc}:rival"),
            targetUrn=node("hrn:mem:acme.com:catalog", f"{loc}:rival"),
        )
        assert schema.text.startswith("Schema violation: name")
    async with as_user(world, "bob") as bob:  # bob reads both but may write neither
        await bob.refused(
            "hadron_move_node",
            "FORBIDDEN",
            urn=node(SPECS, f"{loc}:stay"),
            targetUrn=node(BOTMEM, f"{loc}:stay"),
        )


async def test_delete_soft_hard_recursive_and_cross_memory_edges(world: World) -> None:
    loc = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:p"), name="P")
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:p:c"), name="C")
        await alice.ok(
            "hadron_create_node",
            loc=node(TEAM, f"{loc}:ref"),
            name="Ref",
            edges=[{"targetUrn": node(SPECS, f"{loc}:p:c")}],
        )
        refused = await alice.refused("hadron_delete_node", "CONFLICT", urn=node(SPECS, f"{loc}:p"))
        assert "1 descendant" in refused.text
        await alice.refused("hadron_delete_node", "URN_NOT_QUALIFIED", urn=f"{loc}:p")
        await alice.refused(
            "hadron_delete_node", "CONFLICT", urn=node(SPECS, f"{loc}:p"), hard=True, recursive=True
        )
        hard = await alice.ok(
            "hadron_delete_node",
            urn=node(SPECS, f"{loc}:p"),
            hard=True,
            recursive=True,
            cascadeCrossMemoryEdges=True,
        )
        assert hard.data == {
            "urn": node(SPECS, f"{loc}:p"),
            "deleted": 2,
            "hard": True,
            "crossMemoryEdgesRemoved": 1,
        }
        assert (await alice.ok("hadron_get_node", loc=node(TEAM, f"{loc}:ref"))).data["edges"] == []
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{loc}:soft"), name="Soft")
        await alice.ok("hadron_delete_node", urn=node(SPECS, f"{loc}:soft"))
        await alice.refused("hadron_get_node", "node_not_found", loc=node(SPECS, f"{loc}:soft"))
        again = await alice.ok(
            "hadron_create_node", loc=node(SPECS, f"{loc}:soft"), name="Reborn"
        )  # the loc is free again
        assert again.text.startswith("Created")


async def test_every_graph_tool_against_every_kind_of_caller(world: World) -> None:
    """On acme.com:specs: alice (OWNER) writes; bob (READER) and the bot's key read but may not write;
    dave (another org) and erin (no org) cannot even see it: every tool answers not found."""
    loc = fresh()
    parent, child = node(SPECS, f"{loc}:p"), node(SPECS, f"{loc}:p:c")
    obj = node(SPECS, f"thing:{loc}")
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=parent, name="P")
        await alice.ok("hadron_create_node", loc=child, name="C", seq=1)
        await alice.ok("hadron_create_object", memoryUrn=SPECS, type="thing", fields={"n": 1}, key=loc)
    reads = [
        ("hadron_set_active_memory", {"memoryUrn": SPECS}),
        ("hadron_get_node", {"loc": child}),
        ("hadron_get_next_node", {"parent": parent}),
        ("hadron_list_nodes", {"memoryUrn": SPECS, "parentRel": parent}),
        ("hadron_get_object", {"ref": obj}),
        ("hadron_find_objects", {"memoryUrn": SPECS, "type": "thing"}),
        ("hadron_validate", {"memoryUrn": SPECS}),
    ]
    writes = [
        ("hadron_create_node", {"loc": node(SPECS, f"{loc}:new"), "name": "N"}),
        ("hadron_create_parent_node", {"loc": node(SPECS, f"{loc}:sec"), "name": "S"}),
        ("hadron_update_node", {"loc": child, "name": "C2"}),
        ("hadron_update_node_data", {"nodeUrn": child, "data": {"k": 1}}),
        ("hadron_create_edge", {"sourceUrn": child, "targetUrn": parent}),
        ("hadron_move_node", {"urn": child, "targetUrn": node(SPECS, f"{loc}:moved")}),
        ("hadron_delete_node", {"urn": child}),
        ("hadron_create_object", {"memoryUrn": SPECS, "type": "thing", "fields": {"n": 2}}),
        ("hadron_update_object", {"ref": obj, "fields": {"n": 3}}),
        ("hadron_delete_object", {"ref": obj}),
    ]
    readers = [as_user(world, "bob"), as_app(world)]
    strangers = [as_user(world, "dave"), as_user(world, "erin"), as_app(world, world.other_app_key)]
    for connection in readers:
        async with connection as session:
            for tool, args in reads:
                await session.ok(tool, **args)
            for tool, args in writes:
                await session.refused(tool, "FORBIDDEN", **args)
    for connection in strangers:
        async with connection as session:
            for tool, args in reads + writes:
                refused = await session.call(tool, **args)
                assert refused.is_error and str(refused.code).endswith("_not_found"), (tool, refused.text)
                assert "thing" not in refused.text or tool.endswith("_object"), refused.text
    async with as_user(world, "alice") as alice:  # nothing above changed anything
        got = await alice.ok("hadron_get_node", loc=child)
        assert (got.data["name"], got.data["data"], got.data["edges"], got.data["revision"]) == (
            "C",
            None,
            [],
            1,
        )
        for tool, args in writes:
            if tool == "hadron_delete_node":  # the move before it took the node away
                args = {"urn": node(SPECS, f"{loc}:moved")}
            await alice.ok(tool, **args)
