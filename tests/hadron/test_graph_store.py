"""The graph store's invariants on both engines: live locs are unique, subtrees are exact, edges follow ids."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from triptych.hadron.domain.model import EdgeRecord, Memory, NodeRecord
from triptych.hadron.engines import open_stores
from triptych.hadron.store import SqliteGraphStore, SqliteTenancyStore, new_id

pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture
def stores(
    tmp_path: Path, database_url: str | None
) -> Iterator[tuple[SqliteTenancyStore, SqliteGraphStore, Memory]]:
    opened = open_stores(tmp_path / "hadron.db", database_url, None, None)
    tenancy = opened.tenancy
    assert isinstance(tenancy, SqliteTenancyStore)
    org = tenancy.add_org("acme.com", "Acme")
    memory = tenancy.add_memory(
        Memory(new_id(), "acme.com", "specs", "Specs", "", "knowledge", org.id, None, None)
    )
    yield tenancy, opened.graph, memory
    opened.close()


def make(memory: Memory, loc: str) -> NodeRecord:
    return NodeRecord(
        id=new_id(), memory_id=memory.id, loc=loc, name=loc, node_type="info", object_type=None,
        description=None, content="x", seq=None, tags=[], properties={}, data=None, llm_model=None,
        ai_agent=None, revision=1, created_at="t", updated_at="t", created_by="a", updated_by="a",
    )  # fmt: skip


def test_a_subtree_is_the_node_and_its_descendants_only(
    stores: tuple[SqliteTenancyStore, SqliteGraphStore, Memory],
) -> None:
    _, graph, memory = stores
    for loc in ("a", "a:b", "a:b:c", "a.b", "a0", "ab", "a-b", "b:a"):
        graph.insert_node(make(memory, loc))
    assert [n.loc for n in graph.subtree(memory.id, "a")] == ["a", "a:b", "a:b:c"]
    assert graph.count_descendants(memory.id, "a") == 2
    assert [n.loc for n in graph.subtree(memory.id, "a:b")] == ["a:b", "a:b:c"]
    assert graph.subtree(memory.id, "zz") == []


def test_live_locs_are_unique_and_a_soft_delete_frees_the_loc(
    stores: tuple[SqliteTenancyStore, SqliteGraphStore, Memory],
) -> None:
    import sqlite3

    import psycopg

    _, graph, memory = stores
    first = make(memory, "x")
    graph.insert_node(first)
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):  # the engine's own
        graph.insert_node(make(memory, "x"))
    graph.soft_delete([first.id], "t2")
    assert graph.node_by_loc(memory.id, "x") is None
    graph.insert_node(make(memory, "x"))
    assert graph.node_by_loc(memory.id, "x") is not None


def test_a_failed_write_leaves_nothing_behind(
    stores: tuple[SqliteTenancyStore, SqliteGraphStore, Memory],
) -> None:
    _, graph, memory = stores
    node = make(memory, "tx")
    with pytest.raises(RuntimeError), graph.atomic():
        graph.insert_node(node)
        graph.add_revision(node, "create", "a", None)
        raise RuntimeError("boom")
    assert graph.node_by_id(node.id) is None and graph.revisions(node.id) == []


def test_relocate_points_edges_at_the_new_address_and_carries_embeddings(
    stores: tuple[SqliteTenancyStore, SqliteGraphStore, Memory],
) -> None:
    tenancy, graph, memory = stores
    other = tenancy.add_memory(
        Memory(new_id(), "acme.com", "team", "Team", "", "group", memory.org_id, None, None)
    )
    target, source = make(memory, "t"), make(memory, "s")
    graph.insert_node(target)
    graph.insert_node(source)
    edge = EdgeRecord(new_id(), source.id, "to-t", None, None, target.id, memory.id, "t", "t", False, 0)
    graph.replace_edges(source.id, [edge])
    with graph.atomic() as tx:
        tx.execute(
            "INSERT INTO node_embeddings (node_id, model, dim, vector, status, error, updated_at) "
            "VALUES (?, 'm', 3, ?, 'ok', NULL, 't')",
            (target.id, b"\x00"),
        )
    graph.relocate([(target.id, other.id, "moved:t", "t")], "a", "t2")
    stored = graph.edges_from([source.id])[source.id][0]
    assert (stored.target_memory_id, stored.target_loc) == (other.id, "moved:t")
    moved = graph.node_by_id(target.id)
    assert moved is not None and (moved.memory_id, moved.loc, moved.revision) == (other.id, "moved:t", 2)
    row = graph.conn.execute("SELECT status FROM node_embeddings WHERE node_id = ?", (target.id,)).fetchone()
    assert row[0] == "ok"


def test_hard_delete_removes_edges_and_embeddings(
    stores: tuple[SqliteTenancyStore, SqliteGraphStore, Memory],
) -> None:
    _, graph, memory = stores
    node = make(memory, "h")
    graph.insert_node(node)
    graph.upsert_edge(
        EdgeRecord(new_id(), node.id, "self", None, None, node.id, memory.id, "h", "h", False, 0)
    )
    graph.hard_delete([node.id])
    assert graph.edges_from([node.id]) == {} and graph.node_by_id(node.id) is None


def test_an_edge_is_read_updated_and_found_by_loc_only_while_its_source_is_live(
    stores: tuple[SqliteTenancyStore, SqliteGraphStore, Memory],
) -> None:
    tenancy, graph, memory = stores
    other = tenancy.add_memory(
        Memory(new_id(), "acme.com", "team", "Team", "", "knowledge", memory.org_id, None, None)
    )
    a, b, twin = make(memory, "a"), make(memory, "b"), make(other, "a")
    for node in (a, b, twin):
        graph.insert_node(node)
    first = graph.upsert_edge(
        EdgeRecord(new_id(), a.id, "to-b", None, None, b.id, memory.id, "b", "b", False, 0)
    )
    second = graph.upsert_edge(
        EdgeRecord(new_id(), b.id, "to-b", None, None, b.id, memory.id, "b", "b", False, 0)
    )
    assert graph.edge_by_id(first.id) == first and first.priority == 0 and first.data is None
    assert [e.id for e in graph.edges_at(memory.id, "to-b")] == [first.id, second.id]
    changed = EdgeRecord(
        first.id, a.id, "needs-b", "needs", "why", b.id, memory.id, "b", "b", True, first.position,
        priority=-7, condition={"and": [True, {"var": "x"}]}, data={"n": 1, "s": "é"},
    )  # fmt: skip
    graph.update_edge(changed)
    assert graph.edge_by_id(first.id) == changed
    assert graph.edges_from([a.id])[a.id] == [changed]
    assert graph.edges_at(memory.id, "to-b") == [second]
    assert [n.memory_id for n in graph.nodes_at([memory.id, other.id], "a")] == sorted([memory.id, other.id])
    graph.soft_delete([a.id], "t2")
    assert graph.edge_by_id(first.id) is None and graph.edges_at(memory.id, "needs-b") == []
    assert [n.memory_id for n in graph.nodes_at([memory.id, other.id], "a")] == [other.id]
    graph.delete_edges([second.id])
    assert graph.edge_by_id(second.id) is None and graph.edges_from([b.id]) == {}
