"""Vector graph builds held at a known step: ``VectorIndex._build_hnsw`` wrapped so each build waits until
its index is stopped (a close has begun), then runs for real and records how it ended ("Stopped" at its
first batch, or "built"). For the close tests of decisions 0390 and 0420."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from triptych.core.search import VectorIndex


@dataclass
class HeldBuilds:
    building: threading.Event = field(default_factory=threading.Event)  # a build has begun
    outcomes: list[str] = field(default_factory=list)  # how each build ended


def hold_builds(monkeypatch: pytest.MonkeyPatch) -> HeldBuilds:
    held = HeldBuilds()
    real = VectorIndex._build_hnsw

    def build(self: VectorIndex, ids: Sequence[int], matrix: np.ndarray) -> object:
        held.building.set()
        self.stopping.wait(30)  # the close has begun: the real build now stops at its first batch
        try:
            graph = real(self, ids, matrix)
        except Exception as exc:
            held.outcomes.append(type(exc).__name__)
            raise
        held.outcomes.append("built")
        return graph

    monkeypatch.setattr(VectorIndex, "_build_hnsw", build)
    return held
