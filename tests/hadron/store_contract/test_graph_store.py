"""The ``GraphStore`` contract on every engine: live locs are unique, subtrees are exact, edges follow ids,
revisions and listings come back in one order whatever the engine."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import numpy as np
import psycopg
import pytest
from hadron.store_contract.conftest import AT, Seed, add_memory, node

from triptych.hadron.domain.model import EdgeRecord, NodeRecord
from triptych.hadron.store import new_id

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def edge(source: NodeRecord, loc: str, target: NodeRecord | None, ref: str = "t") -> EdgeRecord:
    return EdgeRecord(new_id(), source.id, loc, None, None, target.id if target else None,
                      target.memory_id if target else source.memory_id, target.loc if target else ref,
                      ref, False, 0)  # fmt: skip


def test_a_node_reads_back_by_loc_and_by_id_field_for_field(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    written = node(memory, "a:b", object_type="task", description="d", content="é ✓", seq=3,
                   tags=["x", "y"], properties={"p": [1, 2]}, data={"k": {"v": None}}, llm_model="m",
                   ai_agent="g")  # fmt: skip
    graph.insert_node(written)
    assert graph.node_by_loc(memory.id, "a:b") == written == graph.node_by_id(written.id)
    changed = replace(written, content="new", revision=2, tags=[])
    graph.update_node(changed)
    assert graph.node_by_id(written.id) == changed
    assert graph.node_by_loc(memory.id, "a") is None and graph.node_by_id("nope") is None


def test_a_subtree_is_the_node_and_its_descendants_only(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    for loc in ("a", "a:b", "a:b:c", "a.b", "a0", "ab", "a-b", "b:a"):
        graph.insert_node(node(memory, loc))
    assert [n.loc for n in graph.subtree(memory.id, "a")] == ["a", "a:b", "a:b:c"]
    assert graph.count_descendants(memory.id, "a") == 2
    assert [n.loc for n in graph.subtree(memory.id, "a:b")] == ["a:b", "a:b:c"]
    assert graph.subtree(memory.id, "zz") == []
    assert graph.branch_locs(memory.id, "a") == ["a", "a:b"]
    assert graph.branch_locs(memory.id, "") == ["", "a", "a:b", "b"]
    assert graph.live_locs(memory.id, ["a", "a:b", "zz"]).keys() == {"a", "a:b"}
    assert [n.loc for n in graph.memory_nodes(memory.id)] == [
        "a",
        "a-b",
        "a.b",
        "a0",
        "a:b",
        "a:b:c",
        "ab",
        "b:a",
    ]


def test_children_come_by_seq_then_loc_with_unsequenced_last(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    for loc, seq in (("p:d", None), ("p:c", 2), ("p:b", None), ("p:a", 5), ("p:c:x", 1)):
        graph.insert_node(node(memory, loc, seq=seq))
    assert [n.loc for n in graph.children(memory.id, "p")] == ["p:c", "p:a", "p:b", "p:d"]
    assert [n.loc for n in graph.children(memory.id, "p", limit=2)] == ["p:c", "p:a"]


def test_objects_of_a_type_come_in_creation_order(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    for loc, at in (("o:2", "2026-01-02"), ("o:1", "2026-01-01"), ("o:3", "2026-01-03")):
        graph.insert_node(node(memory, loc, object_type="task", created_at=at))
    graph.insert_node(node(memory, "o:x", object_type="bug"))
    assert [n.loc for n in graph.objects(memory.id, "task")] == ["o:1", "o:2", "o:3"]


def test_live_locs_are_unique_and_a_soft_delete_frees_the_loc(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    first = node(memory, "x")
    graph.insert_node(first)
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):  # the engine's own
        graph.insert_node(node(memory, "x"))
    graph.soft_delete([first.id], "t2")
    assert graph.node_by_loc(memory.id, "x") is None
    graph.insert_node(node(memory, "x"))
    assert graph.node_by_loc(memory.id, "x") is not None


def test_a_failed_write_leaves_nothing_behind(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    written = node(memory, "tx")
    with pytest.raises(RuntimeError), graph.atomic():
        graph.insert_node(written)
        graph.add_revision(written, "create", "a", None)
        raise RuntimeError("boom")
    assert graph.node_by_id(written.id) is None and graph.revisions(written.id) == []


def test_revisions_come_newest_first_up_to_the_limit(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    written = node(memory, "r")
    graph.insert_node(written)
    graph.add_revision(written, "create", "a", "first")
    graph.add_revisions([(replace(written, revision=2), None)], "move", "b", full=False)
    assert [(r.revision, r.operation, r.actor, r.reason) for r in graph.revisions(written.id)] == [
        (2, "move", "b", None), (1, "create", "a", "first"),
    ]  # fmt: skip
    assert [r.revision for r in graph.revisions(written.id, limit=1)] == [2]


def test_relocate_points_edges_at_the_new_address_and_carries_embeddings(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    other = add_memory(seed.stores, seed.org, "team")
    target, source = node(memory, "t"), node(memory, "s")
    graph.insert_node(target)
    graph.insert_node(source)
    graph.replace_edges(source.id, [edge(source, "to-t", target)])
    seed.stores.search.put_embeddings([(target.id, np.ones(4, dtype=np.float32), None, "h", AT)])
    graph.relocate([(target.id, other.id, "moved:t", "t")], "a", "t2")
    stored = graph.edges_from([source.id])[source.id][0]
    assert (stored.target_memory_id, stored.target_loc) == (other.id, "moved:t")
    moved = graph.node_by_id(target.id)
    assert moved is not None and (moved.memory_id, moved.loc, moved.revision) == (other.id, "moved:t", 2)
    assert seed.stores.search.embedding_hashes([target.id]) == {target.id: "h"}


def test_dangling_edges_into_a_moved_subtree_follow_it(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    source = node(memory, "s")
    graph.insert_node(source)
    graph.replace_edges(source.id, [edge(source, "in", None, "old:x"), edge(source, "at", None, "old"),
                                    edge(source, "out", None, "older")])  # fmt: skip
    assert graph.retarget_dangling([source.id], memory.id, "old", memory.id, "new") == 2
    assert sorted(e.target_loc or "" for e in graph.edges_from([source.id])[source.id]) == [
        "new",
        "new:x",
        "older",
    ]


def test_hard_delete_removes_edges_and_embeddings(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    written = node(memory, "h")
    graph.insert_node(written)
    graph.upsert_edge(edge(written, "self", written))
    seed.stores.search.put_embeddings([(written.id, None, "too long", "h", AT)])
    assert graph.failed_embeddings(memory.id) == [(written.id, "h", "too long")]
    graph.hard_delete([written.id])
    assert graph.edges_from([written.id]) == {} and graph.node_by_id(written.id) is None
    assert graph.failed_embeddings(memory.id) == []


def test_incoming_edges_carry_their_source_memory(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    other = add_memory(seed.stores, seed.org, "team")
    target, near, far = node(memory, "t"), node(memory, "n"), node(other, "f")
    for n in (target, near, far):
        graph.insert_node(n)
    graph.upsert_edge(edge(near, "a", target))
    graph.upsert_edge(edge(far, "b", target))
    assert sorted((e.loc, m) for e, m in graph.incoming_edges([target.id])) == [
        ("a", memory.id),
        ("b", other.id),
    ]


def test_an_edge_is_read_updated_and_found_by_loc_only_while_its_source_is_live(seed: Seed) -> None:
    graph, memory = seed.stores.graph, seed.memory
    other = add_memory(seed.stores, seed.org, "team")
    a, b, twin = node(memory, "a"), node(memory, "b"), node(other, "a")
    for n in (a, b, twin):
        graph.insert_node(n)
    first = graph.upsert_edge(edge(a, "to-b", b))
    second = graph.upsert_edge(edge(b, "to-b", b))
    assert graph.upsert_edge(edge(a, "to-b", twin)) == first  # one edge per (source, loc)
    assert graph.upsert_edge(edge(a, "to-c", b)).position == 1
    assert graph.edge_by_id(first.id) == first and first.priority == 0 and first.data is None
    assert [e.id for e in graph.edges_at(memory.id, "to-b")] == [first.id, second.id]
    changed = EdgeRecord(
        first.id, a.id, "needs-b", "needs", "why", b.id, memory.id, "b", "b", True, first.position,
        priority=-7, condition={"and": [True, {"var": "x"}]}, data={"n": 1, "s": "é"},
    )  # fmt: skip
    graph.update_edge(changed)
    assert graph.edge_by_id(first.id) == changed
    assert graph.edges_from([a.id])[a.id][0] == changed
    assert graph.edges_at(memory.id, "to-b") == [second]
    assert [n.memory_id for n in graph.nodes_at([memory.id, other.id], "a")] == sorted([memory.id, other.id])
    graph.soft_delete([a.id], "t2")
    assert graph.edge_by_id(first.id) is None and graph.edges_at(memory.id, "needs-b") == []
    assert [n.memory_id for n in graph.nodes_at([memory.id, other.id], "a")] == [other.id]
    graph.delete_edges([second.id])
    assert graph.edge_by_id(second.id) is None and graph.edges_from([b.id]) == {}
