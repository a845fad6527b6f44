"""Metergraph's remote MCP endpoint through the official MCP client and plain HTTP, against a real
`triptych serve`: protocol revisions, transport refusals, -32602, every contract error code, roles,
environments and workspace isolation."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SECRET, ServerProcess, mcp_session, open_metergraph
from mcp.shared.exceptions import MCPError

from triptych.metergraph.contract import TOOL_CONTRACT

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
STATIC_APP, STATIC_AGENT = "static-app-token-for-tests", "static-agent-token-for-tests"


class Env:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.url = server.url + "/v1/agent/mcp"

    def mint(self, workspace: str, role: str = "debug", environments: list[str] | None = None) -> str:
        mg = open_metergraph(self.server)
        try:
            return mg.keys.create_agent_key(workspace, role, environments)[1]
        finally:
            mg.close()

    def app_token(self, workspace: str) -> str:
        mg = open_metergraph(self.server)
        try:
            return mg.keys.create_app_token(workspace)[1]
        finally:
            mg.close()

    def retain(self, workspace: str) -> None:
        mg = open_metergraph(self.server)
        try:
            mg.metadata.set_retain_content(workspace, True, datetime.now(UTC).isoformat())
        finally:
            mg.close()

    def ingest(self, token: str, rows: list[dict[str, Any]]) -> httpx.Response:
        return httpx.post(self.server.url + "/v1/ingest", json={"schema_version": 1, "rows": rows},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip

    def rpc(
        self, token: str | None, message: Any, headers: dict[str, str] | None = None, path: str = ""
    ) -> httpx.Response:
        h = {**HEADERS, **({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
        return httpx.post(self.url + path, json=message, headers=h, timeout=30)

    def call(self, token: str, tool: str, **arguments: Any) -> dict[str, Any]:
        response = self.rpc(token, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": {"name": tool, "arguments": arguments}})  # fmt: skip
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def row(**fields: Any) -> dict[str, Any]:
    base = {"ts": datetime.now(UTC).isoformat(), "route": "support", "provider": "openai", "model": "gpt-4o",
            "input_tokens": 1000, "output_tokens": 100, "latency_ms": 420, "trace_id": uuid.uuid4().hex}  # fmt: skip
    base.update(fields)
    return base


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, metergraph_engine: dict[str, str]) -> Iterator[Env]:
    data = tmp_path_factory.mktemp("metergraph") / "data"
    server = ServerProcess(
        data,
        {"AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET, "MG_TOKENS": STATIC_APP,
         "MG_AGENT_TOKENS": STATIC_AGENT, "MG_MAX_BODY_BYTES": str(9 * 1024 * 1024), "MG_AGENT_RATE_PER_MINUTE": "40",
         **metergraph_engine},
    ).start()  # fmt: skip
    yield Env(server)
    server.stop()


def ws() -> str:
    return "mg-" + uuid.uuid4().hex[:8]


async def test_the_official_client_falls_back_to_initialize_and_sees_the_contract_tools(env: Env) -> None:
    replay = env.mint(ws(), "replay")
    async with mcp_session(env.url, {"Authorization": f"Bearer {replay}"}) as mcp:
        assert await mcp.tool_names() == [t.name for t in TOOL_CONTRACT]
        result = await mcp.call("metergraph_get_capabilities")
    assert not result.is_error
    caps = result.data
    assert caps["schema_version"] == "metergraph.agent-access/v1"
    assert caps["agent"]["incidents"]["available"] is True
    assert caps["agent"]["usage_aggregates"]["available"] is True
    assert caps["bounds"]["max_days"] == 90 and caps["bounds"]["max_rows"] == 200


async def test_metadata_keys_do_not_see_content_or_replay_tools(env: Env) -> None:
    metadata = env.mint(ws(), "metadata")
    async with mcp_session(env.url, {"Authorization": f"Bearer {metadata}"}) as mcp:
        names = await mcp.tool_names()
        refused = await mcp.call("metergraph_get_trace", trace_id="anything")
        caps = (await mcp.call("metergraph_get_capabilities")).data
    assert {"metergraph_get_trace", "metergraph_get_report_evidence", "metergraph_replay_trace"}.isdisjoint(
        names
    )
    assert "metergraph_query_traces" in names
    assert refused.is_error and refused.error_code == "forbidden"
    assert caps["agent"]["trace_content"] == {
        **caps["agent"]["trace_content"],
        "available": False,
    }


@pytest.mark.parametrize("revision", ["2025-11-25", "2025-06-18", "2025-03-26"])
def test_each_accepted_revision_initializes_and_serves_with_its_header(env: Env, revision: str) -> None:
    token = env.mint(ws())
    init = env.rpc(token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": revision, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})  # fmt: skip
    assert init.status_code == 200
    assert init.json()["result"]["protocolVersion"] == revision
    assert init.json()["result"]["serverInfo"]["name"] == "metergraph"
    listed = env.rpc(
        token, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"MCP-Protocol-Version": revision}
    )
    assert listed.status_code == 200 and len(listed.json()["result"]["tools"]) == len(TOOL_CONTRACT) - 1


def test_an_unsupported_protocol_header_is_refused_with_the_supported_revisions(env: Env) -> None:
    response = env.rpc(env.mint(ws()), {"jsonrpc": "2.0", "id": 1, "method": "server/discover"},
                       {"MCP-Protocol-Version": "2026-07-28"})  # fmt: skip
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"]["supported"] == ["2025-11-25", "2025-06-18", "2025-03-26"]


def test_notifications_are_answered_202_without_a_body(env: Env) -> None:
    response = env.rpc(env.mint(ws()), {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status_code == 202 and response.content == b""


def test_transport_refusals(env: Env) -> None:
    token = env.mint(ws())
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    big = env.rpc(token, {**ping, "params": {"pad": "x" * (1024 * 1024)}})
    assert big.status_code == 413 and big.json()["error"]["code"] == -32700
    assert env.rpc(token, ping, {"Origin": "https://evil.example"}).status_code == 403
    assert env.rpc(token, ping, {"Origin": "http://localhost:3000"}).status_code == 200
    assert env.rpc(token, ping, path="/").status_code == 404
    assert env.rpc(token, ping, {"Host": "evil.example:8000"}).status_code == 421
    assert httpx.get(env.url, headers={"Authorization": f"Bearer {token}"}).status_code == 405
    batch = env.rpc(token, [ping, ping])
    assert batch.status_code == 400 and batch.json()["error"]["code"] == -32600
    garbage = httpx.post(
        env.url, content=b"{not json", headers={**HEADERS, "Authorization": f"Bearer {token}"}
    )
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700


def test_missing_or_invalid_credentials_are_401_and_app_tokens_cannot_read(env: Env) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert env.rpc(None, ping).status_code == 401
    assert env.rpc("mgagent_forged", ping).headers["www-authenticate"].startswith("Bearer")
    assert env.rpc(env.app_token(ws()), ping).status_code == 403
    assert env.rpc(STATIC_AGENT, ping).status_code == 200


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("metergraph_no_such_tool", {}),
        ("metergraph_get_usage", {"dayz": 7}),
        ("metergraph_get_usage", {"days": 0}),
        ("metergraph_get_usage", {"days": 91}),
        ("metergraph_get_usage", {"days": "7"}),
        ("metergraph_get_usage", {"limit": 201}),
        ("metergraph_get_usage_aggregates", {"metadata": {f"k{i}": "v" for i in range(6)}}),
        ("metergraph_get_usage_aggregates", {"route": [f"r{i}" for i in range(21)]}),
        ("metergraph_query_traces", {"sample": "newest"}),
        ("metergraph_query_traces", {"route": "x" * 513}),
        ("metergraph_query_traces", {"trace_id": ""}),
        ("metergraph_query_traces", {"request_id": "r" * 201}),
        ("metergraph_query_traces", {"trace": "abc"}),
        ("metergraph_get_trace", {}),
        ("metergraph_get_report_evidence", {"analysis_id": "a", "workload_id": "w", "limit": 51}),
    ],
)
async def test_schema_violations_are_json_rpc_invalid_params(
    env: Env, tool: str, arguments: dict[str, Any]
) -> None:
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(ws(), 'replay')}"}) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.client.call_tool(tool, arguments)
    assert refused.value.error.code == -32602


def test_metadata_violations_never_repeat_the_key_or_value(env: Env) -> None:
    token = env.mint(ws())
    result = env.call(token, "metergraph_get_usage_aggregates", metadata={"openai_api_key": "sk-guess-123"})
    text = str(result)
    assert result["result"]["isError"] is True
    assert result["result"]["structuredContent"]["error"]["code"] == "invalid_argument"
    assert "openai_api_key" not in text and "sk-guess-123" not in text
    raw = env.call(token, "metergraph_get_usage", metadata={"k" * 300: 5})
    assert "error" in raw and "kkkk" not in str(raw)


def test_every_contract_error_code_is_reachable(env: Env) -> None:
    workspace = ws()
    app = env.app_token(workspace)
    debug = env.mint(workspace, "debug")
    prod_only = env.mint(workspace, "debug", ["prod"])

    def code(token: str, tool: str, **arguments: Any) -> str:
        result = env.call(token, tool, **arguments)["result"]
        assert result["isError"] is True
        return str(result["structuredContent"]["error"]["code"])

    assert (
        code(debug, "metergraph_get_usage_aggregates", days=7, since="2026-01-01T00:00:00Z")
        == "invalid_argument"
    )
    assert code(debug, "metergraph_get_trace", trace_id="no-such-trace") == "not_found"
    assert code(debug, "metergraph_query_traces", sample="spread", trace_id="t") == "invalid_argument"
    assert code(debug, "metergraph_query_traces", sample="spread", request_id="r") == "invalid_argument"
    assert code(prod_only, "metergraph_query_traces", environment=["dev"]) == "forbidden"
    assert code(env.mint(workspace, "metadata"), "metergraph_get_trace", trace_id="x") == "forbidden"
    assert code(debug, "metergraph_replay_trace", trace_id="x") == "forbidden"
    assert (
        code(env.mint(workspace, "replay"), "metergraph_replay_trace", trace_id="x")
        == "unsupported_capability"
    )
    # response_too_large: a retained trace whose content exceeds the 5 MiB response bound.
    env.retain(workspace)
    trace = uuid.uuid4().hex
    for _ in range(2):
        rows = [row(trace_id=trace, response_text="y" * 40_000) for _ in range(80)]
        assert env.ingest(app, rows).status_code == 202
    assert code(debug, "metergraph_get_trace", trace_id=trace) == "response_too_large"
    # rate_limited: this server allows 40 calls a minute per key.
    limited = env.mint(workspace)
    answers = []
    for _ in range(80):  # the bucket refills at 40 a minute while the loop runs
        answers.append(env.call(limited, "metergraph_get_workspace_context")["result"])
        if answers[-1]["isError"]:
            break
    assert answers[-1]["structuredContent"]["error"]["code"] == "rate_limited"
    assert 40 <= len(answers) < 80


def test_workspaces_are_isolated_on_every_read(env: Env) -> None:
    a, b = ws(), ws()
    secret_trace = uuid.uuid4().hex
    assert env.ingest(env.app_token(a), [row(route="a-route")]).status_code == 202
    assert env.ingest(env.app_token(b), [row(route="b-route", trace_id=secret_trace)] * 3).status_code == 202
    reader = env.mint(a)
    usage = env.call(reader, "metergraph_get_usage_aggregates", group_by=["route"])["result"][
        "structuredContent"
    ]
    assert [i["route"] for i in usage["items"]] == ["a-route"]
    routes = env.call(reader, "metergraph_list_routes")["result"]["structuredContent"]["routes"]
    assert [r["route"] for r in routes] == ["a-route"]
    traces = env.call(reader, "metergraph_query_traces")["result"]["structuredContent"]["traces"]
    assert secret_trace not in [t["trace_id"] for t in traces]
    assert (
        env.call(reader, "metergraph_get_trace", trace_id=secret_trace)["result"]["structuredContent"][
            "error"
        ]["code"]
        == "not_found"
    )
    context = env.call(reader, "metergraph_get_workspace_context")["result"]["structuredContent"]
    assert context["workspace"]["id"] == a and context["provenance"]["workspace_id"] == a


def test_environment_allowlists_apply_to_broad_queries(env: Env) -> None:
    workspace = ws()
    app = env.app_token(workspace)
    env.ingest(app, [row(environment="prod"), row(environment="dev"), row(environment=" "), row()])
    prod_only = env.mint(workspace, "metadata", ["prod"])
    anyone = env.mint(workspace, "metadata")

    def totals(token: str) -> int:
        document = env.call(token, "metergraph_get_usage_aggregates")["result"]["structuredContent"]
        return int(document["totals"]["calls"])

    assert (totals(prod_only), totals(anyone)) == (1, 4)
    traces = env.call(prod_only, "metergraph_query_traces")["result"]["structuredContent"]["traces"]
    assert [t["environment"] for t in traces] == ["prod"]


async def test_a_full_investigation_through_the_official_client(env: Env) -> None:
    workspace = ws()
    app = env.app_token(workspace)
    rows = [
        row(tags={"prompt_id": f"p-{i % 3}"}, route=f"r{i % 2}", request_id=f"req-{i}") for i in range(9)
    ] + [row(model="mystery-1")]
    assert env.ingest(app, rows).json() == {"accepted": 10, "ignored": 0}
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace, 'metadata')}"}) as mcp:
        grouped = (
            await mcp.call(
                "metergraph_get_usage_aggregates", group_by=["route", "metadata.prompt_id"], limit=2
            )
        ).data
        usage = (await mcp.call("metergraph_get_usage", days=1)).data
        health = (await mcp.call("metergraph_get_ingestion_health")).data
        sample = (await mcp.call("metergraph_query_traces", sample="spread", limit=3)).data
        # The skill's exact-identifier reads: one trace by its id, the calls of one provider request id.
        one = (await mcp.call("metergraph_query_traces", trace_id=rows[0]["trace_id"], limit=1)).data
        by_request = (await mcp.call("metergraph_query_traces", request_id="req-1", limit=1)).data
    assert [t["trace_id"] for t in one["traces"]] == [rows[0]["trace_id"]]
    assert [t["trace_id"] for t in by_request["traces"]] == [rows[1]["trace_id"]]
    assert by_request["attribution"]["cost_basis"] == "matching_calls"
    rest = httpx.get(env.server.url + "/v1/agent/traces", params={"request_id": "req-1", "limit": 1},
                     headers={"Authorization": f"Bearer {env.mint(workspace, 'metadata')}"})  # fmt: skip
    assert [t["trace_id"] for t in rest.json()["traces"]] == [rows[1]["trace_id"]]
    refused = httpx.get(env.server.url + "/v1/agent/traces", params={"sample": "spread", "trace_id": "t"},
                        headers={"Authorization": f"Bearer {env.mint(workspace, 'metadata')}"})  # fmt: skip
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "invalid_argument")
    assert grouped["totals"]["calls"] == 10 and grouped["coverage"]["completeness"] == "partial"
    assert grouped["pricing"]["cost"] == "lower_bound" and grouped["pricing"]["unpriced_calls"] == 1
    assert sum(i["calls"] for i in usage["items"]) == 10
    assert health["processed_batches"] == 1 and health["rows"]["accepted"] == 10
    assert sample["coverage"]["rows"]["shape"] == "sample"
    for document in (grouped, usage, health, sample):
        assert document["content_included"] is False
        assert document["schema_version"] == "metergraph.agent-access/v1"
        assert document["provenance"]["workspace_id"] == workspace


MCP1_SCRIPT = """
import asyncio, json, sys
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

