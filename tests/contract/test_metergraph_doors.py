"""Metergraph's other doors against a real `triptych serve`: the ingest API (driven by the upstream
`metergraph` SDK too), sessions and route config, OTLP/HTTP from the OpenTelemetry exporter, the REST
mirrors, /healthz, and the stdio bridge through the official MCP client."""

from __future__ import annotations

import functools
import gzip
import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SECRET, ServerProcess, open_metergraph
from mcp import Client, StdioServerParameters

from triptych.metergraph.service import Metergraph

STATIC_APP = "static-app-token-for-door-tests"
# httpx's 5 s default timed out an ingest once under load (each ClickHouse INSERT feeds seven tables);
# these tests check answers, not speed.
post = functools.partial(httpx.post, timeout=60)
get = functools.partial(httpx.get, timeout=60)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, metergraph_engine: dict[str, str]
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("mgdoors") / "data"
    env = {"AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET, "MG_TOKENS": STATIC_APP,
           "MG_MAX_ROWS": "100", "MG_MAX_BODY_BYTES": str(256 * 1024), **metergraph_engine}  # fmt: skip
    started = ServerProcess(data, env).start()
    yield started
    started.stop()


def open_mg(server: ServerProcess) -> Metergraph:
    return open_metergraph(server)


def mint(
    server: ServerProcess, workspace: str, role: str | None = None, environments: list[str] | None = None
) -> str:
    mg = open_mg(server)
    try:
        if role is None:
            return mg.keys.create_app_token(workspace)[1]
        return mg.keys.create_agent_key(workspace, role, environments)[1]
    finally:
        mg.close()


def stored(server: ServerProcess, workspace: str) -> list[dict[str, Any]]:
    mg = open_mg(server)
    try:
        return mg.calls.raw_calls(workspace)
    finally:
        mg.close()


def ws() -> str:
    return "door-" + uuid.uuid4().hex[:8]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def row(**fields: Any) -> dict[str, Any]:
    base = {"ts": datetime.now(UTC).isoformat(), "route": "r", "provider": "openai", "model": "gpt-4o",
            "input_tokens": 10, "output_tokens": 5, "latency_ms": 100}  # fmt: skip
    return {**base, **fields}


# -- ingest API ------------------------------------------------------------------------------------


def test_ingest_answers_202_with_accepted_and_ignored_and_takes_gzip(server: ServerProcess) -> None:
    workspace = ws()
    token = mint(server, workspace)
    body = {"rows": [row(), {"event_type": "outcome"}], "meta": {"dropped": 2, "transport_errors": 1}}
    plain = post(server.url + "/v1/ingest", json=body, headers=auth(token))
    assert (plain.status_code, plain.json()) == (202, {"accepted": 1, "ignored": 1})
    zipped = post(server.url + "/v1/ingest", content=gzip.compress(json.dumps({"schema_version": 1, "rows": [row()]}).encode()),
                        headers={**auth(token), "Content-Encoding": "gzip", "Content-Type": "application/json"})  # fmt: skip
    assert zipped.status_code == 202
    assert len(stored(server, workspace)) == 2
    static = post(server.url + "/v1/ingest", json={"rows": [row()]}, headers=auth(STATIC_APP))
    assert static.status_code == 202


@pytest.mark.parametrize(
    ("content", "status"),
    [
        (b"{not json", 400),
        (json.dumps({"schema_version": 9, "rows": [row()]}).encode(), 400),
        (json.dumps({"rows": []}).encode(), 400),
        (json.dumps({"schema_version": 1}).encode(), 400),
        (json.dumps({"rows": [row() for _ in range(101)]}).encode(), 400),
        (json.dumps({"rows": [row(pad="x" * 300_000)]}).encode(), 413),
        (gzip.compress(json.dumps({"rows": [row(pad="x" * 300_000)]}).encode()), 413),
    ],
)
def test_bad_ingest_bodies_are_refused(server: ServerProcess, content: bytes, status: int) -> None:
    workspace = ws()
    headers = {**auth(mint(server, workspace)), "Content-Type": "application/json"}
    if content[:2] == b"\x1f\x8b":
        headers["Content-Encoding"] = "gzip"
    response = post(server.url + "/v1/ingest", content=content, headers=headers)
    assert response.status_code == status
    assert stored(server, workspace) == []


