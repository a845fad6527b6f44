"""The knowledge base's PostgreSQL store below the service: its vector search in one round trip, and
keyword indexes that follow other workers' writes through the change log."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

from triptych.core.pg import PgDatabase, one
from triptych.metronix.pg_store import (
    COMPONENT,
    KEYWORD_LOG_KEEP,
    MIGRATIONS,
    SAME_TEXT_READ,
    PostgresKnowledgeStore,
)
from triptych.metronix.store import NewDocument

pytestmark = pytest.mark.engines("postgresql")
DIM = 8


@pytest.fixture
def store(database_url: str) -> Iterator[PostgresKnowledgeStore]:
    # One pooled connection: every statement of the test meets whatever a search left on it. pgvector's
    # index only (no in-process mirror): this is the path a worker takes while its mirror catches up.
    opened = PostgresKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM, mirror=False)
    yield opened
    opened.close()


@pytest.fixture
def workers(database_url: str) -> Iterator[tuple[PostgresKnowledgeStore, PostgresKnowledgeStore]]:
    """Two stores on one database, as two server workers hold them, each with its own mirror."""
    pair = (
        PostgresKnowledgeStore(PgDatabase(database_url), DIM),
        PostgresKnowledgeStore(PgDatabase(database_url), DIM),
    )
    yield pair
    for opened in pair:
        opened.close()


def _put(store: PostgresKnowledgeStore, workspace: str, label: str, vectors: np.ndarray) -> None:
    chunks = [f"{label} chunk {i}" for i in range(len(vectors))]
    store.put_document(
        NewDocument(workspace, label, None, " ".join(chunks), "doc", None, None, {}, label, chunks, vectors)
    )


def _unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_vector_search_settings_hold_for_its_query_and_end_with_it(store: PostgresKnowledgeStore) -> None:
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


def _ids(hits: list[tuple[int, float]]) -> list[int]:
    return [chunk_id for chunk_id, _ in hits]


def test_the_mirror_answers_as_pgvector_s_index_and_follows_its_own_writes_in_place(
    workers: tuple[PostgresKnowledgeStore, PostgresKnowledgeStore],
) -> None:
    store, _ = workers
    vectors = _unit(60, seed=4)
    _put(store, "ws", "doc-a", vectors[:40])
    _put(store, "other", "doc-b", vectors[40:])
    query = _unit(1, seed=5)[0]

    # The first search finds no mirror: pgvector's index answers, the mirror loads in the background.
    first = store.vector_search("ws", query, 10)
    assert store.wait_ready("ws")
    assert store.index.serves("ws", store.generation("ws"))
    mirrored = store.vector_search("ws", query, 10)
    assert _ids(mirrored) == _ids(first) == _ids(store.hnsw_search("ws", query, 10))
    assert [round(score, 5) for _, score in mirrored] == [round(score, 5) for _, score in first]
    exact = np.argsort(-(vectors[:40] @ query))[:10]
    assert _ids(mirrored) == [int(i) + 1 for i in exact]
    # Only the workspace's own chunks, all of them when fewer than asked.
    assert len(store.vector_search("ws", query, 100)) == 40

    # This worker's own write reaches its mirror in place: still current, no reload, the new chunk found.
    _put(store, "ws", "doc-c", query.reshape(1, DIM))
    assert store.index.serves("ws", store.generation("ws"))
    best = store.vector_search("ws", query, 1)
    assert _ids(best) == _ids(store.hnsw_search("ws", query, 1))
    assert best[0][1] == pytest.approx(1.0, abs=1e-5)


def test_a_write_through_another_worker_is_found_on_the_next_search_then_mirrored(
    workers: tuple[PostgresKnowledgeStore, PostgresKnowledgeStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = workers
    _put(writer, "ws", "doc-a", _unit(30, seed=6))
    query = _unit(1, seed=7)[0]
    reader.vector_search("ws", query, 5)
    assert reader.wait_ready("ws")
    loads: list[int] = []
    install = reader.index.install
    monkeypatch.setattr(reader.index, "install", lambda *a: (loads.append(1), install(*a)))

    _put(writer, "ws", "doc-new", query.reshape(1, DIM))
    writer.delete_document("ws", "doc-a")
    # The reader writes too while its mirror is behind: the mirror is kept for the catch-up, not dropped.
    _put(reader, "ws", "doc-mine", -query.reshape(1, DIM))
    # The reader's mirror is behind the database: pgvector's index answers this search, fresh.
    generation = reader.generation("ws")
    assert not reader.index.serves("ws", generation)
    found = reader.vector_search("ws", query, 5)
    assert len(found) == 2 and found[0][1] == pytest.approx(1.0, abs=1e-5)
    # The mirror catches up in the background and then answers the same.
    assert reader.wait_ready("ws")
    assert reader.index.serves("ws", generation)
    assert reader.vector_search("ws", query, 5) == [
        (chunk_id, pytest.approx(score, abs=1e-6)) for chunk_id, score in found
    ]
    assert loads == []  # patched by difference (the new ids' vectors), not loaded whole
    assert reader.vector_search("nowhere", query, 5) == []


def test_re_embedding_through_another_worker_reloads_the_mirror_whole(
    workers: tuple[PostgresKnowledgeStore, PostgresKnowledgeStore],
) -> None:
    reader, writer = workers
    vectors = _unit(12, seed=8)
    _put(writer, "ws", "doc-a", vectors)
    query = vectors[3]
    reader.vector_search("ws", query, 3)
    assert reader.wait_ready("ws")
    assert reader.vector_search("ws", query, 1)[0][0] == 4

    # Same ids, new vectors (what `triptych reindex` writes): a catch-up by new ids would miss them.
    moved = np.roll(vectors, 1, axis=0)
    writer.replace_embeddings([(i + 1, moved[i]) for i in range(len(moved))])
    reader.vector_search("ws", query, 1)
    assert reader.wait_ready("ws")
    assert reader.index.serves("ws", reader.generation("ws"))
    assert reader.vector_search("ws", query, 1)[0][0] == 5


def test_hits_bring_the_labels_of_their_identical_documents_when_the_list_is_short(
    store: PostgresKnowledgeStore,
) -> None:
    def copy_of(text: str, label: str, seed: int, workspace: str = "ws") -> None:
        store.put_document(
            NewDocument(workspace, label, None, text, "doc", None, None, {}, label, [text], _unit(1, seed))
        )

    for i in range(3):
        copy_of("three copies", f"few-{i}", seed=10 + i)
    copy_of("three copies", "elsewhere", seed=13, workspace="other")
    for i in range(SAME_TEXT_READ + 1):
        copy_of("many copies", f"many-{i:02d}", seed=20 + i)
    with store.db.connection() as conn:
        ids = {
            str(label): int(chunk_id)
            for chunk_id, label in conn.execute(
                "SELECT c.id, d.doc_label FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                " WHERE d.workspace_id = 'ws'"
            ).fetchall()
        }
    hits = store.chunk_hits("ws", [ids["few-1"], ids["many-03"]])
    few, many = hits[ids["few-1"]], hits[ids["many-03"]]
    # Short list: read with the hit, as labels_by_body would answer it (one round trip fewer), and
    # only this workspace's: the copy in "other" is not named.
    assert few.same_text == ("few-0", "few-1", "few-2")
    assert list(few.same_text) == store.labels_by_body("ws", [few.body_hash])[few.body_hash]
    # Longer than a search lists: left to labels_by_body, which has them all.
    assert many.same_text is None
    assert len(store.labels_by_body("ws", [many.body_hash])[many.body_hash]) == SAME_TEXT_READ + 1
    # Only the workspace's own documents, from either.
    assert store.chunk_hits("other", [ids["few-1"]]) == {}


# -- keyword indexes of several workers: the change log ------------------------------------------------

WORDS = "harbour tide compass ledger orbit quantum protein enzyme glacier zebra okapi delta turbine".split()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _write(store: PostgresKnowledgeStore, workspace: str, label: str, rng: random.Random) -> None:
    chunks = [_text(rng, rng.randint(3, 12)) for _ in range(rng.randint(1, 3))]
    store.put_document(
        NewDocument(
            workspace, label, _text(rng, 2), " ".join(chunks), "doc", None, None, {}, label, chunks,
            _unit(len(chunks), seed=rng.randint(0, 1 << 30)),
        )
    )  # fmt: skip


def _reloaded(database_url: str, workspace: str, query: str) -> list[tuple[int, float]]:
    """The ranking a worker that has just started (a full load of the workspace) gives."""
    fresh = PostgresKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
    try:
        return fresh.keyword_search(workspace, query, 1000)
    finally:
        fresh.close()


def test_a_worker_follows_another_workers_writes_from_the_log_with_a_reloads_ranking(
    store: PostgresKnowledgeStore, database_url: str
) -> None:
    other = PostgresKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)  # a second worker
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


def test_a_gap_in_the_log_reloads_the_workspace(store: PostgresKnowledgeStore, database_url: str) -> None:
    other = PostgresKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
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
    store: PostgresKnowledgeStore, database_url: str
) -> None:
    other = PostgresKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
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
    store = PostgresKnowledgeStore(db, DIM)  # migrates
    try:
        other = PostgresKnowledgeStore(PgDatabase(database_url, min_size=1, max_size=1), DIM)
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


def test_re_embeddings_prune_the_change_log_at_every_hundredth_generation(
    store: PostgresKnowledgeStore,
) -> None:
    # A long re-embedding steps each workspace's generation once per batch and writes no document: the
    # log must still be pruned when a batch lands on a hundredth generation.
    _write(store, "w", "a", random.Random(5))
    steps = KEYWORD_LOG_KEEP + 98  # the generation one batch short of a hundredth, with a full log
    with store.db.transaction() as conn:
        start = int(one(conn.execute("SELECT generation FROM kb_workspaces WHERE id = 'w'").fetchone())[0])
        conn.execute("UPDATE kb_workspaces SET generation = %s WHERE id = 'w'", (start + steps,))
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO kb_keyword_changes VALUES ('w', %s, '{}', '{}')",
                [(g,) for g in range(start + 1, start + steps + 1)],
            )
    top = start + steps + 1
    assert top % 100 == 0
    ids = [chunk_id for batch in store.iter_chunks() for chunk_id, _, _ in batch]
    store.replace_embeddings([(i, v) for i, v in zip(ids, _unit(len(ids), seed=6), strict=True)])
    with store.db.connection() as conn:
        found = conn.execute(
            "SELECT MIN(generation), MAX(generation), COUNT(*) FROM kb_keyword_changes WHERE workspace_id = 'w'"
        ).fetchone()
    assert tuple(one(found)) == (top - KEYWORD_LOG_KEEP + 1, top, KEYWORD_LOG_KEEP)
