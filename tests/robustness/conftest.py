"""One attacked server for the whole robustness suite, with secrets planted out of the attackers' reach."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from clickhouse_endpoint import ClickHouseEndpoint
from harness import token
from postgres import PostgresCluster
from robustness.target import SECRETS, ClientThread, Target, error_code, result_text, start_target

# Every test on the attacked server runs on each engine: the embedded one (SQLite files), and server
# mode (Metronix and Hadron on PostgreSQL, Metergraph's calls on ClickHouse), where a NUL byte had earned
# 31 internal errors that the embedded engine never showed.
TARGET_ENGINES = ("embedded", "server")


def _target(tmp_path_factory: pytest.TempPathFactory, name: str, engines: dict[str, str]) -> Iterator[Target]:
    t = start_target(tmp_path_factory.mktemp(f"robust-{name}"), engines)
    try:
        _plant_secrets(t)
        yield t
    finally:
        t.server.stop()


# One target per engine for the session, started on first use: a fixture parametrized at package scope
# was torn down and started again at every switch of engine, and under ``--dist loadfile`` a worker
# switches at every file (docs/decisions/0300-shared-test-servers.md).
@pytest.fixture(scope="session")
def target_embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from _target(tmp_path_factory, "embedded", {})


@pytest.fixture(scope="session")
def target_server(
    tmp_path_factory: pytest.TempPathFactory, postgres: PostgresCluster, clickhouse: ClickHouseEndpoint
) -> Iterator[Target]:
    engines = {
        "TRIPTYCH_DATABASE_URL": postgres.create_database("robust"),
        "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": clickhouse.database_url(),
    }
    yield from _target(tmp_path_factory, "server", engines)


@pytest.fixture(scope="module", params=TARGET_ENGINES)
def target(request: pytest.FixtureRequest) -> Target:
    """The attacked server on each engine in turn."""
    t: Target = request.getfixturevalue(f"target_{request.param}")
    return t


def _plant_secrets(t: Target) -> None:
    globex, ws_b, mg_b = SECRETS
    dave = ClientThread(t.url + "/hadron/mcp", {"Authorization": f"Bearer {token(user='dave')}"})
    try:
        result = dave.call(
            "hadron_create_node",
            {"loc": "hrn:node:globex.com:plans:secret", "name": "Plan", "content": f"the plan: {globex}"},
        )
        assert not result.is_error, result_text(result)
    finally:
        dave.close()
    bob = ClientThread(t.url + "/mcp", {"Authorization": f"Bearer {t.other_token}"})
    try:
        for tool, args in (
            ("memory_store", {"content": f"bob's secret {ws_b}", "agent_id": "bot", "workspace_id": "ws-b"}),
            (
                "metronix_store",
                {"content": f"a document: {ws_b}", "doc_label": "secret", "workspace_id": "ws-b"},
            ),
        ):
            result = bob.call(tool, args)
            assert error_code(result) is None, result_text(result)
    finally:
        bob.close()
    row = {"ts": datetime.now(UTC).isoformat(), "route": mg_b, "provider": "openai", "model": "gpt-4o",
           "input_tokens": 10, "output_tokens": 5, "latency_ms": 100, "metadata": {"note": mg_b}}  # fmt: skip
    response = httpx.post(
        t.url + "/v1/ingest",
        json={"schema_version": 1, "rows": [row]},
        headers={"Authorization": f"Bearer {t.other_app_token}"},
        timeout=60,
    )
    assert response.status_code == 202, response.text
