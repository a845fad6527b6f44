"""The Hadron object store, schema validation and hadron_validate through the official MCP client."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from hadron.world import World, as_app, as_user, start_world

from triptych.hadron.surface import Hadron

CATALOG = "hrn:mem:acme.com:catalog"
SPECS = "hrn:mem:acme.com:specs"
TEAM = "hrn:mem:acme.com:team"


# The contract holds on both storage engines: each runs this module against its own server.
pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None) -> Iterator[World]:
    w = start_world(tmp_path_factory.mktemp("hadron-objects"), module_database_url)
    yield w
    w.server.stop()


async def test_object_crud_with_schema_validation(world: World) -> None:
    async with as_user(world, "carol") as carol:
        made = await carol.ok(
            "hadron_create_object",
            memoryUrn=CATALOG,
            type="competitor",
            fields={"name": "Initech", "price": 10},
            key="initech",
        )
        assert made.data == {"id": made.data["id"], "type": "competitor", "name": "Initech", "price": 10}
        got = await carol.ok("hadron_get_object", ref=made.data["id"])
        assert got.data == made.data
        by_urn = await carol.ok("hadron_get_object", ref="hrn:node:acme.com:catalog:competitor:initech")
        assert by_urn.data["id"] == made.data["id"]
        bad = await carol.refused(
            "hadron_create_object",
            "SCHEMA_VIOLATION",
            memoryUrn=CATALOG,
            type="competitor",
            fields={"name": "X", "price": "ten"},
        )
        assert bad.text.startswith("Schema violation: price:")
        missing = await carol.refused(
            "hadron_create_object",
            "SCHEMA_VIOLATION",
            memoryUrn=CATALOG,
            type="competitor",
            fields={"price": 1},
        )
        assert missing.text.startswith("Schema violation: name:")
        undeclared = await carol.refused(
            "hadron_create_object", "SCHEMA_VIOLATION", memoryUrn=CATALOG, type="supplier", fields={}
        )
        assert undeclared.text.startswith("Schema violation: objectType:")
        for reserved in ("id", "type"):
            refused = await carol.refused(
                "hadron_create_object",
                "SCHEMA_VIOLATION",
                memoryUrn=SPECS,
                type="thing",
                fields={reserved: 1},
            )
            assert refused.text.startswith(f"Schema violation: {reserved}:")
        await carol.refused(
            "hadron_create_object",
            "URN_ALREADY_EXISTS",
            memoryUrn=CATALOG,
            type="competitor",
            fields={"name": "Again"},
            key="initech",
        )
        merged = await carol.ok(
            "hadron_update_object", ref=made.data["id"], fields={"tier": "a"}, reason="ranked"
        )
        assert merged.data == {**made.data, "tier": "a"}
        await carol.refused(
            "hadron_update_object", "SCHEMA_VIOLATION", ref=made.data["id"], fields={"tier": "z"}
        )
        assert (await carol.ok("hadron_get_object", ref=made.data["id"])).data[
            "tier"
        ] == "a"  # unchanged on refusal
        history = (
            await carol.ok("hadron_get_node", loc="hrn:node:acme.com:catalog:competitor:initech")
        ).data["revisions"]
        assert [(r["operation"], r["reason"]) for r in history] == [("update", "ranked"), ("create", None)]
        schemaless = await carol.ok(
            "hadron_create_object", memoryUrn=SPECS, type="anything", fields={"free": ["form"]}
        )
        assert schemaless.data["free"] == ["form"]
        await carol.ok("hadron_delete_object", ref=made.data["id"])
        await carol.refused("hadron_get_object", "object_not_found", ref=made.data["id"])
        await carol.ok("hadron_delete_object", ref=schemaless.data["id"], hard=True)
    async with as_user(world, "bob") as bob:  # READER of acme: the catalog is read-only
        await bob.refused(
            "hadron_create_object", "FORBIDDEN", memoryUrn=CATALOG, type="competitor", fields={"name": "B"}
        )
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_find_objects", "memory_not_found", memoryUrn=CATALOG, type="competitor")
    async with as_app(world) as app:
        await app.refused(
            "hadron_create_object", "FORBIDDEN", memoryUrn=CATALOG, type="competitor", fields={"name": "B"}
        )
        await app.ok("hadron_find_objects", memoryUrn=CATALOG, type="competitor")


async def test_find_objects_match_where_sort_and_paging(world: World) -> None:
    kind = "competitor"
    async with as_user(world, "alice") as alice:
        await alice.ok(
            "hadron_create_node",
            loc=f"hrn:node:acme.com:catalog:scratch:{uuid.uuid4().hex[:6]}",
            name="not an object",
        )
        for name, price, tier in (("Acme", 5, "a"), ("Bolt", 15, "b"), ("Cog", 25, "a"), ("Dyn", 35, "b")):
            await alice.ok(
                "hadron_create_object",
                memoryUrn=CATALOG,
                type=kind,
                fields={"name": name, "price": price, "tier": tier},
                key=f"f-{name.lower()}",
            )
        found = await alice.ok(
            "hadron_find_objects", memoryUrn=CATALOG, type=kind, match={"tier": "a", "price": "25"}
        )
        assert [o["name"] for o in found.data["objects"]] == ["Cog"] and found.data["total"] == 1
        where = {
            "or": [
                {"path": "price", "lt": 10},
                {"and": [{"path": "price", "gte": 30}, {"not": {"path": "tier", "eq": "a"}}]},
            ]
        }
        found = await alice.ok(
            "hadron_find_objects", memoryUrn=CATALOG, type=kind, where=where, sort={"name": "asc"}
        )
        assert [o["name"] for o in found.data["objects"]] == ["Acme", "Dyn"]
        ranged = await alice.ok(
            "hadron_find_objects",
            memoryUrn=CATALOG,
            type=kind,
            where={"path": "price", "between": [10, 30], "as": "number"},
            sort={"price": "desc"},
        )
        assert [o["name"] for o in ranged.data["objects"]] == ["Cog", "Bolt"]
        page = await alice.ok(
            "hadron_find_objects",
            memoryUrn=CATALOG,
            type=kind,
            where={"path": "name", "in": ["Acme", "Bolt", "Cog", "Dyn"]},
            sort={"price": "asc"},
            limit=3,
            offset=1,
        )
        assert [o["name"] for o in page.data["objects"]] == ["Bolt", "Cog", "Dyn"] and page.data["total"] == 4
        exists = await alice.ok(
            "hadron_find_objects",
            memoryUrn=CATALOG,
            type=kind,
            where={"path": "missing", "exists": False},
            limit=1,
        )
        assert exists.data["total"] == 4
        deep = {"not": {"not": {"not": {"not": {"path": "price", "eq": 1}}}}}
        too_deep = await alice.refused(
            "hadron_find_objects", "BAD_USER_INPUT", memoryUrn=CATALOG, type=kind, where=deep
        )
        assert "deeper than 4" in too_deep.text
        many = {"or": [{"path": "price", "eq": i} for i in range(33)]}
        await alice.refused("hadron_find_objects", "BAD_USER_INPUT", memoryUrn=CATALOG, type=kind, where=many)
        long_path = {"path": ".".join("abcdefghi"), "eq": 1}
        await alice.refused(
            "hadron_find_objects", "BAD_USER_INPUT", memoryUrn=CATALOG, type=kind, where=long_path
        )
        await alice.refused(
            "hadron_find_objects",
            "BAD_USER_INPUT",
            memoryUrn=CATALOG,
            type=kind,
            where={"path": "price", "near": 1},
        )
        await alice.refused(
            "hadron_find_objects", "BAD_USER_INPUT", memoryUrn=CATALOG, type=kind, sort={"price": "up"}
        )


async def test_node_writes_honour_the_schema_and_validate_reports_old_records(world: World) -> None:
    loc = "v" + uuid.uuid4().hex[:8]
    async with as_user(world, "alice") as alice:
        refused = await alice.refused(
            "hadron_create_node",
            "SCHEMA_VIOLATION",
            loc=f"hrn:node:acme.com:catalog:{loc}",
            name="Bad",
            objectType="competitor",
            properties={"name": 3},
        )
        assert refused.text.startswith("Schema violation: name:")
        await alice.ok(
            "hadron_create_node",
            loc=f"hrn:node:acme.com:catalog:{loc}:free",
            name="Free",
            properties={"anything": True},
        )
        await alice.ok(
            "hadron_create_node",
            loc=f"hrn:node:acme.com:team:{loc}:old",
            name="Old",
            objectType="competitor",
            properties={"price": "cheap"},
        )
        await alice.ok("hadron_create_node", loc=f"hrn:node:acme.com:team:{loc}:empty", name="Empty")
        await alice.ok(
            "hadron_create_node",
            loc=f"hrn:node:acme.com:team:{loc}:linked",
            name="Linked",
            content="x",
            edges=[{"targetLoc": f"{loc}:nowhere"}],
        )
        before = await alice.ok("hadron_validate", memoryUrn=TEAM)
        assert before.data["schemaViolations"] == []
    hadron = Hadron.open(world.server.data_dir / "hadron.db", database_url=world.database_url)
    try:  # the team memory gains a schema after the fact
        hadron.admin().set_schema(
            TEAM, json.dumps({"collections": {"competitor": {"type": "object", "required": ["name"]}}})
        )
        node = hadron.graph.node_by_loc(hadron.admin().memory(TEAM).id, f"{loc}:empty")
        assert node is not None
        with hadron.graph.atomic() as tx:
            tx.execute(
                "INSERT INTO node_embeddings (node_id, model, dim, vector, status, error, updated_at) "
                f"VALUES ({hadron.stores.graph.dialect.p}, 'm', 384, NULL, 'failed', 'model timed out', '2026-01-01')",
                (node.id,),
            )
    finally:
        hadron.close()
    async with as_user(world, "carol") as carol:
        report = await carol.ok("hadron_validate", memoryUrn=TEAM)
        await carol.refused("hadron_validate", "URN_NOT_QUALIFIED", memoryUrn="team")
    assert {v["urn"] for v in report.data["schemaViolations"]} == {f"hrn:node:acme.com:team:{loc}:old"}
    assert report.data["schemaViolations"][0]["field"] == "name"
    assert {"urn": f"hrn:node:acme.com:team:{loc}:empty"} in report.data["missingContent"]
    assert {
        "source": f"hrn:node:acme.com:team:{loc}:linked",
        "edge": f"{loc}:nowhere",
        "target": f"hrn:node:acme.com:team:{loc}:nowhere",
    } in report.data["brokenEdges"]
    assert report.data["embeddingFailures"] == [
        {"urn": f"hrn:node:acme.com:team:{loc}:empty", "error": "model timed out"}
    ]
    assert "schema violations: 1" in report.text
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_validate", "memory_not_found", memoryUrn=TEAM)
