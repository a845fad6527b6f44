"""PostgreSQL's own dense search of a workspace (server mode, a worker's mirror not current): an exact scan
below ``exact_below`` chunks (decision 0270), above it a walk of the table-wide HNSW index filtered to the
workspace whose pool is re-sorted exactly, and the exact scan again when the walk comes back short
(decision 0330). The threshold is moved down so that a few hundred rows make a large workspace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql as pgsql

from triptych.core.errors import StorageUnavailable
from triptych.core.pg import PgDatabase, one
from triptych.metronix import pg_store, pg_vectors
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import NewDocument

pytestmark = pytest.mark.engines("postgresql")
DIM = 8
EXACT_BELOW = 50
ROWS = 300  # per workspace


@pytest.fixture
def store(database_url: str) -> Iterator[PostgresKnowledgeStore]:
    # On a few hundred rows the planner reads a workspace and sorts it rather than walk an HNSW index,
    # whatever the statement; without sorts it takes the index, as it does at the sizes the walk is for
    # (bench/pg_large_workspace.py, 30,000 chunks among 300,000). The exact branch has no other way
    # than a sort and keeps it.
    with psycopg.connect(database_url, autocommit=True) as conn:
        name = one(conn.execute("SELECT current_database()").fetchone())[0]
        conn.execute(pgsql.SQL("ALTER DATABASE {} SET enable_sort = off").format(pgsql.Identifier(name)))
    opened = PostgresKnowledgeStore(
        PgDatabase(database_url, min_size=1, max_size=1), DIM, mirror=False, exact_below=EXACT_BELOW
    )
    yield opened
    opened.close()


def _unit(vectors: np.ndarray) -> np.ndarray:
    normalised: np.ndarray = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    return normalised


def _put(store: PostgresKnowledgeStore, workspace: str, vectors: np.ndarray) -> list[int]:
    """The workspace's chunks, one document; their ids in the order of ``vectors``."""
    chunks = [f"{workspace} chunk {i}" for i in range(len(vectors))]
    store.put_document(
        NewDocument(
            workspace, "doc", None, " ".join(chunks), "doc", None, None, {}, workspace, chunks, vectors
        )
    )
    with store.db.connection() as conn:
        rows = conn.execute(
            "SELECT id FROM kb_chunks WHERE workspace_id = %s ORDER BY ordinal", (workspace,)
        ).fetchall()
    return [int(r[0]) for r in rows]


def _exact(ids: list[int], vectors: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    scores = vectors @ query
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))[:k]]


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _plan(store: PostgresKnowledgeStore, workspace: str, query: np.ndarray, k: int) -> dict[str, Any]:
    """The statement's executed plan under the search's own settings."""
    statement, params = store.nearest_statement(workspace, query, k)
    with store.db.transaction() as conn:
        store.walk_settings(conn, params)
        row = one(conn.execute(pgsql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement, params).fetchone())
    plan: dict[str, Any] = row[0][0]["Plan"]
    return plan


def _ran(store: PostgresKnowledgeStore, workspace: str, query: np.ndarray, k: int) -> tuple[bool, bool]:
    """Whether the walk of the HNSW index and the exact scan read ``kb_chunks``, from the statement's
    plan (a node never executed has no loops)."""
    root = _plan(store, workspace, query, k)
    walked = any(
        str(n.get("Index Name", "")).startswith("kb_chunks_hnsw") and n.get("Actual Loops", 0) > 0
        for n in _nodes(root)
    )
    exact_member = [n for n in root["Plans"] if n.get("Parent Relationship") == "Member"][-1]
    scanned = any(
        n.get("Relation Name") == "kb_chunks" and n.get("Actual Loops", 0) > 0 for n in _nodes(exact_member)
    )
    return walked, scanned


def test_a_small_workspace_is_searched_exactly_and_a_large_one_by_a_walk_of_the_hnsw_index(
    store: PostgresKnowledgeStore,
) -> None:
    rng = np.random.default_rng(6)
    small = _unit(rng.normal(size=(EXACT_BELOW - 1, DIM)))
    large = _unit(rng.normal(size=(EXACT_BELOW, DIM)))
    small_ids, large_ids = _put(store, "small", small), _put(store, "large", large)
    _put(store, "crowd", _unit(rng.normal(size=(ROWS, DIM))))
    query = _unit(rng.normal(size=(1, DIM)))[0]

    # Below the threshold: every vector of the workspace, none of the index; the exact order and scores.
    found = store.hnsw_search("small", query, EXACT_BELOW)
    assert [i for i, _ in found] == _exact(small_ids, small, query, EXACT_BELOW)
    assert [s for _, s in found] == pytest.approx(sorted((small @ query).tolist(), reverse=True), abs=1e-5)
    assert _ran(store, "small", query, 10) == (False, True)

    # At the threshold: the walk, finding every row asked for in the exact order.
    found = store.hnsw_search("large", query, EXACT_BELOW)
    assert [i for i, _ in found] == _exact(large_ids, large, query, EXACT_BELOW)
    assert _ran(store, "large", query, 10) == (True, False)


