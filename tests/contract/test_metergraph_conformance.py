"""Conformance with upstream's published Agent Access contract (``agent_contract.py`` and its conformance
checks), against a real `triptych serve`: every tool's output validates against the contract's JSON schemas
(``metergraph/schemas.py``, checked with jsonschema), capabilities are keyed by capability name, and the HTTP
boundaries answer the contract's error documents."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import ServerProcess, bearer, cli_env, mcp_session, open_metergraph

from triptych.metergraph.contract import TOOL_CONTRACT, TOOLS_BY_NAME, WARNING_CODES
from triptych.metergraph.schemas import validate

sys.path.insert(0, str(Path(__file__).parent.parent / "metergraph"))
from report_support import artifact  # noqa: E402
from shared_metergraph import STATIC_INGEST  # noqa: E402

# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def server(shared_metergraph: ServerProcess) -> ServerProcess:
    """The session's shared server (tests/shared_metergraph.py): MG_TOKENS is ``STATIC_INGEST`` for the
    workspace ``static-ws``, incidents open from $0.50; every other test takes a workspace of its own."""
    return shared_metergraph


def agent_key(server: ServerProcess, workspace: str, role: str) -> str:
    mg = open_metergraph(server)
    try:
        return str(mg.keys.create_agent_key(workspace, role)[1])
    finally:
        mg.close()


def keys(server: ServerProcess, workspace: str) -> tuple[str, str]:
    mg = open_metergraph(server)
    try:
        return mg.keys.create_app_token(workspace)[1], mg.keys.create_agent_key(workspace, "replay")[1]
    finally:
        mg.close()


def ingest_episode(server: ServerProcess, app: str) -> None:
    """A day of ordinary traffic and a cost spike, so incidents, usage and traces all have rows."""
    zero = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=30)
    hours = []
    for h in range(26):
        tokens = 60_000 if h == 25 else 1000
        hours.append([{"ts": (zero + timedelta(hours=h, minutes=i * 2)).isoformat(), "route": "support",
                       "provider": "openai", "model": "gpt-4o", "input_tokens": tokens, "output_tokens": 100,
                       "latency_ms": 400, "environment": "production", "trace_id": uuid.uuid4().hex,
                       "tags": {"prompt_id": "p-1"}} for i in range(25)])  # fmt: skip
    # Two batches (the even hours, then the odd), not one per hour: incidents are judged on event time
    # when they are read, so nothing judged changes, and behind the two-machines balancer each machine
    # still ingests the hours it did (as in test_metergraph_incidents.py's ``baseline``).
    for batch in (hours[0::2], hours[1::2]):
        rows = [row for hour in batch for row in hour]
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


# -- The product's own conformance checks ------------------------------------------------------------
# The product's public repository ships an Agent Access conformance module (``tests/agent_access``: checks
# that take only a ``call(name, arguments)`` and a profile fixture) with the contract's JSON schemas. What
# follows restates what those checks require, run against Triptych's own profile: what a Debug key sees on a
# server without a replay provider (the product's fixtures describe one deployment's key the same way).
# The schemas they validate with are ``metergraph/schemas.py``, the product's requirements restated.

# The product's 14 tools: privacy class and required scope in its vocabulary, and whether a Debug key here
# can call them (replay needs the Replay role).
PRODUCT_TOOLS: dict[str, tuple[str, str, bool]] = {
    "metergraph_get_workspace_context": ("metadata", "agent:read", True),
    "metergraph_get_capabilities": ("metadata", "agent:read", True),
    "metergraph_list_routes": ("metadata", "agent:read", True),
    "metergraph_get_usage": ("metadata", "agent:read", True),
    "metergraph_get_ingestion_health": ("metadata", "agent:read", True),
    "metergraph_list_incidents": ("metadata", "agent:read", True),
    "metergraph_query_traces": ("metadata", "agent:read", True),
    "metergraph_list_analysis_runs": ("metadata", "agent:read", True),
    "metergraph_get_analysis_run": ("metadata", "agent:read", True),
    "metergraph_list_reports": ("metadata", "agent:read", True),
    "metergraph_get_report": ("metadata", "agent:read", True),
    "metergraph_get_report_evidence": ("content", "agent:read", True),
    "metergraph_get_trace": ("content", "agent:read", True),
    "metergraph_replay_trace": ("replay", "agent:replay", False),
}
PROFILE = {
    "deployment_profile": "local",
    "bounds": {"max_days": 90, "max_rows": 200, "max_response_bytes": 5242880},
}
RPC_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def rpc_call(url: str, key: str, name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
    """One tools/call as the product's checks make it: (the document or the JSON-RPC error, is_error)."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    reply = httpx.post(
        url + "/v1/agent/mcp", json=message, headers={**RPC_HEADERS, **bearer(key)}, timeout=60
    )
    body = reply.json()
    if "error" in body:
        return body["error"], True
    return body["result"].get("structuredContent"), bool(body["result"].get("isError"))


def error_code(result: Any) -> Any:
    error = result.get("error") if isinstance(result, dict) else None
    return error.get("code") if isinstance(error, dict) else (result or {}).get("code")


