"""The live Hadron server's tools beyond the reference (issue 28) through the official MCP client, on both
engines: first-class edge update and delete, batch and uniform node reads, text replacement and memory
locks, with every refusal they answer and the access rules of the other tools (a reader, another
organization, an App key)."""

from __future__ import annotations

import uuid

import pytest
from hadron.world import Session, World, as_app, as_user, fresh, node

SPECS = "hrn:mem:acme.com:specs"
TEAM = "hrn:mem:acme.com:team"
VAULT = "hrn:mem:acme.com:vault"
PLANS = "hrn:mem:globex.com:plans"

pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")


@pytest.fixture(scope="module")
def world(shared_hadron_world: World) -> World:
    """The session's shared world (tests/conftest.py): every test here works under locations of its own."""
    return shared_hadron_world


def edge(memory: str, loc: str) -> str:
    return memory.replace("hrn:mem:", "hrn:edge:") + ":" + loc


async def _graph(alice: Session, base: str, word: str) -> dict[str, str]:
    """a → b, a → c in specs; returns the edges' ids by target."""
    for leaf in ("b", "c"):
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{base}:{leaf}"), name=leaf.upper())
    await alice.ok("hadron_create_node", loc=node(SPECS, f"{base}:a"), name="A", content=f"the {word} hub")
    ids = {}
    for leaf in ("b", "c"):
        made = await alice.ok(
            "hadron_create_edge", sourceUrn=node(SPECS, f"{base}:a"), targetUrn=node(SPECS, f"{base}:{leaf}")
        )
        ids[leaf] = made.data["edge"]["id"]
        assert made.data["edge"]["urn"] == edge(SPECS, f"{base}:{leaf}")
    return ids


async def test_update_edge_changes_only_the_fields_passed_by_id_or_urn(world: World) -> None:
    base = fresh()
    async with as_user(world, "alice") as alice:
        ids = await _graph(alice, base, "alpha")
        updated = await alice.ok(
            "hadron_update_edge", edgeRef=ids["b"], name="depends-on", priority=5,
            data={"weight": 2}, condition={"==": [1, 1]},
        )  # fmt: skip
        view = updated.data["edge"]
        assert (view["name"], view["priority"], view["data"], view["condition"]) == (
            "depends-on", 5, {"weight": 2}, {"==": [1, 1]},
        )  # fmt: skip
        assert view["loc"] == f"{base}:b" and view["target"]["urn"] == node(SPECS, f"{base}:b")
        assert sorted(updated.data["changed"]) == ["condition", "data", "name", "priority"]
        assert updated.text.startswith(f"Updated edge {edge(SPECS, f'{base}:b')}")
        by_urn = await alice.ok("hadron_update_edge", edgeRef=edge(SPECS, f"{base}:b"), loc=f"{base}:needs-b")
        assert by_urn.data["edge"]["id"] == ids["b"] and by_urn.data["edge"]["name"] == "depends-on"
        cleared = await alice.ok("hadron_update_edge", edgeRef=ids["b"], data=None, name=None)
        assert cleared.data["edge"]["data"] is None and cleared.data["edge"]["name"] is None
        assert cleared.data["edge"]["priority"] == 5
        read = await alice.ok("hadron_get_node", loc=node(SPECS, f"{base}:a"))
        by_id = {e["id"]: e for e in read.data["edges"]}
        assert by_id[ids["b"]]["loc"] == f"{base}:needs-b" and by_id[ids["c"]]["loc"] == f"{base}:c"
        assert f"[edge id {ids['c']}]" in read.text
        assert [r["operation"] for r in read.data["revisions"]][:3] == ["update_edge"] * 3

        taken = await alice.refused(
            "hadron_update_edge", "URN_ALREADY_EXISTS", edgeRef=ids["b"], loc=f"{base}:c"
        )
        assert "already has an edge" in taken.text
        nothing = await alice.refused("hadron_update_edge", "BAD_USER_INPUT", edgeRef=ids["b"])
        assert "nothing to update" in nothing.text
        await alice.refused("hadron_update_edge", "BAD_USER_INPUT", edgeRef=ids["b"], data=[1, 2])
        await alice.refused("hadron_update_edge", "BAD_USER_INPUT", edgeRef=ids["b"], loc=None)
        await alice.refused("hadron_update_edge", "BAD_USER_INPUT", edgeRef=ids["b"], priority=2**31)
        await alice.refused("hadron_update_edge", "BAD_USER_INPUT", edgeRef=ids["b"], colour="red")
        missing = await alice.refused(
            "hadron_update_edge", "edge_not_found", edgeRef=uuid.uuid4().hex, name="x"
        )
        assert missing.text.startswith("[edge_not_found]")
        await alice.refused(
            "hadron_update_edge", "edge_not_found", edgeRef=edge(SPECS, f"{base}:zz"), name="x"
        )
        await alice.refused("hadron_update_edge", "URN_NOT_QUALIFIED", edgeRef=f"{base}:b", name="x")


