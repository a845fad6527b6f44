"""The knowledge base's PostgreSQL store below the service: its vector search in one round trip, and
keyword indexes that follow other workers' writes through the change log."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

from triptych.core.pg import PgDatabase, one
from triptych.metronix.pg_store import COMPONENT, MIGRATIONS, PgKnowledgeStore
from triptych.metronix.store import NewDocument

pytestmark = pytest.mark.engines("postgresql")
DIM = 8


@pytest.fixture
def store(database_url: str) -> Iterator[PgKnowledgeStore]:
    # One pooled connection: every statement of the test meets whatever a search left on it.
    opened = PgKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
    yield opened
    opened.close()


def _put(store: PgKnowledgeStore, workspace: str, label: str, vectors: np.ndarray) -> None:
    chunks = [f"{label} chunk {i}" for i in range(len(vectors))]
    store.put_document(
        NewDocument(workspace, label, None, " ".join(chunks), "doc", None, None, {}, label, chunks, vectors)
    )


def _unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_vector_search_settings_hold_for_its_query_and_end_with_it(store: PgKnowledgeStore) -> None:
    _put(store, "big", "big-doc", _unit(300, seed=1))
    _put(store, "small", "small-doc", _unit(5, seed=2))
    query = _unit(1, seed=3)[0]

    # ef_search above the default 40 and the iterative scan both hold: 150 rows, and all of a small
    # workspace's rows though most of the graph's nearest belong to another.
    assert len(store.vector_search("big", query, 150)) == 150
    assert len(store.vector_search("small", query, 5)) == 5
    wide = store.vector_search("big", query, 300)
    exact = np.argsort(-(_unit(300, seed=1) @ query))[:10]
    assert [chunk_id for chunk_id, _ in wide[:10]] == [int(i) + 1 for i in exact]

    # Transaction-local: the connection the searches ran on is back to the server's defaults.
    with store.db.connection() as conn:
        settings = conn.execute(
            "SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')"
        ).fetchone()
    assert settings == ("40", "off")


# -- keyword indexes of several workers: the change log ------------------------------------------------

WORDS = "harbour tide compass ledger orbit quantum protein enzyme glacier zebra okapi delta turbine".split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _write(store: PgKnowledgeStore, workspace: str, label: str, rng: random.Random) -> None:
    chunks = [_text(rng, rng.randint(3, 12)) for _ in range(rng.randint(1, 3))]
    store.put_document(
        NewDocument(
            workspace, label, _text(rng, 2), " ".join(chunks), "doc", None, None, {}, label, chunks,
            _unit(len(chunks), seed=rng.randint(0, 1 << 30)),
        )
    )  # fmt: skip


def _reloaded(database_url: str, workspace: str, query: str) -> list[tuple[int, float]]:
    """The ranking a worker that has just started (a full load of the workspace) gives."""
    fresh = PgKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
    try:
        return fresh.keyword_search(workspace, query, 1000)
    finally:
        fresh.close()


def test_a_worker_follows_another_workers_writes_from_the_log_with_a_reloads_ranking(
    store: PgKnowledgeStore, database_url: str
) -> None:
    other = PgKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)  # a second worker
    try:
        rng = random.Random(5)
        for i in range(12):
            _write(store, "w", f"doc-{i}", rng)
        assert other.keyword_search("w", "harbour", 10)  # loaded once
        loaded = other.keywords.sync("w", 0)
        queries = ["harbour tide", "quantum enzyme okapi", "zebra", "ledger orbit delta turbine"]
        for step in range(40):
            label = f"doc-{rng.randrange(16)}"
            if rng.random() < 0.2:
                store.delete_document("w", label)
            else:
                _write(store, "w", label, rng)  # new documents and replacements
            if step % 3 == 0:
                _write(other, "w", f"mine-{step % 4}", rng)  # the follower's own writes interleave
            query = queries[step % len(queries)]
            # Same documents, same order, same scores as a full load of the workspace, in the follower
            # and in the writer (whose own deletes used to leave their chunks in its index) ...
            expected = _reloaded(database_url, "w", query)
            assert other.keyword_search("w", query, 1000) == expected
            assert store.keyword_search("w", query, 1000) == expected
        # ... and the follower never reloaded: its partition is the one it loaded at first.
        assert other.keywords.sync("w", 0) is loaded
        assert other.keywords.generation("w") == store._generation("w")
    finally:
        other.close()


def test_a_gap_in_the_log_reloads_the_workspace(store: PgKnowledgeStore, database_url: str) -> None:
    other = PgKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
    try:
        rng = random.Random(9)
        _write(store, "w", "a", rng)
        other.keyword_search("w", "harbour", 10)
        loaded = other.keywords.sync("w", 0)
        _write(store, "w", "b", rng)
        _write(store, "w", "c", rng)
        # As a previous version's write, or a pruned log: the entry of one generation is missing.
        middle = store._generation("w") - 1
        with store.db.transaction() as conn:
            conn.execute("DELETE FROM kb_keyword_changes WHERE generation = %s", (middle,))
        query = "harbour tide compass ledger"
        assert other.keyword_search("w", query, 1000) == _reloaded(database_url, "w", query)
        assert other.keywords.sync("w", 0) is not loaded
    finally:
        other.close()


def test_re_embedding_steps_every_keyword_index_over_its_generation(
    store: PgKnowledgeStore, database_url: str
) -> None:
    other = PgKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
    try:
        rng = random.Random(3)
        for workspace in ("w1", "w2"):
            _write(store, workspace, "a", rng)
            other.keyword_search(workspace, "harbour", 10)
        loaded = {w: other.keywords.sync(w, 0) for w in ("w1", "w2")}
        ids = [chunk_id for batch in store.iter_chunks() for chunk_id, _, _ in batch]
        store.replace_embeddings([(i, v) for i, v in zip(ids, _unit(len(ids), seed=4), strict=True)])
        for workspace in ("w1", "w2"):
            query = "harbour tide zebra"
            assert other.keyword_search(workspace, query, 1000) == _reloaded(database_url, workspace, query)
            assert other.keywords.sync(workspace, 0) is loaded[workspace]
    finally:
        other.close()


def test_the_log_arrives_by_migration_over_a_previous_versions_database(database_url: str) -> None:
    db = PgDatabase(database_url, min_size=1, max_size=1)
    db.migrate(COMPONENT, MIGRATIONS[:1])  # the schema before the change log
    now = "2026-12-01T00:00:00Z"
    with db.transaction() as conn:
        conn.execute("INSERT INTO kb_workspaces (id, created_at, generation) VALUES ('w', %s, 1)", (now,))
        document = conn.execute(
            "INSERT INTO kb_documents (workspace_id, doc_label, title, content, source_type, content_hash,"
            " body_hash, created_at, updated_at) VALUES ('w', 'old', NULL, 'old harbour', 'doc', 'h', 'h', %s, %s)"
            " RETURNING id",
            (now, now),
        ).fetchone()
        conn.execute(
            "INSERT INTO kb_chunks (document_id, workspace_id, ordinal, text, embedding) VALUES (%s, 'w', 0,"
            " 'old harbour', %s)",
            (one(document)[0], _unit(1, seed=1)[0]),
        )
    store = PgKnowledgeStore(db, DIM)  # migrates
    try:
        other = PgKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
        try:
            assert [i for i, _ in other.keyword_search("w", "harbour", 10)] == [1]
            loaded = other.keywords.sync("w", 0)
            _write(store, "w", "new", random.Random(1))
            with store.db.connection() as conn:
                logged = conn.execute("SELECT workspace_id, generation FROM kb_keyword_changes").fetchall()
            assert logged == [("w", 2)]
            query = "harbour tide compass"
            assert other.keyword_search("w", query, 1000) == _reloaded(database_url, "w", query)
            assert other.keywords.sync("w", 0) is loaded
        finally:
            other.close()
    finally:
        store.close()
