"""The ``SearchStore`` contract on every engine: the four search modes with their filters applied inside
the query, vectors and their hashes, entity matching, and scopes."""

from __future__ import annotations

import numpy as np
import pytest
from hadron.store_contract.conftest import AT, Seed, add_memory, node

from triptych.core.regex import LinearPattern
from triptych.hadron.domain.model import Scope
from triptych.hadron.domain.where import compile_where
from triptych.hadron.search_store import NodeFilter
from triptych.hadron.store import new_id

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def _fill(seed: Seed) -> dict[str, int]:
    """Nodes a, a:b (task, price 5), a:c (task, price 9), b (action), and x in another memory; their rowids."""
    graph, memory = seed.stores.graph, seed.memory
    other = add_memory(seed.stores, seed.org, "other")
    written = [
        node(memory, "a", name="apple pie", description="sweet", content="baked apples"),
        node(memory, "a:b", name="banana", object_type="task", data={"price": 5}, content="apple bread"),
        node(
            memory, "a:c", name="cherry", object_type="task", properties={"price": 9}, content="no fruit here"
        ),
        node(memory, "b", name="run me", node_type="action", description="apple action", content=None),
        node(other, "x", name="apple elsewhere"),
    ]
    for n in written:
        graph.insert_node(n)
    return {loc: rowid for (loc, rowid) in zip([n.loc for n in written], _rowids(seed, written), strict=True)}


def _rowids(seed: Seed, nodes: list) -> list[int]:  # type: ignore[type-arg]
    by_id = seed.stores.search.rowids_of([n.id for n in nodes])
    return [by_id[n.id] for n in nodes]


def test_survey_goes_by_loc_and_applies_every_filter_before_the_limit(seed: Seed) -> None:
    rowids = _fill(seed)
    search, mid = seed.stores.search, seed.memory.id
    loc = {v: k for k, v in rowids.items()}
    assert [loc[r] for r in search.survey(NodeFilter((mid,)), 10)] == ["a", "a:b", "a:c", "b"]
    assert [loc[r] for r in search.survey(NodeFilter((mid,)), 2)] == ["a", "a:b"]
    assert [loc[r] for r in search.survey(NodeFilter((mid,), object_type="task"), 1)] == ["a:b"]
    assert [loc[r] for r in search.survey(NodeFilter((mid,), runnable=True), 10)] == ["b"]
    assert [loc[r] for r in search.survey(NodeFilter((mid,), subtree=(mid, "a")), 10)] == ["a:b", "a:c"]
    where = compile_where({"path": "price", "gt": 6})
    assert [loc[r] for r in search.survey(NodeFilter((mid,), where=where), 1)] == ["a:c"]
    assert search.filter_rowids(NodeFilter((mid,), object_type="task"), list(rowids.values())) == {
        rowids["a:b"],
        rowids["a:c"],
    }
    assert search.filter_rowids(NodeFilter((mid,)), []) == set()
    assert sorted(search.all_rowids(NodeFilter((mid,)), mid)) == sorted(
        rowids[x] for x in ("a", "a:b", "a:c", "b")
    )
    assert set(search.nodes_by_rowid([rowids["a"], rowids["x"]])) == {rowids["a"], rowids["x"]}


