"""A NUL character (U+0000) in text is refused at every door with the door's documented invalid-input
error naming the field, on every engine: PostgreSQL cannot store it, SQLite and ClickHouse can, and the
answer must not depend on which one is behind the server (core/nul.py, decision record 0065).

Not left to the fuzzer's luck: every text argument of every tool gets a NUL, one at a time, with the
other required arguments filled with values that reach the services."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from robustness.hostile import KNOWN
from robustness.report import record
from robustness.target import ClientThread, Target, error_code, result_text
from robustness.test_fuzz_tools import ENDPOINTS

NUL_TEXT = "before\x00after"
INVALID = {"metronix": "INVALID_PARAMS", "hadron": "BAD_USER_INPUT"}
JSONRPC_INVALID_PARAMS = -32602


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
    return schema


def _kinds(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a property takes (``anyOf`` unfolded, ``$ref`` resolved)."""
    schema = _resolve(schema, defs)
    if "anyOf" in schema:
        return [k for s in schema["anyOf"] for k in _kinds(s, defs)]
    return [schema]


def _plain(schema: dict[str, Any], defs: dict[str, Any], name: str) -> Any:
    """A well-formed value for a required argument, so that a call gets past validation."""
    if name in KNOWN:
        return KNOWN[name][0]
    kind = next((k for k in _kinds(schema, defs) if k.get("type") != "null"), {})
    if "enum" in kind:
        return kind["enum"][0]
    if "const" in kind:
        return kind["const"]
    return {"string": "x" * max(1, kind.get("minLength", 1)), "integer": kind.get("minimum", 1),
            "number": kind.get("minimum", 1), "boolean": False,
            "array": [], "object": {}}.get(kind.get("type", "string"), "x")  # fmt: skip


def _nul_value(schema: dict[str, Any], defs: dict[str, Any]) -> tuple[Any, str] | None:
    """A value holding a NUL for a text argument (or a list of texts), with the suffix of the field path
    the refusal must name; None for an argument that holds no text."""
    for kind in _kinds(schema, defs):
        if kind.get("type") == "string" and "enum" not in kind:
            return NUL_TEXT, ""
        items = _resolve(kind.get("items", {}), defs)
        if kind.get("type") == "array" and items.get("type") == "string" and "enum" not in items:
            return [NUL_TEXT], "[0]"
    return None


def nul_calls(tool: Any) -> list[tuple[dict[str, Any], str]]:
    """One call per text argument of ``tool``: (arguments, the field the refusal must name)."""
    schema = tool.input_schema
    defs, props = schema.get("$defs", {}), schema.get("properties", {})
    base = {name: _plain(props[name], defs, name) for name in schema.get("required", []) if name in props}
    calls = []
    for name, prop in props.items():
        nul = _nul_value(prop, defs)
        if nul is not None:
            calls.append(({**base, name: nul[0]}, name + nul[1]))
    return calls


@pytest.mark.parametrize("surface", list(ENDPOINTS))
def test_a_nul_in_any_text_argument_of_any_tool_is_refused_naming_the_argument(
    target: Target, surface: str
) -> None:
    path, headers = ENDPOINTS[surface]
    log_before = len(target.server.log())
    client = ClientThread(target.url + path, headers(target))
    failures: list[str] = []
    calls = 0
    try:
        for tool in client.list_tools():
            for arguments, field in nul_calls(tool):
                calls += 1
                problem = _judge_call(client, surface, tool.name, arguments, field)
                if problem:
                    failures.append(problem)
    finally:
        client.close()
    record(f"nul-{surface}", calls=calls, failures=len(failures))
    assert calls >= 10, f"{surface}: too few text arguments found ({calls})"
    assert not failures, "\n".join(failures[:20])
    new_log = target.server.log()[log_before:]
    assert "Traceback" not in new_log, new_log[-4000:]


def _judge_call(client: ClientThread, surface: str, tool: str, arguments: dict[str, Any], field: str) -> str:
    try:
        result = client.call(tool, arguments)
    except MCPError as exc:  # Metergraph: bad arguments are a JSON-RPC -32602 naming the field
        if (
            surface == "metergraph"
            and exc.error.code == JSONRPC_INVALID_PARAMS
            and field in exc.error.message
        ):
            return ""
        return f"{tool}({field}): {exc.error.code} {exc.error.message}"
    code, text = error_code(result), result_text(result)
    if code != INVALID.get(surface) or field not in text or "NUL" not in text:
        return f"{tool}({field}): {code} {text[:300]}"
    return ""


def test_a_nul_in_a_free_form_key_names_only_the_argument(target: Target) -> None:
    client = ClientThread(target.url + "/mcp", {"Authorization": f"Bearer {target.metronix_token}"})
    try:
        result = client.call(
            "memory_store",
            {"content": "c", "agent_id": "bot", "workspace_id": "ws-a", "metadata": {"se\x00cret": "v"}},
        )
    finally:
        client.close()
    assert error_code(result) == "INVALID_PARAMS", result_text(result)
    assert "metadata" in result_text(result) and "NUL" in result_text(result)


# -- the HTTP doors ------------------------------------------------------------------------------------


def _row(**fields: Any) -> dict[str, Any]:
    return {"ts": datetime.now(UTC).isoformat(), "route": "r", "provider": "openai", "model": "gpt-4o",
            "input_tokens": 1, "output_tokens": 1, "latency_ms": 1, **fields}  # fmt: skip