async def test_an_edge_urn_naming_edges_of_two_nodes_is_refused_with_the_candidates(world: World) -> None:
    base = fresh()
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(SPECS, f"{base}:t"), name="T")
        for src in ("x", "y"):
            await alice.ok("hadron_create_node", loc=node(SPECS, f"{base}:{src}"), name=src)
            await alice.ok(
                "hadron_create_edge",
                sourceUrn=node(SPECS, f"{base}:{src}"),
                targetUrn=node(SPECS, f"{base}:t"),
            )
        refused = await alice.refused(
            "hadron_delete_edge", "BAD_USER_INPUT", edgeRef=edge(SPECS, f"{base}:t")
        )
        data = refused.data["error"]["data"]
        assert data["reason"] == "ambiguous_edge_loc"
        assert sorted(c["sourceUrn"] for c in data["candidates"]) == [
            node(SPECS, f"{base}:x"), node(SPECS, f"{base}:y"),
        ]  # fmt: skip
        await alice.ok("hadron_delete_edge", edgeRef=data["candidates"][0]["id"])
        assert (await alice.ok("hadron_delete_edge", edgeRef=edge(SPECS, f"{base}:t"))).data["deleted"]


async def test_a_deleted_edge_is_gone_from_node_reads_search_and_neighbour_walks(world: World) -> None:
    base, word = fresh(), "w" + uuid.uuid4().hex[:8]
    async with as_user(world, "alice") as alice:
        ids = await _graph(alice, base, word)

        async def neighbours() -> set[str]:
            found = await alice.ok("hadron_find_nodes", query=word, memoryUrn=SPECS, expand=1)
            hub = next(h for h in found.data["hits"] if h["urn"] == node(SPECS, f"{base}:a"))
            assert {e["id"] for e in hub["edges"]} <= set(ids.values())
            return {h["urn"] for h in found.data["hits"] if "expandedFrom" in h}

        assert await neighbours() == {node(SPECS, f"{base}:b"), node(SPECS, f"{base}:c")}
        gone = await alice.ok("hadron_delete_edge", edgeRef=ids["c"])
        assert gone.data == {
            "deleted": True, "id": ids["c"], "urn": edge(SPECS, f"{base}:c"), "loc": f"{base}:c",
            "sourceUrn": node(SPECS, f"{base}:a"),
        }  # fmt: skip
        read = await alice.ok("hadron_get_node", loc=node(SPECS, f"{base}:a"))
        assert [e["id"] for e in read.data["edges"]] == [ids["b"]]
        assert read.data["revisions"][0]["operation"] == "delete_edge"
        assert await neighbours() == {node(SPECS, f"{base}:b")}
        brief = await alice.ok("hadron_find_nodes", query=word, memoryUrn=SPECS, brief=True)
        assert [e["id"] for e in brief.data["hits"][0]["edges"]] == [ids["b"]]
        batch = await alice.ok("hadron_get_nodes", refs=[node(SPECS, f"{base}:a")])
        assert [e["id"] for e in batch.data["nodes"][0]["edges"]] == [ids["b"]]
        await alice.refused("hadron_delete_edge", "edge_not_found", edgeRef=ids["c"])
        dangling = await alice.ok(
            "hadron_create_edge", sourceUrn=node(SPECS, f"{base}:a"), targetUrn=node(SPECS, f"{base}:nowhere")
        )

        async def broken() -> set[str]:
            report = await alice.ok("hadron_validate", memoryUrn=SPECS)
            return {b["edge"] for b in report.data["brokenEdges"] if b["source"] == node(SPECS, f"{base}:a")}

        assert await broken() == {f"{base}:nowhere"}
        await alice.ok("hadron_delete_edge", edgeRef=dangling.data["edge"]["id"])
        assert await broken() == set()
        await alice.ok("hadron_delete_node", urn=node(SPECS, f"{base}:a"))  # an edge of a deleted node
        await alice.refused("hadron_update_edge", "edge_not_found", edgeRef=ids["b"], name="x")


