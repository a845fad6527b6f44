"""KnowledgeService over a real store (SQLite in tmp_path, or a fresh PostgreSQL database), embedding with
the real local model."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import count_loads, run_threads

from triptych.core.auth import Principal, local_principal
from triptych.core.embed import Embedder, LocalEmbedder, Matrix
from triptych.core.errors import EmbeddingMismatch, Forbidden, IngestionFailed, NotFound
from triptych.core.pg import PgDatabase
from triptych.metronix.errors import InvalidParams, WorkspaceNotFound
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import KnowledgeStore, SqliteKnowledgeStore

LOCAL = local_principal()
# The service's rules are the same over any store: they are tested on SQLite, and what the service needs
# of a store is tested on every engine by tests/metronix/test_knowledge_store.py. The tests kept on both
# engines here check an engine's part in a rule (a failed write leaving nothing, a change log followed,
# a model change) through the service.
BOTH = pytest.mark.engines("sqlite", "postgresql")

ZEBRA = "Zebras graze on the savanna grass. Their stripes confuse biting flies."
QUBIT = "Quantum computers store information in qubits. Superposition makes them powerful."


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real local model, loaded once for the whole session (about a second)."""
    local = LocalEmbedder(threads=1)
    local.warm_up()
    return local


class OtherEmbedder:
    """Another "model": a deterministic hashed bag of words in 8 dimensions."""

    name = "other"
    dim = 8

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, 0] = 1e-3
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.sha1(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        normalised: Matrix = out / np.linalg.norm(out, axis=1, keepdims=True)
        return normalised


class BreaksOnMarker:
    """Wraps an embedder; any batch containing ``marker`` raises, or comes back malformed."""

    def __init__(self, inner: Embedder, marker: str, failure: str = "raise") -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.marker = marker
        self.failure = failure

    def embed(self, texts: Sequence[str]) -> Matrix:
        vectors = self.inner.embed(texts)
        if not any(self.marker in text for text in texts):
            return vectors
        if self.failure == "raise":
            raise RuntimeError("embedding backend fell over")
        if self.failure == "wrong_dim":
            return vectors[:, : self.dim // 2].copy()
        if self.failure == "too_few":
            return vectors[:-1].copy()
        raise AssertionError(self.failure)


OpenService = Callable[..., KnowledgeService]


@pytest.fixture
def open_service(
    tmp_path: Path, embedder: LocalEmbedder, storage_engine: str, request: pytest.FixtureRequest
) -> Iterator[OpenService]:
    """Opens a service over tmp_path/metronix.db or one fresh PostgreSQL database (each call is a new
    store, like another worker)."""
    stores: list[KnowledgeStore] = []
    url = request.getfixturevalue("postgres").create_database() if storage_engine == "postgresql" else None

    def open_(using: Embedder | None = None, **options: Any) -> KnowledgeService:
        chosen: Embedder = using if using is not None else embedder
        store: KnowledgeStore
        if url is not None:
            store = PostgresKnowledgeStore(PgDatabase(url, max_size=4), chosen.dim)
        else:
            store = SqliteKnowledgeStore(tmp_path / "metronix.db", chosen.dim)
        stores.append(store)
        return KnowledgeService(store, chosen, **options)

    yield open_
    for store in stores:
        store.close()


@pytest.fixture
def service(open_service: OpenService) -> KnowledgeService:
    return open_service()


def _labels(result: dict[str, Any]) -> list[str]:
    return [hit["doc_label"] for hit in result["results"]]


def _chunk_ids(service: KnowledgeService, workspace: str, label: str) -> set[int]:
    store = service.store
    if isinstance(store, PostgresKnowledgeStore):
        with store.db.connection() as conn:
            found = conn.execute(
                "SELECT c.id FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                " WHERE d.workspace_id = %s AND d.doc_label = %s",
                (workspace, label),
            ).fetchall()
        return {int(r[0]) for r in found}
    assert isinstance(store, SqliteKnowledgeStore)
    rows = store.db.conn.execute(
        "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
        " WHERE d.workspace_id = ? AND d.doc_label = ?",
        (workspace, label),
    ).fetchall()
    return {int(r[0]) for r in rows}


# -- store, get, search --------------------------------------------------------------------


def test_stored_document_can_be_read_back_and_found_by_keyword(service: KnowledgeService) -> None:
    metadata = {"url": "https://example.org/zebras", "date": "2024-05-01", "tags": ["animals"]}

    stored = service.store_document(LOCAL, None, ZEBRA, title="Zebras", doc_label="zebra", metadata=metadata)

    assert (stored.doc_label, stored.chunks_stored, stored.unchanged) == ("zebra", 1, False)
    assert service.get(LOCAL, None, "zebra") == {
        "doc_label": "zebra",
        "title": "Zebras",
        "content": ZEBRA,
        "source_type": "manual",
        "timestamp": "2024-05-01",
        "metadata": metadata,
    }
    found = service.search(LOCAL, None, "zebra stripes", top_k=3)
    assert found["count"] == 1
    (hit,) = found["results"]
    assert (hit["doc_label"], hit["title"], hit["content"]) == ("zebra", "Zebras", ZEBRA)
    assert (hit["url"], hit["date"]) == ("https://example.org/zebras", "2024-05-01")
    assert hit["keyword_score"] is not None and hit["dense_score"] is not None
    assert hit["score"] == pytest.approx(1.0)


def test_search_finds_documents_by_meaning_without_shared_words(service: KnowledgeService) -> None:
    docs = {
        "zebra": "Zebras graze on the savanna grass.",
        "bank": "The central bank raised interest rates.",
        "bread": "Bake the bread at a high oven temperature.",
    }
    for label, text in docs.items():
        service.store_document(LOCAL, None, text, doc_label=label)

    for query, expected in [
        ("striped horses in Africa", "zebra"),
        ("monetary policy", "bank"),
        ("cooking a loaf", "bread"),
    ]:
        results = service.search(LOCAL, None, query, top_k=3)["results"]
        assert results[0]["doc_label"] == expected
        assert results[0]["keyword_score"] is None  # found by the dense side alone


def test_source_type_comes_from_argument_metadata_or_label_prefix(service: KnowledgeService) -> None:
    service.store_document(LOCAL, None, "A web page about kites.", doc_label="web:kites")
    service.store_document(
        LOCAL, None, "Notes about kites.", doc_label="notes", metadata={"source_type": "notion"}
    )
    service.store_document(LOCAL, None, "Kite manual.", doc_label="pdf:kite", source_type="upload")

    assert service.get(LOCAL, None, "web:kites")["source_type"] == "web"
    assert service.get(LOCAL, None, "notes")["source_type"] == "notion"
    assert service.get(LOCAL, None, "pdf:kite")["source_type"] == "upload"


def test_document_without_a_label_gets_a_mem_label(service: KnowledgeService) -> None:
    first = service.store_document(LOCAL, None, "Remember to water the plants.")
    second = service.store_document(LOCAL, None, "Remember to water the plants.")

    assert re.fullmatch(r"MEM-[0-9A-F]{8}", first.doc_label)
    assert re.fullmatch(r"MEM-[0-9A-F]{8}", second.doc_label)
    assert first.doc_label != second.doc_label
    assert service.get(LOCAL, None, first.doc_label)["source_type"] == "manual"


def test_deleted_document_is_gone_from_get_and_search(service: KnowledgeService) -> None:
    service.store_document(LOCAL, None, ZEBRA, doc_label="zebra")
    service.store_document(LOCAL, None, QUBIT, doc_label="qubit")
    assert "zebra" in _labels(service.search(LOCAL, None, "zebra", top_k=5))

    assert service.delete_document(LOCAL, None, "zebra") is True
    assert service.delete_document(LOCAL, None, "zebra") is False

    with pytest.raises(NotFound):
        service.get(LOCAL, None, "zebra")
    assert _labels(service.search(LOCAL, None, "zebra savanna", top_k=5)) == ["qubit"]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.store_document(LOCAL, None, "   \n "), "content"),
        (lambda s: s.store_document(LOCAL, None, "text", doc_label="  "), "doc_label"),
        (lambda s: s.store_document(LOCAL, None, "text", doc_label="x" * 513), "doc_label"),
        (lambda s: s.search(LOCAL, None, "  "), "query"),
        (lambda s: s.search(LOCAL, None, "zebra", top_k=0), "top_k"),
        (lambda s: s.search(LOCAL, None, "zebra", top_k=51), "top_k"),
        (lambda s: s.get(LOCAL, None, ""), "doc_label"),
    ],
    ids=["blank-content", "blank-label", "long-label", "blank-query", "top_k-0", "top_k-51", "blank-get"],
)
def test_invalid_arguments_are_refused_with_the_field_named(
    service: KnowledgeService, call: Callable[[KnowledgeService], object], field: str
) -> None:
    with pytest.raises(InvalidParams) as refused:
        call(service)

    assert refused.value.details == {"field": field}
    assert service.store.count_chunks() == 0


