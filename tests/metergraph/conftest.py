"""Metergraph service fixtures: a real SQLite store in tmp_path and a fixed clock."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mg_support import NOW  # noqa: E402

from triptych.metergraph.service import Metergraph  # noqa: E402
from triptych.metergraph.settings import load_metergraph_settings  # noqa: E402


@pytest.fixture
def mg(tmp_path: Path) -> Iterator[Metergraph]:
    service = Metergraph.open(tmp_path, load_metergraph_settings(max_rows=50), clock=lambda: NOW)
    yield service
    service.close()