async def test_edge_tools_follow_the_source_memorys_access(world: World) -> None:
    base = fresh()
    async with as_user(world, "alice") as alice:
        ids = await _graph(alice, base, "beta")
    async with as_user(world, "bob") as bob:  # acme READER: reads specs, cannot write it
        refused = await bob.refused("hadron_update_edge", "FORBIDDEN", edgeRef=ids["b"], name="x")
        assert refused.text.startswith("FORBIDDEN: read-only access")
        await bob.refused("hadron_delete_edge", "FORBIDDEN", edgeRef=ids["b"])
    async with as_user(world, "dave") as dave:  # globex: acme's edges read as missing
        await dave.refused("hadron_update_edge", "edge_not_found", edgeRef=ids["b"], name="x")
        await dave.refused("hadron_delete_edge", "edge_not_found", edgeRef=ids["b"])
        await dave.refused("hadron_delete_edge", "memory_not_found", edgeRef=edge(SPECS, f"{base}:b"))
    async with as_app(world) as app:  # the bot's key reads its org's knowledge read-only
        await app.refused("hadron_delete_edge", "FORBIDDEN", edgeRef=ids["b"])
    async with as_app(world, world.other_app_key) as other:
        await other.refused("hadron_delete_edge", "edge_not_found", edgeRef=ids["b"])
    async with as_user(world, "alice") as alice:
        assert len((await alice.ok("hadron_get_node", loc=node(SPECS, f"{base}:a"))).data["edges"]) == 2
        await alice.ok("hadron_create_node", loc=node(VAULT, f"{base}:s"), name="S")
        made = await alice.ok(
            "hadron_create_edge", sourceUrn=node(VAULT, f"{base}:s"), targetUrn=node(VAULT, f"{base}:s")
        )
        sealed = await alice.refused(
            "hadron_update_edge", "BAD_USER_INPUT", edgeRef=made.data["edge"]["id"], data={"k": 1}
        )
        assert sealed.data["error"]["data"]["reason"] == "encrypted_memory"
        assert (await alice.ok("hadron_update_edge", edgeRef=made.data["edge"]["id"], priority=3)).data[
            "edge"
        ]["priority"] == 3


async def test_get_nodes_reads_refs_in_order_and_lists_what_it_cannot_read(world: World) -> None:
    base = fresh()
    async with as_user(world, "alice") as alice:
        made = {}
        for leaf in ("one", "two", "two:deep"):
            made[leaf] = (
                await alice.ok("hadron_create_node", loc=node(SPECS, f"{base}:{leaf}"), name=leaf)
            ).data
        missing = node(SPECS, f"{base}:nothing")
        refs = [node(SPECS, f"{base}:two"), made["one"]["id"], missing, node(PLANS, "x"), made["one"]["id"]]
        batch = await alice.ok("hadron_get_nodes", refs=refs)
        assert [n["name"] for n in batch.data["nodes"]] == ["two", "one"]
        assert batch.data["unavailable"] == [missing, node(PLANS, "x")]
        assert (batch.data["truncated"], batch.data["omitted"]) == (False, [])
        assert batch.data["nodes"][0]["content"] is None and "edges" in batch.data["nodes"][0]
        assert batch.text.startswith("2 node(s); unavailable")
        subtree = await alice.ok("hadron_get_nodes", memory=SPECS, locPrefix=f"{base}:two")
        assert [n["loc"] for n in subtree.data["nodes"]] == [f"{base}:two", f"{base}:two:deep"]
        bare = await alice.refused("hadron_get_nodes", "URN_NOT_QUALIFIED", refs=[f"{base}:one"])
        assert "not a fully qualified" in bare.text
        await alice.refused("hadron_get_nodes", "BAD_USER_INPUT", refs=[SPECS])
        await alice.refused("hadron_get_nodes", "BAD_USER_INPUT", refs=[edge(SPECS, f"{base}:one")])
        as_task = node(SPECS, f"{base}:one").replace("hrn:node:", "hrn:task:")  # a node kind names a node
        assert [n["name"] for n in (await alice.ok("hadron_get_nodes", refs=[as_task])).data["nodes"]] == [
            "one"
        ]
        await alice.refused("hadron_get_nodes", "BAD_USER_INPUT", refs=[made["one"]["id"]], memory=SPECS,
                            locPrefix=base)  # fmt: skip
        await alice.refused("hadron_get_nodes", "BAD_USER_INPUT")
        await alice.refused("hadron_get_nodes", "BAD_USER_INPUT", memory=SPECS)
        over = await alice.refused(
            "hadron_get_nodes", "BAD_USER_INPUT", refs=[uuid.uuid4().hex for _ in range(201)]
        )
        assert "at most 200" in over.text
        assert (await alice.ok("hadron_get_nodes", refs=[])).data["nodes"] == []
    async with as_user(world, "dave") as dave:
        hidden = await dave.ok("hadron_get_nodes", refs=[made["one"]["id"], node(SPECS, f"{base}:two")])
        assert hidden.data["nodes"] == [] and len(hidden.data["unavailable"]) == 2
        await dave.refused("hadron_get_nodes", "memory_not_found", memory=SPECS, locPrefix=base)
    async with as_user(world, "bob") as bob:  # a reader reads
        assert len((await bob.ok("hadron_get_nodes", refs=[made["one"]["id"]])).data["nodes"]) == 1


