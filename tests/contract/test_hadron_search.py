"""Hadron search through the official MCP client against a real `triptych serve`: hadron_find_nodes in every
mode with every filter, where operator and bound; the search ladder rung by rung; scopes; hadron_search;
and access (a reader of one memory never sees another's nodes through any mode)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hadron.world import Result, World, admin_of, as_app, as_user, build_world, node, serve

SPECS = "hrn:mem:acme.com:specs"
TEAM = "hrn:mem:acme.com:team"
BOTMEM = "hrn:mem:acme.com:botmem"
BOARD = "hrn:mem:acme.com:board"
VAULT = "hrn:mem:acme.com:vault"
PLANS = "hrn:mem:globex.com:plans"
NOTES = "hrn:mem:erin:notes"
BOT = "hrn:app:acme.com:bot"


# The contract holds on both storage engines: each runs this module against its own server.
pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None) -> Iterator[World]:
    """The graph world plus acme.com:board (a group memory only acme's OWNER/ADMIN read) and a vector
    index on acme.com:team."""
    tmp: Path = tmp_path_factory.mktemp("hadron-search")
    data_dir = tmp / "data"
    data_dir.mkdir()
    key, other = build_world(data_dir, module_database_url)
    with admin_of(data_dir, module_database_url) as admin:
        admin.create_memory("board", "group", org="acme.com", name="Board")
        admin.set_embedding(TEAM, "content")
    w = serve(data_dir, key, other, module_database_url)
    yield w
    w.server.stop()


def fresh() -> str:
    return "s" + uuid.uuid4().hex[:10]


def locs(result: Result) -> list[str]:
    return [h["loc"] for h in result.data["hits"]]


def leaves(result: Result) -> set[str]:
    return {h["loc"].rsplit(":", 1)[-1] for h in result.data["hits"]}


async def _seed(memory: str, user: str, root: str, items: list[dict[str, Any]], world: World) -> None:
    async with as_user(world, user) as session:
        await session.ok("hadron_create_parent_node", loc=node(memory, root), name=root)
        for item in items:
            body = {k: v for k, v in item.items() if k != "leaf"}
            await session.ok("hadron_create_node", loc=node(memory, f"{root}:{item['leaf']}"), **body)


CORPUS = [
    {"leaf": "deploy", "name": "Deploying the service", "description": "How releases ship",
     "content": "We deployed version two with docker compose.\n\nRollbacks use the previous image."},
    {"leaf": "tests", "name": "Running tests", "content": "The test suite runs with pytest on every push."},
    {"leaf": "cats", "name": "Cats", "content": "Felines purr, sleep most of the day and chase mice."},
    {"leaf": "action", "name": "Restart job", "nodeType": "action", "content": "Restarts the deploy worker."},
]  # fmt: skip


async def test_keyword_search_is_stemmed_and_every_result_starts_with_the_scope_line(world: World) -> None:
    root = fresh()
    await _seed(SPECS, "alice", root, CORPUS, world)
    async with as_user(world, "alice") as alice:
        found = await alice.ok("hadron_find_nodes", query="deploying", memoryUrn=SPECS)
        assert found.text.startswith(
            f"scope: memoryUrn (named in the call) — searched 1 memory ({SPECS}); 0 dropped"
        )
        assert leaves(found) >= {"deploy", "action"}  # "deploying" matches "deployed" and "deploy"
        assert locs(found)[0] == f"{root}:deploy"  # the name (weighted) outranks the content mention
        assert found.data["mode"] == "keyword" and found.data["scope"]["rung"] == "memoryUrn"
        assert all(h["score"] > 0 for h in found.data["hits"])
        nothing = await alice.ok("hadron_find_nodes", query="zeppelin", memoryUrn=SPECS)
        assert (
            nothing.text.splitlines()[0].startswith("scope: memoryUrn") and "No nodes found" in nothing.text
        )
        assert nothing.data["hits"] == []
        for survey in ("*", ""):
            listed = await alice.ok("hadron_find_nodes", query=survey, parentRel=node(SPECS, root))
            assert locs(listed) == sorted(f"{root}:{c['leaf']}" for c in CORPUS)
            assert listed.data["mode"] == "survey" and all(h["score"] is None for h in listed.data["hits"])
            assert listed.text.startswith(f"scope: parentRel {node(SPECS, root)}")


async def test_vector_hybrid_and_regex_modes(world: World) -> None:
    root = fresh()
    await _seed(SPECS, "alice", root, CORPUS, world)
    async with as_user(world, "alice") as alice:
        sub = node(SPECS, root)
        vector = await alice.ok("hadron_find_nodes", query="kitten", mode="vector", parentRel=sub, limit=2)
        assert locs(vector)[0] == f"{root}:cats" and vector.data["degraded"] is None
        assert -1.0 <= vector.data["hits"][0]["score"] <= 1.0
        hybrid = await alice.ok("hadron_find_nodes", query="pytest suite", mode="hybrid", parentRel=sub)
        top = hybrid.data["hits"][0]
        assert top["loc"] == f"{root}:tests" and top["score"] == 1.0
        assert top["keywordScore"] is not None and top["vectorScore"] is not None
        regex = await alice.ok("hadron_find_nodes", query=r"pur+", mode="regex", parentRel=sub)
        assert locs(regex) == [f"{root}:cats"] and regex.data["hits"][0]["score"] == 0.33
        by_name = await alice.ok("hadron_find_nodes", query="^Run", mode="regex", parentRel=sub)
        assert locs(by_name) == [f"{root}:tests"] and by_name.data["hits"][0]["score"] == 1.0
        bad = await alice.refused(
            "hadron_find_nodes", "BAD_USER_INPUT", query="(", mode="regex", memoryUrn=SPECS
        )
        assert "invalid regex" in bad.text
        await alice.refused("hadron_find_nodes", "BAD_USER_INPUT", query="x", mode="fuzzy", memoryUrn=SPECS)
        await alice.refused("hadron_find_nodes", "BAD_USER_INPUT", query="x", memoryUrn=SPECS, sort="loc")
    async with as_user(world, "bob") as bob:  # botmem (an app memory) has no vector index
        await bob.ok("hadron_create_node", loc=node(BOTMEM, fresh()), name="Cats again", content="purring")
        degraded = await bob.ok("hadron_find_nodes", query="cats", mode="vector", memoryUrn=BOTMEM)
        assert degraded.data["degraded"] == "no_vector_index" and degraded.data["hits"] == []
        assert "[degraded: no_vector_index]" in degraded.text
        fallback = await bob.ok("hadron_find_nodes", query="cats", mode="hybrid", memoryUrn=BOTMEM)
        assert fallback.data["hits"] and fallback.data["degraded"] == "no_vector_index"


ITEMS = [
    {"leaf": "n1", "name": "Alpha widget", "content": "widget", "objectType": "competitor",
     "properties": {"name": "Alpha", "price": 10, "tier": "a"},
     "data": {"when": "2026-01-05T00:00:00Z", "flag": True, "tags": ["x", "y"], "deep": {"a": {"b": 1}}}},
    {"leaf": "n2", "name": "Beta widget", "content": "widget widget widget", "objectType": "competitor",
     "properties": {"name": "Beta", "price": 20, "tier": "b"},
     "data": {"when": "2026-03-01T00:00:00Z", "flag": False, "tags": ["y"], "deep": {"a": {"b": 2}}}},
    {"leaf": "n3", "name": "Gamma widget", "content": "widget widget", "objectType": "competitor",
     "properties": {"name": "Gamma", "price": 30}, "data": {"note": "12"}},
    {"leaf": "n4", "name": "Plain note", "content": "widget", "properties": {"price": "5"}},
]  # fmt: skip

WHERE_CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"path": "price", "eq": 20}, {"n2"}),
    ({"path": "tier", "ne": "a"}, {"n2", "n3", "n4"}),  # a missing path passes ne
    ({"path": "tier", "in": ["a", "b"]}, {"n1", "n2"}),
    ({"path": "price", "lt": 20, "as": "number"}, {"n1", "n4"}),
    ({"path": "price", "lte": 20, "as": "number"}, {"n1", "n2", "n4"}),
    ({"path": "price", "gt": 20}, {"n3"}),
    ({"path": "price", "gte": 20}, {"n2", "n3"}),
    ({"path": "price", "between": [10, 20]}, {"n1", "n2"}),
    ({"path": "tier", "exists": True}, {"n1", "n2"}),
    ({"path": "tier", "exists": False}, {"n3", "n4"}),
    ({"path": "name", "contains": "mm"}, {"n3"}),
    ({"path": "tags", "contains": "x", "field": "data"}, {"n1"}),
    ({"path": "deep.a.b", "eq": 2, "field": "data"}, {"n2"}),
    ({"path": "when", "gt": "2026-02-01T00:00:00+00:00", "field": "data", "as": "datetime"}, {"n2"}),
    ({"path": "flag", "eq": "true", "field": "data", "as": "boolean"}, {"n1"}),
    ({"path": "note", "eq": 12, "field": "data", "as": "text"}, {"n3"}),
    ({"and": [{"path": "price", "gte": 10}, {"path": "tier", "eq": "a"}]}, {"n1"}),
    ({"or": [{"path": "price", "eq": 10}, {"path": "price", "eq": 30}]}, {"n1", "n3"}),
    ({"not": {"path": "tier", "exists": True}}, {"n3", "n4"}),
]


async def test_where_filters_first_for_every_operator_in_every_mode(world: World) -> None:
    root = fresh()
    await _seed(SPECS, "alice", root, ITEMS, world)
    sub = node(SPECS, root)
    async with as_user(world, "alice") as alice:
        for where, expected in WHERE_CASES:
            for mode, query in (
                ("keyword", "widget"),
                ("regex", "widget"),
                ("vector", "widget"),
                ("hybrid", "widget"),
            ):
                got = await alice.ok("hadron_find_nodes", query=query, mode=mode, parentRel=sub, where=where)
                assert leaves(got) == expected, (where, mode, got.text)
            survey = await alice.ok("hadron_find_nodes", query="*", parentRel=sub, where=where)
            assert leaves(survey) == expected, (where, survey.text)
        # where filters first, then ranks: the best-ranked node (n2, most "widget") is filtered out, and
        # limit 1 still returns the best survivor instead of an empty page.
        for mode in ("keyword", "vector", "hybrid"):
            one = await alice.ok(
                "hadron_find_nodes",
                query="widget",
                mode=mode,
                parentRel=sub,
                limit=1,
                where={"path": "price", "eq": 30},
            )
            assert leaves(one) == {"n3"}, mode


async def test_where_bounds_are_refused(world: World) -> None:
    deep: dict[str, Any] = {"path": "a", "eq": 1}
    for _ in range(4):
        deep = {"not": deep}
    many = {"or": [{"path": "a", "eq": i} for i in range(33)]}
    long_path = {"path": ".".join("p" * 9), "eq": 1}
    async with as_user(world, "alice") as alice:
        for where, words in (
            (deep, "deeper than 4"),
            (many, "more than 32 leaves"),
            (long_path, "at most 8"),
            ({"path": "a", "eq": 1, "lt": 2}, "exactly one operator"),
            ({"path": "a", "eq": 1, "as": "money"}, "as must be one of"),
            ({"path": "a", "eq": 1, "field": "meta"}, "field must be one of"),
            ({"path": "a", "between": [1]}, "between takes"),
        ):
            refused = await alice.refused(
                "hadron_find_nodes", "BAD_USER_INPUT", query="x", memoryUrn=SPECS, where=where
            )
            assert words in refused.text, refused.text
        at_bounds: dict[str, Any] = {"path": "a", "eq": 1}
        for _ in range(3):
            at_bounds = {"not": at_bounds}
        await alice.ok("hadron_find_nodes", query="x", memoryUrn=SPECS, where=at_bounds)
        await alice.ok(
            "hadron_find_nodes",
            query="x",
            memoryUrn=SPECS,
            where={"or": [{"path": "a", "eq": i} for i in range(32)]},
        )
        await alice.ok(
            "hadron_find_nodes", query="x", memoryUrn=SPECS, where={"path": ".".join("p" * 8), "eq": 1}
        )


async def test_filters_and_options(world: World) -> None:
    root = fresh()
    await _seed(SPECS, "alice", root, [*CORPUS, *ITEMS], world)
    sub = node(SPECS, root)
    async with as_user(world, "alice") as alice:
        typed = await alice.ok("hadron_find_nodes", query="widget", parentRel=sub, objectType="competitor")
        assert leaves(typed) == {"n1", "n2", "n3"}
        runnable = await alice.ok("hadron_find_nodes", query="*", parentRel=sub, isRunnable=True)
        assert leaves(runnable) == {"action"}
        not_runnable = await alice.ok("hadron_find_nodes", query="deploy", parentRel=sub, isRunnable=False)
        assert leaves(not_runnable) == {"deploy"}
        limited = await alice.ok("hadron_find_nodes", query="*", parentRel=sub, limit=3)
        assert len(limited.data["hits"]) == 3
        await alice.refused("hadron_find_nodes", "BAD_USER_INPUT", query="*", parentRel=sub, limit=0)
        await alice.refused("hadron_find_nodes", "BAD_USER_INPUT", query="*", parentRel=sub, limit=101)
        scored = await alice.ok("hadron_find_nodes", query="widget", parentRel=sub)
        scores = sorted(h["score"] for h in scored.data["hits"])
        floor = await alice.ok("hadron_find_nodes", query="widget", parentRel=sub, minScore=scores[-1])
        assert len(floor.data["hits"]) == scores.count(scores[-1]) < len(scores)
        brief = await alice.ok("hadron_find_nodes", query="deploy", parentRel=sub, brief=True)
        assert set(brief.data["hits"][0]) <= {
            "urn",
            "name",
            "description",
            "edges",
            "score",
            "keywordScore",
            "vectorScore",
        }
        full = await alice.ok("hadron_find_nodes", query="deploy", parentRel=sub)
        assert {"content", "properties", "data", "loc", "memoryUrn"} <= set(full.data["hits"][0])
        chunk = await alice.ok("hadron_find_nodes", query="rollbacks", parentRel=sub, granularity="chunk")
        passage = chunk.data["hits"][0]["passage"]
        content = CORPUS[0]["content"]
        assert (
            content[passage["charStart"] : passage["charEnd"]] == passage["text"]
            and "Rollbacks" in passage["text"]
        )
        await alice.ok(
            "hadron_create_edge",
            sourceUrn=node(SPECS, f"{root}:cats"),
            targetUrn=node(SPECS, f"{root}:tests"),
        )
        await alice.ok(
            "hadron_create_edge", sourceUrn=node(SPECS, f"{root}:tests"), targetUrn=node(SPECS, f"{root}:n1")
        )
        for hops, expected in ((0, []), (1, ["tests"]), (2, ["tests", "n1"])):
            expanded = await alice.ok(
                "hadron_find_nodes", query="felines", parentRel=sub, expand=hops, minScore=0.01
            )
            extra = [h["loc"].rsplit(":", 1)[-1] for h in expanded.data["hits"] if "expandedFrom" in h]
            assert extra == expected
        await alice.refused("hadron_find_nodes", "BAD_USER_INPUT", query="x", parentRel=sub, expand=4)
        await alice.refused("hadron_find_nodes", "BAD_USER_INPUT", query="x", parentRel=root)  # no memory


async def test_the_search_ladder_rung_by_rung(world: World) -> None:
    word = "ladder" + uuid.uuid4().hex[:6]
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(SPECS, fresh()), name=f"Specs {word}")
        await alice.ok("hadron_create_node", loc=node(BOARD, fresh()), name=f"Board {word}")
        await alice.ok("hadron_create_node", loc=node(TEAM, fresh()), name=f"Team {word}")
    async with as_user(world, "dave") as dave:
        await dave.ok("hadron_create_node", loc=node(PLANS, fresh()), name=f"Plans {word}")
    async with as_user(world, "erin") as erin:
        await erin.ok("hadron_create_node", loc=node(NOTES, fresh()), name=f"Notes {word}")
        personal = await erin.ok("hadron_find_nodes", query=word)  # rung 5: no membership
        assert personal.text.startswith(
            f"scope: personal (your own user-owned memories) — searched 1 memory ({NOTES})"
        )
        assert len(personal.data["hits"]) == 1
    async with as_user(world, "dave") as dave:  # rung 4: single membership
        found = await dave.ok("hadron_find_nodes", query=word)
        assert found.data["scope"]["rung"] == "global" and "hrn:org:globex.com" in found.text.splitlines()[0]
        assert [h["name"] for h in found.data["hits"]] == [f"Plans {word}"]
    async with as_user(world, "bob") as bob:  # rung 4 for acme's READER: board is dropped for access
        found = await bob.ok("hadron_find_nodes", query=word)
        assert found.data["scope"]["droppedForAccess"] == 1 and BOARD not in found.text
        assert {h["name"] for h in found.data["hits"]} == {f"Specs {word}", f"Team {word}"}
    async with as_user(world, "carol") as carol:  # two memberships and nothing chosen: loud, not empty
        refused = await carol.refused("hadron_find_nodes", "ORG_REQUIRED", query=word)
        assert "hrn:org:acme.com" in refused.text and "hrn:org:globex.com" in refused.text
        await carol.ok("hadron_set_active_org", org="hrn:org:globex.com")
        chosen = await carol.ok("hadron_find_nodes", query=word)
        assert "chosen by active-org" in chosen.text and [h["name"] for h in chosen.data["hits"]] == [
            f"Plans {word}"
        ]
    async with as_user(world, "alice") as alice:
        org_wide = await alice.ok("hadron_find_nodes", query=word)
        assert {h["name"] for h in org_wide.data["hits"]} == {
            f"Specs {word}",
            f"Board {word}",
            f"Team {word}",
        }
        await alice.ok("hadron_set_active_memory", memoryUrn=TEAM)  # the active memory is not a rung
        assert (await alice.ok("hadron_find_nodes", query=word)).data["scope"]["rung"] == "global"
        await alice.ok("hadron_set_active_app", app=BOT)  # rung 3: the app's memories (specs is attached)
        in_app = await alice.ok("hadron_find_nodes", query=word)
        assert in_app.text.startswith(f"scope: app {BOT} (the active App's memories) — searched 2 memories")
        assert [h["name"] for h in in_app.data["hits"]] == [f"Specs {word}"]
        trap = await alice.ok("hadron_find_nodes", query=f"Board {word}", mode="regex")
        assert trap.data["hits"] == [] and trap.text.splitlines()[0].startswith(f"scope: app {BOT}")
        everything = await alice.ok("hadron_find_nodes", query=word, allMemories=True)
        assert len(everything.data["hits"]) == 3 and everything.data["scope"]["rung"] == "allMemories"
        scope = await alice.ok(
            "hadron_create_scope", name=fresh(), memoryUrns=[TEAM, BOARD], organizationRef="acme.com"
        )
        named = await alice.ok("hadron_find_nodes", query=word, scope=scope.data["name"])  # rung 1
        assert {h["name"] for h in named.data["hits"]} == {f"Team {word}", f"Board {word}"}
        assert named.data["scope"]["rung"] == "scope"
        await alice.ok("hadron_set_active_scope", scope=scope.data["id"])  # rung 2 beats the app
        active = await alice.ok("hadron_find_nodes", query=word)
        assert active.data["scope"]["rung"] == "active-scope" and len(active.data["hits"]) == 2
        explicit = await alice.ok("hadron_find_nodes", query=word, memoryUrn=SPECS)  # explicit beats rung 2
        assert [h["name"] for h in explicit.data["hits"]] == [f"Specs {word}"]
        both = await alice.ok(
            "hadron_find_nodes", query=word, memoryUrns=[SPECS, TEAM], scope=scope.data["id"]
        )
        assert [h["name"] for h in both.data["hits"]] == [f"Team {word}"]  # explicit ∩ the named scope
        assert "1 named memory outside the scope" in both.text
        builtin = await alice.ok("hadron_find_nodes", query=word, scope="global")
        assert builtin.data["scope"]["rung"] == "scope" and len(builtin.data["hits"]) == 3
        await alice.ok("hadron_delete_scope", scope=scope.data["id"])
        gone = await alice.ok("hadron_find_nodes", query=word)  # a deleted active scope is cleared, and said
        assert gone.data["scope"]["rung"] == "app" and "no longer resolves" in gone.text


async def test_scope_rules_resolution_and_narrowing(world: World) -> None:
    name = fresh()
    async with as_user(world, "alice") as alice:
        for bad in ("Bad Name", "x" * 65, "app", "global", ""):
            await alice.refused(
                "hadron_create_scope",
                "BAD_USER_INPUT",
                name=bad,
                memoryUrns=[SPECS],
                organizationRef="acme.com",
            )
        await alice.refused(
            "hadron_create_scope", "BAD_USER_INPUT", name=name, memoryUrns=[], organizationRef="acme.com"
        )
        await alice.refused("hadron_create_scope", "no_active_app", name=name, memoryUrns=[SPECS])
        await alice.refused(
            "hadron_create_scope",
            "memory_not_found",
            name=name,
            memoryUrns=[PLANS],
            organizationRef="acme.com",
        )
        org_scope = await alice.ok(
            "hadron_create_scope",
            name=name,
            memoryUrns=[SPECS, BOARD],
            organizationRef="acme.com",
            description="org lens",
        )
        await alice.refused(
            "hadron_create_scope",
            "SCOPE_NAME_TAKEN",
            name=name,
            memoryUrns=[SPECS],
            organizationRef="acme.com",
        )
        await alice.ok("hadron_set_active_app", app=BOT)
        app_scope = await alice.ok(
            "hadron_create_scope", name=name, memoryUrns=[TEAM]
        )  # the active App owns it
        assert app_scope.data["ownerType"] == "app" and app_scope.data["owner"] == BOT
        explained = await alice.ok("hadron_scope_explain", name=name, loc="nope")
        assert explained.data["tier"] == "app" and explained.data["memoryUrns"] == [TEAM]
        assert [s["id"] for s in explained.data["shadowed"]] == [org_scope.data["id"]]
        listed = await alice.ok("hadron_list_scopes")
        assert {(s["tier"], s["name"]) for s in listed.data["scopes"]} >= {
            ("app", name),
            ("organization", name),
        }
        only_org = await alice.ok(
            "hadron_list_scopes", ownerType="organization", ownerRef="acme.com", name=name
        )
        assert [s["id"] for s in only_org.data["scopes"]] == [org_scope.data["id"]]
        replaced = await alice.ok(
            "hadron_update_scope", scope=org_scope.data["id"], memoryUrns=[BOARD, SPECS]
        )
        assert replaced.data["memoryUrns"] == [BOARD, SPECS]  # replaces, never merges
        await alice.ok("hadron_create_node", loc=node(BOARD, "x:y"), name="Board loc")
        await alice.ok("hadron_create_node", loc=node(SPECS, "x:y"), name="Specs loc")
        winner = await alice.ok("hadron_scope_explain", scope=org_scope.data["id"], loc="x:y")
        assert winner.data["winner"]["memoryUrn"] == BOARD and winner.data["tier"] == "organization"
    async with as_user(world, "bob") as bob:  # READER: sees the scope, narrowed to what bob reads
        seen = await bob.ok("hadron_scope_explain", scope=org_scope.data["id"], loc="x:y")
        assert seen.data["memoryUrns"] == [SPECS] and seen.data["droppedForAccess"] == 1
        assert seen.data["winner"]["memoryUrn"] == SPECS and BOARD not in seen.text
        # Listing shows the same narrowing: the memory bob cannot read is a count, never its name.
        listed = await bob.ok("hadron_list_scopes", ownerType="organization", ownerRef="acme.com", name=name)
        assert [(s["memoryUrns"], s["droppedForAccess"]) for s in listed.data["scopes"]] == [([SPECS], 1)]
        assert BOARD not in listed.text and BOARD not in str(listed.data)
        await bob.refused("hadron_update_scope", "FORBIDDEN", scope=org_scope.data["id"], name="mine")
        await bob.refused(
            "hadron_create_scope", "FORBIDDEN", name=fresh(), memoryUrns=[SPECS], organizationRef="acme.com"
        )
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_scope_explain", "scope_not_found", scope=org_scope.data["id"])
        await dave.refused("hadron_find_nodes", "scope_not_found", query="x", scope=org_scope.data["id"])
        await dave.refused("hadron_delete_scope", "scope_not_found", scope=org_scope.data["id"])
    async with as_app(world) as app:  # an app key reads its app's scopes but cannot manage them
        assert (await app.ok("hadron_scope_explain", name=name)).data["tier"] == "app"
        await app.refused("hadron_delete_scope", "FORBIDDEN", scope=app_scope.data["id"])
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_delete_scope", scope=org_scope.data["id"])
        again = await alice.ok(
            "hadron_create_scope", name=name, memoryUrns=[SPECS], organizationRef="acme.com"
        )
        assert again.data["id"] != org_scope.data["id"]  # the name is free again at once
        await alice.refused("hadron_scope_explain", "scope_not_found", scope=org_scope.data["id"])


async def test_the_active_scope_is_persisted_per_client_id(world: World) -> None:
    word = "persist" + uuid.uuid4().hex[:6]
    client = "search-client-" + uuid.uuid4().hex[:6]
    async with as_user(world, "alice", client) as alice:
        await alice.ok("hadron_create_node", loc=node(BOARD, fresh()), name=f"Board {word}")
        await alice.ok("hadron_create_node", loc=node(SPECS, fresh()), name=f"Specs {word}")
        scope = await alice.ok(
            "hadron_create_scope", name=fresh(), memoryUrns=[BOARD], organizationRef="acme.com"
        )
        set_ = await alice.ok("hadron_set_active_scope", scope=scope.data["name"])
        assert set_.data["persisted"] is True
    async with as_user(world, "alice", client) as again:
        restored = await again.ok("hadron_find_nodes", query=word)
        assert restored.data["scope"]["rung"] == "active-scope"
        assert [h["name"] for h in restored.data["hits"]] == [f"Board {word}"]
        await again.ok("hadron_set_active_scope", clear=True)
    async with as_user(world, "alice", client) as third:
        assert (await third.ok("hadron_find_nodes", query=word)).data["scope"]["rung"] == "global"
    async with as_user(world, "alice") as no_client:
        await no_client.refused("hadron_set_active_scope", "BAD_USER_INPUT")
        assert (await no_client.ok("hadron_find_nodes", query=word)).data["scope"]["rung"] == "global"


async def test_a_reader_never_sees_another_memorys_nodes_through_any_mode(world: World) -> None:
    word = "secret" + uuid.uuid4().hex[:6]
    async with as_user(world, "dave") as dave:
        made = await dave.ok(
            "hadron_create_node",
            loc=node(PLANS, fresh()),
            name=f"Globex {word}",
            content=f"{word} merger plans",
        )
    async with as_user(world, "alice") as alice:
        for mode in ("keyword", "vector", "hybrid", "regex"):
            for selector in ({"allMemories": True}, {"memoryUrns": [PLANS, SPECS]}, {}):
                got = await alice.ok("hadron_find_nodes", query=word, mode=mode, **selector)
                assert all("globex.com" not in h["urn"] for h in got.data["hits"]), (mode, selector)
                assert "globex" not in got.text
            dropped = await alice.ok("hadron_find_nodes", query=word, mode=mode, memoryUrns=[PLANS])
            assert dropped.data["scope"]["droppedForAccess"] == 1 and dropped.data["hits"] == []
            await alice.refused(
                "hadron_find_nodes", "memory_not_found", query=word, mode=mode, memoryUrn=PLANS
            )
        survey = await alice.ok("hadron_find_nodes", query="*", allMemories=True, limit=100)
        assert all("globex.com" not in h["urn"] for h in survey.data["hits"])
        await alice.refused("hadron_find_nodes", "memory_not_found", query="*", parentRel=node(PLANS, "x"))
        searched = await alice.ok("hadron_search", query=word)
        assert searched.data["hits"] == []
        by_id = await alice.ok("hadron_search", query=made.data["id"])
        assert by_id.data["hits"] == []
        listed_scope = await alice.refused(
            "hadron_create_scope",
            "memory_not_found",
            name=fresh(),
            memoryUrns=[PLANS],
            organizationRef="acme.com",
        )
        assert listed_scope.code == "memory_not_found"
    async with as_user(world, "dave") as dave:
        assert [h["name"] for h in (await dave.ok("hadron_search", query=word)).data["hits"]] == [
            f"Globex {word}"
        ]


async def test_hadron_search_finds_entities_by_id_urn_and_name(world: World) -> None:
    word = "entity" + uuid.uuid4().hex[:6]
    async with as_user(world, "alice") as alice:
        made = await alice.ok(
            "hadron_create_node", loc=node(SPECS, fresh()), name=f"Node {word}", content="body text"
        )
        await alice.ok(
            "hadron_create_node", loc=node(VAULT, fresh()), name="Vaulted", content=f"hidden {word} body"
        )
        memory = await alice.ok("hadron_search", query="specs")
        assert memory.data["hits"][0]["entityType"] == "memory" and memory.data["hits"][0]["score"] == 1.0
        assert memory.text.startswith("scope: everything you can read")
        orgs = await alice.ok("hadron_search", query="acme", entityTypes=["organization"])
        assert [h["urn"] for h in orgs.data["hits"]] == ["hrn:org:acme.com"]
        apps = await alice.ok("hadron_search", query="bot", entityTypes=["app"])
        assert [h["urn"] for h in apps.data["hits"]] == [BOT]
        users = await alice.ok("hadron_search", query="a", entityTypes=["user"])
        assert {h["urn"] for h in users.data["hits"]} == {
            "hrn:user:alice",
            "hrn:user:carol",
        }  # not erin or dave
        by_pk = await alice.ok("hadron_search", query=made.data["id"])
        assert [(h["entityType"], h["matchedField"]) for h in by_pk.data["hits"]] == [("node", "pk")]
        partial_pk = await alice.ok("hadron_search", query=made.data["id"][:20], fields=["pk"])
        assert partial_pk.data["hits"] == []  # pk is exact
        by_urn = await alice.ok("hadron_search", query=made.data["urn"])
        assert (
            by_urn.data["hits"][0]["id"] == made.data["id"]
            and by_urn.data["hits"][0]["matchedField"] == "urn"
        )
        by_name = await alice.ok("hadron_search", query=word.upper())  # case-insensitive substring
        assert [h["id"] for h in by_name.data["hits"]] == [made.data["id"]]
        content = await alice.ok("hadron_search", query=word, fields=["content"], entityTypes=["node"])
        assert content.data["hits"] == [] and "encrypted" in content.data["degraded"][0]
        body = await alice.ok("hadron_search", query="body text", fields=["content"])
        assert made.data["id"] in [h["id"] for h in body.data["hits"]]
        scope = await alice.ok(
            "hadron_create_scope", name=fresh(), memoryUrns=[TEAM], organizationRef="acme.com"
        )
        narrowed = await alice.ok("hadron_search", query=word, scope=scope.data["id"])
        assert narrowed.data["hits"] == [] and narrowed.text.startswith("scope: scope")
        await alice.refused("hadron_search", "BAD_USER_INPUT", query="x", entityTypes=["widget"])
        await alice.refused("hadron_search", "BAD_USER_INPUT", query="x", limit=201)
    async with as_app(world) as app:  # the bot's key: its org's knowledge, not the team group memory
        seen = await app.ok("hadron_search", query=word)
        assert [h["id"] for h in seen.data["hits"]] == [made.data["id"]]
        assert (await app.ok("hadron_search", query="team", entityTypes=["memory"])).data["hits"] == []
