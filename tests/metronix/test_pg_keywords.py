"""PostgreSQL's BM25 statement (``pg_keywords.RANK``) reads indexes only once the data is vacuumed, and the
migration that gave it its covering indexes (decision 0440) upgrades a database of the version before
with its rows and its ranking unchanged."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from triptych.core.keyword_index import K1, B
from triptych.core.pg import PgDatabase, one
from triptych.metronix import pg_keywords
from triptych.metronix.knowledge_schema_pg import COMPONENT, MIGRATIONS
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import NewDocument

pytestmark = pytest.mark.engines("postgresql")
DIM = 8
WORDS = "harbour tide compass ledger orbit quantum protein enzyme glacier zebra okapi delta turbine".split()
QUERIES = ["harbour tide", "zebra okapi delta", "quantum", "protein enzyme glacier orbit", "absent"]
PREVIOUS = 3  # the schema version before the covering indexes


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _chunks(rng: random.Random) -> list[str]:
    return [_text(rng, rng.randint(3, 15)) for _ in range(rng.randint(1, 4))]


def _vectors(rows: int, rng: random.Random) -> np.ndarray:
    vectors = np.random.default_rng(rng.randint(0, 1 << 30)).normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _rankings(db: PgDatabase) -> dict[tuple[str, str], list[tuple[int, float]]]:
    return {(ws, q): pg_keywords.rank(db, ws, q, 20) for ws in ("w1", "w2") for q in QUERIES}


def _same(found: dict[Any, list[tuple[int, float]]], expected: dict[Any, list[tuple[int, float]]]) -> None:
    """The same chunks in the same order; the same scores but for the last bits (a plan sums a chunk's
    terms in its own order)."""
    assert found.keys() == expected.keys()
    for key, ranked in expected.items():
        assert [i for i, _ in found[key]] == [i for i, _ in ranked], key
        assert [s for _, s in found[key]] == pytest.approx([s for _, s in ranked], rel=1e-12), key


def _vacuum(url: str) -> None:
    """What autovacuum does in its time: the visibility map index-only scans rely on, up to date."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE kb_chunks, kb_chunk_terms")


def _plan(db: PgDatabase, workspace: str, query: str) -> dict[str, Any]:
    """RANK's plan as executed (EXPLAIN ANALYZE). On a few pages the planner would rightly read the
    tables whole: without sequential and bitmap scans it shows the index path it takes on a large table."""
    params = {
        "ws": workspace,
        "terms": pg_keywords.query_stems(query),
        "k": 10,
        "k1": K1,
        "k1p": K1 + 1.0,
        "b": B,
    }
    with db.transaction() as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        row = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + pg_keywords.RANK, params).fetchone()
    plan: dict[str, Any] = one(row)[0][0]["Plan"]
    return plan


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _scans(plan: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The plan's scans of each table, by table."""
    found: dict[str, list[dict[str, Any]]] = {}
    for node in _nodes(plan):
        if "Relation Name" in node:
            found.setdefault(node["Relation Name"], []).append(node)
    return found


@pytest.fixture
def store(database_url: str) -> Iterator[PostgresKnowledgeStore]:
    opened = PostgresKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM, mirror=False)
    yield opened
    opened.close()


def test_the_bm25_statement_reads_only_indexes_of_vacuumed_data(
    store: PostgresKnowledgeStore, database_url: str
) -> None:
    rng = random.Random(3)
    for workspace in ("w1", "w2"):
        for d in range(12):
            chunks = _chunks(rng)
            store.put_document(
                NewDocument(
                    workspace, f"doc-{d}", _text(rng, 2), " ".join(chunks), "doc", None, None, {}, f"{workspace}-{d}",
                    chunks, _vectors(len(chunks), rng),
                )
            )  # fmt: skip
    _vacuum(database_url)
    for query in QUERIES[:-1]:
        plan = _plan(store.db, "w1", query)
        scans = _scans(plan)
        assert set(scans) == {"kb_chunks", "kb_chunk_terms"}, query
        # the counts from kb_chunks_by_workspace; the document frequencies and the postings from the key
        assert [(n["Node Type"], n["Index Name"]) for n in scans["kb_chunks"]] == [
            ("Index Only Scan", "kb_chunks_by_workspace")
        ]
        assert [(n["Node Type"], n["Index Name"]) for n in scans["kb_chunk_terms"]] == [
            ("Index Only Scan", "kb_chunk_terms_pkey")
        ] * 2
        assert all(n["Heap Fetches"] == 0 for s in scans.values() for n in s), query
        # the counts and frequencies are computed once, whatever side of a join their rows end on
        assert scans["kb_chunks"][0]["Actual Loops"] == 1, query
        ctes = [n for n in _nodes(plan) if n.get("Subplan Name", "").startswith("CTE ")]
        assert sorted((n["Subplan Name"], n["Actual Loops"]) for n in ctes) == [
            ("CTE df", 1),
            ("CTE stats", 1),
        ]
        assert [i for i, _ in pg_keywords.rank(store.db, "w1", query, 10)], query  # it ranks something