def test_get_of_an_unknown_label_is_not_found(service: KnowledgeService) -> None:
    with pytest.raises(NotFound) as refused:
        service.get(LOCAL, None, "nope")

    assert refused.value.code == "DOCUMENT_NOT_FOUND"


# -- replacement and failed writes ------------------------------------------------------------


def test_storing_an_existing_label_replaces_the_document_and_its_old_chunks_leave_search(
    open_service: OpenService, embedder: LocalEmbedder
) -> None:
    service = open_service(chunk_tokens=20)
    long_zebra = " ".join(
        [
            "Zebras graze on the savanna grass every morning.",
            "Their black and white stripes confuse biting flies.",
            "A zebra herd moves across the plains with wildebeest.",
            "Lions hunt zebras near the watering holes at dusk.",
        ]
    )
    first = service.store_document(LOCAL, "ws", long_zebra, title="Zebras", doc_label="doc")
    assert first.chunks_stored > 1
    old_chunks = _chunk_ids(service, "ws", "doc")
    # Searching first puts the workspace's vectors in memory, so the replacement patches that index.
    # One result per document: its best chunk.
    assert _labels(service.search(LOCAL, "ws", "zebra stripes", top_k=10)) == ["doc"]
    created = service.store.get_document("ws", "doc")
    assert created is not None

    second = service.store_document(LOCAL, "ws", QUBIT, title="Qubits", doc_label="doc")

    assert second.chunks_stored == 1
    new_chunks = _chunk_ids(service, "ws", "doc")
    assert not new_chunks & old_chunks
    assert service.get(LOCAL, "ws", "doc")["content"] == QUBIT
    replaced = service.store.get_document("ws", "doc")
    assert replaced is not None and replaced.created_at == created.created_at
    # Old text: no keyword hit, and the dense side returns only the one live chunk.
    assert service.store.keyword_search("ws", "zebra stripes savanna wildebeest", 50) == []
    dense = service.store.vector_search("ws", embedder.embed(["zebras on the savanna"])[0], 50)
    assert {i for i, _ in dense} == new_chunks
    results = service.search(LOCAL, "ws", "zebra stripes savanna", top_k=10)["results"]
    assert [(r["doc_label"], r["content"]) for r in results] == [("doc", QUBIT)]
    # Another worker over the same file, with a cold index, sees the same.
    other = open_service(chunk_tokens=20)
    assert [r["content"] for r in other.search(LOCAL, "ws", "zebra", top_k=10)["results"]] == [QUBIT]


