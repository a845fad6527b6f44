"""A tiny deterministic embedder for Hadron's search tests: letter frequencies of a-h, L2-normalised."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class LetterEmbedder:
    """Vectors without a model: texts sharing letters of a-h are near each other."""

    name = "letters"
    dim = 8

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "h":
                    out[i, ord(ch) - ord("a")] += 1
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out
