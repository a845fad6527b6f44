"""Incident detectors against a real `triptych serve`: generated traffic goes in through `/v1/ingest`,
incidents come out of `metergraph_list_incidents` through the official MCP client. Each episode opens one
incident, which updates while the signal lasts and resolves once it is back at baseline (no flapping).

Traffic is stamped in past hours (event time drives the windows), so a whole episode plays out in seconds.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from harness import ServerProcess, bearer, mcp_session, open_metergraph
from mcp import Client, MCPError, StdioServerParameters

HOUR = timedelta(hours=1)


# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def server(shared_metergraph: ServerProcess) -> ServerProcess:
    """The session's shared server (tests/shared_metergraph.py): incidents are swept when they are read (a
    long tick keeps the background sweep out of the way) and open from $0.50; each World is a workspace of
    its own."""
    return shared_metergraph


class World:
    """One workspace: an ingest token, agent keys, and an hour grid ending in the previous whole hour."""

    def __init__(self, server: ServerProcess, environments: list[str] | None = None) -> None:
        self.server = server
        self.workspace = "inc-" + uuid.uuid4().hex[:8]
        mg = open_metergraph(server)
        try:
            self.app = mg.keys.create_app_token(self.workspace)[1]
            self.key = mg.keys.create_agent_key(self.workspace, "metadata", None)[1]
            self.env_key = mg.keys.create_agent_key(self.workspace, "metadata", ["production"])[1]
        finally:
            mg.close()
        now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        self.zero = now - 60 * HOUR  # hour 0 of the grid; hour 59 is the previous whole hour

    def hour(self, h: int, n: int = 30, **fields: Any) -> None:
        """``n`` calls spread over grid hour ``h``, ingested as one batch."""
        self.ingest(self.calls(h, n, **fields))

    def calls(self, h: int, n: int = 30, **fields: Any) -> list[dict[str, Any]]:
        """The calls of ``hour``."""
        start = self.zero + h * HOUR
        rows = []
        for i in range(n):
            base = {"ts": (start + timedelta(seconds=(i + 1) * 3600 // (n + 2))).isoformat(), "route": "support",
                    "provider": "openai", "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 100,
                    "latency_ms": 400 + (i % 5) * 20, "status": "success", "environment": "production",
                    "trace_id": uuid.uuid4().hex}  # fmt: skip
            error = fields.get("errors", 0) > i
            rows.append({**base, **{k: v for k, v in fields.items() if k != "errors"},
                         **({"status": "error", "error_type": "rate_limit"} if error else {})})  # fmt: skip
        return rows

    def ingest(self, rows: list[dict[str, Any]]) -> None:
        response = httpx.post(
            self.server.url + "/v1/ingest", json={"rows": rows}, headers=bearer(self.app), timeout=60
        )
        assert response.status_code == 202, response.text

    def baseline(self, hours: range, **fields: Any) -> None:
        """``hour`` for each of ``hours``, in two or three batches rather than one per hour: detectors judge
        event-time windows when incidents are read (the shared server's tick is an hour), so the batching
        of calls before a read changes nothing judged, and a batch per hour made a whole episode cost
        dozens of inserts (seconds each test on ClickHouse). The batches are the hours at even and at odd
        positions (the last hour of an odd count alone, third), so that behind the two-machines balancer,
        which alternates requests, each machine ingests the same hours, newest last, and the next request
        goes where it went with a batch per hour."""
        listed = list(hours)
        last = [listed.pop()] if len(listed) % 2 else []
        for batch in (listed[0::2], listed[1::2], last):
            if batch:
                self.ingest([call for h in batch for call in self.calls(h, **fields)])

    async def incidents(self, key: str | None = None, limit: int = 200) -> dict[str, Any]:
        async with mcp_session(self.server.url + "/v1/agent/mcp", bearer(key or self.key)) as mcp:
            result = await mcp.call("metergraph_list_incidents", limit=limit)
        assert not result.is_error, result.data
        return result.data

    async def of_kind(self, kind: str, grain: str = "model") -> list[dict[str, Any]]:
        listed = (await self.incidents())["incidents"]
        return [i for i in listed if i["detector_key"] == kind and i["grain"] == grain]


async def test_a_cost_spike_opens_one_incident_that_updates_and_resolves(server: ServerProcess) -> None:
    w = World(server)
    w.baseline(range(0, 24))
    assert await w.of_kind("cost_spike") == []
    w.hour(24, input_tokens=60_000)  # about 45x the hourly baseline spend
    [opened] = await w.of_kind("cost_spike")
    assert (opened["status"], opened["occurrences"], opened["severity"]) == ("open", 1, "critical")
    assert (opened["provider"], opened["model"], opened["environment"]) == ("openai", "gpt-4o", "production")
    numbers = opened["diagnosis"]["numbers"]
    assert numbers["window_cost_usd"] > 3 * numbers["baseline_cost_usd"] > 0
    w.hour(25, input_tokens=60_000)
    [updated] = await w.of_kind("cost_spike")
    assert (updated["id"], updated["occurrences"]) == (opened["id"], 2)
    assert updated["generation"] > opened["generation"]
    # Back at baseline: one clear window is not enough (hysteresis), two in a row resolve it.
    w.hour(26)
    w.hour(27)
    [still] = await w.of_kind("cost_spike")
    assert still["status"] == "open"
    w.hour(28)
    [resolved] = await w.of_kind("cost_spike")
    assert (resolved["id"], resolved["status"]) == (opened["id"], "resolved")
    assert resolved["resolved_at"] is not None
    # The evidence pointer reproduces the triggering window's numbers.
    async with mcp_session(server.url + "/v1/agent/mcp", bearer(w.key)) as mcp:
        evidence = opened["diagnosis"]["evidence"]["usage"]
        again = await mcp.call(evidence["tool"], **evidence["arguments"])
        traces = opened["diagnosis"]["evidence"]["traces"]
        listed = await mcp.call(traces["tool"], **traces["arguments"])
    assert abs(again.data["totals"]["cost_usd"] - numbers["window_cost_usd"]) < 1e-6
    assert evidence["exact"] is True
    # Trace queries filter by route, not model: the evidence points at the route that carried the model.
    [busiest] = opened["diagnosis"]["evidence"]["routes"]
    assert (busiest["route"], busiest["day_errors"]) == ("support", 0) and busiest["day_calls"] >= 30
    assert traces["arguments"]["route"] == "support"
    assert not listed.is_error and listed.data["traces"]
    # A second episode is a second incident; the first stays resolved.
    w.hour(29)
    w.hour(30, input_tokens=60_000)
    episodes = await w.of_kind("cost_spike")
    assert [i["status"] for i in episodes] == ["open", "resolved"]
    assert episodes[1]["id"] == opened["id"]


async def test_a_signal_in_the_hysteresis_band_neither_resolves_nor_reopens(server: ServerProcess) -> None:
    w = World(server)
    w.baseline(range(0, 24), latency_ms=500)
    w.hour(24, latency_ms=2000)
    [opened] = await w.of_kind("latency_p95_regression")
    assert opened["diagnosis"]["numbers"]["window_p95_latency_ms"] > 1.5 * opened["diagnosis"]["baseline"]
    # Alternate clear and in-band windows: the clear run never reaches two, so no resolve, no new incident.
    for h, latency in ((25, 500), (26, 700), (27, 500), (28, 700), (29, 500)):
        w.hour(h, latency_ms=latency)
    [held] = await w.of_kind("latency_p95_regression")
    assert (held["id"], held["status"], held["occurrences"]) == (opened["id"], "open", 1)
    w.hour(30, latency_ms=500)
    w.hour(31, latency_ms=500)
    [resolved] = await w.of_kind("latency_p95_regression")
    assert resolved["status"] == "resolved"


async def test_an_error_rate_spike_opens_once(server: ServerProcess) -> None:
    w = World(server)
    w.baseline(range(0, 24), errors=1)
    w.hour(24, errors=18)
    w.hour(25, errors=20)
    [opened] = await w.of_kind("error_rate_spike")
    assert opened["occurrences"] == 2 and opened["severity"] == "critical"
    assert opened["diagnosis"]["numbers"]["baseline_error_rate"] < 0.05
    assert opened["diagnosis"]["evidence"]["traces"]["arguments"]["status"] == "error"
    for h in (26, 27, 28):
        w.hour(h, errors=1)
    [resolved] = await w.of_kind("error_rate_spike")
    assert resolved["status"] == "resolved"


async def test_a_model_without_a_price_opens_an_incident(server: ServerProcess) -> None:
    w = World(server)
    w.baseline(range(0, 4))
    w.hour(4, n=5, model="acme-unpriced-model-1")
    w.hour(5, n=5, model="acme-unpriced-model-1")
    [opened] = await w.of_kind("unpriced_model")
    assert (opened["model"], opened["occurrences"], opened["status"]) == ("acme-unpriced-model-1", 2, "open")
    w.baseline(range(6, 9))
    [resolved] = await w.of_kind("unpriced_model")
    assert resolved["status"] == "resolved"


async def test_route_series_are_judged_day_by_day(server: ServerProcess) -> None:
    w = World(server)
    day = 24
    w.zero = w.zero - 9 * day * HOUR  # a grid of days: day d is hours 24d..24d+23
    for d in range(0, 8):
        w.hour(d * day + 12, route="checkout", n=40, errors=1)
    w.hour(8 * day + 12, route="checkout", n=40, errors=30)
    [opened] = await w.of_kind("error_rate_spike", grain="route")
    assert (opened["route"], opened["environment"]) == ("checkout", "production")
    assert opened["diagnosis"]["evidence"]["traces"]["arguments"]["route"] == "checkout"


async def test_failed_ingestion_opens_once_and_resolves_after_good_batches(server: ServerProcess) -> None:
    w = World(server)
    w.hour(0, n=3)
    for _ in range(4):
        refused = httpx.post(server.url + "/v1/ingest", json={"rows": []}, headers=bearer(w.app), timeout=60)
        assert refused.status_code == 400
    [opened] = await w.of_kind("ingestion_failure", grain="ingest")
    assert opened["diagnosis"]["numbers"]["failed_batches"] == 4
    assert opened["diagnosis"]["evidence"]["ingestion_health"]["tool"] == "metergraph_get_ingestion_health"
    httpx.post(server.url + "/v1/ingest", json={"rows": []}, headers=bearer(w.app), timeout=60)
    [updated] = await w.of_kind("ingestion_failure", grain="ingest")
    assert (updated["id"], updated["occurrences"]) == (opened["id"], 2)
    for h in (1, 2, 3):
        w.hour(h, n=3)
    [resolved] = await w.of_kind("ingestion_failure", grain="ingest")
    assert resolved["status"] == "resolved"


async def test_incidents_are_isolated_by_workspace_and_environment_and_bounded(server: ServerProcess) -> None:
    w = World(server)
    w.baseline(range(0, 24))
    w.baseline(range(0, 24), environment="staging")
    w.hour(24, input_tokens=60_000)
    w.hour(24, input_tokens=60_000, environment="staging")
    listed = await w.incidents()
    assert {i["environment"] for i in listed["incidents"] if i["detector_key"] == "cost_spike"} == {
        "production",
        "staging",
    }
    assert listed["open"] >= 2 and listed["content_included"] is False
    scoped = await w.incidents(w.env_key)
    assert {i["environment"] for i in scoped["incidents"]} == {"production"}
    one = await w.incidents(limit=1)
    assert (len(one["incidents"]), one["truncated"], one["page"]["truncated"]) == (1, True, True)
    assert one["warnings"][0]["code"] == "truncated"
    other = World(server)
    assert (await other.incidents())["incidents"] == []
    async with mcp_session(server.url + "/v1/agent/mcp", bearer(w.key)) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.client.call_tool("metergraph_list_incidents", {"limit": 201})
        capabilities = await mcp.call("metergraph_get_capabilities")
    assert refused.value.error.code == -32602
    assert capabilities.data["agent"]["incidents"]["available"] is True


async def test_the_stdio_bridge_lists_the_same_incidents(server: ServerProcess) -> None:
    w = World(server)
    w.baseline(range(0, 24))
    w.hour(24, input_tokens=60_000)
    over_http = await w.incidents()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "triptych.metergraph.bridge"],
        env={**os.environ, "METERGRAPH_URL": server.url, "METERGRAPH_AGENT_TOKEN": w.key},
    )
    async with Client(params) as client:
        result = await client.call_tool("metergraph_list_incidents", {"limit": 200})
    over_stdio = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert [i["id"] for i in over_stdio["incidents"]] == [i["id"] for i in over_http["incidents"]]
    assert any(i["detector_key"] == "cost_spike" for i in over_stdio["incidents"])