def _assert_zebra_intact(service: KnowledgeService) -> None:
    assert service.get(LOCAL, None, "doc")["content"] == ZEBRA
    results = service.search(LOCAL, None, "zebra stripes", top_k=5)["results"]
    assert [(r["doc_label"], r["content"]) for r in results] == [("doc", ZEBRA)]
    assert results[0]["keyword_score"] is not None and results[0]["dense_score"] is not None


@pytest.mark.parametrize("failure", ["raise", "too_few"])
@BOTH
def test_failed_store_leaves_the_previous_version_intact_and_searchable(
    open_service: OpenService, embedder: LocalEmbedder, failure: str
) -> None:
    service = open_service(BreaksOnMarker(embedder, "KABOOM", failure))
    service.store_document(LOCAL, None, ZEBRA, doc_label="doc")
    _assert_zebra_intact(service)

    with pytest.raises(IngestionFailed):
        service.store_document(LOCAL, None, f"KABOOM {QUBIT}", doc_label="doc")

    _assert_zebra_intact(service)
    assert service.store.count_chunks() == 1


@pytest.mark.parametrize("warm_index", [False, True], ids=["cold-index", "warm-index"])
@BOTH
def test_store_with_wrong_dimension_vectors_fails_and_leaves_the_previous_version_intact(
    open_service: OpenService, embedder: LocalEmbedder, warm_index: bool
) -> None:
    service = open_service(BreaksOnMarker(embedder, "KABOOM", "wrong_dim"))
    service.store_document(LOCAL, None, ZEBRA, doc_label="doc")
    if warm_index:
        _assert_zebra_intact(service)

    with pytest.raises(IngestionFailed):
        service.store_document(LOCAL, None, f"KABOOM {QUBIT}", doc_label="doc")

    _assert_zebra_intact(service)


