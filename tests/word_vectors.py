"""A deterministic embedder for the knowledge base's tests: a seeded vector per word, summed and normalised,
so the tests get real vectors they can predict without loading a model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from triptych.core.embed import Matrix

DIM = 16


class WordVectors:
    """A deterministic embedder (a seeded vector per word, summed): real vectors the test can predict."""

    name = "words-16"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                seed = sum(word.encode()) * 7919 + len(word)
                out[row] += np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
            out[row, 0] += 1e-3
        normalised: Matrix = out / np.linalg.norm(out, axis=1, keepdims=True)
        return normalised