async def test_read_node_resolves_an_id_a_urn_or_a_bare_loc_across_memories(world: World) -> None:
    base = fresh()
    async with as_user(world, "carol") as carol:  # carol writes specs (CONTRIBUTOR) and team (a grant)
        spec = (await carol.ok("hadron_create_node", loc=node(SPECS, f"{base}:x"), name="In specs")).data
        await carol.ok("hadron_create_node", loc=node(TEAM, f"{base}:x"), name="In team")
        await carol.ok("hadron_create_node", loc=node(SPECS, f"{base}:only"), name="Only here")
        assert (await carol.ok("hadron_read_node", ref=spec["id"])).data["name"] == "In specs"
        by_urn = await carol.ok("hadron_read_node", ref=node(TEAM, f"{base}:x"))
        assert by_urn.data["memoryUrn"] == TEAM and by_urn.text.startswith("---\nurn: ")
        assert (await carol.ok("hadron_read_node", ref=f"{base}:x", memoryRef=TEAM)).data["name"] == "In team"
        assert (await carol.ok("hadron_read_node", ref=f"{base}:only", raw=True)).data["memoryUrn"] == SPECS
        unprefixed = await carol.ok("hadron_read_node", ref=f"acme.com:specs:{base}:x")
        assert unprefixed.data["id"] == spec["id"]
        ambiguous = await carol.refused("hadron_read_node", "AMBIGUOUS_NODE_LOC", ref=f"{base}:x")
        assert sorted(ambiguous.data["error"]["data"]["memoryUrns"]) == [SPECS, TEAM]
        await carol.refused("hadron_read_node", "node_not_found", ref=f"{base}:nowhere")
        await carol.refused("hadron_read_node", "node_not_found", ref=f"{base}:nowhere", memoryRef=SPECS)
        await carol.refused(
            "hadron_read_node", "BAD_USER_INPUT", ref=node(TEAM, f"{base}:x"), memoryRef=SPECS
        )
        await carol.refused("hadron_read_node", "BAD_USER_INPUT", ref="a b")
    async with as_user(world, "dave") as dave:  # another org: denied reads as missing
        await dave.refused("hadron_read_node", "node_not_found", ref=spec["id"])
        await dave.refused("hadron_read_node", "node_not_found", ref=node(SPECS, f"{base}:x"))
        await dave.refused("hadron_read_node", "node_not_found", ref=f"{base}:only")
        await dave.refused("hadron_read_node", "memory_not_found", ref=f"{base}:only", memoryRef=SPECS)