def test_keyword_search_ranks_by_bm25_within_the_filter(seed: Seed) -> None:
    rowids = _fill(seed)
    search, mid = seed.stores.search, seed.memory.id
    loc = {v: k for k, v in rowids.items()}
    hits = search.keyword(NodeFilter((mid,)), "apple", 10)
    assert loc[hits[0][0]] == "a" and {loc[r] for r, _ in hits} == {"a", "a:b", "b"}
    assert all(s > 0 for _, s in hits) and [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert [loc[r] for r, _ in search.keyword(NodeFilter((mid,), object_type="task"), "apple", 10)] == ["a:b"]
    assert [loc[r] for r, _ in search.keyword(NodeFilter((mid,), runnable=True), "apple", 10)] == ["b"]
    seed.stores.graph.soft_delete([seed.stores.graph.node_by_loc(mid, "a").id], AT)  # type: ignore[union-attr]
    assert "a" not in {loc[r] for r, _ in search.keyword(NodeFilter((mid,)), "apple", 10)}


def test_regex_scores_the_best_field_matched_and_ties_go_by_loc(seed: Seed) -> None:
    rowids = _fill(seed)
    search, mid = seed.stores.search, seed.memory.id
    loc = {v: k for k, v in rowids.items()}
    hits = search.regex(NodeFilter((mid,)), LinearPattern("appl|fruit"), 10)
    assert [loc[r] for r, _ in hits] == ["a", "b", "a:b", "a:c"]
    assert hits[0][1] > hits[1][1] > hits[2][1] == hits[3][1]
    assert [loc[r] for r, _ in search.regex(NodeFilter((mid,)), LinearPattern("appl|fruit"), 2)] == ["a", "b"]
    where = compile_where({"path": "price", "lt": 6, "field": "data"})
    assert [loc[r] for r, _ in search.regex(NodeFilter((mid,), where=where), LinearPattern("appl"), 10)] == [
        "a:b"
    ]


def test_vectors_follow_writes_deletes_and_failures(seed: Seed) -> None:
    rowids = _fill(seed)
    search, graph, mid = seed.stores.search, seed.stores.graph, seed.memory.id
    ids = {n.loc: n.id for n in graph.memory_nodes(mid)}
    assert search.vector_count(mid) == 0
    vectors = {"a": [1, 0, 0, 0], "a:b": [0, 1, 0, 0], "a:c": [0.9, 0.1, 0, 0]}
    search.put_embeddings([(ids[k], np.array(v, dtype=np.float32), None, f"h-{k}", AT) for k, v in vectors.items()]
                          + [(ids["b"], None, "too long", "h-b", AT), ("gone", np.ones(4, dtype=np.float32), None, "h", AT)])  # fmt: skip
    assert search.vector_count(mid) == 3
    assert search.embedding_hashes([ids["a"], ids["b"], "gone"]) == {ids["a"]: "h-a"}  # failures have none
    query = np.array([1, 0, 0, 0], dtype=np.float32)
    assert [r for r, _ in search.vector(mid, query, 2)] == [rowids["a"], rowids["a:c"]]
    assert [r for r, _ in search.vector_subset(mid, query, [rowids["a:b"], rowids["a:c"]], 5)][0] == rowids[
        "a:c"
    ]
    search.delete_embeddings([ids["a"]])
    graph.soft_delete([ids["a:c"]], AT)
    assert search.vector_count(mid) == 1 and [r for r, _ in search.vector(mid, query, 5)] == [rowids["a:b"]]


def test_entity_matching_is_case_insensitive_literal_and_scoped_to_the_memories(seed: Seed) -> None:
    _fill(seed)
    search, graph, mid = seed.stores.search, seed.stores.graph, seed.memory.id
    graph.insert_node(node(seed.memory, "pct", name="100% Pure_Juice"))
    assert {n.loc for n in search.nodes_matching([mid], ["name"], "APPLE", False, 10)} == {"a"}
    assert [n.loc for n in search.nodes_matching([mid], ["name"], "0% pure_", False, 10)] == ["pct"]
    assert search.nodes_matching([mid], ["name"], "_", False, 10)[0].loc == "pct"  # no wildcard
    a = graph.node_by_loc(mid, "a")
    assert a is not None and [n.loc for n in search.nodes_matching([mid], [], a.id, True, 10)] == ["a"]
    assert search.nodes_matching([], ["name"], "apple", False, 10) == []
    other = seed.stores.tenancy.memory_by_key("acme.com", "other")
    assert other is not None and search.live_locs_in([mid, other.id], "x") == {other.id}
    assert search.live_locs_in([], "x") == set()


def test_scopes_are_named_per_owner_updated_and_soft_deleted(seed: Seed) -> None:
    search = seed.stores.search
    scope = Scope(new_id(), "zeta", None, "app", seed.app.id, (seed.memory.id,), "alice", AT, AT)
    search.add_scope(scope)
    search.add_scope(Scope(new_id(), "alpha", "d", "app", seed.app.id, (), "alice", AT, AT))
    assert search.scope(scope.id) == scope == search.scope_named("app", seed.app.id, "zeta")
    assert [s.name for s in search.scopes_of("app", seed.app.id)] == ["alpha", "zeta"]
    changed = Scope(scope.id, "omega", "new", "app", seed.app.id, ("m1", "m2"), "alice", AT, "later")
    search.update_scope(changed)
    assert search.scope(scope.id) == changed
    search.delete_scope(scope.id, "later")
    assert search.scope(scope.id) is None and search.scope_named("app", seed.app.id, "omega") is None
    search.add_scope(
        Scope(new_id(), "omega", None, "app", seed.app.id, (), "alice", AT, AT)
    )  # the name is free
    assert [s.name for s in search.scopes_of("app", seed.app.id)] == ["alpha", "omega"]