def test_a_large_workspace_s_walk_finds_the_exact_top_k_and_only_its_own_chunks(
    store: PostgresKnowledgeStore,
) -> None:
    rng = np.random.default_rng(8)
    queries = _unit(rng.normal(size=(4, DIM)))
    big = _unit(rng.normal(size=(ROWS, DIM)))
    # Another tenant holds a near copy of every query, closer than any of "big"'s chunks: the index's
    # first candidates are theirs, and none of them may come back.
    near = _unit(np.repeat(queries, 10, axis=0) + rng.normal(scale=0.02, size=(40, DIM)))
    tenants = {
        "near": _unit(np.vstack([near, rng.normal(size=(ROWS - len(near), DIM))])),
        "other": _unit(rng.normal(size=(ROWS, DIM))),
    }
    big_ids = _put(store, "big", big)
    ids = {name: _put(store, name, vectors) for name, vectors in tenants.items()}

    for query in queries:
        for k in (1, 10, 50):
            found = store.hnsw_search("big", query, k)
            assert [i for i, _ in found] == _exact(big_ids, big, query, k)
            expected = sorted((big @ query).tolist(), reverse=True)[:k]
            assert [s for _, s in found] == pytest.approx(expected, abs=1e-5)
        for name, vectors in tenants.items():
            assert [i for i, _ in store.hnsw_search(name, query, 10)] == _exact(ids[name], vectors, query, 10)
    # The walk answered, not the exact scan behind it, and its whole pool was ranked: the walk's rows
    # come in pgvector's relaxed order, which the planner would otherwise take for sorted and stop at
    # the first k + 1.
    assert _ran(store, "big", queries[0], 10) == (True, False)
    root = _plan(store, "big", queries[0], 10)
    walked = [n for n in _nodes(root) if str(n.get("Index Name", "")).startswith("kb_chunks_hnsw")]
    ranked = [n for n in root["Plans"] if n.get("Parent Relationship") == "Member"][0]
    read = max(n["Actual Rows"] for n in _nodes(ranked) if n.get("Node Type") == "CTE Scan")
    assert read == walked[0]["Actual Rows"] == pg_store.EF_SEARCH
    assert store.hnsw_search("nowhere", queries[0], 10) == []


def test_a_walk_that_comes_back_short_is_answered_by_the_exact_scan(
    store: PostgresKnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(9)
    query = _unit(rng.normal(size=(1, DIM)))[0]
    # The workspace lies opposite the query and a crowd of another tenant around it: the walk's first
    # candidates are all the crowd's, and it may go no further.
    far = _unit(-query + rng.normal(scale=0.3, size=(EXACT_BELOW * 2, DIM)))
    far_ids = _put(store, "far", far)
    _put(store, "crowd", _unit(query + rng.normal(scale=0.3, size=(ROWS, DIM))))
    monkeypatch.setattr(pg_vectors, "MAX_SCAN_TUPLES", 1)  # read by the walk's settings

    found = store.hnsw_search("far", query, 10)
    assert [i for i, _ in found] == _exact(far_ids, far, query, 10)
    assert _ran(store, "far", query, 10) == (True, True)


def test_a_pgvector_older_than_0_8_is_refused_in_one_line(database_url: str) -> None:
    # The catalog says 0.7.4 (the server's library is newer; the version installed in a database is
    # what ALTER EXTENSION ... UPDATE moves, and what the check reads).
    PgDatabase(database_url).close()  # the extension created
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE pg_extension SET extversion = '0.7.4' WHERE extname = 'vector'")
    with pytest.raises(StorageUnavailable) as refused:
        PostgresKnowledgeStore(PgDatabase(database_url), DIM)
    error = refused.value
    assert "pgvector 0.7.4" in error.message and "0.8 or newer" in error.message
    assert "\n" not in error.message and "ALTER EXTENSION vector UPDATE" in str(error.hint)
    assert error.details["reason"] == "extension_too_old"
    with psycopg.connect(database_url) as conn:  # the knowledge base left unmigrated
        assert conn.execute("SELECT to_regclass('kb_chunks')").fetchone() == (None,)