async def test_replace_text_previews_then_rewrites_with_revisions_and_search_follows(world: World) -> None:
    base, old, new = fresh(), "q" + uuid.uuid4().hex[:8], "r" + uuid.uuid4().hex[:8]
    async with as_user(world, "alice") as alice:
        for leaf in ("p", "p:q", "other"):
            await alice.ok("hadron_create_node", loc=node(SPECS, f"{base}:{leaf}"), name=f"{old} {leaf}",
                           content=f"{old} and {old.upper()}", tags=[old])  # fmt: skip
        preview = await alice.ok("hadron_replace_text", oldText=old, newText=new, fields=["content", "name"],
                                 memoryIds=[SPECS], prefix=f"{base}:p", dryRun=True)  # fmt: skip
        assert (preview.data["dryRun"], preview.data["nodesScanned"], preview.data["nodesChanged"]) == (
            True,
            2,
            2,
        )
        assert preview.data["totalReplacements"] == 4
        assert (
            (await alice.ok("hadron_get_node", loc=node(SPECS, f"{base}:p"))).data["content"].startswith(old)
        )
        done = await alice.ok("hadron_replace_text", oldText=old, newText=new, fields=["content", "tags"],
                              memoryIds=[SPECS], prefix=f"{base}:p", caseInsensitive=True, reason="rename")  # fmt: skip
        assert done.data["totalReplacements"] == 6
        row = next(r for r in done.data["results"] if r["loc"] == f"{base}:p")
        assert row["fields"] == [{"field": "content", "matches": 2}, {"field": "tags", "matches": 1}]
        read = (await alice.ok("hadron_get_node", loc=node(SPECS, f"{base}:p"))).data
        assert (read["content"], read["tags"], read["name"]) == (f"{new} and {new}", [new], f"{old} p")
        assert (read["revisions"][0]["operation"], read["revisions"][0]["reason"]) == (
            "replace_text",
            "rename",
        )
        found = await alice.ok("hadron_find_nodes", query=new, memoryUrn=SPECS)
        assert {h["urn"] for h in found.data["hits"]} == {
            node(SPECS, f"{base}:p"),
            node(SPECS, f"{base}:p:q"),
        }
        regex = await alice.ok("hadron_replace_text", oldText=rf"({old}) (\w+)", newText="$2-$1 $$",
                               fields=["name"], nodeIds=[node(SPECS, f"{base}:other"), node(PLANS, "x")],
                               regex=True)  # fmt: skip
        assert regex.data["unavailable"] == [node(PLANS, "x")]
        assert (await alice.ok("hadron_get_node", loc=node(SPECS, f"{base}:other"))).data[
            "name"
        ] == f"other-{old} $"
        for args, code in [
            ({"oldText": "", "fields": ["content"], "memoryIds": [SPECS]}, "BAD_USER_INPUT"),
            ({"oldText": "a", "fields": [], "memoryIds": [SPECS]}, "BAD_USER_INPUT"),
            ({"oldText": "a", "fields": ["alias"], "memoryIds": [SPECS]}, "BAD_USER_INPUT"),
            ({"oldText": "a", "fields": ["data"], "memoryIds": [SPECS]}, "BAD_USER_INPUT"),
            ({"oldText": "a", "fields": ["content"]}, "BAD_USER_INPUT"),
            ({"oldText": "a", "fields": ["content"], "nodeIds": [f"{base}:p"], "prefix": "p"}, "BAD_USER_INPUT"),
            ({"oldText": "(a", "fields": ["content"], "memoryIds": [SPECS], "regex": True}, "BAD_USER_INPUT"),
            ({"oldText": "a", "fields": ["content"], "nodeIds": [f"{base}:p"]}, "URN_NOT_QUALIFIED"),
            ({"oldText": "^.*$", "regex": True, "fields": ["name"], "nodeIds": [node(SPECS, f"{base}:other")],
              "newText": " "}, "BAD_USER_INPUT"),
        ]:  # fmt: skip
            await alice.refused("hadron_replace_text", code, **({"newText": "x"} | args))
    async with as_user(world, "bob") as bob:  # a reader previews but does not write
        dry = await bob.ok("hadron_replace_text", oldText=new, newText="z", fields=["content"],
                           nodeIds=[node(SPECS, f"{base}:p")], dryRun=True)  # fmt: skip
        assert dry.data["nodesChanged"] == 1
        await bob.refused("hadron_replace_text", "FORBIDDEN", oldText=new, newText="z", fields=["content"],
                          nodeIds=[node(SPECS, f"{base}:p")])  # fmt: skip
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_replace_text", "memory_not_found", oldText=new, newText="z",
                           fields=["content"], memoryIds=[SPECS])  # fmt: skip
        hidden = await dave.ok("hadron_replace_text", oldText=new, newText="z", fields=["content"],
                               nodeIds=[node(SPECS, f"{base}:p")])  # fmt: skip
        assert hidden.data["nodesChanged"] == 0 and hidden.data["unavailable"] == [node(SPECS, f"{base}:p")]


