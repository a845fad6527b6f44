"""PostgreSQL databases (core/pg.py) against a real server: migrations, concurrent workers, failures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import psycopg
import pytest
from harness import free_port, run_threads, shared_file
from postgres import PostgresCluster

from triptych.core.errors import StorageUnavailable
from triptych.core.pg import NativeDatabase, PgDatabase, redacted
from triptych.metronix import pg_store
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import KnowledgeStore, NewDocument, SqliteKnowledgeStore

FIRST = "CREATE TABLE notes (id BIGINT PRIMARY KEY, body TEXT NOT NULL);"
SECOND = (
    "ALTER TABLE notes ADD COLUMN tag TEXT NOT NULL DEFAULT 'none'; CREATE INDEX notes_by_tag ON notes (tag);"
)


def _tables(db: PgDatabase) -> set[str]:
    with db.connection() as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {str(r[0]) for r in rows}


def test_migrations_from_an_empty_database_apply_every_version_once(postgres: PostgresCluster) -> None:
    db = PgDatabase(postgres.create_database())
    try:
        assert db.migrate("notes", [FIRST, SECOND]) == 2
        assert db.version("notes") == 2
        assert "notes" in _tables(db)
        assert db.migrate("notes", [FIRST, SECOND]) == 0  # a restart applies nothing
    finally:
        db.close()


def test_a_store_s_statements_reach_postgresql_as_written(postgres: PostgresCluster) -> None:
    """Every store sends psycopg's spellings unchanged (``NativeDatabase``, docs/decisions/0290): a ``?``
    in a literal stays one and ``%%`` is psycopg's literal ``%``, nothing is rewritten on the way (a ``?``
    placeholder is a syntax error). It takes the store's write lock and reads rows by position and by
    name."""
    pg = PgDatabase(postgres.create_database())
    try:
        native = NativeDatabase(pg, write_lock="test-store")
        with native.transaction("tenant-a") as conn:
            row = conn.execute("SELECT '?' AS mark, %s AS value, 5 %% 3 AS rest", ("x",)).fetchone()
            held = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
            ).fetchone()
        assert (row["mark"], row["value"], row[2]) == ("?", "x", 2)
        assert held[0] == 2  # the store's key shared and the (store, tenant) pair: docs/decisions/0170
        with pytest.raises(psycopg.errors.SyntaxError):
            native.conn.execute("SELECT ? AS value")
    finally:
        pg.close()


def test_a_database_of_the_previous_version_migrates_and_keeps_its_rows(postgres: PostgresCluster) -> None:
    url = postgres.create_database()
    old = PgDatabase(url)
    old.migrate("notes", [FIRST])
    with old.transaction() as conn:
        conn.execute("INSERT INTO notes VALUES (1, 'kept')")
    old.close()

    new = PgDatabase(url)
    try:
        assert new.migrate("notes", [FIRST, SECOND]) == 1
        with new.connection() as conn:
            assert conn.execute("SELECT id, body, tag FROM notes").fetchall() == [(1, "kept", "none")]
    finally:
        new.close()


def test_a_failed_migration_leaves_the_previous_version_whole(postgres: PostgresCluster) -> None:
    db = PgDatabase(postgres.create_database())
    try:
        db.migrate("notes", [FIRST])
        broken = "ALTER TABLE notes ADD COLUMN tag TEXT; SELECT no_such_function();"
        with pytest.raises(Exception, match="no_such_function"):
            db.migrate("notes", [FIRST, broken])
        assert db.version("notes") == 1
        with db.connection() as conn:
            columns = conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'notes'"
            ).fetchall()
        assert {str(c[0]) for c in columns} == {"id", "body"}
    finally:
        db.close()


def test_workers_starting_at_once_on_an_empty_database_migrate_it_exactly_once(
    postgres: PostgresCluster,
) -> None:
    url = postgres.create_database()
    applied: list[int] = []

    def start(_: int) -> None:
        db = PgDatabase(url, max_size=2)
        try:
            applied.append(db.migrate("notes", [FIRST, SECOND]))
        finally:
            db.close()

    assert run_threads(start, 4) == []
    assert sorted(applied) == [0, 0, 0, 2]


def test_the_knowledge_store_schema_is_current_and_indexes_vectors_with_hnsw(
    postgres: PostgresCluster,
) -> None:
    store = PostgresKnowledgeStore(PgDatabase(postgres.create_database()), dim=4)
    try:
        assert store.db.version(pg_store.COMPONENT) == len(pg_store.MIGRATIONS)
        with store.db.connection() as conn:
            indexes = conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'kb_chunks'").fetchall()
        assert any("USING hnsw" in str(r[0]) and "vector(4)" in str(r[0]) for r in indexes)
    finally:
        store.close()


def test_vector_search_never_returns_another_workspace_s_chunks(postgres: PostgresCluster) -> None:
    store = PostgresKnowledgeStore(PgDatabase(postgres.create_database()), dim=4)
    try:
        rng = np.random.default_rng(7)
        for workspace in ("acme", "globex"):
            for n in range(30):
                vectors = rng.normal(size=(1, 4)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                doc = NewDocument(workspace, f"d{n}", None, f"text {n}", "manual", None, None, {}, "h",
                                  chunks=[f"text {n}"], embeddings=vectors)  # fmt: skip
                store.put_document(doc)
        query = np.array([1, 0, 0, 0], dtype=np.float32)
        found = store.vector_search("acme", query, 50)
        assert len(found) == 30  # top_k is honest: every chunk of the workspace, none of the other
        own = set(store.chunk_hits("acme", [i for i, _ in found]))
        assert own == {i for i, _ in found}
        assert store.chunk_hits("globex", [i for i, _ in found]) == {}
        assert store.keyword_search("globex", "text", 100) != []
        assert {i for i, _ in store.keyword_search("acme", "text", 100)} == own
    finally:
        store.close()


def test_an_unreachable_database_is_storage_unavailable_without_the_password() -> None:
    url = f"postgresql://triptych:s3cret@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(StorageUnavailable) as caught:
        PgDatabase(url, timeout=2)
    assert "s3cret" not in caught.value.message and redacted(url) in caught.value.message
    assert caught.value.details["reason"] == "database_unavailable"
    assert "TRIPTYCH_DATABASE_URL" in (caught.value.hint or "")


def test_keyword_ranking_on_postgresql_is_the_embedded_engine_s_to_the_score(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    """The same 400 SciFact abstracts in both engines; 100 queries rank the same labels with the same
    BM25 scores (the decision in docs/decisions.md, issue 16, rests on this)."""
    corpus = shared_file("data/scifact/corpus.jsonl")
    queries = shared_file("data/scifact/queries.jsonl")
    docs = [json.loads(line) for line in corpus.read_text().splitlines()[:400]]
    texts = [json.loads(line)["text"] for line in queries.read_text().splitlines()[:100]]
    dim = 8
    rng = np.random.default_rng(3)
    stores: list[KnowledgeStore] = [
        SqliteKnowledgeStore(tmp_path / "metronix.db", dim),
        PostgresKnowledgeStore(PgDatabase(postgres.create_database()), dim),
    ]
    try:
        for doc in docs:
            vector = rng.normal(size=(1, dim)).astype(np.float32)
            new = NewDocument("sci", doc["_id"], doc["title"], doc["text"], "manual", None, None, {}, "h",
                              chunks=[doc["text"]], embeddings=vector / np.linalg.norm(vector))  # fmt: skip
            for store in stores:
                store.put_document(new)
        compared = 0
        for query in texts:
            rankings = []
            for store in stores:
                hits = store.keyword_search("sci", query, 10)
                labels = store.chunk_hits("sci", [i for i, _ in hits])
                rankings.append([(labels[i].doc_label, round(score, 9)) for i, score in hits])
            assert rankings[0] == rankings[1], query
            compared += bool(rankings[0])
        assert compared >= 90
    finally:
        for store in stores:
            store.close()