async def main(url, token):
    async with streamablehttp_client(url, headers={"Authorization": f"Bearer {token}"}) as (r, w, _):
        async with ClientSession(r, w) as session:
            init = await session.initialize()
            tools = await session.list_tools()
            usage = await session.call_tool("metergraph_get_usage", {"days": 1})
            print(json.dumps({"version": init.protocolVersion, "tools": len(tools.tools),
                              "usage": json.loads(usage.content[0].text)["content_included"]}))

asyncio.run(main(*sys.argv[1:3]))
"""


def test_the_1x_client_api_works_against_the_stateless_endpoint(env: Env, tmp_path: Path) -> None:
    python = Path(__file__).resolve().parents[2] / ".venv-mcp1" / "bin" / "python"
    if not python.exists():
        pytest.skip("the 1.x client venv is missing: run `python3 tasks.py test`")
    script = tmp_path / "mcp1_metergraph.py"
    script.write_text(MCP1_SCRIPT)
    out = subprocess.run([str(python), str(script), env.url, env.mint(ws(), "metadata")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["version"] in ("2025-11-25", "2025-06-18", "2025-03-26")
    assert result["tools"] == len(TOOL_CONTRACT) - 3 and result["usage"] is False


def test_data_dir_is_shared_with_cli_processes(env: Env) -> None:
    # Keys minted by another process (as the CLI does) are usable at once: SQLite in WAL mode.
    assert Path(env.server.data_dir, "metergraph.db").exists()
