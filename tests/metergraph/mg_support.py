"""Helpers shared by the Metergraph service tests (conftest puts this directory on sys.path)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from triptych.metergraph.keys import AgentPrincipal, AppPrincipal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def row(minutes_ago: float = 10, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ts": (NOW - timedelta(minutes=minutes_ago)).isoformat(),
        "route": "support",
        "provider": "openai",
        "model": "gpt-4o",
        "input_tokens": 1000,
        "output_tokens": 100,
        "latency_ms": 500,
        "status": "success",
    }
    base.update(fields)
    return base


def app(workspace: str = "w1") -> AppPrincipal:
    return AppPrincipal(workspace, "test-app")


def agent(
    workspace: str = "w1", role: str = "debug", environments: tuple[str, ...] | None = None
) -> AgentPrincipal:
    return AgentPrincipal(workspace, role, "test-key", environments)


# For service tests whose rules do not depend on the engine: the embedded engine only. What each engine
# stores and reads back is the store contract suite's (``store_contract/``), run on every engine.
embedded_only = pytest.mark.parametrize("engine", ["sqlite"])


def engine_settings(request: pytest.FixtureRequest, engine: str) -> dict[str, Any]:
    """The Metergraph settings selecting ``engine`` (ClickHouse: a fresh database on the chdb endpoint)."""
    if engine == "clickhouse":
        return {"clickhouse_url": request.getfixturevalue("clickhouse").database_url()}
    return {}


def open_engine(request: pytest.FixtureRequest, engine: str, path: Path, **settings: Any) -> Metergraph:
    """The Metergraph services on ``engine``: embedded SQLite, or ClickHouse (the chdb endpoint)."""
    settings.update(engine_settings(request, engine))
    return Metergraph.open(path, load_metergraph_settings(**settings), clock=lambda: NOW)