# -- workspaces and roles ----------------------------------------------------------------


def test_search_in_one_workspace_returns_top_k_of_its_own_documents_only(
    open_service: OpenService,
) -> None:
    # Few candidates per side: a search that filtered a shared candidate list afterwards would find
    # nothing of B's behind A's twenty strong matches.
    service = open_service(candidates=10)
    for i in range(20):
        service.store_document(
            LOCAL, "A", f"Solar panels turn sunlight into electricity, panel {i}.", doc_label=f"a{i}"
        )
    weak = [
        "Tomatoes need plenty of sun in the garden.",
        "The power went out during the storm.",
        "Panel discussion notes from the conference.",
        "Light bulbs were invented long ago.",
        "Roof repairs are planned for spring.",
        "Energy drinks contain caffeine.",
        "The weather was bright and warm today.",
    ]
    for i, text in enumerate(weak):
        service.store_document(LOCAL, "B", text, doc_label=f"b{i}")

    in_b = _labels(service.search(LOCAL, "B", "solar panels sunlight electricity", top_k=5))
    in_a = _labels(service.search(LOCAL, "A", "solar panels sunlight electricity", top_k=5))

    assert len(in_b) == 5
    assert set(in_b) <= {f"b{i}" for i in range(len(weak))}
    assert len(in_a) == 5
    assert set(in_a) <= {f"a{i}" for i in range(20)}


def test_refusal_of_an_ungranted_workspace_does_not_reveal_whether_it_exists(
    service: KnowledgeService,
) -> None:
    service.store_document(LOCAL, "team-b", ZEBRA, doc_label="secret")
    assert service.store.count_documents("team-b") == 1
    assert service.store.count_documents("team-z") == 0
    editor = Principal(user="bob", role="editor", workspace_ids=("team-a",))

    refusals: dict[str, list[str]] = {}
    for workspace in ("team-b", "team-z"):
        calls: list[Callable[[], object]] = [
            lambda w=workspace: service.search(editor, w, "zebra"),
            lambda w=workspace: service.get(editor, w, "secret"),
            lambda w=workspace: service.status(editor, w),
            lambda w=workspace: service.store_document(editor, w, "overwrite", doc_label="secret"),
            lambda w=workspace: service.delete_document(editor, w, "secret"),
        ]
        for call in calls:
            with pytest.raises(WorkspaceNotFound) as refused:
                call()
            refusals.setdefault(workspace, []).append(
                json.dumps(refused.value.to_dict()).replace(workspace, "<id>")
            )

    assert refusals["team-b"] == refusals["team-z"]
    assert service.get(LOCAL, "team-b", "secret")["content"] == ZEBRA