def test_refused_batches_show_as_permanent_failures_in_ingestion_health(server: ServerProcess) -> None:
    workspace = ws()
    app = mint(server, workspace)
    post(server.url + "/v1/ingest", json={"rows": [row()]}, headers=auth(app))
    post(server.url + "/v1/ingest", json={"rows": [row(), "not an object"]}, headers=auth(app))
    health = get(
        server.url + "/v1/agent/ingestion-health", headers=auth(mint(server, workspace, "metadata"))
    ).json()
    assert (health["processed_batches"], health["failed_batches"], health["permanent_failures"]) == (1, 1, 1)
    assert health["last_received_at"] is not None and health["last_processed_at"] is not None


def test_ingest_without_a_valid_app_token_is_401(server: ServerProcess) -> None:
    for headers in ({}, auth("mgapp_forged"), auth(mint(server, ws(), "debug"))):
        response = post(server.url + "/v1/ingest", json={"rows": [row()]}, headers=headers)
        assert response.status_code == 401, headers


def test_sessions_exchange_an_app_token_for_a_short_lived_ingest_token(server: ServerProcess) -> None:
    workspace = ws()
    token = mint(server, workspace)
    body = {"protocol_version": 2, "repository": "acme/app", "sdk_version": "0.6.12"}
    session = post(server.url + "/v1/ingest/sessions", json=body, headers=auth(token))
    assert session.status_code == 201
    doc = session.json()
    assert datetime.fromisoformat(doc["expires_at"]) > datetime.now(UTC)
    assert (
        post(
            server.url + "/v1/ingest", json={"rows": [row()]}, headers=auth(doc["session_token"])
        ).status_code
        == 202
    )
    assert (
        post(
            server.url + "/v1/ingest/sessions", json={**body, "protocol_version": 1}, headers=auth(token)
        ).status_code
        == 400
    )
    assert post(server.url + "/v1/ingest/sessions", json=body, headers=auth("nope")).status_code == 401
    assert stored(server, workspace)[0]["app"] != "static"


def test_route_config_has_an_etag_and_answers_304(server: ServerProcess) -> None:
    workspace = ws()
    token = mint(server, workspace)
    mg = open_mg(server)
    try:
        mg.metadata.set_route(
            workspace, "support", "Support replies", {"model": "gpt-4o-mini"}, datetime.now(UTC).isoformat()
        )
    finally:
        mg.close()
    first = get(server.url + "/v1/config", headers=auth(token))
    assert first.json() == {"routes": {"support": {"model": "gpt-4o-mini"}}}
    again = get(server.url + "/v1/config", headers={**auth(token), "If-None-Match": first.headers["etag"]})
    assert again.status_code == 304


# -- the upstream SDK ------------------------------------------------------------------------------

