"""The bundled embedder's bulk lane: a document's many chunks run in their own session, one batch at a
time, so requests that embed a query or a memory never wait for them."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from triptych.core.embed import BULK_TEXTS, LocalEmbedder


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    local = LocalEmbedder(threads=1)
    local.warm_up()
    return local


def test_bulk_lane_gives_the_same_vectors_as_the_interactive_session(embedder: LocalEmbedder) -> None:
    texts = [
        f"paragraph {i} about graphs, memories and the servers that keep them" for i in range(BULK_TEXTS + 4)
    ]
    vectors = embedder.embed(texts)  # more than BULK_TEXTS: the bulk lane
    assert vectors.shape == (len(texts), embedder.dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    # Same batch, same model: the lanes differ only in their sessions' threads.
    batch = texts[:4]
    assert np.allclose(embedder._run_bulk(batch), embedder._run(batch), atol=1e-5)


def test_interactive_embedding_never_waits_for_the_bulk_lane(embedder: LocalEmbedder) -> None:
    finished = threading.Event()
    with embedder._bulk_lock:  # a document is being embedded
        worker = threading.Thread(
            target=lambda: (
                embedder.embed(["a memory worth keeping, long enough for two threads"] * 3),
                finished.set(),
            )
        )
        worker.start()
        worker.join(120)
        assert finished.is_set(), "an interactive embed waited for the bulk lane"


def test_bulk_lane_leaves_one_core_by_default() -> None:
    cores = os.cpu_count() or 1
    assert LocalEmbedder()._bulk_threads == max(1, cores - 1)
    assert LocalEmbedder(bulk_threads=3)._bulk_threads == 3
    assert LocalEmbedder(threads=1)._bulk_threads == 1
