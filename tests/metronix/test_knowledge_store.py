"""The ``KnowledgeStore`` protocol's contract, one suite run against every engine that implements it
(SQLite in tmp_path; PostgreSQL from tests/postgres.py, a fresh database per test). What the service
builds on is checked here once per engine; the service's own rules are tested on one engine
(tests/metronix/test_knowledge_service.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from triptych.core.pg import PgDatabase
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import KnowledgeStore, NewDocument, SqliteKnowledgeStore

pytestmark = pytest.mark.engines("sqlite", "postgresql")
DIM = 8
OpenStore = Callable[[], KnowledgeStore]


@pytest.fixture
def open_store(tmp_path: Path, database_url: str | None) -> Iterator[OpenStore]:
    """Opens a store on one database: each call another worker (PostgreSQL) or a restart (SQLite)."""
    opened: list[KnowledgeStore] = []

    def open_() -> KnowledgeStore:
        store: KnowledgeStore
        if database_url is not None:
            store = PostgresKnowledgeStore(PgDatabase(database_url, max_size=2), DIM)
        else:
            store = SqliteKnowledgeStore(tmp_path / "kb.db", DIM)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> KnowledgeStore:
    return open_store()


def _unit(rows: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _doc(workspace: str, label: str, chunks: list[str], seed: int = 1, **fields: object) -> NewDocument:
    values: dict[str, object] = {
        "title": f"{label} title", "source_type": "doc", "url": None, "date": None, "metadata": {},
        "content_hash": f"hash-{label}-{seed}",
    }  # fmt: skip
    values.update(fields)
    return NewDocument(
        workspace_id=workspace, doc_label=label, content=" ".join(chunks), chunks=chunks,
        embeddings=_unit(len(chunks), seed), **values,  # type: ignore[arg-type]
    )  # fmt: skip


def _exact(store: KnowledgeStore, workspace: str, query: np.ndarray, k: int) -> list[int]:
    """The exact top-k chunk ids, from the vectors the store hands back (chunk order by id)."""
    found = store.dense_candidates(workspace, query, 1000, store.generation(workspace)).hits
    return [i for i, _ in sorted(found, key=lambda h: -h[1])][:k]


def test_a_document_reads_back_as_stored_with_its_chunk_count(store: KnowledgeStore) -> None:
    metadata = {"url": "https://example.org", "tags": ["a", "b"], "nested": {"z": 1, "a": 2}}
    stored = store.put_document(
        _doc("ws", "jira:X-1", ["alpha beta", "gamma delta"], metadata=metadata, url="https://example.org")
    )
    assert stored == 2
    got = store.get_document("ws", "jira:X-1")
    assert got is not None
    assert (got.title, got.content, got.metadata, got.chunk_count) == (
        "jira:X-1 title",
        "alpha beta gamma delta",
        metadata,
        2,
    )
    assert list(got.metadata) == ["url", "tags", "nested"]  # key order kept as written
    assert store.document_hash("ws", "jira:X-1") == "hash-jira:X-1-1"
    assert store.get_document("ws", "jira:X-2") is None and store.document_hash("ws", "nope") is None
    assert store.count_documents("ws") == 1 and store.count_chunks() == 2


def test_every_write_steps_the_workspace_generation_by_one(store: KnowledgeStore) -> None:
    assert store.generation("ws") == 0
    store.put_document(_doc("ws", "a", ["one"]))
    store.put_document(_doc("ws", "a", ["one again"], seed=2))
    assert store.generation("ws") == 2
    assert store.delete_document("ws", "a") is True
    assert store.delete_document("ws", "a") is False  # nothing to delete: no write, no step
    assert store.generation("ws") == 3 and store.generation("other") == 0


def test_a_replaced_document_s_old_chunks_leave_both_searches(store: KnowledgeStore) -> None:
    store.put_document(_doc("ws", "a", ["zebra stripes", "savanna grass"], seed=1))
    old = set(store.chunk_hits("ws", [i for i, _ in store.keyword_search("ws", "zebra savanna", 10)]))
    store.put_document(_doc("ws", "a", ["quantum qubits"], seed=2))
    generation = store.generation("ws")
    keyword = store.keyword_candidates("ws", "zebra savanna quantum", 10, generation)
    dense = store.dense_candidates("ws", _unit(1, 9)[0], 10, generation)
    assert keyword.method == "bm25" and dense.method in {"exact", "hnsw", "pgvector"}
    assert not old & {i for i, _ in keyword.hits} and not old & {i for i, _ in dense.hits}
    hits = store.chunk_hits("ws", [i for i, _ in keyword.hits])
    assert [hit.text for hit in hits.values()] == ["quantum qubits"]


def test_searches_stay_inside_their_workspace(store: KnowledgeStore) -> None:
    store.put_document(_doc("mine", "m", ["shared words here"], seed=1))
    store.put_document(_doc("theirs", "t", ["shared words here"], seed=1))
    mine = store.keyword_search("mine", "shared words", 10)
    dense = store.vector_search("mine", _unit(1, 1)[0], 10)
    assert len(mine) == 1 and len(dense) == 1
    assert store.chunk_hits("theirs", [i for i, _ in mine]) == {}  # another workspace's ids read nothing
    assert store.chunk_hits("mine", [mine[0][0]])[mine[0][0]].doc_label == "m"


def test_dense_search_returns_the_nearest_chunks_best_first(store: KnowledgeStore) -> None:
    vectors = _unit(40, 3)
    chunks = [f"chunk {i}" for i in range(40)]
    store.put_document(NewDocument("ws", "d", None, "x", "doc", None, None, {}, "h", chunks, vectors))
    query = vectors[7]
    found = store.vector_search("ws", query, 5)
    assert len(found) == 5 and [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert store.chunk_hits("ws", [found[0][0]])[found[0][0]].text == "chunk 7"
    assert found[0][1] == pytest.approx(1.0, abs=1e-3)


def test_identical_texts_are_found_by_their_body_hash_in_label_order(store: KnowledgeStore) -> None:
    for label in ("b", "a", "c"):
        store.put_document(_doc("ws", label, ["same text"]))
    store.put_document(_doc("other", "z", ["same text"]))
    hit = next(iter(store.chunk_hits("ws", [store.keyword_search("ws", "same", 1)[0][0]]).values()))
    assert store.labels_by_body("ws", [hit.body_hash]) == {hit.body_hash: ["a", "b", "c"]}
    assert hit.same_text in (None, ("a", "b", "c"))  # read with the hit, or left to labels_by_body
    assert store.labels_by_body("ws", []) == {}


def test_labels_with_prefix_compare_the_prefix_exactly(store: KnowledgeStore) -> None:
    for label in ("git:a_b", "git:aXb", "GIT:a_b", "git:a%"):
        store.put_document(_doc("ws", label, [label]))
    assert set(store.labels_with_prefix("ws", "git:a_")) == {"git:a_b"}
    assert set(store.labels_with_prefix("ws", "git:a%")) == {"git:a%"}
    assert store.labels_with_prefix("ws", "git:a_b") == {"git:a_b": "hash-git:a_b-1"}


def test_last_sync_and_the_embedding_model_are_remembered(open_store: OpenStore) -> None:
    store = open_store()
    assert store.last_sync("ws") is None and store.embedding_model() is None
    store.set_last_sync("ws", "2026-12-05T01:00:00+00:00")
    store.set_embedding_model("model-a", DIM)
    again = open_store()
    assert again.last_sync("ws") == "2026-12-05T01:00:00+00:00"
    assert again.embedding_model() == ("model-a", DIM)


def test_another_store_on_the_same_database_sees_every_write(open_store: OpenStore) -> None:
    writer, reader = open_store(), open_store()
    writer.put_document(_doc("ws", "a", ["first words"]))
    assert [
        h.doc_label
        for h in reader.chunk_hits("ws", [i for i, _ in reader.keyword_search("ws", "first", 5)]).values()
    ] == ["a"]
    writer.put_document(_doc("ws", "a", ["second words"], seed=2))
    writer.put_document(_doc("ws", "b", ["first again"], seed=3))
    reader_hits = reader.keyword_search("ws", "first second", 5)
    assert {h.text for h in reader.chunk_hits("ws", [i for i, _ in reader_hits]).values()} == {
        "second words",
        "first again",
    }
    assert len(reader.vector_search("ws", _unit(1, 5)[0], 10)) == 2


def test_re_embedding_replaces_vectors_in_place_and_steps_generations(store: KnowledgeStore) -> None:
    store.put_document(_doc("ws", "a", ["one", "two", "three"]))
    rows = [row for batch in store.iter_chunks(batch=2) for row in batch]
    assert [(title, text) for _, title, text in rows] == [
        ("a title", "one"),
        ("a title", "two"),
        ("a title", "three"),
    ]
    before = store.generation("ws")
    target = _unit(1, 42)[0]
    store.replace_embeddings([(rows[2][0], target)])
    assert store.generation("ws") == before + 1
    assert store.vector_search("ws", target, 1)[0][0] == rows[2][0]


def test_candidates_say_how_they_were_found(store: KnowledgeStore) -> None:
    store.put_document(_doc("ws", "a", ["alpha words", "beta words"]))
    generation = store.generation("ws")
    keyword = store.keyword_candidates("ws", "alpha", 5, generation)
    dense = store.dense_candidates("ws", _unit(1, 1)[0], 5, generation)
    # A worker whose keyword index is not in memory yet has PostgreSQL rank by the same BM25 ("sql").
    assert keyword.method in {"bm25", "sql"} and len(keyword.hits) == 1
    # Below the graph's threshold the embedded engine (and a current mirror) search exactly; a worker
    # whose mirror is still loading asks pgvector.
    assert dense.method in {"exact", "pgvector"} and len(dense.hits) == 2
    assert [i for i, _ in dense.hits] == _exact(store, "ws", _unit(1, 1)[0], 2)