def test_the_covering_indexes_arrive_by_migration_over_a_previous_versions_database(
    database_url: str,
) -> None:
    db = PgDatabase(database_url, min_size=1, max_size=1)
    with db.connection() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    db.migrate(COMPONENT, MIGRATIONS[:PREVIOUS])
    now = "2026-12-01T00:00:00Z"
    rng = random.Random(7)
    with db.transaction() as conn:  # what that version's writes stored: rows, lengths and postings
        for workspace in ("w1", "w2"):
            conn.execute(
                "INSERT INTO kb_workspaces (id, created_at, generation) VALUES (%s, %s, 1)", (workspace, now)
            )
            for d in range(10):
                chunks = _chunks(rng)
                document = conn.execute(
                    "INSERT INTO kb_documents (workspace_id, doc_label, title, content, source_type, content_hash,"
                    " body_hash, created_at, updated_at) VALUES (%s, %s, %s, %s, 'doc', 'h', 'h', %s, %s) RETURNING id",
                    (workspace, f"doc-{d}", _text(rng, 2), " ".join(chunks), now, now),
                ).fetchone()
                ids = [
                    int(one(conn.execute(
                        "INSERT INTO kb_chunks (document_id, workspace_id, ordinal, text, embedding)"
                        " VALUES (%s, %s, %s, %s, %s) RETURNING id",
                        (one(document)[0], workspace, ordinal, text, vector),
                    ).fetchone())[0])
                    for ordinal, (text, vector) in enumerate(zip(chunks, _vectors(len(chunks), rng), strict=True))
                ]  # fmt: skip
                pg_keywords.write(conn, workspace, ids)
    counts = "SELECT (SELECT count(*) FROM kb_chunks), (SELECT count(*) FROM kb_chunk_terms)"
    with db.connection() as conn:
        rows_before = conn.execute(counts).fetchone()
    ranked_before = _rankings(db)
    assert any(ranked_before.values())

    store = PostgresKnowledgeStore(db, DIM, mirror=False)  # migrates
    try:
        with db.connection() as conn:
            version = one(
                conn.execute(
                    "SELECT version FROM schema_version WHERE component = %s", (COMPONENT,)
                ).fetchone()
            )
            assert version[0] == len(MIGRATIONS) >= PREVIOUS + 2
            assert conn.execute(counts).fetchone() == rows_before
            key = conn.execute(
                "SELECT pg_get_indexdef(conindid) FROM pg_constraint"
                " WHERE conrelid = 'kb_chunk_terms'::regclass AND contype = 'p'"
            ).fetchone()
            by_workspace = conn.execute(
                "SELECT pg_get_indexdef('kb_chunks_by_workspace'::regclass)"
            ).fetchone()
            indexes = conn.execute(
                "SELECT tablename, indexname FROM pg_indexes WHERE tablename IN ('kb_chunks', 'kb_chunk_terms')"
                " ORDER BY 1, 2"
            ).fetchall()
        assert indexes == [  # the old ones replaced, none left beside them
            ("kb_chunk_terms", "kb_chunk_terms_by_chunk"), ("kb_chunk_terms", "kb_chunk_terms_pkey"),
            ("kb_chunks", "kb_chunks_by_document"), ("kb_chunks", "kb_chunks_by_workspace"),
            ("kb_chunks", f"kb_chunks_hnsw_{DIM}"), ("kb_chunks", "kb_chunks_pkey"), ("kb_chunks", "kb_chunks_without_terms"),
        ]  # fmt: skip
        assert one(key)[0].endswith("(workspace_id, term, chunk_id) INCLUDE (weight, length)")
        assert one(by_workspace)[0].endswith("(workspace_id, id) INCLUDE (term_length)")
        _same(_rankings(db), ranked_before)
        _vacuum(database_url)
        _same(_rankings(db), ranked_before)
        assert all(
            n["Heap Fetches"] == 0 for s in _scans(_plan(db, "w2", "harbour tide")).values() for n in s
        )
        # writes after it store their postings under the new key, ranked as the in-process index does
        chunks = _chunks(rng)
        store.put_document(
            NewDocument(
                "w1",
                "new",
                None,
                " ".join(chunks),
                "doc",
                None,
                None,
                {},
                "new",
                chunks,
                _vectors(len(chunks), rng),
            )
        )
        generation = store.generation("w1")
        for query in QUERIES:
            expected = store.keywords.search("w1", generation, query, 20)
            found = pg_keywords.rank(db, "w1", query, 20)
            assert [i for i, _ in found] == [i for i, _ in expected], query
            assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-5), query
    finally:
        store.close()