def test_viewer_can_search_but_cannot_store_or_delete(service: KnowledgeService) -> None:
    service.store_document(LOCAL, "team-a", ZEBRA, doc_label="doc")
    viewer = Principal(user="eve", role="viewer", workspace_ids=("team-a",))

    assert _labels(service.search(viewer, None, "zebra")) == ["doc"]
    with pytest.raises(Forbidden):
        service.store_document(viewer, None, QUBIT, doc_label="doc")
    with pytest.raises(Forbidden):
        service.delete_document(viewer, None, "doc")
    assert service.get(viewer, None, "doc")["content"] == ZEBRA


def test_status_is_initializing_until_the_workspace_has_documents(service: KnowledgeService) -> None:
    empty = service.status(LOCAL, None)
    assert empty == {
        "status": "initializing",
        "documents": {"total": 0},
        "last_sync": None,
        "embedding_model": "all-MiniLM-L6-v2-onnx-qint8-dynamic",
    }

    service.store_document(LOCAL, None, ZEBRA, doc_label="doc")
    service.store_document(LOCAL, "elsewhere", QUBIT, doc_label="doc")

    ready = service.status(LOCAL, None)
    assert (ready["status"], ready["documents"]) == ("healthy", {"total": 1})
    assert service.status(LOCAL, "third")["status"] == "initializing"


# -- several workers over one database ------------------------------------------------------


def test_a_worker_sees_documents_another_worker_stored_or_replaced(open_service: OpenService) -> None:
    first = open_service()
    second = open_service()
    first.store_document(LOCAL, None, ZEBRA, doc_label="zebra")
    assert _labels(first.search(LOCAL, None, "quantum qubits", top_k=5)) == ["zebra"]  # index now warm

    second.store_document(LOCAL, None, QUBIT, doc_label="qubit")
    second.store_document(LOCAL, None, "Penguins huddle together in Antarctic winters.", doc_label="zebra")

    results = first.search(LOCAL, None, "quantum qubits", top_k=5)["results"]
    assert results[0]["doc_label"] == "qubit"
    assert results[0]["dense_score"] is not None
    assert {r["content"] for r in results} == {QUBIT, "Penguins huddle together in Antarctic winters."}


@BOTH
def test_keyword_search_follows_another_worker_s_stores_replacements_and_deletes(
    open_service: OpenService,
) -> None:
    first = open_service()
    second = open_service()
    first.store_document(LOCAL, None, ZEBRA, doc_label="zebra")
    assert _keyword_hits(first, "stripes") == ["zebra"]  # the keyword index is now loaded

    second.store_document(LOCAL, None, "Penguins huddle together in Antarctic winters.", doc_label="zebra")
    second.store_document(LOCAL, None, QUBIT, doc_label="qubit")
    assert _keyword_hits(first, "stripes") == []
    assert _keyword_hits(first, "penguins huddle") == ["zebra"]
    second.delete_document(LOCAL, None, "qubit")
    assert _keyword_hits(first, "qubits") == []


def _keyword_hits(service: KnowledgeService, query: str) -> list[str]:
    return [r["doc_label"] for r in service.search(LOCAL, None, query)["results"] if r["keyword_score"]]


