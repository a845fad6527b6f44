"""Every thread Metronix starts ends with its owner: the surface's close stops the agent memory's and the
knowledge base's graph builds and loads, the warm-up, and the two services' query-embedding threads, and
only then closes the database; the PostgreSQL store's postings fill stops between workspaces (decision
0420, after 0390 did the knowledge store's loads and builds).

A graph build is held at a known step by wrapping ``VectorIndex._build_hnsw``, which then runs for real;
the graph threshold is lowered so 120 records get one. Each test counts the threads by name before and
after: none of the owner's may be left, and nothing may crash."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
from held_builds import hold_builds
from word_vectors import WordVectors

from triptych.core import search
from triptych.core.auth import local_principal
from triptych.core.config import load_settings
from triptych.core.pg import PgDatabase
from triptych.metronix import knowledge_model, pg_keywords
from triptych.metronix.entities import extract_entities
from triptych.metronix.memory import content_hash
from triptych.metronix.memory_model import MemoryRecord
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import NewDocument, utcnow
from triptych.metronix.surface import Metronix

THRESHOLD = 64
WS = "ws"
RECORDS = 120
WORDS = "zebra quantum river mountain violin copper orbit meadow lantern harbor falcon glacier".split()
# The threads Metronix's stores and services start (core/partitions.py names the loads and builds; kb-:
# the query embeddings, the postings' fill, the mirror's refreshes).
OWNED = ("load-", "hnsw-", "checkpoint-", "memory-index-warm", "memory-embed", "kb-")


@pytest.fixture(autouse=True)
def small_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", THRESHOLD)
    monkeypatch.setattr(knowledge_model, "BACKGROUND_LOAD_CHUNKS", THRESHOLD)


def _owned(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.name.startswith(OWNED))


def _texts(seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=6)) for _ in range(RECORDS)]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory whose metronix.db holds 120 one-chunk documents and 120 memory records in one
    workspace, closed."""
    embedder = WordVectors()
    metronix = Metronix.open(load_settings(data_dir=tmp_path / "data"), embedder)
    for d, text in enumerate(_texts(7)):
        metronix.knowledge.store_document(local_principal(), WS, text, doc_label=f"doc-{d}")
    store = metronix.memory.store
    store.set_embedding_model(embedder.name, embedder.dim)
    for text in _texts(8):
        now = utcnow()
        record = MemoryRecord(
            id=str(uuid.uuid4()), workspace_id=WS, agent_id="hermes", scope="per_agent", session_id=None,
            kind="fact", content=text, content_hash=content_hash(text), tags=[], importance_score=0.5,
            source_type="", metadata={}, status="active", created_at=now, updated_at=now,
        )  # fmt: skip
        store.insert(record, embedder.embed([text])[0], extract_entities(text), False)
    metronix.close()
    return tmp_path / "data"


def test_closing_the_surface_during_its_warm_up_and_graph_builds_leaves_no_thread(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = set(threading.enumerate())
    held = hold_builds(monkeypatch)
    metronix = Metronix.open(load_settings(data_dir=data_dir), WordVectors())
    metronix.start()  # the warm-up loads the memory's indexes: their graph starts building
    assert held.building.wait(30)
    # Both services' query embeddings run in their executors, beside the held build.
    found = metronix.knowledge.hybrid(WS, "zebra river", 3)
    recalled = metronix.memory.search(local_principal(), workspace_id=WS, query="zebra river", agent_id=None)
    assert found and recalled["results"]
    running = _owned(before)
    for prefix in ("hnsw-", "kb-query-embed", "memory-embed"):
        assert any(n.startswith(prefix) for n in running), running

    metronix.close()

    assert held.outcomes and set(held.outcomes) == {
        "Stopped"
    }  # every build that began ended at its first batch
    assert _owned(before) == []
    assert not metronix.memory.store.caches.index.resident(WS)  # forgotten: out of the memory budget


def test_a_surface_closed_at_any_stage_of_its_warm_up_never_crashes_or_leaves_a_thread(
    data_dir: Path,
) -> None:
    """Close right after the start, once the memory's indexes are in (their graph building), and once the
    warm-up has ended: the interleavings around each stage vary from round to round."""
    before = set(threading.enumerate())
    for round_ in range(9):
        metronix = Metronix.open(load_settings(data_dir=data_dir), WordVectors())
        metronix.start()
        if round_ % 3 >= 1:
            metronix.memory.store.caches.index.await_load(WS, timeout=30)
            metronix.memory.store.caches.index.wait_ready(WS, timeout=0 if round_ % 3 == 1 else 30)
        if round_ % 3 == 2 and metronix.warming is not None:
            metronix.warming.join(30)
        metronix.close()
        assert _owned(before) == [], f"round {round_}"


def _put(store: PostgresKnowledgeStore, workspace: str, count: int) -> None:
    embedder = WordVectors()
    texts = _texts(len(workspace))[:count]
    store.put_document(
        NewDocument(
            workspace, workspace, None, " ".join(texts), "doc", None, None, {}, workspace, texts,
            embedder.embed(texts),
        )
    )  # fmt: skip


@pytest.mark.engines("postgresql")
def test_closing_the_postgres_store_during_its_postings_fill_stops_it_between_workspaces(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workspaces written before their postings were stored: the close lands while the first fills.
    It finishes (one transaction), the second is left to the next start, and no thread is left."""
    before = set(threading.enumerate())
    store = PostgresKnowledgeStore(PgDatabase(database_url), WordVectors.dim, mirror=False)
    for workspace in ("ws-a", "ws-b"):
        _put(store, workspace, 8)
    with store.db.connection() as conn:
        conn.execute("UPDATE kb_chunks SET term_length = NULL")
    real = pg_keywords.fill
    filling = threading.Event()
    filled: list[str] = []

    def held(db: PgDatabase, workspace_id: str) -> bool:
        filling.set()
        store._stopping.wait(30)  # the close has begun: this workspace still fills, whole
        done = real(db, workspace_id)
        filled.append(workspace_id)
        return done

    monkeypatch.setattr(pg_keywords, "fill", held)
    store.warm()
    assert filling.wait(30)
    assert any(t.name == "kb-postings" for t in threading.enumerate())

    store.close()

    assert len(filled) == 1  # the second workspace waits for the next start
    assert [n for n in _owned(before) if n == "kb-postings"] == [] and _owned(before) == []
    reopened = PgDatabase(database_url)
    try:
        with reopened.connection() as conn:
            rows = conn.execute(
                "SELECT workspace_id, count(*) FILTER (WHERE term_length IS NULL) FROM kb_chunks"
                " GROUP BY workspace_id ORDER BY workspace_id"
            ).fetchall()
    finally:
        reopened.close()
    assert {str(w): int(n) for w, n in rows} == {filled[0]: 0, ({"ws-a", "ws-b"} - set(filled)).pop(): 8}


@pytest.mark.engines("postgresql")
def test_closing_the_postgres_store_during_its_mirror_s_graph_build_stops_the_build(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's mirror of a workspace above the (lowered) graph threshold builds its graph in the
    background after a refresh; the close lands while it builds: the build ends at its first batch and
    neither the refresh nor the build outlives the store."""
    before = set(threading.enumerate())
    held = hold_builds(monkeypatch)
    store = PostgresKnowledgeStore(PgDatabase(database_url), WordVectors.dim, mirror=True)
    _put(store, f"ws-mirror-{uuid.uuid4().hex[:8]}", 100)
    store.warm()  # refreshes every workspace's mirror in the background, which then builds its graph
    assert held.building.wait(30)

    store.close()

    assert held.outcomes == ["Stopped"]
    assert _owned(before) == []
