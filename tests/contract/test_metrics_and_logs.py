"""Watching a real server: ``GET /metrics`` after a mixed run, read with Prometheus' own parser; the request
id on every response; JSON log lines that carry it (issue 31, items 2 and 3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import ServerProcess, mcp_session, metergraph_key
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "metrics-token-for-the-tests"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition by (name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(parsed: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return parsed.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with JSON logs, a metrics token, and request lines kept at the default level."""
    env = {"TRIPTYCH_AUTH_ENABLED": "false", "TRIPTYCH_LOG_FORMAT": "json", "TRIPTYCH_METRICS_TOKEN": TOKEN}
    server = ServerProcess(tmp_path_factory.mktemp("watched") / "data", env).start()
    yield server
    server.stop()


def scrape(server: ServerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


async def test_metrics_count_a_mixed_run_by_surface_tool_and_outcome(watched: ServerProcess) -> None:
    before = scrape(watched)
    async with mcp_session(watched.url + "/mcp") as session:
        for _ in range(3):
            assert not (await session.call("metronix_status")).is_error
        refused = await session.call("metronix_get", document_id="no-such-document")
        assert refused.is_error
        code = refused.error_code
    async with mcp_session(watched.url + "/hadron/mcp") as session:
        assert "hadron_server_info" in await session.tool_names()
    ingest_token = metergraph_key(watched.data_dir, "metrics-ws", app=True)
    rows = [{"ts": "2026-12-01T00:00:00Z", "provider": "openai", "model": "gpt-4o-mini",
             "input_tokens": 10, "output_tokens": 5} for _ in range(4)]  # fmt: skip
    ingested = httpx.post(
        watched.url + "/v1/ingest", json={"rows": rows}, headers={"Authorization": f"Bearer {ingest_token}"}
    )
    assert ingested.status_code == 202, ingested.text
    refused_batch = httpx.post(
        watched.url + "/v1/ingest", json={"rows": "nope"}, headers={"Authorization": f"Bearer {ingest_token}"}
    )
    assert refused_batch.status_code == 400

    after = scrape(watched)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("triptych_tool_calls_total", surface="metronix", tool="metronix_status", outcome="ok") == 3
    assert grew("triptych_tool_calls_total", surface="metronix", tool="metronix_get", outcome=code or "") == 1
    assert grew("triptych_tool_call_seconds_count", surface="metronix", tool="metronix_status") == 3
    assert grew("triptych_metergraph_ingest_rows_total", outcome="accepted") == 4
    assert grew("triptych_metergraph_ingest_batches_total", outcome="accepted") == 1
    assert grew("triptych_metergraph_ingest_batches_total", outcome="refused") == 1
    assert grew("triptych_http_requests_total", surface="metergraph", method="POST", status="202") == 1
    assert grew("triptych_http_requests_total", surface="hadron", method="POST", status="200") >= 1
    # The gauges are there, sampled at the scrape.
    names = {name for name, _ in after}
    assert {"triptych_metronix_freshness_queue", "triptych_index_builds_in_progress"} <= names
    assert "triptych_metergraph_rollup_fold_pending" in names


def test_metrics_need_the_token_when_one_is_set(watched: ServerProcess) -> None:
    missing = httpx.get(watched.url + "/metrics")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert "TRIPTYCH_METRICS_TOKEN" in missing.json()["error"]["hint"]
    wrong = httpx.get(watched.url + "/metrics", headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401


def test_every_response_carries_a_request_id_the_client_may_choose(watched: ServerProcess) -> None:
    chosen = httpx.get(watched.url + "/health", headers={"X-Request-Id": "client-chose-this.1"})
    assert chosen.headers["x-request-id"] == "client-chose-this.1"
    made = httpx.get(watched.url + "/health")
    assert len(made.headers["x-request-id"]) == 32
    unusable = httpx.get(watched.url + "/health", headers={"X-Request-Id": 'has spaces and "quotes"'})
    assert unusable.headers["x-request-id"] != 'has spaces and "quotes"'
    missing = httpx.get(watched.url + "/v1/agent/no-such-path")
    assert missing.status_code == 404 and len(missing.headers["x-request-id"]) == 32


async def test_json_log_lines_carry_the_request_id_surface_and_tool(watched: ServerProcess) -> None:
    headers = {"X-Request-Id": "trace-me-42"}
    async with mcp_session(watched.url + "/mcp", headers=headers) as session:
        assert not (await session.call("metronix_status")).is_error
    lines = [json.loads(line) for line in _log_lines(watched)]
    mine = [line for line in lines if line.get("request_id") == "trace-me-42"]
    tool_lines = [line for line in mine if line["logger"] == "triptych.tools"]
    assert tool_lines and tool_lines[0]["tool"] == "metronix_status" and tool_lines[0]["outcome"] == "ok"
    assert tool_lines[0]["surface"] == "metronix" and tool_lines[0]["duration_ms"] >= 0
    request_lines = [line for line in mine if line["logger"] == "triptych.requests"]
    assert request_lines and all(line["surface"] == "metronix" for line in request_lines)
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line)


def _log_lines(server: ServerProcess) -> list[str]:
    # The first line is the start banner (printed, not logged); every logged line is one JSON object.
    return [line for line in server.log().splitlines() if line.startswith("{")]


def test_without_a_token_metrics_answer_this_machine_only(tmp_path: Path) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from triptych.core.metrics import metrics_endpoint

    app = Starlette(routes=[Route("/metrics", metrics_endpoint(None))])
    remote = TestClient(app, client=("203.0.113.9", 5000)).get("/metrics")
    assert remote.status_code == 403 and "TRIPTYCH_METRICS_TOKEN" in remote.json()["error"]["hint"]
    local = TestClient(app, client=("127.0.0.1", 5000)).get("/metrics")
    assert local.status_code == 200 and "triptych_tool_calls_total" in local.text