def test_identical_documents_collapse_into_one_result_naming_the_other_labels(
    service: KnowledgeService,
) -> None:
    for label in ("b-copy", "a-copy", "c-copy"):
        service.store_document(LOCAL, None, ZEBRA, title=label.upper(), doc_label=label)
    service.store_document(LOCAL, None, QUBIT, doc_label="qubit")
    service.store_document(LOCAL, "elsewhere", ZEBRA, doc_label="other-workspace-copy")

    results = service.search(LOCAL, None, "zebra stripes", top_k=2)["results"]

    assert len(results) == 2
    zebra, qubit = results
    assert qubit["doc_label"] == "qubit" and qubit["duplicate_labels"] == []
    # Another workspace's copy is not named: it is not this workspace's knowledge.
    assert sorted([zebra["doc_label"], *zebra["duplicate_labels"]]) == ["a-copy", "b-copy", "c-copy"]


# -- skip_unchanged --------------------------------------------------------------------------


def test_skip_unchanged_does_not_rewrite_or_re_embed_an_identical_document(
    open_service: OpenService, embedder: LocalEmbedder
) -> None:
    service = open_service()
    service.store_document(LOCAL, None, f"KABOOM {ZEBRA}", title="Z", doc_label="doc", metadata={"v": 1})
    chunks = _chunk_ids(service, "default", "doc")
    # A second worker whose embedder would fail on this text: skipping must not embed at all.
    fragile = open_service(BreaksOnMarker(embedder, "KABOOM", "raise"))

    again = fragile.store_document(
        LOCAL, None, f"KABOOM {ZEBRA}", title="Z", doc_label="doc", metadata={"v": 1}, skip_unchanged=True
    )

    assert (again.doc_label, again.chunks_stored, again.unchanged) == ("doc", 1, True)
    assert _chunk_ids(service, "default", "doc") == chunks


def test_skip_unchanged_still_stores_a_changed_title_content_or_metadata(service: KnowledgeService) -> None:
    service.store_document(LOCAL, None, ZEBRA, title="Z", doc_label="doc", metadata={"v": 1})

    for title, content, metadata in [
        ("Zebras", ZEBRA, {"v": 1}),
        ("Zebras", ZEBRA + " They sleep standing up.", {"v": 1}),
        ("Zebras", ZEBRA + " They sleep standing up.", {"v": 2}),
    ]:
        before = _chunk_ids(service, "default", "doc")
        result = service.store_document(
            LOCAL, None, content, title=title, doc_label="doc", metadata=metadata, skip_unchanged=True
        )
        assert result.unchanged is False
        assert _chunk_ids(service, "default", "doc").isdisjoint(before)
    assert service.get(LOCAL, None, "doc")["metadata"] == {"v": 2}


def test_without_skip_unchanged_an_identical_document_is_stored_again(service: KnowledgeService) -> None:
    service.store_document(LOCAL, None, ZEBRA, doc_label="doc")
    before = _chunk_ids(service, "default", "doc")

    result = service.store_document(LOCAL, None, ZEBRA, doc_label="doc")

    assert result.unchanged is False
    assert _chunk_ids(service, "default", "doc").isdisjoint(before)


# -- embedding model changes --------------------------------------------------------------------


@BOTH
def test_index_built_with_another_model_refuses_store_and_search_until_reindexed(
    open_service: OpenService,
) -> None:
    original = open_service()
    original.store_document(LOCAL, None, ZEBRA, title="Zebras", doc_label="zebra")
    original.store_document(LOCAL, None, QUBIT, title="Qubits", doc_label="qubit")
    original.store.close()

    switched = open_service(OtherEmbedder())

    with pytest.raises(EmbeddingMismatch) as refused:
        switched.search(LOCAL, None, "zebra")
    assert "all-MiniLM-L6-v2-onnx-qint8-dynamic" in refused.value.message and "other" in refused.value.message
    with pytest.raises(EmbeddingMismatch):
        switched.store_document(LOCAL, None, "New text.", doc_label="new")
    assert switched.get(LOCAL, None, "zebra")["content"] == ZEBRA  # reads need no embeddings

    assert switched.reindex() == 2

    assert switched.store.embedding_model() == ("other", 8)
    assert _labels(switched.search(LOCAL, None, "zebra stripes", top_k=1)) == ["zebra"]
    assert switched.store_document(LOCAL, None, "New text.", doc_label="new").chunks_stored == 1
    # Now the original model is the stranger.
    with pytest.raises(EmbeddingMismatch):
        open_service().search(LOCAL, None, "zebra")