async def test_a_lock_refuses_other_principals_writes_until_its_holder_unlocks(world: World) -> None:
    base = fresh()
    async with as_user(world, "alice") as alice, as_user(world, "carol") as carol:
        await carol.ok("hadron_create_node", loc=node(SPECS, f"{base}:n"), name="N")
        ids = await _graph(alice, base, "gamma")
        locked = await alice.ok("hadron_lock_memory", memoryUrn=SPECS, ttlSeconds=600, reason="migrating")
        assert (locked.data["locked"], locked.data["lockedBy"], locked.data["renewed"]) == (
            True, "hrn:user:alice", False,
        )  # fmt: skip
        for tool, args in [
            ("hadron_create_node", {"loc": node(SPECS, fresh()), "name": "x"}),
            ("hadron_update_node", {"loc": node(SPECS, f"{base}:n"), "name": "x"}),
            ("hadron_update_edge", {"edgeRef": ids["b"], "name": "x"}),
            ("hadron_delete_edge", {"edgeRef": ids["b"]}),
            ("hadron_replace_text", {"oldText": "N", "newText": "M", "fields": ["name"],
                                     "nodeIds": [node(SPECS, f"{base}:n")]}),
            ("hadron_delete_node", {"urn": node(SPECS, f"{base}:n")}),
        ]:  # fmt: skip
            refused = await carol.refused(tool, "MEMORY_LOCKED", **args)
            assert refused.text.startswith(f"MEMORY_LOCKED: {SPECS} is locked by hrn:user:alice until ")
            assert refused.data["error"]["data"]["reason"] == "migrating"
        assert (await carol.ok("hadron_get_node", loc=node(SPECS, f"{base}:n"))).data["name"] == "N"
        other = await carol.ok("hadron_lock_memory", memoryUrn=SPECS)
        assert (other.data["locked"], other.data["lockedBy"]) == (False, "hrn:user:alice")
        assert other.data["expiresAt"] == locked.data["expiresAt"] and other.text.startswith("Not locked")
        await carol.refused("hadron_unlock_memory", "MEMORY_LOCKED", memoryUrn=SPECS)
        await carol.refused("hadron_unlock_memory", "FORBIDDEN", memoryUrn=SPECS, force=True)
        async with as_user(world, "alice") as again:  # the holder is the user, on any connection
            await again.ok("hadron_update_node", loc=node(SPECS, f"{base}:n"), name="By the holder")
            await again.ok("hadron_set_active_memory", memoryUrn=SPECS)
            renewed = await again.ok("hadron_lock_memory")
            assert renewed.data["renewed"] and renewed.data["lockedAt"] == locked.data["lockedAt"]
        released = await alice.ok("hadron_unlock_memory", memoryUrn=SPECS)
        assert released.data == {"memoryUrn": SPECS, "unlocked": True, "lockedBy": "hrn:user:alice"}
        await carol.ok("hadron_update_node", loc=node(SPECS, f"{base}:n"), name="After")
        assert (await alice.ok("hadron_unlock_memory", memoryUrn=SPECS)).data["unlocked"] is False


async def test_who_may_lock_and_who_may_break_a_lock(world: World) -> None:
    async with as_user(world, "bob") as bob:  # a reader cannot lock
        refused = await bob.refused("hadron_lock_memory", "FORBIDDEN", memoryUrn=SPECS)
        assert refused.text.startswith("FORBIDDEN: read-only access")
        await bob.refused("hadron_unlock_memory", "FORBIDDEN", memoryUrn=SPECS)
        await bob.refused("hadron_lock_memory", "no_active_memory")
    async with as_user(world, "dave") as dave:  # another org cannot see the memory
        await dave.refused("hadron_lock_memory", "memory_not_found", memoryUrn=SPECS)
        await dave.refused("hadron_unlock_memory", "memory_not_found", memoryUrn=SPECS, force=True)
    async with as_app(world) as app:  # the bot's key: specs is read-only to it
        await app.refused("hadron_lock_memory", "FORBIDDEN", memoryUrn=SPECS)
    async with as_user(world, "carol") as carol:
        assert (await carol.ok("hadron_lock_memory", memoryUrn=TEAM)).data["locked"]
        await carol.refused("hadron_lock_memory", "BAD_USER_INPUT", memoryUrn=TEAM, ttlSeconds=0)
        await carol.refused("hadron_lock_memory", "BAD_USER_INPUT", memoryUrn=TEAM, ttlSeconds=86_401)
    async with as_user(world, "alice") as alice:  # acme's OWNER administers the group memory
        await alice.refused("hadron_create_node", "MEMORY_LOCKED", loc=node(TEAM, fresh()), name="x")
        await alice.refused("hadron_unlock_memory", "MEMORY_LOCKED", memoryUrn=TEAM)
        broken = await alice.ok("hadron_unlock_memory", memoryUrn=TEAM, force=True)
        assert broken.data == {"memoryUrn": TEAM, "unlocked": True, "lockedBy": "hrn:user:carol"}
        await alice.ok("hadron_create_node", loc=node(TEAM, fresh()), name="x")
