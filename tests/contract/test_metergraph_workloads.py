"""Classification, workload-matched trace queries and the routes' evaluation contract and
replay-eligible counts, end to end through the official MCP client against a real `triptych serve`
(and the REST mirror of traces)."""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from harness import ServerProcess, mcp_session, open_metergraph
from mcp import Client, StdioServerParameters

RUN_FIELDS = {"run_id", "analysis_id", "status", "kind", "created_at", "started_at", "finished_at", "error_code",
              "report", "app_url"}  # fmt: skip


class Env:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.url = server.url + "/v1/agent/mcp"

    def prepare(self, workspace: str, contract: dict[str, Any] | None = None) -> str:
        """Retention on, a route config, and a mixed day of traffic; returns an app token."""
        mg = open_metergraph(self.server)
        now = datetime.now(UTC).isoformat()
        try:
            mg.metadata.set_retain_content(workspace, True, now)
            if contract is not None:
                mg.metadata.set_route(workspace, "support", None, {"evaluation_contract": contract}, now)
            token = mg.keys.create_app_token(workspace)[1]
        finally:
            mg.close()
        start = datetime.now(UTC) - timedelta(hours=2)

        def rows(n: int, **fields: Any) -> list[dict[str, Any]]:
            return [{"ts": (start + timedelta(seconds=i)).isoformat(), "route": "support", "provider": "openai",
                     "model": "gpt-4o", "trace_id": uuid.uuid4().hex, **fields} for i in range(n)]  # fmt: skip

        body = (
            rows(25, tags={"prompt_id": "a"}, input_tokens=200, output_tokens=30, request_json="hello")
            + rows(22, input_tokens=6000, output_tokens=400)
            + rows(21, route="extract", model="gpt-4o-mini", input_tokens=1500, output_tokens=80)
        )
        response = httpx.post(self.server.url + "/v1/ingest", json={"rows": body},
                              headers={"Authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip
        assert response.status_code == 202, response.text
        return token

    def key(self, workspace: str, role: str = "debug", environments: list[str] | None = None) -> str:
        mg = open_metergraph(self.server)
        try:
            return mg.keys.create_agent_key(workspace, role, environments)[1]
        finally:
            mg.close()


# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def env(shared_metergraph: ServerProcess) -> Env:
    """The session's shared server (tests/shared_metergraph.py); each test classifies a workspace of its own."""
    return Env(shared_metergraph)


def ws() -> str:
    return "wl-" + uuid.uuid4().hex[:8]


async def test_classification_saves_workloads_that_query_traces_matches(env: Env) -> None:
    workspace = ws()
    env.prepare(workspace)
    key = env.key(workspace)
    async with mcp_session(env.url, {"Authorization": f"Bearer {key}"}) as mcp:
        caps = (await mcp.call("metergraph_get_capabilities")).data
        started = await mcp.call("metergraph_start_classification", days=2)
        again = await mcp.call("metergraph_start_classification")
        by_calls = {w["calls"]: w for w in started.data["workloads"]}
        page = await mcp.call("metergraph_query_traces", workload=by_calls[25]["workload_id"], limit=200)
        other = await mcp.call("metergraph_query_traces", workload=by_calls[21]["workload_id"], limit=200)
    entry = caps["agent"]["classification_start"]
    assert entry["available"] is True and entry["mutates"] is True
    assert "classification_start" in caps["deployment_capabilities"]
    assert not started.is_error and started.data["content_included"] is False
    run = started.data["run"]
    assert RUN_FIELDS <= set(run) and run["kind"] == "classification" and run["status"] == "succeeded"
    uuid.UUID(run["run_id"])
    assert sorted(by_calls) == [21, 22, 25]
    assert by_calls[25]["metadata_keys"] == ["prompt_id"] and by_calls[25]["replay_eligible_calls"] == 25
    assert {w["workload_id"] for w in again.data["workloads"]} == {
        w["workload_id"] for w in by_calls.values()
    }
    assert len(page.data["traces"]) == 25 and page.data["coverage"]["filters"]["workload"].startswith("wl_")
    assert {t["models"][0] for t in other.data["traces"]} == {"gpt-4o-mini"} and len(
        other.data["traces"]
    ) == 21
    rest = httpx.get(env.server.url + "/v1/agent/traces", params={"workload": by_calls[22]["workload_id"],
                     "limit": 200}, headers={"Authorization": f"Bearer {key}"}, timeout=30)  # fmt: skip
    assert rest.status_code == 200 and len(rest.json()["traces"]) == 22


async def test_classification_refusals(env: Env) -> None:
    workspace = ws()
    env.prepare(workspace)
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.key(workspace, 'metadata')}"}) as mcp:
        metadata = await mcp.call("metergraph_start_classification")
    async with mcp_session(
        env.url, {"Authorization": f"Bearer {env.key(workspace, 'debug', ['prod'])}"}
    ) as mcp:
        restricted = await mcp.call("metergraph_start_classification")
    assert metadata.error_code == "forbidden" and restricted.error_code == "forbidden"


async def test_workloads_do_not_cross_workspaces(env: Env) -> None:
    first, second = ws(), ws()
    env.prepare(first)
    env.prepare(second)
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.key(first)}"}) as mcp:
        mine = (await mcp.call("metergraph_start_classification")).data["workloads"]
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.key(second)}"}) as mcp:
        for workload in mine:
            seen = await mcp.call("metergraph_query_traces", workload=workload["workload_id"])
            assert not seen.is_error and seen.data["traces"] == []
        theirs = (await mcp.call("metergraph_start_classification")).data["workloads"]
    assert {w["workload_id"] for w in mine}.isdisjoint({w["workload_id"] for w in theirs})


async def test_routes_report_the_evaluation_contract_and_replay_eligible_calls(env: Env) -> None:
    workspace = ws()
    contract = {"version": "2026-12", "checks": [{"kind": "exact_match"}], "candidates": ["gpt-4o-mini"]}
    env.prepare(workspace, contract)
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.key(workspace, 'metadata')}"}) as mcp:
        routes = {r["route"]: r for r in (await mcp.call("metergraph_list_routes")).data["routes"]}
    assert routes["support"]["evaluation_contract"] == contract
    assert routes["support"]["evaluation_contract_version"] == "2026-12"
    assert routes["support"]["evaluation_contract_hash"].startswith("sha256:")
    assert routes["support"]["calls"] == 47 and routes["support"]["replay_eligible_calls"] == 25
    assert (
        routes["extract"]["evaluation_contract"] is None and routes["extract"]["replay_eligible_calls"] == 0
    )


async def test_the_stdio_bridge_classifies_and_matches_a_workload(env: Env) -> None:
    workspace = ws()
    env.prepare(workspace)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "triptych.metergraph.bridge"],
        env={**os.environ, "METERGRAPH_URL": env.server.url, "METERGRAPH_AGENT_TOKEN": env.key(workspace)},
    )
    async with Client(params) as client:
        started = await client.call_tool("metergraph_start_classification", {"days": 2})
        workloads = json.loads(started.content[0].text)["workloads"]  # type: ignore[union-attr]
        biggest = max(workloads, key=lambda w: w["calls"])
        page = await client.call_tool(
            "metergraph_query_traces", {"workload": biggest["workload_id"], "limit": 200}
        )
    assert not started.is_error and len(workloads) == 3
    assert len(json.loads(page.content[0].text)["traces"]) == biggest["calls"] == 25  # type: ignore[union-attr]