def test_reindex_reports_progress_per_batch(open_service: OpenService) -> None:
    service = open_service(OtherEmbedder())
    for i in range(3):
        service.store_document(LOCAL, None, f"Document number {i}.", doc_label=f"d{i}")
    progress: list[int] = []

    assert service.reindex(progress.append) == 3
    assert sum(progress) == 3


def test_empty_index_adopts_the_configured_model(open_service: OpenService) -> None:
    first = open_service()
    assert first.store.embedding_model() is None  # the constructor reads and writes nothing
    first.search(LOCAL, None, "anything")  # the first call that embeds adopts the model
    assert first.store.embedding_model() == ("all-MiniLM-L6-v2-onnx-qint8-dynamic", 384)
    first.store.close()

    switched = open_service(OtherEmbedder())

    switched.store_document(LOCAL, None, ZEBRA, doc_label="zebra")
    assert switched.store.embedding_model() == ("other", 8)
    assert _labels(switched.search(LOCAL, None, "zebra")) == ["zebra"]


def test_concurrent_stores_and_searches_never_reload_the_vector_or_keyword_index(
    service: KnowledgeService,
) -> None:
    # Each store commits and then hands its chunks to the index (``WriteGate``): with one process
    # writing, a search racing a store must never find the index behind and reload it.
    for i in range(20):
        service.store_document(LOCAL, None, f"{ZEBRA} Herd {i}.", doc_label=f"herd-{i}")
    service.search(LOCAL, None, "zebra")
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    loads = count_loads(store.index, store.keywords)

    def work(worker: int) -> None:
        for i in range(8):
            if i % 2:
                service.store_document(
                    LOCAL, None, f"{QUBIT} Lab {worker}-{i}.", doc_label=f"lab-{worker}-{i}"
                )
            else:
                assert service.search(LOCAL, None, "zebra herd", top_k=5)["count"] == 5

    assert run_threads(work, 6) == []
    assert loads == []
    assert service.search(LOCAL, None, "qubits superposition lab", top_k=50)["count"] >= 24


def test_a_database_of_the_previous_version_migrates_and_its_documents_stay_searchable(
    tmp_path: Path, embedder: LocalEmbedder, open_service: OpenService
) -> None:
    from triptych.core.db import Database
    from triptych.metronix.store import MIGRATIONS

    # A knowledge base written before issue 21: FTS5 table, no body hashes.
    old = Database(tmp_path / "metronix.db", MIGRATIONS[:2])
    vector = embedder.embed([ZEBRA])[0]
    with old.transaction() as conn:
        conn.execute("INSERT INTO workspaces (id, created_at) VALUES ('default', '2026-01-01')")
        for label in ("zebra", "zebra-copy"):
            document = conn.execute(
                "INSERT INTO documents (workspace_id, doc_label, content, source_type, content_hash, created_at,"
                " updated_at) VALUES ('default', ?, ?, 'manual', ?, '2026-01-01', '2026-01-01')",
                (label, ZEBRA, label),
            ).lastrowid
            chunk = conn.execute(
                "INSERT INTO chunks (document_id, workspace_id, ordinal, text, embedding)"
                " VALUES (?, 'default', 0, ?, ?)",
                (document, ZEBRA, vector.tobytes()),
            ).lastrowid
            conn.execute(
                "INSERT INTO chunks_fts (rowid, part, title, body) VALUES (?, 'p', '', ?)", (chunk, ZEBRA)
            )
    old.close()

    service = open_service()

    (hit,) = service.search(LOCAL, None, "zebra stripes")["results"]
    assert hit["keyword_score"] and hit["duplicate_labels"] == ["zebra-copy"]
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    tables = {r[0] for r in store.db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "chunks_fts" not in tables
