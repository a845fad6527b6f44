"""Server mode reads back the indexes the memory budget forgot from the files it saved (metronix/pg_saved.py,
decision 0236): a forgotten workspace whose files match the database is answered in process, as on the
embedded engine, without reading its rows; another worker's write makes the files stale, and PostgreSQL
answers with the write in it; the files of one database are never read for another; a start's warm-up
loads one workspace after another while the budget has room, and no further."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from word_vectors import DIM, WordVectors

from triptych.core import partitions, search
from triptych.core.auth import local_principal
from triptych.core.keyword_files import KeywordFiles
from triptych.core.partitions import MemoryBudget
from triptych.core.pg import PgDatabase
from triptych.core.vector_files import VectorFiles
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.memory_store import PostgresMemoryStore
from triptych.metronix.migrate import migrate_to_embedded
from triptych.metronix.pg_store import PostgresKnowledgeStore

pytestmark = pytest.mark.engines("postgresql")
LOCAL = local_principal()
WORDS = "zebra quantum river mountain violin copper orbit meadow lantern harbor falcon glacier".split()
QUERY = "zebra river lantern"
IN_PROCESS = {"dense": "exact", "keyword": "bm25"}
ENGINE = {"dense": "pgvector", "keyword": "sql"}


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> MemoryBudget:
    accountant = MemoryBudget()
    monkeypatch.setattr(partitions, "BUDGET", accountant)
    return accountant


def _open(database_url: str, saved: Path) -> KnowledgeService:
    store = PostgresKnowledgeStore(PgDatabase(database_url, max_size=4), DIM, saved=saved)
    return KnowledgeService(store, WordVectors(), chunk_tokens=8)


@pytest.fixture
def service(database_url: str, tmp_path: Path, budget: MemoryBudget) -> Iterator[KnowledgeService]:
    opened = _open(database_url, tmp_path / "metronix-vectors")
    yield opened
    opened.store.close()


def _fill(service: KnowledgeService, workspace: str, documents: int) -> None:
    for d in range(documents):
        words = [WORDS[(d * 7 + i * 5 + len(workspace)) % len(WORDS)] for i in range(18)]
        service.store_document(
            LOCAL, workspace, " ".join(words), title=f"{workspace} {d}", doc_label=f"doc-{d}"
        )


def _search(service: KnowledgeService, workspace: str) -> tuple[list[str], dict[str, str]]:
    found = service.search(LOCAL, workspace, QUERY, top_k=8)
    return [str(r["doc_label"]) for r in found["results"]], found["retrieval"]


def _loaded(service: KnowledgeService, workspace: str) -> list[str]:
    """Search until the workspace is resident (the second ask admits its load), and its hits."""
    store: Any = service.store
    for _ in range(3):
        hits, how = _search(service, workspace)
        assert store.wait_ready(workspace, timeout=60)
        store.keywords.await_load(workspace, timeout=60)
    hits, how = _search(service, workspace)
    assert how == IN_PROCESS
    return hits


def _reads(store: PostgresKnowledgeStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of a workspace's rows into the worker's indexes, recorded."""
    read: list[str] = []
    copy, documents = store.vectors.copy, store.keywords._loader
    monkeypatch.setattr(
        store.vectors, "copy", lambda conn, ws, *a, **k: (read.append(ws), copy(conn, ws, *a, **k))[1]
    )
    monkeypatch.setattr(store.keywords, "_loader", lambda ws: (read.append(ws), documents(ws))[1])
    return read


def _size(budget: MemoryBudget, workspace: str) -> int:
    return sum(nbytes for _, key, nbytes in budget.entries() if key == workspace)


def _forget_all_but(budget: MemoryBudget, keep: str) -> None:
    budget.limit = _size(budget, keep) + 1
    budget.enforce(None)


def _two_loaded(service: KnowledgeService, documents: int) -> tuple[PostgresKnowledgeStore, list[str]]:
    """ws-a and ws-b filled and loaded in that order; the store, and ws-a's hits in process."""
    store = service.store
    assert isinstance(store, PostgresKnowledgeStore)
    _fill(service, "ws-a", documents)
    _fill(service, "ws-b", documents)
    expected = _loaded(service, "ws-a")
    _loaded(service, "ws-b")
    return store, expected