SDK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from types import SimpleNamespace as NS
    import metergraph

    class Completions:
        def create(self, **kw):
            usage = NS(prompt_tokens=120, completion_tokens=30, total_tokens=150,
                       prompt_tokens_details=NS(cached_tokens=20), completion_tokens_details=NS(reasoning_tokens=5))
            message = NS(role="assistant", content="FAKE ANSWER TEXT", tool_calls=None)
            return NS(id="chatcmpl-fake-1", object="chat.completion", model=kw["model"],
                      choices=[NS(index=0, message=message, finish_reason="stop")], usage=usage)

    class Chat:
        def __init__(self):
            self.completions = Completions()

    class FakeOpenAI:
        def __init__(self):
            self.chat = Chat()
            self.base_url = "https://api.openai.com/v1"

    client = metergraph.wrap(FakeOpenAI())
    with metergraph.route("support-reply"), metergraph.tags(prompt_id="reply-v3"):
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "SECRET PROMPT"}])
    metergraph.record_outcome("support-reply", model="gpt-4o-mini", task_completed=True, session_key="s-1")
    ok = metergraph.flush(15)
    metergraph.shutdown()
    print(json.dumps({"flushed": ok}))
    """
)


def test_the_upstream_sdk_delivers_rows_unchanged(server: ServerProcess, tmp_path: Path) -> None:
    workspace = ws()
    env = {**os.environ, "METERGRAPH_APP_TOKEN": mint(server, workspace), "METERGRAPH_INGEST_URL": server.url,
           "METERGRAPH_REPOSITORY": "acme/support-bot", "METERGRAPH_ENV": "staging",
           "METERGRAPH_FLUSH_SECONDS": "0.1", "METERGRAPH_CONFIG_POLL_SECONDS": "60"}  # fmt: skip
    script = tmp_path / "sdk_app.py"
    script.write_text(SDK_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"flushed": True}
    [call] = stored(server, workspace)
    expected = {
        "route": "support-reply", "provider": "openai", "model": "gpt-4o-mini", "input_tokens": 120,
        "output_tokens": 30, "cache_read_tokens": 20, "reasoning_tokens": 5, "environment": "staging",
        "request_id": "chatcmpl-fake-1", "finish_reason": "stop", "sdk": "python", "status": "stop",
        "cost_status": "priced", "error": 0, "source": "sdk",
    }  # fmt: skip
    assert {k: call[k] for k in expected} == expected
    assert json.loads(call["tags"]) == {"prompt_id": "reply-v3"}
    assert call["trace_id"] and call["span_id"] and call["sdk_version"] and call["latency_ms"] is not None
    assert call["app"].startswith("app_")  # ingested with a session token minted from this app token
    assert "SECRET PROMPT" not in json.dumps(call) and "FAKE ANSWER" not in json.dumps(call)
    mg = open_mg(server)
    try:
        assert mg.calls.raw_content(workspace) == []  # the workspace did not opt in to content
    finally:
        mg.close()


# -- OTLP ------------------------------------------------------------------------------------------


def test_an_otlp_exporter_delivers_genai_spans_in_every_spelling(server: ServerProcess) -> None:
    otel_sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is a dev dependency")
    exporter_mod = pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    workspace = ws()
    token = mint(server, workspace)
    provider = otel_sdk.TracerProvider(
        resource=Resource.create({"service.name": "agent", "deployment.environment.name": "prod"})
    )
    for compression in (Compression.NoCompression, Compression.Gzip):
        exporter = exporter_mod.OTLPSpanExporter(
            endpoint=server.url + "/v1/traces", headers=auth(token), compression=compression
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("support agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.usage.input_tokens": 999, "gen_ai.usage.output_tokens": 999}):  # fmt: skip
        with tracer.start_as_current_span("chat gpt-4o", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.usage.input_tokens": 1000,
            "gen_ai.usage.output_tokens": 50, "gen_ai.usage.cache_read.input_tokens": 200,
            "gen_ai.usage.reasoning.output_tokens": 7, "gen_ai.conversation.id": "conv-1",
            "gen_ai.response.finish_reasons": ["stop"], "gen_ai.brand_new_attribute": "x"}):  # fmt: skip
            pass
        with tracer.start_as_current_span("old spelling", attributes={
            "gen_ai.system": "anthropic", "gen_ai.request.model": "claude-3-5-sonnet-latest",
            "gen_ai.usage.prompt_tokens": 300, "gen_ai.usage.completion_tokens": 20,
            "gen_ai.usage.cache_creation.input_tokens": 100, "deployment.environment": "prod"}):  # fmt: skip
            pass
        with tracer.start_as_current_span("openinference", attributes={
            "openinference.span.kind": "LLM", "llm.provider": "openai", "llm.model_name": "gpt-4o-mini",
            "llm.token_count.prompt": 40, "llm.token_count.completion": 4}):  # fmt: skip
            pass
        with tracer.start_as_current_span("failed call", attributes={
            "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o", "error.type": "RateLimitError"}) as span:  # fmt: skip
            span.set_status(Status(StatusCode.ERROR, "429"))
        with tracer.start_as_current_span(
            "workflow", attributes={"traceloop.span.kind": "workflow", "gen_ai.usage.input_tokens": 5}
        ):
            pass
    provider.shutdown()
    calls = stored(server, workspace)
    assert (
        len(calls) == 8
    )  # four model calls, sent twice (plain and gzip); agent and workflow spans are not calls
    by_name = {c["model"]: c for c in calls}
    chat = by_name["gpt-4o-2024-08-06"]
    assert (
        chat["provider"],
        chat["input_tokens"],
        chat["output_tokens"],
        chat["cache_read_tokens"],
        chat["reasoning_tokens"],
    ) == ("openai", 1000, 50, 200, 7)
    assert (chat["environment"], chat["conversation_id"], chat["operation"], chat["finish_reason"]) == (
        "prod",
        "conv-1",
        "chat",
        "stop",
    )
    assert chat["trace_name"] == "support agent" and chat["cost_status"] == "priced"
    old = by_name["claude-3-5-sonnet-latest"]
    assert (old["provider"], old["input_tokens"], old["output_tokens"], old["cache_write_tokens"]) == (
        "anthropic",
        300,
        20,
        100,
    )
    assert by_name["gpt-4o-mini"]["input_tokens"] == 40
    failed = by_name["gpt-4o"]
    assert (failed["error"], failed["error_type"], failed["cost_status"]) == (1, "RateLimitError", "unpriced")
    assert sum(c["input_tokens"] or 0 for c in calls) == 2 * (1000 + 300 + 40)  # no double counting
    reader = mint(server, workspace, "metadata")
    health = get(server.url + "/v1/agent/ingestion-health", headers=auth(reader)).json()
    assert health["unknown_attributes"] == 2  # gen_ai.brand_new_attribute, counted in each delivery


def test_otlp_json_with_hex_ids_and_gzip_is_accepted(server: ServerProcess) -> None:
    workspace = ws()
    trace_id = uuid.uuid4().hex
    document = {"resourceSpans": [{"resource": {"attributes": [{"key": "deployment.environment.name", "value": {"stringValue": "dev"}}]},
        "scopeSpans": [{"spans": [{"traceId": trace_id, "spanId": "00f067aa0ba902b7", "name": "chat",
            "startTimeUnixNano": str(1_700_000_000_000_000_000), "endTimeUnixNano": str(1_700_000_000_250_000_000),
            "attributes": [{"key": "gen_ai.provider.name", "value": {"stringValue": "openai"}},
                           {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
                           {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}}]}]}]}]}  # fmt: skip
    response = post(server.url + "/v1/traces", content=gzip.compress(json.dumps(document).encode()),
                          headers={**auth(mint(server, workspace)), "Content-Type": "application/json", "Content-Encoding": "gzip"})  # fmt: skip
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    [call] = stored(server, workspace)
    assert (call["trace_id"], call["input_tokens"], call["latency_ms"], call["environment"]) == (
        trace_id,
        12,
        250.0,
        "dev",
    )
    bad = post(
        server.url + "/v1/traces",
        content=b"\xff\x00garbage",
        headers={**auth(mint(server, workspace)), "Content-Type": "application/x-protobuf"},
    )
    assert bad.status_code == 400
    assert (
        post(
            server.url + "/v1/traces", content=b"", headers={"Content-Type": "application/x-protobuf"}
        ).status_code
        == 401
    )


# -- REST mirrors and health -----------------------------------------------------------------------


def test_rest_mirrors_apply_the_same_bounds_and_decode_metadata(server: ServerProcess) -> None:
    workspace = ws()
    app = mint(server, workspace)
    rows = [row(tags={"prompt,id": "p-1"}), row(tags={"prompt,id": "p-2"}), row(tags={"prompt,id": "中文"})]
    assert post(server.url + "/v1/ingest", json={"rows": rows}, headers=auth(app)).status_code == 202
    reader = auth(mint(server, workspace, "metadata"))
    base = server.url + "/v1/agent"
    grouped = get(
        base + "/usage/aggregates",
        params=[("group_by", "route,model"), ("group_by", "metadata.prompt,id")],
        headers=reader,
    ).json()
    assert grouped["group_by"] == ["route", "model", "metadata.prompt,id"] and grouped["totals"]["calls"] == 3
    escaped = get(
        base + "/traces", params={"metadata": '{"prompt,id": "\\u4e2d\\u6587"}'}, headers=reader
    ).json()
    plain = get(
        base + "/traces",
        params={"metadata": json.dumps({"prompt,id": "中文"}, ensure_ascii=False)},
        headers=reader,
    ).json()
    assert len(escaped["traces"]) == len(plain["traces"]) == 1
    assert escaped["coverage"]["filters"]["metadata"] == [{"key": "prompt,id", "value": "中文"}]
    for bad in ('{"a": 1}', '{"a": "x", "a": "y"}', "{nope", '["a"]'):
        response = get(base + "/usage", params={"metadata": bad}, headers=reader)
        assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_argument", bad
    assert get(base + "/usage", params={"days": 91}, headers=reader).status_code == 422
    assert get(base + "/usage", params={"colour": "red"}, headers=reader).status_code == 422
    for path in ("/workspace", "/capabilities", "/routes", "/usage", "/ingestion-health"):
        response = get(base + path, headers=reader)
        assert response.status_code == 200 and response.json()["content_included"] is False, path
    incidents = get(base + "/incidents", params={"limit": 5}, headers=reader)
    assert incidents.status_code == 200 and incidents.json()["page"]["limit"] == 5
    assert get(base + "/debug/traces/abc", headers=reader).status_code == 403
    assert get(base + "/usage").status_code == 401
    assert get(server.url + "/healthz").json()["ok"] is True


# -- the stdio bridge ------------------------------------------------------------------------------


def bridge_env(url: str, token: str) -> dict[str, str]:
    return {**os.environ, "METERGRAPH_URL": url, "METERGRAPH_AGENT_TOKEN": token}


async def test_the_stdio_bridge_serves_the_tools_through_the_official_client(server: ServerProcess) -> None:
    workspace = ws()
    post(server.url + "/v1/ingest", json={"rows": [row()]}, headers=auth(mint(server, workspace)))
    token = mint(server, workspace, "debug")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "triptych.metergraph.bridge"], env=bridge_env(server.url, token)
    )
    async with Client(params) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("metergraph_get_usage_aggregates", {"days": 1})
        refused = await client.call_tool("metergraph_get_trace", {"trace_id": "missing"})
    assert "metergraph_get_usage_aggregates" in names
    assert json.loads(result.content[0].text)["totals"]["calls"] == 1  # type: ignore[union-attr]
    assert refused.is_error and json.loads(refused.content[0].text)["error"]["code"] == "not_found"  # type: ignore[union-attr]


def run_bridge(env: dict[str, str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "triptych.metergraph.bridge"],
        env=env,
        input=stdin,
        capture_output=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "url",
    [
        "",
        "localhost:8000",
        "ftp://host/x",
        "http://host/x?token=1",
        "http://host/x#frag",
        "http://user:pw@host/x",
    ],
)
def test_the_bridge_refuses_bad_urls_with_exit_code_2(url: str) -> None:
    out = run_bridge(bridge_env(url, "mgagent_secret_never_printed"), b"")
    assert out.returncode == 2
    assert b"mgagent_secret_never_printed" not in out.stdout + out.stderr


def test_the_bridge_caps_messages_refuses_redirects_and_never_prints_the_token(server: ServerProcess) -> None:
    token = mint(server, ws(), "metadata")
    ping = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}).encode()
    huge = json.dumps(
        {"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"p": "x" * (1024 * 1024)}}
    ).encode()
    out = run_bridge(bridge_env(server.url, token), ping + b"\n" + huge + b"\n{oops\n")
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert answers[0] == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert answers[1]["error"]["code"] == -32700 and answers[2]["error"]["code"] == -32700
    assert token.encode() not in out.stdout + out.stderr

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.send_response(307)
            self.send_header("Location", server.url + "/v1/agent/mcp")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    redirector = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=redirector.serve_forever, daemon=True).start()
    try:
        out = run_bridge(bridge_env(f"http://127.0.0.1:{redirector.server_port}", token), ping + b"\n")
    finally:
        redirector.shutdown()
        redirector.server_close()
    [answer] = [json.loads(line) for line in out.stdout.splitlines()]
    assert answer["error"]["code"] == -32603 and "redirect" in answer["error"]["message"]
