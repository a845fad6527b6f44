"""The knowledge base under a memory budget (``TRIPTYCH_INDEX_MEMORY_MB``, core/partitions.MemoryBudget), on
every engine: a budget smaller than two workspaces keeps at most the budget resident and forgets the least
recently used workspace; a search of a forgotten workspace returns the same hits and says how it answered
(the engine itself on PostgreSQL, a load in the search on SQLite); the partition just installed is never
the one forgotten; a graph changed since it was saved is saved before it goes.

Each test gives the process an accountant of its own (the caches join the one in ``partitions.BUDGET``
when they are made), so other tests' stores never count against it."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from word_vectors import DIM, WordVectors

from triptych.core import partitions, search
from triptych.core.auth import local_principal
from triptych.core.partitions import MemoryBudget
from triptych.core.pg import PgDatabase
from triptych.core.search import VectorIndex
from triptych.core.vector_files import VectorFiles
from triptych.metronix import knowledge_model, pg_keywords
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import KnowledgeStore, SqliteKnowledgeStore, vectors_dir

pytestmark = pytest.mark.engines("sqlite", "postgresql")
LOCAL = local_principal()
WORDS = "zebra quantum river mountain violin copper orbit meadow lantern harbor falcon glacier".split()
QUERY = "zebra river lantern"


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> MemoryBudget:
    """This test's accountant, without a limit until the test sets one."""
    accountant = MemoryBudget()
    monkeypatch.setattr(partitions, "BUDGET", accountant)
    return accountant


@pytest.fixture
def service(tmp_path: Path, database_url: str | None, budget: MemoryBudget) -> Iterator[KnowledgeService]:
    store: KnowledgeStore
    if database_url is not None:
        store = PostgresKnowledgeStore(PgDatabase(database_url, max_size=4), DIM)
    else:
        store = SqliteKnowledgeStore(tmp_path / "metronix.db", DIM)
    yield KnowledgeService(store, WordVectors(), chunk_tokens=8)
    store.close()


