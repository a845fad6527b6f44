"""Hadron in server mode: two `triptych serve` processes on one PostgreSQL database behave like one server.

Each worker has its own (empty) data directory, so whatever one sees of the other's writes came through
the database: nodes, edges and revisions, the keyword index (each worker's in-process BM25 follows the
``node_text_changes`` log), node vectors (``vector_generations``), scopes, and the selections a client
gets back by its X-Hadron-Client-Id whichever worker takes the reconnect.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hadron.world import HADRON_KEY, World, as_user, build_world, engine, node
from harness import SECRET, ServerProcess, run_threads
from postgres import PostgresCluster

from triptych.hadron.sealing import PREFIX
from triptych.hadron.surface import Hadron

SPECS = "hrn:mem:acme.com:specs"
TEAM = "hrn:mem:acme.com:team"
VAULT = "hrn:mem:acme.com:vault"


@pytest.fixture(scope="module")
def workers(postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[World]]:
    url = postgres.create_database("hadron_workers")
    seed = tmp_path_factory.mktemp("hadron-seed") / "data"
    seed.mkdir()
    key, other = build_world(seed, url)
    hadron = Hadron.open(seed / "hadron.db", database_url=url)
    try:
        hadron.admin().set_embedding(TEAM, "content")
    finally:
        hadron.close()
    env = {
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": SECRET,
        "TRIPTYCH_HADRON_KEY": HADRON_KEY.encoded(),
        **engine(url),
    }
    servers = [ServerProcess(tmp_path_factory.mktemp(f"hadron-worker{i}") / "data", env) for i in range(2)]
    errors = run_threads(lambda i: servers[i].start(), 2)
    try:
        assert errors == [], [str(e) for e in errors]
        yield [World(s, key, other, database_url=url) for s in servers]
    finally:
        for server in servers:
            server.stop()


def fresh() -> str:
    return "w" + uuid.uuid4().hex[:10]


async def test_a_write_through_one_worker_is_found_by_the_other_on_its_next_call(
    workers: list[World],
) -> None:
    one, two = workers
    loc, word, later = fresh(), "zephyr" + uuid.uuid4().hex[:6], "quokka" + uuid.uuid4().hex[:6]
    async with as_user(one, "alice") as alice_one, as_user(two, "alice") as alice_two:
        # Worker two's keyword index for specs is loaded before the write it must then catch up with.
        await alice_two.ok("hadron_find_nodes", query="anything", mode="keyword", memoryUrn=SPECS)
        made = await alice_one.ok(
            "hadron_create_node", loc=node(SPECS, loc), name=f"Plan {word}", content="v1"
        )
        got = await alice_two.ok("hadron_get_node", loc=node(SPECS, loc))
        assert got.data["id"] == made.data["id"] and got.data["content"] == "v1"
        found = await alice_two.ok("hadron_find_nodes", query=word, mode="keyword", memoryUrn=SPECS)
        assert [h["loc"] for h in found.data["hits"]] == [loc]
        await alice_two.ok("hadron_update_node", loc=node(SPECS, loc), content=f"now about {later}")
        again = await alice_one.ok("hadron_find_nodes", query=later, mode="keyword", memoryUrn=SPECS)
        assert [h["loc"] for h in again.data["hits"]] == [loc]
        history = (await alice_one.ok("hadron_get_node", loc=node(SPECS, loc))).data["revisions"]
        assert [r["operation"] for r in history] == ["update", "create"]
        await alice_one.ok("hadron_create_node", loc=node(SPECS, f"{loc}:child"), name="Child")
        await alice_two.ok("hadron_delete_node", urn=node(SPECS, loc), recursive=True)
        gone = await alice_one.ok("hadron_find_nodes", query=later, mode="keyword", memoryUrn=SPECS)
        assert gone.data["hits"] == []


async def test_vectors_written_through_one_worker_rank_on_the_other(workers: list[World]) -> None:
    one, two = workers
    loc = fresh()
    text = "Penguins huddle together through the antarctic winter to keep warm."
    async with as_user(one, "carol") as carol_one, as_user(two, "carol") as carol_two:
        await carol_two.ok("hadron_find_nodes", query="warm up", mode="vector", memoryUrn=TEAM)
        await carol_one.ok("hadron_create_node", loc=node(TEAM, loc), name="Birds", content=text)
        for mode in ("vector", "hybrid"):
            hits = await carol_two.ok(
                "hadron_find_nodes", query="penguins in the antarctic winter", mode=mode, memoryUrn=TEAM
            )
            assert hits.data["hits"][0]["loc"] == loc, mode


async def test_selections_and_scopes_follow_a_client_to_the_other_worker(workers: list[World]) -> None:
    one, two = workers
    client_id = "laptop-" + uuid.uuid4().hex[:8]
    loc, name = fresh(), fresh()
    async with as_user(one, "alice", client_id) as first:
        await first.ok("hadron_set_active_memory", memoryUrn=SPECS)
        await first.ok("hadron_set_active_app", app="hrn:app:acme.com:bot")
        await first.ok("hadron_create_node", loc=loc, name="Relative")
        await first.ok("hadron_create_scope", name=name, memoryUrns=[SPECS, TEAM], organizationRef="acme.com")
    async with as_user(two, "alice", client_id) as second:  # the reconnect lands on the other worker
        assert "active memory hrn:mem:acme.com:specs" in (await second.ok("hadron_server_info")).text
        assert (await second.ok("hadron_get_node", loc=loc)).data["memoryUrn"] == SPECS
        scoped = await second.ok("hadron_find_nodes", query="Relative", scope=name)
        assert scoped.data["scope"]["rung"] == "scope" and [h["loc"] for h in scoped.data["hits"]] == [loc]


async def test_an_encrypted_memory_reads_back_through_either_worker(workers: list[World]) -> None:
    one, two = workers
    loc = fresh()
    async with as_user(one, "alice") as alice_one, as_user(two, "alice") as alice_two:
        await alice_one.ok("hadron_create_node", loc=node(VAULT, loc), name="Vaulted", content="launch codes")
        assert (await alice_two.ok("hadron_get_node", loc=node(VAULT, loc))).data["content"] == "launch codes"
    hadron = Hadron.open(one.server.data_dir / "hadron.db", database_url=one.database_url)
    try:  # what the database holds for it is sealed
        sql = f"SELECT content FROM nodes WHERE loc = {hadron.stores.graph.dialect.p}"
        stored = hadron.db.conn.execute(sql, (loc,)).fetchone()[0]
        assert "launch codes" not in stored and stored.startswith(PREFIX)
    finally:
        hadron.close()


async def test_a_memory_lock_and_an_edge_change_through_one_worker_hold_on_the_other(
    workers: list[World],
) -> None:
    """Issue 28: the lock is a database row, and edges are read from the database on every call."""
    one, two = workers
    loc = fresh()
    async with as_user(one, "carol") as carol_one, as_user(two, "alice") as alice_two:
        await carol_one.ok("hadron_create_node", loc=node(TEAM, f"{loc}:t"), name="T")
        await carol_one.ok("hadron_create_node", loc=node(TEAM, loc), name="Source")
        made = await carol_one.ok(
            "hadron_create_edge", sourceUrn=node(TEAM, loc), targetUrn=node(TEAM, f"{loc}:t")
        )
        locked = await carol_one.ok("hadron_lock_memory", memoryUrn=TEAM, ttlSeconds=300)
        assert locked.data["locked"]
        refused = await alice_two.refused(
            "hadron_delete_edge", "MEMORY_LOCKED", edgeRef=made.data["edge"]["id"]
        )
        assert refused.data["error"]["data"]["lockedBy"] == "hrn:user:carol"
        assert not (await alice_two.ok("hadron_lock_memory", memoryUrn=TEAM)).data["locked"]
        await carol_one.ok("hadron_unlock_memory", memoryUrn=TEAM)
        await alice_two.ok("hadron_delete_edge", edgeRef=made.data["edge"]["id"])
        assert (await carol_one.ok("hadron_get_node", loc=node(TEAM, loc))).data["edges"] == []