def _write_elsewhere(store: PostgresKnowledgeStore, database_url: str, tmp_path: Path) -> None:
    """ws-a forgotten by this worker, then written to by another worker of this machine (same files)."""
    store.index.forget("ws-a")
    store.keywords.forget("ws-a")
    other = _open(database_url, tmp_path / "metronix-vectors")
    try:
        other.store_document(LOCAL, "ws-a", "zebra zebra river lantern lantern", doc_label="new")
    finally:
        other.store.close()


def test_a_forgotten_workspace_is_read_back_from_its_saved_files_and_a_write_elsewhere_makes_them_stale(
    service: KnowledgeService,
    budget: MemoryBudget,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, expected = _two_loaded(service, 10)  # ws-a is the least recently used now
    token = search.partition_token("ws-a")
    [files] = (tmp_path / "metronix-vectors").iterdir()  # one database, one directory
    assert files.name.startswith("pg-")
    # Saved when loaded, off the request path: its eviction writes nothing in the search that causes it.
    assert VectorFiles(files).columns_path(token).exists() and KeywordFiles(files).path(token).exists()

    size = _size(budget, "ws-a")
    _forget_all_but(budget, "ws-b")
    assert not store.index.resident("ws-a") and not store.keywords.resident("ws-a")
    read = _reads(store, monkeypatch)
    hits, how = _search(service, "ws-a")
    assert (hits, how) == (expected, IN_PROCESS) and read == []  # mapped back, no row of it read

    # Another worker (of this machine: the same files) writes to ws-a: the files no longer match.
    _write_elsewhere(store, database_url, tmp_path)
    hits, how = _search(service, "ws-a")
    assert how == ENGINE and hits[0] == "new"  # PostgreSQL answers, with the write in it
    # Asked for again, with room for it now: loaded from the database, write and all.
    budget.limit = 3 * size
    assert _loaded(service, "ws-a")[0] == "new"


def test_the_saved_files_of_one_database_are_never_read_for_another(
    service: KnowledgeService, budget: MemoryBudget, database_url: str, tmp_path: Path
) -> None:
    store, _ = _two_loaded(service, 6)
    store.close()
    # The same data directory pointed at another database whose workspace looks alike (same generation,
    # count and ids): here the same database under another id, as a restore into a new cluster gives.
    db = PgDatabase(database_url, max_size=1)
    try:
        with db.transaction() as conn:
            conn.execute("UPDATE kb_meta SET value = 'another' WHERE key = 'instance'")
    finally:
        db.close()
    reopened = _open(database_url, tmp_path / "metronix-vectors")
    try:
        hits, how = _search(reopened, "ws-a")
        assert how == ENGINE  # not read back from the other database's files
        _loaded(reopened, "ws-a")  # saved under this database's own id
        assert (tmp_path / "metronix-vectors" / "pg-another").is_dir()
    finally:
        reopened.store.close()


def test_a_start_warms_workspaces_one_after_another_while_the_budget_has_room(
    service: KnowledgeService, budget: MemoryBudget, database_url: str, tmp_path: Path
) -> None:
    for workspace in ("ws-a", "ws-b", "ws-c"):
        _fill(service, workspace, 6)
        _loaded(service, workspace)
    one = max(_size(budget, ws) for ws in ("ws-a", "ws-b", "ws-c"))
    service.store.close()
    fresh = MemoryBudget(int(1.5 * one))  # room for one workspace
    partitions.BUDGET = fresh  # the fixture puts the test's accountant back
    restarted = _open(database_url, tmp_path / "metronix-vectors")
    try:
        restarted.store.warm()
        resident = [ws for ws in ("ws-a", "ws-b", "ws-c") if restarted.store.index.resident(ws)]  # type: ignore[attr-defined]
        assert resident == ["ws-a"] and fresh.evictions == {}  # loaded in order until full, none forgotten
        assert _search(restarted, "ws-a")[1] == IN_PROCESS
    finally:
        restarted.store.close()


def test_a_load_at_a_newer_generation_never_takes_the_saved_files_of_an_older_one(
    service: KnowledgeService, budget: MemoryBudget, database_url: str, tmp_path: Path
) -> None:
    """The fingerprint a search read is kept for its generation: a load asked for a newer one (a start's
    warm-up that read the workspaces after another worker's write) must not take files of the older
    generation for the newer one, or the index serves without that write for as long as it stays."""
    store = service.store
    assert isinstance(store, PostgresKnowledgeStore)
    _fill(service, "ws-a", 6)
    _loaded(service, "ws-a")  # saved at this generation
    store.index.forget("ws-a")
    store.keywords.forget("ws-a")
    assert _search(service, "ws-a")[1] == IN_PROCESS  # read back: the fingerprint of this generation kept
    _write_elsewhere(store, database_url, tmp_path)  # forgotten by the budget again, then written to
    generation = store._generation("ws-a")
    with store.db.connection() as conn:
        new = {
            int(r[0])
            for r in conn.execute(
                "SELECT c.id FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                " WHERE d.doc_label = 'new'"
            ).fetchall()
        }
    store.warm()  # reads the generation after the write
    store.index.preload("ws-a", generation)
    cached = store.index.cached("ws-a")
    assert cached is not None
    assert cached[0] < generation or new <= set(cached[1])  # never labelled newer than its rows
    found = store.keyword_candidates("ws-a", "zebra", 50, generation)
    assert found.method == "sql" or new <= {chunk for chunk, _ in found.hits}


def test_a_mirror_read_back_from_before_a_re_embedding_is_never_caught_up_by_difference(
    service: KnowledgeService, budget: MemoryBudget, database_url: str, tmp_path: Path
) -> None:
    """A search that read its generation before another worker's re-embedding committed may map back
    files of that generation (saved later by a third party: here another worker's eviction). The mirror
    then holds vectors from before the re-embedding, and its next catch-up must load it whole: by
    difference (no id changed) it would serve the old vectors as current."""
    store = service.store
    assert isinstance(store, PostgresKnowledgeStore)
    _fill(service, "ws-a", 6)
    other = _open(database_url, tmp_path / "metronix-vectors")
    try:
        _loaded(other, "ws-a")
        other.store_document(LOCAL, "ws-a", "zebra orbit meadow", doc_label="late")  # unsaved there
        _loaded(service, "ws-a")  # loaded whole here, before the re-embedding
        before = store._generation("ws-a")
        with store.db.connection() as conn:
            ids, matrix = store.vectors.copy(conn, "ws-a", after=0)
        query = matrix[0]
        other.store.replace_embeddings([(i, -vector) for i, vector in zip(ids, matrix, strict=True)])
        after = store._generation("ws-a")
        store.dense_candidates("ws-a", query, 3, after)  # caught up: loaded whole, its files saved
        assert store.mirror.wait_ready("ws-a", timeout=60)
        budget.limit = 1
        budget.enforce(None)  # both workers forget ws-a; the other saves its copy, of ``before``
    finally:
        other.store.close()
    budget.limit = None
    stale = store.dense_candidates("ws-a", query, 3, before)  # read its generation before the re-embedding
    assert stale.method in ("exact", "pgvector")
    store.dense_candidates("ws-a", query, 3, after)
    assert store.mirror.wait_ready("ws-a", timeout=60)
    found = store.dense_candidates("ws-a", query, 3, after)
    assert found.method == "pgvector" or [c for c, _ in found.hits] == [
        c for c, _ in store.vectors.search("ws-a", query, 3)
    ]


def test_a_copy_to_the_embedded_engine_leaves_the_database_id_behind(
    service: KnowledgeService, tmp_path: Path, database_url: str
) -> None:
    """``triptych migrate --from`` copies ``kb_meta`` but not ``instance``: taken back to PostgreSQL the
    copy is another database, and its workers' files are never mistaken for the first one's."""
    _fill(service, "ws-a", 2)
    db = PgDatabase(database_url, max_size=1)
    try:
        PostgresMemoryStore(db, DIM).close()  # agent memory's tables, which a copy reads too
        with db.connection() as conn:
            assert conn.execute("SELECT value FROM kb_meta WHERE key = 'instance'").fetchone() is not None
    finally:
        db.close()
    copied = migrate_to_embedded(database_url, tmp_path / "embedded", lambda table, total: lambda n: None)
    assert copied.rows["documents"] == 2
    with sqlite3.connect(tmp_path / "embedded" / "metronix.db") as db:
        keys = {str(r[0]) for r in db.execute("SELECT key FROM meta")}
    assert "instance" not in keys and "embedding_model" in keys
