"""Metergraph service fixtures: each engine in turn (SQLite in tmp_path, ClickHouse over the chdb endpoint)
and a fixed clock."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mg_support import NOW, open_engine  # noqa: E402

from triptych.metergraph.service import Metergraph  # noqa: E402
from triptych.metergraph.settings import load_metergraph_settings  # noqa: E402

ENGINES = ("sqlite", "clickhouse")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn: the service tests run against both."""
    return str(request.param)


@pytest.fixture
def mg(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[Metergraph]:
    service = open_engine(request, engine, tmp_path, max_rows=50)
    yield service
    service.close()


@pytest.fixture
def mg_sqlite(tmp_path: Path) -> Iterator[Metergraph]:
    """The embedded engine only (tests of its rollup tables and columnar projection)."""
    service = Metergraph.open(tmp_path, load_metergraph_settings(max_rows=50), clock=lambda: NOW)
    yield service
    service.close()