def product_checks(url: str, key: str) -> dict[str, str | None]:
    """Every check of the product's module that applies to this profile: its name, and None when it holds
    or what failed."""
    out: dict[str, str | None] = {}

    def call(name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
        return rpc_call(url, key, name, arguments)

    def document(name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        result, failed = call(name, arguments)
        return None if failed or not isinstance(result, dict) else result

    # Capability discovery.
    caps = document("metergraph_get_capabilities", {}) or {}
    agent = caps.get("agent") or {}
    out["capabilities.deployment_profile"] = (
        None if caps.get("deployment_profile") == PROFILE["deployment_profile"]
        else f"deployment_profile is {caps.get('deployment_profile')!r}"
    )  # fmt: skip
    product_capabilities = {TOOLS_BY_NAME[name].capability for name in PRODUCT_TOOLS}
    out["capabilities.cover_the_contract"] = (
        None if set(agent) == {t.capability for t in TOOL_CONTRACT} and product_capabilities <= set(agent)
        else "the agent map does not cover the contract's capabilities"
    )  # fmt: skip
    for name, (privacy, scope, available) in PRODUCT_TOOLS.items():
        entry = agent.get(TOOLS_BY_NAME[name].capability) or {}
        got = (entry.get("privacy_class"), entry.get("required_scope"), entry.get("available"))
        out[f"capabilities.{name}"] = (
            None if got == (privacy, scope, available) else f"{got} != {(privacy, scope, available)}"
        )
    bounds = caps.get("bounds") or {}
    out["capabilities.bounds"] = (
        None if all(bounds.get(k) == v for k, v in PROFILE["bounds"].items()) else f"bounds {bounds}"
    )
    out["capabilities.content_included_by_default"] = (
        None if bounds.get("content_included_by_default") is False else "content is included by default"
    )
    runs = (document("metergraph_list_analysis_runs", {"limit": 1}) or {}).get("runs") or []
    run_id = runs[0].get("run_id") if runs else None
    reports = (document("metergraph_list_reports", {"limit": 1}) or {}).get("reports") or []
    report_id = reports[0].get("analysis_id") if reports else None

    # Content-free metadata reads (the ones needing an id apply when one exists).
    for name, (privacy, _, available) in PRODUCT_TOOLS.items():
        if privacy != "metadata" or not available:
            continue
        arguments: dict[str, Any] = {"limit": 1} if name == "metergraph_list_reports" else {}
        if name == "metergraph_get_analysis_run":
            if run_id is None:
                continue
            arguments = {"run_id": run_id}
        if name == "metergraph_get_report":
            if report_id is None:
                continue
            arguments = {"analysis_id": report_id}
        doc = document(name, arguments)
        if doc is None:
            out[f"content_free.{name}"] = "no successful document"
            continue
        found = CONTENT_FIELDS & set(keys_of(doc))
        out[f"content_free.{name}"] = (
            f"content fields {sorted(found)}" if found
            else "content_included is not false" if doc.get("content_included", False) is not False else None
        )  # fmt: skip

    # Bounds.
    for name, arguments in (("metergraph_get_usage", {"days": 91}), ("metergraph_get_usage", {"limit": 201}),
                            ("metergraph_list_reports", {"limit": 201}),
                            ("metergraph_list_analysis_runs", {"limit": 201})):  # fmt: skip
        result, failed = call(name, arguments)
        out[f"bounds.{name}.{next(iter(arguments))}"] = (
            None if failed and error_code(result) == -32602 else f"not -32602: {result}"
        )
    first = document("metergraph_query_traces", {"days": 90, "limit": 1}) or {}
    cursor = first.get("next_cursor")
    if not (first.get("page") or {}).get("truncated") or not cursor:
        out["bounds.trace_cursor"] = "limit=1 gave no truncated page with a cursor"
    else:
        second = document("metergraph_query_traces", {"days": 90, "limit": 1, "cursor": cursor}) or {}
        ids = [{t["trace_id"] for t in page.get("traces", [])} for page in (first, second)]
        out["bounds.trace_cursor"] = (
            "the next page repeated a trace" if ids[0] & ids[1] or not second else None
        )

    # Stable errors, in the order the product answers them.
    result, failed = call("metergraph_unknown", {})
    out["errors.unknown_tool"] = None if failed and error_code(result) == -32602 else f"{result}"
    result, failed = call("metergraph_replay_trace", {"trace_id": "missing-trace"})
    out["errors.replay_without_scope"] = None if failed and error_code(result) == "forbidden" else f"{result}"
    result, failed = call("metergraph_get_trace", {"trace_id": "missing-trace"})
    out["errors.unknown_trace"] = None if failed and error_code(result) == "not_found" else f"{result}"

    # Every successful document validates against its schema.
    workload_id = None
    if report_id is not None:
        detail = document("metergraph_get_report", {"analysis_id": report_id}) or {}
        workload_id = (detail.get("workloads") or [{}])[0].get("workload_id")
    for name in PRODUCT_TOOLS:
        arguments = {
            "metergraph_get_usage": {"days": 90, "limit": 200}, "metergraph_get_ingestion_health": {"days": 90},
            "metergraph_list_incidents": {"limit": 200}, "metergraph_query_traces": {"days": 90, "limit": 200},
            "metergraph_list_reports": {"limit": 200}, "metergraph_list_analysis_runs": {"limit": 200},
            "metergraph_get_analysis_run": {"run_id": run_id}, "metergraph_get_report": {"analysis_id": report_id},
            "metergraph_get_report_evidence": {"analysis_id": report_id, "workload_id": workload_id, "limit": 1},
            "metergraph_get_trace": {"trace_id": "missing-trace"},
            "metergraph_replay_trace": {"trace_id": "missing-trace"},
        }.get(name, {})  # fmt: skip
        if None in arguments.values():
            continue  # no run or report to read: the product skips these too
        doc = document(name, arguments)
        if doc is None:
            continue
        try:
            validate(TOOLS_BY_NAME[name].schema, doc)
            out[f"schema.{name}"] = None
        except Exception as exc:  # jsonschema raises several kinds
            out[f"schema.{name}"] = str(exc).splitlines()[0]

    # The HTTP boundaries.
    origin = httpx.post(url + "/v1/agent/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                        headers={"Origin": "https://not-the-deployment.example"})  # fmt: skip
    out["http.foreign_origin"] = (
        None
        if origin.status_code == 403 and error_code(origin.json()) == "forbidden"
        else f"{origin.status_code}"
    )
    big = httpx.post(url + "/v1/agent/mcp", content=b"{" + b"a" * (1_048_576 + 1) + b"}",
                     headers={"Content-Type": "application/json"})  # fmt: skip
    out["http.oversized_body"] = (
        None
        if big.status_code == 413 and error_code(big.json()) == -32700
        else f"{big.status_code} {big.text[:80]}"
    )
    for method, path in (("POST", "/v1/agent/mcp/"), ("GET", "/v1/agent/routes/")):
        status = httpx.request(method, url + path, follow_redirects=False).status_code
        out[f"http.no_redirect.{path}"] = None if status == 404 else f"{status}"
    return out


def test_the_products_conformance_checks_hold_for_triptychs_profile(
    server: ServerProcess, tmp_path: Path
) -> None:
    workspace = "conf-" + uuid.uuid4().hex[:8]
    app, _ = keys(server, workspace)
    ingest_episode(server, app)
    # As in the product's own seed: calls of a model no catalogue prices, so usage has a lower bound.
    unpriced = {
        "ts": datetime.now(UTC).isoformat(),
        "route": "experiments",
        "provider": "openai",
        "model": "mystery-model",
        "input_tokens": 100,
        "output_tokens": 20,
        "trace_id": uuid.uuid4().hex,
    }
    assert (
        httpx.post(server.url + "/v1/ingest", json={"rows": [unpriced]}, headers=bearer(app)).status_code
        == 202
    )
    # A report, so the report reads apply (the product skips them without one).
    path = tmp_path / "report.json"
    path.write_text(json.dumps(artifact()))
    imported = subprocess.run(
        [sys.executable, "-m", "triptych", "metergraph", "report", "import", str(path), "--workspace", workspace,
         "--data-dir", str(server.data_dir)], capture_output=True, text=True, timeout=120, env=cli_env(server),
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    debug = agent_key(server, workspace, "debug")
    # A classification run, so the run reads apply (the product skips them without one).
    assert not rpc_call(server.url, debug, "metergraph_start_classification", {"days": 2})[1]
    results = product_checks(server.url, debug)
    failed = {name: why for name, why in results.items() if why is not None}
    print(f"product conformance: {len(results) - len(failed)} of {len(results)} checks hold")
    for name, why in failed.items():
        print(f"  {name}: {why}")
    assert not failed, failed


async def test_route_constraints_set_from_the_cli_come_back_over_mcp_and_rest(server: ServerProcess) -> None:
    workspace = "conf-" + uuid.uuid4().hex[:8]
    app, _ = keys(server, workspace)  # no traffic needed: a configured route is listed with 0 calls
    constraints = {"max_cost_usd": 0.01, "allowed_models": ["gpt-4o", "gpt-4o-mini"]}
    config = {"model": "gpt-4o", "constraints": constraints}
    done = subprocess.run(
        [sys.executable, "-m", "triptych", "metergraph", "route", "set", "support", "--workspace", workspace,
         "--config", json.dumps(config), "--data-dir", str(server.data_dir)], capture_output=True, text=True,
        timeout=120, env=cli_env(server),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    key = agent_key(server, workspace, "metadata")
    async with mcp_session(server.url + "/v1/agent/mcp", bearer(key)) as mcp:
        listed = (await mcp.call("metergraph_list_routes")).data
    rest = httpx.get(server.url + "/v1/agent/routes", headers=bearer(key)).json()
    for document in (listed, rest):
        validate("agent-access/routes", document)
        assert {r["route"]: r["constraints"] for r in document["routes"]} == {"support": constraints}
    polled = httpx.get(server.url + "/v1/config", headers=bearer(app)).json()
    assert polled == {"routes": {"support": {"model": "gpt-4o"}}}  # what SDKs poll: the rest of the config
