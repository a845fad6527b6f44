"""Hadron as the official hadron CLI calls it (issue 28), through the official MCP client on both engines:
``where`` paths as lists of keys, implicit folders in hadron_list_nodes and its parent's URN, work refs
from percent-encoded URLs, App short forms, a bounded hadron_search query, and keyword scores that keep a
real match above nothing at every memory size. The CLI's own request shapes are the test data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hadron.team_world import CREW, OPS, build_team, worker_session
from hadron.world import World, admin_of, as_user, node, serve

SPECS = "hrn:mem:acme.com:specs"
CATALOG = "hrn:mem:acme.com:catalog"
TREE = "hrn:mem:acme.com:tree"
GLOBEX_OPS = "hrn:app:globex.com:ops"
SIZES = (1, 2, 3, 10)

pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None) -> Iterator[World]:
    """The team world, plus globex.com:ops (so the slug ``ops`` names two Apps carol can see), an empty
    memory for the tree and one empty memory per size of the keyword-score test."""
    data_dir = tmp_path_factory.mktemp("hadron-cli-requests") / "data"
    data_dir.mkdir(parents=True)
    key, other, _ = build_team(data_dir, module_database_url)
    with admin_of(data_dir, module_database_url) as admin:
        admin.create_app("ops", "Globex Ops", "globex.com", None)
        admin.create_memory("tree", "knowledge", org="acme.com", name="Tree")
        for size in SIZES:
            admin.create_memory(f"size{size}", "knowledge", org="acme.com", name=f"{size} node(s)")
    w = serve(data_dir, key, other, module_database_url)
    yield w
    w.server.stop()


# ── 1. where paths as lists of keys ─────────────────────────────────────────


async def test_where_takes_a_path_as_a_list_of_keys_in_every_place_a_leaf_goes(world: World) -> None:
    async with as_user(world, "alice") as alice:
        rows = [
            ("acme", "Acme pricing", {"tier": "enterprise", "seats": 500, "plan": {"tier": "gold"}}),
            ("bolt", "Bolt pricing", {"tier": "team", "seats": 20, "plan": {"tier": "silver"}}),
            ("cog", "Cog pricing", {"tier": "enterprise", "seats": 5, "plan": {"tier": "gold"}}),
        ]
        for leaf, name, properties in rows:
            await alice.ok("hadron_create_node", loc=node(SPECS, f"where:{leaf}"), name=name,
                           objectType="competitor", properties=properties)  # fmt: skip
        await alice.ok("hadron_create_node", loc=node(SPECS, "where:memo"), name="Pricing memo",
                       objectType="insight", properties={"tier": "enterprise"})  # fmt: skip

        async def found(where: dict[str, object]) -> set[str]:
            # The CLI's own example: hadron search "pricing" --object-type competitor --where '...'
            result = await alice.ok("hadron_find_nodes", query="pricing", memoryUrn=SPECS,
                                    objectType="competitor", where=where)  # fmt: skip
            return {h["loc"].rsplit(":", 1)[-1] for h in result.data["hits"]}

        assert await found({"path": ["tier"], "eq": "enterprise"}) == {"acme", "cog"}
        assert await found({"path": "tier", "eq": "enterprise"}) == {"acme", "cog"}  # the dotted string too
        assert await found({"path": ["plan", "tier"], "eq": "gold"}) == {"acme", "cog"}  # nested keys
        both = {
            "and": [{"path": ["tier"], "eq": "enterprise"}, {"path": ["seats"], "as": "number", "gt": 100}]
        }
        assert await found(both) == {"acme"}
        either = {
            "or": [{"path": ["seats"], "as": "number", "lt": 10}, {"path": ["plan", "tier"], "eq": "silver"}]
        }
        assert await found(either) == {"bolt", "cog"}
        assert await found({"not": {"path": ["tier"], "eq": "enterprise"}}) == {"bolt"}
        survey = await alice.ok("hadron_find_nodes", query="*", memoryUrn=SPECS,
                                where={"path": ["tier"], "eq": "enterprise"})  # fmt: skip
        assert {h["loc"] for h in survey.data["hits"]} >= {"where:acme", "where:cog", "where:memo"}
        refused = await alice.refused("hadron_find_nodes", "BAD_USER_INPUT", query="pricing", memoryUrn=SPECS,
                                      where={"and": [{"path": [], "eq": 1}]})  # fmt: skip
        assert "and[0]" in refused.text and "list of keys" in refused.text

        for key, price, tier in (("anvil", 5, "a"), ("bellow", 25, "b"), ("crank", 40, "a")):
            await alice.ok("hadron_create_object", memoryUrn=CATALOG, type="competitor", key=key,
                           fields={"name": key.title(), "price": price, "tier": tier})  # fmt: skip

        async def objects(where: dict[str, object]) -> set[str]:
            result = await alice.ok("hadron_find_objects", memoryUrn=CATALOG, type="competitor", where=where)
            return {o["name"] for o in result.data["objects"]}

        # The CLI's example: hadron object find ... --where '{"path":["fundingUsd"],"as":"number","gt":...}'
        assert await objects({"path": ["price"], "as": "number", "gt": 10}) == {"Bellow", "Crank"}
        assert await objects({"and": [{"path": ["price"], "as": "number", "gt": 10},
                                      {"not": {"path": ["tier"], "eq": "b"}}]}) == {"Crank"}  # fmt: skip
        await alice.refused("hadron_find_objects", "BAD_USER_INPUT", memoryUrn=CATALOG, type="competitor",
                            where={"path": ["a", "b", "c", "d", "e", "f", "g", "h", "i"], "eq": 1})  # fmt: skip


# ── 2 and 5. implicit folders, and a subtree listing's heading ──────────────


async def test_a_listing_shows_implicit_folders_at_every_depth_and_heads_with_the_parent_s_urn(
    world: World,
) -> None:
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(TREE, "tasks:nightly-digest"), name="Nightly digest")
        await alice.ok("hadron_create_node", loc=node(TREE, "docs"), name="Docs", seq=1)
        await alice.ok("hadron_create_node", loc=node(TREE, "docs:guides:setup"), name="Setup")
        await alice.ok("hadron_create_node", loc=node(TREE, "a:b:c:d"), name="Deep")

        def entries(result: object) -> list[tuple[str, int, bool]]:
            return [(n["loc"], n["depth"], n["implicit"]) for n in result.data["nodes"]]  # type: ignore[attr-defined]

        top = await alice.ok("hadron_list_nodes", memoryUrn=TREE)
        assert entries(top) == [("docs", 1, False), ("a", 1, True), ("tasks", 1, True)]  # seq first, then loc
        assert top.text.splitlines()[0] == f"{TREE} — 1 node(s), 2 implicit folder(s), depth 1"
        three = await alice.ok("hadron_list_nodes", memoryUrn=TREE, depth=3)
        assert entries(three) == [
            ("docs", 1, False), ("docs:guides", 2, True), ("docs:guides:setup", 3, False),
            ("a", 1, True), ("a:b", 2, True), ("a:b:c", 3, True),
            ("tasks", 1, True), ("tasks:nightly-digest", 2, False),
        ]  # fmt: skip
        folder = next(n for n in three.data["nodes"] if n["loc"] == "tasks")
        assert folder == {"loc": "tasks", "name": "tasks", "description": None, "nodeType": None,
                          "depth": 1, "implicit": True}  # fmt: skip
        four = await alice.ok("hadron_list_nodes", memoryUrn=TREE, depth=4)
        assert ("a:b:c:d", 4, False) in entries(four)

        # A subtree under an implicit folder lists too; its heading is the parent's node URN ...
        sub = await alice.ok("hadron_list_nodes", parentRel=node(TREE, "a"), depth=2)
        assert entries(sub) == [("a:b", 1, True), ("a:b:c", 2, True)]
        heading = sub.text.splitlines()[0].split(" — ")[0]
        assert heading == node(TREE, "a") == sub.data["parentUrn"]
        # ... which the server itself takes back as a parent.
        again = await alice.ok("hadron_list_nodes", parentRel=heading, depth=2)
        assert entries(again) == entries(sub)
        tasks = await alice.ok("hadron_list_nodes", parentRel=node(TREE, "tasks"))
        assert tasks.text.startswith(node(TREE, "tasks") + " — 1 node(s), depth 1")
        await alice.refused("hadron_list_nodes", "node_not_found", parentRel=node(TREE, "nothing"))


# ── 3. work refs from percent-encoded URLs ──────────────────────────────────


async def test_a_branch_recorded_by_its_encoded_url_is_found_by_its_short_form(world: World) -> None:
    async with as_user(world, "carol") as carol:
        sid = await worker_session(carol, CREW, "Quill", "backend-engineer")
        url = "https://github.com/acme/gadgets/tree/release%25rc"
        recorded = await carol.ok("hadron_record_work", session=sid, tool="github", kind="branch", ref=url,
                                  action="pushed")  # fmt: skip
        assert recorded.data["item"]["ref"] == "acme/gadgets:release%rc"
        for spelling in ("acme/gadgets:release%rc", url, "github.com/Acme/Gadgets/tree/release%25rc"):
            found = await carol.ok("hadron_team_work_items", ref=spelling, tool="github")
            assert [i["ref"] for i in found.data["items"]] == ["acme/gadgets:release%rc"], spelling


# ── 4. App short forms ──────────────────────────────────────────────────────


async def test_set_active_app_takes_the_short_forms_the_cli_writes(world: World) -> None:
    async with as_user(world, "carol") as carol:
        for ref, urn in [
            ("acme.com:ops", OPS),  # <org-root>:<slug>, exactly as the CLI writes --app
            ("acme.com::ops", OPS),  # the v1 separator
            (" acme.com:ops ", OPS),
            ("globex.com:ops", GLOBEX_OPS),
            ("@carol:scratch", "hrn:app:carol:scratch"),  # the personal form
            ("carol:scratch", "hrn:app:carol:scratch"),
            ("hrn:app:@carol:scratch", "hrn:app:carol:scratch"),
            ("acme.com:crew", CREW),
        ]:
            chosen = await carol.ok("hadron_set_active_app", app=ref)
            assert chosen.data["appUrn"] == urn, ref
        listed = await carol.ok("hadron_list_memories")
        assert listed.data is not None  # an App-scoped call runs under the short form's App
        ambiguous = await carol.refused("hadron_set_active_app", "app_identifier_ambiguous", app="ops")
        assert ambiguous.data["error"]["data"]["candidates"] == [OPS, GLOBEX_OPS]
        await carol.refused("hadron_set_active_app", "app_identifier_ambiguous", app="Helper")
        for missing in ("acme.com:nope", "@acme.com:ops", "initech.com:ops", "acme.com:ops:extra"):
            await carol.refused("hadron_set_active_app", "app_not_found", app=missing)
    async with as_user(world, "erin") as erin:  # a short form reveals nothing the caller cannot see
        await erin.refused("hadron_set_active_app", "app_not_found", app="acme.com:ops")


# ── 6. a very long hadron_search query ──────────────────────────────────────


async def test_hadron_search_bounds_its_query_with_a_typed_refusal(world: World) -> None:
    async with as_user(world, "alice") as alice:
        for query in ("%" * 60_000, "x" * 4097):
            refused = await alice.refused(
                "hadron_search", "BAD_USER_INPUT", query=query, fields=["name", "content"]
            )
            assert "4096" in refused.text
        longest = await alice.ok("hadron_search", query="%_\\" * 1365, fields=["name", "urn", "content"])
        assert longest.data["total"] == 0


# ── 7. keyword scores at every memory size ──────────────────────────────────


async def test_a_real_match_keeps_a_positive_score_in_a_memory_of_any_size(world: World) -> None:
    async with as_user(world, "alice") as alice:
        for size in SIZES:
            memory = f"hrn:mem:acme.com:size{size}"
            await alice.ok("hadron_create_node", loc=node(memory, "rollback"), name="Rollback",
                           content="Undo a release.")  # fmt: skip
            for i in range(1, size):
                name = (
                    "Glossary of terms" if i == size - 1 and size > 2 else f"Deploy step {i} and its rollback"
                )
                await alice.ok("hadron_create_node", loc=node(memory, f"n{i}"), name=name)
            found = await alice.ok(
                "hadron_find_nodes", query="deploy rollback", memoryUrn=memory, minScore=0.01
            )
            scores = {h["loc"]: h["score"] for h in found.data["hits"]}
            assert "rollback" in scores and all(s >= 0.01 for s in scores.values()), (size, scores)
            assert f"n{size - 1}" not in scores or size <= 2, (size, scores)  # the glossary matches nothing
