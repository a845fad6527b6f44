"""Conformance with upstream's published Agent Access contract (``agent_contract.py`` and its conformance
checks), against a real `triptych serve`: every tool's output validates against the contract's JSON schemas
(``metergraph/schemas.py``, checked with jsonschema), capabilities are keyed by capability name, and the HTTP
boundaries answer the contract's error documents."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from harness import SECRET, ServerProcess, bearer, mcp_session, open_metergraph

from triptych.metergraph.contract import TOOL_CONTRACT, WARNING_CODES
from triptych.metergraph.schemas import validate

STATIC_INGEST = "static-ingest-token-for-conformance"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, metergraph_engine: dict[str, str]
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("mgconformance") / "data"
    env = {"AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET, "MG_TOKENS": STATIC_INGEST,
           "MG_WORKSPACE": "static-ws", "MG_INCIDENT_COST_MIN_USD": "0.5", "MG_AGENT_RATE_PER_MINUTE": "0",
           **metergraph_engine}  # fmt: skip
    started = ServerProcess(data, env).start()
    yield started
    started.stop()


def keys(server: ServerProcess, workspace: str) -> tuple[str, str]:
    mg = open_metergraph(server)
    try:
        return mg.keys.create_app_token(workspace)[1], mg.keys.create_agent_key(workspace, "replay")[1]
    finally:
        mg.close()


def ingest_episode(server: ServerProcess, app: str) -> None:
    """A day of ordinary traffic and a cost spike, so incidents, usage and traces all have rows."""
    zero = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=30)
    for h in range(26):
        tokens = 60_000 if h == 25 else 1000
        rows = [{"ts": (zero + timedelta(hours=h, minutes=i * 2)).isoformat(), "route": "support",
                 "provider": "openai", "model": "gpt-4o", "input_tokens": tokens, "output_tokens": 100,
                 "latency_ms": 400, "environment": "production", "trace_id": uuid.uuid4().hex,
                 "tags": {"prompt_id": "p-1"}} for i in range(25)]  # fmt: skip
        assert (
            httpx.post(
                server.url + "/v1/ingest", json={"rows": rows}, headers=bearer(app), timeout=60
            ).status_code
            == 202
        )


CONTENT_FIELDS = frozenset({"text", "tool_definitions", "tool_calls", "prompt", "system", "messages", "input",
                            "output"})  # fmt: skip


def keys_of(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield str(key)
            yield from keys_of(child)
    elif isinstance(value, list):
        for child in value:
            yield from keys_of(child)


def arguments_for(name: str, trace_id: str) -> dict[str, Any]:
    return {
        "metergraph_get_usage": {"days": 90, "limit": 200},
        "metergraph_get_usage_aggregates": {"days": 90, "group_by": ["route", "metadata.prompt_id"]},
        "metergraph_get_ingestion_health": {"days": 90},
        "metergraph_list_incidents": {"limit": 200},
        "metergraph_query_traces": {"days": 90, "limit": 200},
        "metergraph_list_reports": {"limit": 200},
        "metergraph_list_analysis_runs": {"limit": 200},
        "metergraph_get_analysis_run": {"run_id": str(uuid.uuid4())},
        "metergraph_get_report": {"analysis_id": "missing"},
        "metergraph_get_suite_results": {"analysis_id": "missing", "workload_id": "missing"},
        "metergraph_get_report_evidence": {"analysis_id": "missing", "workload_id": "missing", "limit": 1},
        "metergraph_get_trace": {"trace_id": trace_id},
        "metergraph_replay_trace": {"trace_id": trace_id},
    }.get(name, {})


async def test_every_tool_output_validates_against_the_contract_schemas(server: ServerProcess) -> None:
    workspace = "conf-" + uuid.uuid4().hex[:8]
    app, key = keys(server, workspace)
    ingest_episode(server, app)
    validated: dict[str, str] = {}
    async with mcp_session(server.url + "/v1/agent/mcp", bearer(key)) as mcp:
        traces = await mcp.call("metergraph_query_traces", days=2, limit=1)
        trace_id = traces.data["traces"][0]["trace_id"]
        for tool in TOOL_CONTRACT:
            result = await mcp.call(tool.name, **arguments_for(tool.name, trace_id))
            # A refusal is the contract's error document; a success, the tool's own schema.
            validate("agent-access/error" if result.is_error else tool.schema, result.data)
            validated[tool.name] = "error" if result.is_error else "document"
            if not result.is_error and tool.privacy_class == "metadata":
                # Upstream's content-free check: no content-named field anywhere in a metadata document.
                assert CONTENT_FIELDS.isdisjoint(keys_of(result.data)), tool.name
    assert {name for name, kind in validated.items() if kind == "document"} >= {
        "metergraph_get_workspace_context", "metergraph_get_capabilities", "metergraph_list_routes",
        "metergraph_get_usage", "metergraph_get_usage_aggregates", "metergraph_get_ingestion_health",
        "metergraph_list_incidents", "metergraph_query_traces", "metergraph_get_trace",
    }  # fmt: skip
    async with mcp_session(server.url + "/v1/agent/mcp", bearer(key)) as mcp:
        incidents = (await mcp.call("metergraph_list_incidents", limit=200)).data
    assert incidents["incidents"], "the cost spike must have opened an incident to validate"


async def test_capabilities_are_keyed_by_capability_name(server: ServerProcess) -> None:
    _, key = keys(server, "conf-" + uuid.uuid4().hex[:8])
    async with mcp_session(server.url + "/v1/agent/mcp", bearer(key)) as mcp:
        caps = (await mcp.call("metergraph_get_capabilities")).data
    assert set(caps["agent"]) == {t.capability for t in TOOL_CONTRACT}
    for tool in TOOL_CONTRACT:
        entry = caps["agent"][tool.capability]
        assert (entry["tool"], entry["privacy_class"], entry["required_scope"]) == (
            tool.name,
            tool.privacy_class,
            tool.required_scope,
        )
        # Availability may also hang on configuration (replay needs a provider): a reason says why not.
        assert entry["available"] is True or entry["unavailable_reason"]
    assert caps["agent"]["incidents"]["available"] is True


async def test_usage_aggregates_emit_only_contract_warning_codes(server: ServerProcess) -> None:
    workspace = "conf-" + uuid.uuid4().hex[:8]
    app, key = keys(server, workspace)
    ingest_episode(server, app)
    async with mcp_session(server.url + "/v1/agent/mcp", bearer(key)) as mcp:
        # days=N is N whole UTC days up to today: three always hold the episode's 26 hours, which span
        # two days or more whatever the hour (days=2 held a single day between midnight and 05:00 UTC).
        truncated = (
            await mcp.call("metergraph_get_usage_aggregates", days=3, group_by=["day"], limit=1)
        ).data
        missing = (
            await mcp.call("metergraph_get_usage_aggregates", days=2, group_by=["metadata.nokey"])
        ).data
    codes = {w["code"] for w in truncated["warnings"] + missing["warnings"]}
    assert codes == {"truncated", "coverage_incomplete", "metadata_key_mostly_missing"}
    assert codes <= WARNING_CODES


def test_a_foreign_origin_gets_the_forbidden_error_document(server: ServerProcess) -> None:
    response = httpx.post(server.url + "/v1/agent/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                          headers={"Origin": "https://not-the-deployment.example"})  # fmt: skip
    assert response.status_code == 403
    validate("agent-access/error", response.json())
    assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/agent/routes/"), ("POST", "/v1/agent/mcp/"), ("GET", "/v1/agent/no-such-thing"),
     ("GET", "/v1/agent/usage/aggregates/")],
)  # fmt: skip
def test_unknown_agent_paths_are_contract_404s_without_redirects(
    server: ServerProcess, method: str, path: str
) -> None:
    response = httpx.request(method, server.url + path, follow_redirects=False)
    assert response.status_code == 404
    validate("agent-access/error", response.json())
    assert response.json()["error"]["code"] == "not_found"


def test_healthz_answers_ok_and_the_price_catalogue_version(server: ServerProcess) -> None:
    body = httpx.get(server.url + "/healthz").json()
    assert body["ok"] is True and body["catalog_version"] == "metergraph-core-0.7.4"


def test_a_static_ingest_token_reads_metadata_as_upstream_and_minted_app_tokens_do_not(
    server: ServerProcess,
) -> None:
    usage = httpx.get(server.url + "/v1/agent/usage", headers=bearer(STATIC_INGEST))
    assert usage.status_code == 200 and usage.json()["provenance"]["workspace_id"] == "static-ws"
    content = httpx.get(server.url + "/v1/agent/debug/traces/anything", headers=bearer(STATIC_INGEST))
    assert (content.status_code, content.json()["error"]["code"]) == (403, "forbidden")
    app, _ = keys(server, "conf-" + uuid.uuid4().hex[:8])
    minted = httpx.get(server.url + "/v1/agent/usage", headers=bearer(app))
    assert (minted.status_code, minted.json()["error"]["code"]) == (403, "forbidden")
