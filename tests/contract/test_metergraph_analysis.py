"""Analysis runs through a real `triptych serve` and the official MCP client: start a run, follow its
progress to a report, read the report; roles, argument errors and another workspace's view. Replays go
through the real OpenAI client to the local provider server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import McpSession, ServerProcess, mcp_session, open_metergraph
from mcp.shared.exceptions import MCPError

from triptych.metergraph.contract import TOOLS_BY_NAME
from triptych.metergraph.service import Metergraph

sys.path.insert(0, str(Path(__file__).parent.parent))
from provider_server import ProviderServer  # noqa: E402
from shared_metergraph import PUBLIC_URL as PUBLIC  # noqa: E402


class Env:
    def __init__(self, server: ServerProcess, provider: ProviderServer) -> None:
        self.server = server
        self.provider = provider
        self.url = server.url + "/v1/agent/mcp"

    def _mg(self) -> Metergraph:
        return open_metergraph(self.server)

    def mint(self, workspace: str, role: str = "debug") -> str:
        mg = self._mg()
        try:
            return mg.keys.create_agent_key(workspace, role, None)[1]
        finally:
            mg.close()

    def traffic(self, workspace: str, route: str, n: int) -> None:
        mg = self._mg()
        try:
            mg.metadata.set_retain_content(workspace, True, datetime.now(UTC).isoformat())
            token = mg.keys.create_app_token(workspace)[1]
        finally:
            mg.close()
        rows = []
        for i in range(n):
            question = f"{route} question {i}: when does the store open?"
            rows.append({"ts": datetime.now(UTC).isoformat(), "route": route, "provider": "openai", "model": "gpt-4o",
                         "input_tokens": 300, "output_tokens": 40, "latency_ms": 800, "trace_id": uuid.uuid4().hex,
                         "request_json": {"messages": [{"role": "user", "content": question}]},
                         "response_text": f"replayed: {question}"})  # fmt: skip
        response = httpx.post(self.server.url + "/v1/ingest", json={"schema_version": 1, "rows": rows},
                              headers={"Authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip
        assert response.status_code == 202, response.text


# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def env(shared_metergraph: ServerProcess, replay_provider: ProviderServer) -> Env:
    """The session's shared server (tests/shared_metergraph.py); each test analyses a workspace of its own."""
    return Env(shared_metergraph, replay_provider)


async def follow(mcp: McpSession, run_id: str, timeout: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = (await mcp.call("metergraph_get_analysis_run", run_id=run_id)).data["run"]
        if run["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return run
        await asyncio.sleep(0.5)


async def test_a_run_started_through_the_client_writes_a_report_it_can_read(env: Env) -> None:
    workspace = "an-" + uuid.uuid4().hex[:8]
    env.traffic(workspace, "support", 8)
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace)}"}) as mcp:
        caps = (await mcp.call("metergraph_get_capabilities")).data
        started = await mcp.call("metergraph_start_analysis", candidates=["gpt-4o-mini"], samples_per_workload=6,
                                 min_samples=5, request_key="first-run")  # fmt: skip
        run = await follow(mcp, started.data["run"]["run_id"])
        listed = await mcp.call("metergraph_list_analysis_runs", limit=5)
        report = await mcp.call("metergraph_get_report", analysis_id=run["report"]["analysis_id"])
    for name in ("metergraph_start_analysis", "metergraph_list_analysis_runs", "metergraph_get_analysis_run"):
        assert caps["agent"][TOOLS_BY_NAME[name].capability]["available"] is True
    assert caps["agent"]["analysis_start"]["mutates"] is True
    assert not started.is_error and started.data["mutates"] is True
    assert started.data["run"]["app_url"].startswith(PUBLIC)
    assert run["status"] == "succeeded", run
    assert run["progress"]["replays_done"] == 6
    assert run["report"]["available"] is True and run["report"]["app_url"].startswith(PUBLIC)
    assert [r["run_id"] for r in listed.data["runs"]] == [run["run_id"]]
    assert report.data["outcome"] == "opportunities"
    assert report.data["workloads"][0]["opportunities"][0]["recommendation_status"] == "recommended"
    mirror = httpx.get(f"{env.server.url}/v1/agent/analysis-runs/{run['run_id']}",
                       headers={"Authorization": f"Bearer {env.mint(workspace, 'metadata')}"}, timeout=30)  # fmt: skip
    assert mirror.status_code == 200 and mirror.json()["run"]["status"] == "succeeded"


async def test_analysis_error_codes_and_roles(env: Env) -> None:
    workspace = "an-" + uuid.uuid4().hex[:8]
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace, 'metadata')}"}) as mcp:
        forbidden = await mcp.call("metergraph_start_analysis")
        missing = await mcp.call("metergraph_get_analysis_run", run_id=str(uuid.uuid4()))
        with pytest.raises(MCPError):  # a schema violation is a protocol error (-32602)
            await mcp.call("metergraph_start_analysis", samples_per_workload=0)
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace)}"}) as mcp:
        contradictory = await mcp.call("metergraph_start_analysis", samples_per_workload=5, min_samples=9)
        bad_cursor = await mcp.call("metergraph_list_analysis_runs", cursor="not-a-cursor")
    assert forbidden.error_code == "forbidden"
    assert missing.error_code == "not_found"
    assert contradictory.error_code == "invalid_argument"
    assert bad_cursor.error_code == "invalid_argument"


async def test_another_workspace_sees_none_of_the_runs(env: Env) -> None:
    owner = "an-" + uuid.uuid4().hex[:8]
    env.traffic(owner, "support", 6)
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(owner)}"}) as mcp:
        started = await mcp.call("metergraph_start_analysis", candidates=["gpt-4o-mini"], samples_per_workload=5,
                                 min_samples=5)  # fmt: skip
        run = await follow(mcp, started.data["run"]["run_id"])
    other = env.mint("an-other-" + uuid.uuid4().hex[:6])
    async with mcp_session(env.url, {"Authorization": f"Bearer {other}"}) as mcp:
        listed = await mcp.call("metergraph_list_analysis_runs")
        fetched = await mcp.call("metergraph_get_analysis_run", run_id=run["run_id"])
        report = await mcp.call("metergraph_get_report", analysis_id=run["analysis_id"])
    assert listed.data["runs"] == []
    assert fetched.error_code == "not_found" and report.error_code == "not_found"
