"""Closing the embedded knowledge store while its background work runs: a vector or keyword load reading
the database, a graph build. Closing a SQLite connection under a query another thread runs on it crashes
the interpreter (a worker died of SIGSEGV right after a test that left a load running), so ``close`` stops
that work first: no crash, nothing installed or saved by it, and no thread of the store left behind
(decision 0390).

The graph threshold is lowered so the 120 chunks get an HNSW graph; the loads and the build are held at a
known step by wrapping the store's own loaders and ``_build_hnsw``, which then run for real."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from word_vectors import DIM, WordVectors

from triptych.core import search
from triptych.core.auth import local_principal
from triptych.core.search import VectorIndex
from triptych.metronix import knowledge_model
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.store import SqliteKnowledgeStore, vectors_dir

THRESHOLD = 64
WS = "ws"
CHUNKS = 120
WORDS = "zebra quantum river mountain violin copper orbit meadow lantern harbor falcon glacier".split()
STORE_THREADS = ("load-", "hnsw-", "checkpoint-")  # the threads a knowledge store starts


@pytest.fixture(autouse=True)
def small_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", THRESHOLD)
    monkeypatch.setattr(knowledge_model, "BACKGROUND_LOAD_CHUNKS", THRESHOLD)


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A metronix.db holding 120 one-chunk documents in one workspace, closed (no index saved beside it);
    each test opens copies of it."""
    path = tmp_path_factory.mktemp("filled") / "metronix.db"
    service = KnowledgeService(SqliteKnowledgeStore(path, DIM), WordVectors())
    rng = np.random.default_rng(7)
    for d in range(CHUNKS):
        text = " ".join(rng.choice(WORDS, size=6))
        service.store_document(local_principal(), WS, text, doc_label=f"doc-{d}")
    service.store.close()
    return path


Open = Callable[[], SqliteKnowledgeStore]


@pytest.fixture
def open_store(filled: Path, tmp_path: Path) -> Iterator[Open]:
    """Each call opens a store over a fresh copy of ``filled``; any left open is closed at the end."""
    opened: list[SqliteKnowledgeStore] = []

    def open_() -> SqliteKnowledgeStore:
        copy = tmp_path / f"copy-{len(opened)}" / "metronix.db"
        copy.parent.mkdir()
        shutil.copy(filled, copy)
        store = SqliteKnowledgeStore(copy, DIM)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def _new_store_threads(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in threading.enumerate() if t not in before and t.name.startswith(STORE_THREADS)]


def _connections(store: SqliteKnowledgeStore, monkeypatch: pytest.MonkeyPatch) -> list[sqlite3.Connection]:
    """The store's SQLite connections: those open now and every one its threads open from now on."""
    made = [conn for _, conn in store.db._all]
    connect = store.db._connect

    def recorded() -> sqlite3.Connection:
        conn = connect()
        made.append(conn)
        return conn

    monkeypatch.setattr(store.db, "_connect", recorded)
    return made


def _open(connections: Sequence[sqlite3.Connection]) -> int:
    """How many of ``connections`` still answer a query."""
    still = 0
    for conn in connections:
        try:
            conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:
            continue
        still += 1
    return still


def test_closing_during_the_loads_waits_for_their_reads_installs_nothing_and_leaves_no_thread(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    store = open_store()
    real_vectors, real_keywords = store._load_vectors, store._load_keyword_documents
    read: dict[str, int] = {}
    started = threading.Barrier(3)

    def vectors(key: str) -> tuple[list[int], np.ndarray]:
        started.wait(30)
        store.index.stopping.wait(30)  # held until the close has begun: the read below runs under it
        ids, matrix = real_vectors(key)
        read["vectors"] = len(ids)
        return ids, matrix

    def keywords(key: str) -> list[object]:
        started.wait(30)
        store.keywords.stopping.wait(30)
        documents = list(real_keywords(key))
        read["keywords"] = len(documents)
        return documents

    monkeypatch.setattr(store.index, "_loader", vectors)
    monkeypatch.setattr(store.keywords, "_loader", keywords)
    connections = _connections(store, monkeypatch)
    generation = store.generation(WS)
    store.index.load_in_background(WS, generation)
    store.keywords.load_in_background(WS, generation)
    started.wait(30)  # both loads are inside their loaders, before their database reads

    store.close()

    assert read == {"vectors": CHUNKS, "keywords": CHUNKS}  # both reads ran whole, on an open database
    assert not store.index.resident(WS) and not store.keywords.resident(WS)  # and were not installed
    assert not store.index.loading(WS) and not store.keywords.loading(WS)
    assert _new_store_threads(before) == []
    assert len(connections) >= 3 and _open(connections) == 0  # every connection closed, the loads' too


def test_closing_during_a_graph_build_stops_it_and_saves_no_graph(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    store = open_store()
    real = VectorIndex._build_hnsw
    building = threading.Event()
    outcomes: list[str] = []

    def held(self: VectorIndex, ids: Sequence[int], matrix: np.ndarray) -> object:
        building.set()
        self.stopping.wait(30)  # the close has begun: the real build now stops at its first batch
        try:
            graph = real(self, ids, matrix)
        except Exception as exc:
            outcomes.append(type(exc).__name__)
            raise
        outcomes.append("built")
        return graph

    monkeypatch.setattr(VectorIndex, "_build_hnsw", held)
    store.warm()  # loads both indexes; the vectors' graph starts building in the background
    assert building.wait(30)

    store.close()

    assert outcomes == ["Stopped"]
    assert list(vectors_dir(store.db.path).glob("*.vectors")) == []  # no graph saved, half-built or not
    assert _new_store_threads(before) == []


def test_a_store_closed_at_every_stage_of_its_loads_and_build_never_crashes_or_leaves_a_thread(
    open_store: Open, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Close right after the loads start, after the vectors are in (their graph building), and after both
    are in: the interleavings around each stage vary from round to round."""
    before = set(threading.enumerate())
    for round_ in range(18):
        store = open_store()
        connections = _connections(store, monkeypatch)
        generation = store.generation(WS)
        store.index.load_in_background(WS, generation)
        store.keywords.load_in_background(WS, generation)
        if round_ % 3 >= 1:
            store.index.await_load(WS, timeout=30)
        if round_ % 3 == 2:
            store.keywords.await_load(WS, timeout=30)
        store.close()
        assert _new_store_threads(before) == [], f"round {round_}"
        assert _open(connections) == 0, f"round {round_}"