def _fill(service: KnowledgeService, workspace: str, documents: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for d in range(documents):
        text = " ".join(" ".join(rng.choice(WORDS, size=6)) + "." for _ in range(3))
        service.store_document(LOCAL, workspace, text, title=f"{workspace} {d}", doc_label=f"doc-{d}")


def _search(service: KnowledgeService, workspace: str) -> tuple[list[tuple[str, float]], dict[str, str]]:
    found = service.search(LOCAL, workspace, QUERY, top_k=8)
    hits = [(str(r["doc_label"]), round(float(r["score"]), 4)) for r in found["results"]]
    return hits, found["retrieval"]


def _same(hits: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    """The same documents in the same order with the same scores (pgvector's float arithmetic may differ
    from numpy's in the last digits)."""
    assert [label for label, _ in hits] == [label for label, _ in expected]
    assert [score for _, score in hits] == pytest.approx([score for _, score in expected], abs=1e-3)


def _settled(service: KnowledgeService, workspace: str) -> None:
    """The background loads a search of ``workspace`` started are over (the search after it reads what
    they installed): server mode's vector copy, and the keyword index on every engine. They run in
    threads of their own, so waiting for one says nothing of the other: under load the keyword index
    may still be loading when the vectors are in, and a search then answers ``"keyword": "sql"``."""
    store: Any = service.store
    if isinstance(store, PostgresKnowledgeStore):
        assert store.wait_ready(workspace, timeout=60)
    store.keywords.await_load(workspace, timeout=60)


def _resident(store: Any, workspace: str) -> tuple[bool, bool]:
    return store.index.resident(workspace), store.keywords.resident(workspace)


def _bytes(budget: MemoryBudget, workspace: str) -> int:
    return sum(nbytes for _, key, nbytes in budget.entries() if key == workspace)


def test_a_budget_under_two_workspaces_forgets_the_least_recently_used_and_its_search_answers_alike(
    service: KnowledgeService, budget: MemoryBudget
) -> None:
    server = isinstance(service.store, PostgresKnowledgeStore)
    for workspace, seed in (("ws-a", 1), ("ws-b", 2)):
        _fill(service, workspace, 12, seed)
    before: dict[str, list[tuple[str, float]]] = {}
    for workspace in ("ws-a", "ws-b"):
        _search(service, workspace)
        _settled(service, workspace)
        before[workspace], how = _search(service, workspace)
        assert how == {"dense": "exact", "keyword": "bm25"} and before[workspace]
    sizes = {workspace: _bytes(budget, workspace) for workspace in before}
    assert all(sizes.values())
    budget.limit = max(sizes.values()) + 1  # room for one workspace, not for any part of a second

    _search(service, "ws-a")  # ws-b is now the least recently used
    budget.enforce(None)
    assert budget.total <= budget.limit
    assert _resident(service.store, "ws-a") == (True, True)
    assert _resident(service.store, "ws-b") == (False, False)
    assert budget.evictions == {"vectors": 1, "keywords": 1}

    hits, how = _search(service, "ws-b")  # not resident: answered all the same
    _same(hits, before["ws-b"])
    # Server mode: PostgreSQL answers (pgvector's index, BM25 over the stored postings); asked for once
    # while the budget is full, nothing is loaded. Embedded: a workspace this small loads in the search.
    server_how = {"dense": "pgvector", "keyword": "sql"}
    assert how == (server_how if server else {"dense": "exact", "keyword": "bm25"})
    if server:  # asked for again, more recently than ws-a was used: loaded in the background
        _same(_search(service, "ws-b")[0], before["ws-b"])
    _settled(service, "ws-b")
    hits, how = _search(service, "ws-b")
    _same(hits, before["ws-b"])
    assert how == {"dense": "exact", "keyword": "bm25"}
    assert budget.total <= budget.limit
    assert _resident(service.store, "ws-a") != (True, True)  # now the least recently used

    # A write to a forgotten workspace is found by its next search (the write touches no cache).
    service.store_document(LOCAL, "ws-a", "zebra zebra river lantern lantern", doc_label="new")
    assert _search(service, "ws-a")[0][0][0] == "new"


def test_the_partition_just_installed_is_never_the_one_forgotten(
    service: KnowledgeService, budget: MemoryBudget
) -> None:
    _fill(service, "ws-a", 8, 1)
    _search(service, "ws-a")
    _settled(service, "ws-a")
    store: Any = service.store
    generation = store.generation("ws-a")
    budget.limit = 1  # smaller than any partition
    store.index.clear()
    store.keywords.clear()

    store.keywords.sync("ws-a", generation)
    assert _resident(store, "ws-a") == (False, True)  # alone over the budget, and kept
    store.index.sync("ws-a", generation)
    assert _resident(store, "ws-a") == (True, False)  # the keywords went for it, not it
    assert budget.total == _bytes(budget, "ws-a") > budget.limit
    store.keywords.sync("ws-a", generation)
    assert _resident(store, "ws-a") == (False, True)
    assert budget.evictions == {"keywords": 1, "vectors": 1}


# Only the embedded engine saves graphs (server mode: pgvector's index is the saved one).
@pytest.mark.engines("sqlite")
def test_a_graph_changed_since_it_was_saved_is_saved_before_it_is_forgotten(
    service: KnowledgeService, budget: MemoryBudget, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 32)
    monkeypatch.setattr(knowledge_model, "BACKGROUND_LOAD_CHUNKS", 10_000)
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    _fill(service, "ws-a", 16, 1)
    _fill(service, "ws-b", 4, 2)
    _search(service, "ws-a")
    assert len(store.index._parts["ws-a"].ids) >= 32  # over the threshold: a graph is built
    assert store.index.wait_ready("ws-a", timeout=60)
    service.store_document(LOCAL, "ws-a", QUERY, doc_label="late")  # patched into the graph
    part = store.index._parts["ws-a"]
    assert part.hnsw is not None and part.saved != part.generation

    budget.limit = 1
    _search(service, "ws-b")  # ws-a's partitions go
    assert _resident(store, "ws-a") == (False, False)
    fingerprint = store._fingerprint("ws-a")
    assert fingerprint is not None
    assert VectorFiles(vectors_dir(tmp_path / "metronix.db")).load(
        search.partition_token("ws-a"), fingerprint
    )

    built: list[int] = []
    real = VectorIndex._build_hnsw

    def counted(self: VectorIndex, ids: Sequence[int], matrix: np.ndarray) -> object:
        built.append(len(ids))
        return real(self, ids, matrix)

    monkeypatch.setattr(VectorIndex, "_build_hnsw", counted)
    hits, how = _search(service, "ws-a")
    assert how["dense"] == "hnsw" and built == []  # the saved graph came back, none was built
    assert hits[0][0] == "late"  # the write made after the last save is in what came back


# Only the embedded engine saves keyword indexes (server mode ranks a forgotten workspace in SQL, 0191).
@pytest.mark.engines("sqlite")
def test_a_keyword_partition_changed_since_it_was_saved_is_saved_when_forgotten_and_read_back(
    service: KnowledgeService, budget: MemoryBudget, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    _fill(service, "ws-a", 12, 1)
    _fill(service, "ws-b", 4, 2)
    _search(service, "ws-a")  # built from the chunks, and saved
    service.store_document(LOCAL, "ws-a", QUERY, doc_label="late")  # applied in place: unsaved
    part = store.keywords._parts["ws-a"]
    assert part.saved != part.generation
    before, _ = _search(service, "ws-a")

    budget.limit = 1
    _search(service, "ws-b")  # ws-a's partitions go; the keyword partition is saved on its way out
    assert _resident(store, "ws-a") == (False, False)
    built: list[str] = []
    real = store.keywords._loader
    monkeypatch.setattr(store.keywords, "_loader", lambda key: (built.append(key), real(key))[1])
    hits, how = _search(service, "ws-a")
    assert how["keyword"] == "bm25" and built == []  # read back from the file, not built
    assert hits == before and hits[0][0] == "late"


# Only the embedded engine saves vector columns (server mode: PostgreSQL answers for a forgotten workspace).
@pytest.mark.engines("sqlite")
def test_a_forgotten_partition_without_a_graph_is_saved_as_columns_and_read_back_without_the_database(
    service: KnowledgeService, budget: MemoryBudget, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    _fill(service, "ws-a", 12, 1)
    _fill(service, "ws-b", 4, 2)
    before, how = _search(service, "ws-a")  # read from the database: nothing saved yet
    assert how["dense"] == "exact"
    files = VectorFiles(vectors_dir(tmp_path / "metronix.db"))
    token = search.partition_token("ws-a")
    assert not files.columns_path(token).exists()

    budget.limit = 1
    _search(service, "ws-b")  # ws-a's partitions go; the vectors are saved as columns on their way out
    assert _resident(store, "ws-a") == (False, False)
    assert files.columns_path(token).exists() and not files.path(token).exists()
    read: list[str] = []
    real = store.index._loader
    monkeypatch.setattr(store.index, "_loader", lambda key: (read.append(key), real(key))[1])
    hits, how = _search(service, "ws-a")
    assert how == {"dense": "exact", "keyword": "bm25"} and read == []  # from the file, not the database
    assert hits == before

    # A write makes the file stale: the next load reads the database (and the next eviction saves again).
    service.store_document(LOCAL, "ws-a", QUERY, doc_label="late")
    store.index.forget("ws-a")
    hits, _ = _search(service, "ws-a")
    assert read == ["ws-a"] and hits[0][0] == "late"


@pytest.mark.engines("sqlite")
@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_saved_files_read_before_then_damaged_in_place_are_refused_and_the_database_read(
    service: KnowledgeService,
    budget: MemoryBudget,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    damage: str,
) -> None:
    """A saved file's checks are skipped only for the very file checked before (decision 0370): one changed
    or cut short in place since is checked again, refused, and the partition read from the database."""
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    _fill(service, "ws-a", 12, 1)
    _fill(service, "ws-b", 4, 2)
    before, _ = _search(service, "ws-a")
    budget.limit = 1
    _search(service, "ws-b")  # ws-a goes, its vectors saved as columns
    folder = vectors_dir(tmp_path / "metronix.db")
    token = search.partition_token("ws-a")
    paths = [folder / f"{token}.columns", folder / f"{token}.keywords"]
    for path in paths:  # in the past, so a change in place moves it even where timestamps are coarse
        os.utime(path, ns=(10**18, 10**18))
    assert _search(service, "ws-a")[0] == before  # read back from both files: now known good
    _search(service, "ws-b")
    assert _resident(store, "ws-a") == (False, False)
    for path in paths:
        if damage == "truncated":
            os.truncate(path, path.stat().st_size - 8)
        else:
            with open(path, "r+b") as out:
                out.seek(-9, os.SEEK_END)
                byte = out.read(1)
                out.seek(-9, os.SEEK_END)
                out.write(bytes([byte[0] ^ 0x55]))
    read: list[str] = []
    real_vectors, real_keywords = store.index._loader, store.keywords._loader
    monkeypatch.setattr(store.index, "_loader", lambda key: (read.append("vectors"), real_vectors(key))[1])
    monkeypatch.setattr(
        store.keywords, "_loader", lambda key: (read.append("keywords"), real_keywords(key))[1]
    )
    hits, how = _search(service, "ws-a")
    assert sorted(read) == ["keywords", "vectors"] and how == {"dense": "exact", "keyword": "bm25"}
    assert hits == before


@pytest.mark.engines("sqlite")
def test_a_partition_read_back_from_its_files_takes_writes_and_outlives_them(
    service: KnowledgeService, budget: MemoryBudget, tmp_path: Path
) -> None:
    """Mapped files are read-only: a write to a partition read back from them goes into memory of its own,
    and the partition keeps serving when its files are replaced or removed."""
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    _fill(service, "ws-a", 12, 1)
    _fill(service, "ws-b", 4, 2)
    budget.limit = 1
    _search(service, "ws-a")
    _search(service, "ws-b")  # ws-a goes, its vectors saved as columns
    budget.limit = None
    before, _ = _search(service, "ws-a")  # ws-a from its files, and kept
    assert _resident(store, "ws-a") == (True, True)
    VectorFiles(vectors_dir(tmp_path / "metronix.db")).remove(search.partition_token("ws-a"))
    assert _search(service, "ws-a")[0] == before
    service.store_document(LOCAL, "ws-a", QUERY, doc_label="late")
    hits, how = _search(service, "ws-a")
    assert hits[0][0] == "late" and how == {"dense": "exact", "keyword": "bm25"}


def _two_workspaces(service: KnowledgeService) -> PostgresKnowledgeStore:
    store = service.store
    assert isinstance(store, PostgresKnowledgeStore)
    _fill(service, "ws-a", 12, 1)
    _fill(service, "ws-b", 12, 2)
    return store


@pytest.mark.engines("postgresql")
def test_postgresql_ranks_a_workspace_by_bm25_as_the_in_process_index_does(
    service: KnowledgeService, database_url: str
) -> None:
    store = _two_workspaces(service)  # ws-b's postings never count in ws-a's ranking
    service.store_document(LOCAL, "ws-a", "A zebra, zebras and zebra-striped lanterns.", doc_label="doc-3")
    service.delete_document(LOCAL, "ws-a", "doc-5")
    queries = [QUERY, "falcon", "glacier harbor meadow orbit", "zebras striped", "the", "absent words"]

    def compare() -> None:
        generation = store.generation("ws-a")
        for query in queries:
            expected = store.keywords.search("ws-a", generation, query, 10)
            found = pg_keywords.rank(store.db, "ws-a", query, 10)
            assert [i for i, _ in found] == [i for i, _ in expected], query
            assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-5), query

    compare()
    # A workspace written before the postings existed (or copied in by ``triptych migrate``): searched
    # in process until it is filled, then by SQL, alike.
    with store.db.transaction() as conn:
        conn.execute("DELETE FROM kb_chunk_terms WHERE workspace_id = 'ws-a'")
        conn.execute("UPDATE kb_chunks SET term_length = NULL WHERE workspace_id = 'ws-a'")
    upgraded = PostgresKnowledgeStore(PgDatabase(database_url, max_size=2), DIM)  # a worker after it
    try:
        generation = upgraded.generation("ws-a")
        assert upgraded.keyword_candidates("ws-a", QUERY, 10, generation).method == "bm25"
        assert pg_keywords.fill(store.db, "ws-a") and not pg_keywords.fill(store.db, "ws-a")
        compare()
        upgraded.keywords.clear()
        assert upgraded.keyword_candidates("ws-a", QUERY, 10, generation).method == "sql"
    finally:
        upgraded.close()


@pytest.mark.engines("postgresql")
def test_a_workspace_searched_once_is_answered_by_postgresql_and_evicts_nothing(
    service: KnowledgeService, budget: MemoryBudget
) -> None:
    store = _two_workspaces(service)
    expected: list[tuple[str, float]] = []
    for workspace in ("ws-b", "ws-a"):  # ws-a used last
        _search(service, workspace)
        _settled(service, workspace)
        expected = expected or _search(service, workspace)[0]
    budget.limit = max(_bytes(budget, "ws-a"), _bytes(budget, "ws-b")) + 1
    budget.enforce(None)  # ws-b, the least recently used, goes
    assert _resident(store, "ws-a") == (True, True) and _resident(store, "ws-b") == (False, False)

    # Asked for once, while the budget is full: PostgreSQL answers, nothing is loaded or forgotten.
    hits, how = _search(service, "ws-b")
    _same(hits, expected)
    assert how == {"dense": "pgvector", "keyword": "sql"}
    _settled(service, "ws-b")
    assert _resident(store, "ws-b") == (False, False) and _resident(store, "ws-a") == (True, True)
    # Asked for again, more recently than ws-a was used: it is the hotter one now, and is loaded.
    _search(service, "ws-b")
    _settled(service, "ws-b")
    assert _resident(store, "ws-b") == (True, True) and _resident(store, "ws-a") == (False, False)
    hits, how = _search(service, "ws-b")
    _same(hits, expected)
    assert how == {"dense": "exact", "keyword": "bm25"}
