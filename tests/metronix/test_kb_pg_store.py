"""The knowledge base's PostgreSQL store below the service: its vector search in one round trip."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from triptych.core.pg import PgDatabase
from triptych.metronix.pg_store import PgKnowledgeStore
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