def _otlp_protobuf(model: str) -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes(range(16)), bytes(range(8)), "chat"
    span.start_time_unix_nano = span.end_time_unix_nano = int(datetime.now(UTC).timestamp() * 1e9)
    for key, value in (("gen_ai.request.model", AnyValue(string_value=model)),
                       ("gen_ai.usage.input_tokens", AnyValue(int_value=3))):  # fmt: skip
        span.attributes.append(KeyValue(key=key, value=value))
    return bytes(request.SerializeToString())


def _otlp_json(model: str) -> dict[str, Any]:
    now = str(int(datetime.now(UTC).timestamp() * 1e9))
    attrs = [{"key": "gen_ai.request.model", "value": {"stringValue": model}},
             {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "3"}}]  # fmt: skip
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "chat", "startTimeUnixNano": now,
            "endTimeUnixNano": now, "attributes": attrs}  # fmt: skip
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


# (door, method, path, credential, json body or raw bytes, query, the field the refusal names, shape)
HTTP_DOORS: list[tuple[str, str, str, str, Any, dict[str, str], str, str]] = [
    ("rest-create", "POST", "/api/v1/memory/records", "metronix_token",
     {"content": "a\x00b", "agent_id": "bot", "workspace_id": "ws-a"}, {}, "content", "metronix"),
    ("rest-search", "POST", "/api/v1/memory/search", "metronix_token",
     {"query": "q", "tags": ["t\x00"], "workspace_id": "ws-a"}, {}, "tags[0]", "metronix"),
    ("rest-knowledge", "POST", "/api/v1/knowledge/store", "metronix_token",
     {"content": "c", "metadata": {"k": "v\x00"}, "workspace_id": "ws-a"}, {}, "metadata.k", "metronix"),
    ("rest-query", "GET", "/api/v1/memory/records", "metronix_token", None,
     {"workspace_id": "ws-a", "agent_id": "b\x00t"}, "agent_id", "metronix"),
    ("rest-path", "GET", "/api/v1/memory/records/id%00x", "metronix_token", None,
     {"workspace_id": "ws-a"}, "record_id", "metronix"),
    ("rest-delete-path", "DELETE", "/api/v1/memory/records/id%00x", "metronix_token", None,
     {"workspace_id": "ws-a"}, "record_id", "metronix"),
    ("chat-completions", "POST", "/v1/chat/completions", "metronix_token",
     {"model": "m", "messages": [{"role": "user", "content": "hi\x00"}]}, {}, "messages[0].content", "openai"),
    ("ingest", "POST", "/v1/ingest", "app_token",
     {"schema_version": 1, "rows": [_row(), _row(metadata={"note": "n\x00"})]}, {}, "rows[1].metadata.note",
     "metergraph"),
    ("ingest-sessions", "POST", "/v1/ingest/sessions", "app_token", {"name": "s\x00"}, {}, "name", "metergraph"),
    ("otlp-json", "POST", "/v1/traces", "app_token", _otlp_json("gpt\x00x"), {}, "stringValue", "metergraph"),
    ("otlp-protobuf", "POST", "/v1/traces", "app_token", _otlp_protobuf("gpt\x00x"), {}, "rows[0].model",
     "metergraph"),
    ("agent-query", "GET", "/v1/agent/usage", "agent_key", None, {"route": "r\x00"}, "route", "metergraph"),
    ("agent-path", "GET", "/v1/agent/debug/traces/ab%00c", "agent_key", None, {}, "trace_id", "metergraph"),
    ("report-artifact", "GET", "/v1/agent/reports/a%00b/artifact", "agent_key", None, {}, "analysis_id",
     "metergraph"),
    ("replay", "POST", "/v1/agent/debug/replay", "agent_key", {"trace_id": "t\x00"}, {}, "trace_id",
     "metergraph"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("door", "method", "path", "credential", "body", "query", "field", "shape"), HTTP_DOORS,
    ids=[d[0] for d in HTTP_DOORS],
)  # fmt: skip
def test_a_nul_at_an_http_door_is_refused_in_the_doors_shape_naming_the_field(
    target: Target, door: str, method: str, path: str, credential: str, body: Any, query: dict[str, str],
    field: str, shape: str,
) -> None:  # fmt: skip
    headers = {"Authorization": f"Bearer {getattr(target, credential)}"}
    if isinstance(body, bytes):
        content, headers["Content-Type"] = body, "application/x-protobuf"
    else:
        content = json.dumps(body).encode() if body is not None else None
        headers["Content-Type"] = "application/json"
    log_before = len(target.server.log())
    response = httpx.request(
        method, target.url + path, params=query, content=content, headers=headers, timeout=60
    )
    assert response.status_code in (400, 422), f"{response.status_code} {response.text[:400]}"
    error = response.json()["error"]
    expected_code = {"metronix": "INVALID_PARAMS", "metergraph": "invalid_argument"}.get(shape)
    if expected_code is not None:
        assert error["code"] == expected_code, error
    else:  # OpenAI's error object
        assert error["type"] == "invalid_request_error", error
    assert field in error["message"] and "NUL" in error["message"], error
    assert "Traceback" not in target.server.log()[log_before:]
