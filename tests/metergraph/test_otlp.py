"""OTLP mapping: every spelling the issue names, agent/workflow spans without usage, unknown attributes
counted and never a reason to drop a span."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from triptych.metergraph import otlp


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def request(*spans: dict[str, Any], resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend(kv(k, v) for k, v in (resource or {}).items())
    ss = rs.scope_spans.add()
    for i, attrs in enumerate(spans):
        span = ss.spans.add()
        span.trace_id = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
        span.span_id = (i + 1).to_bytes(8, "big")
        if i:
            span.parent_span_id = (1).to_bytes(8, "big")
        span.name = attrs.pop("_name", f"span-{i}")
        if attrs.pop("_error", False):
            span.status.code = Status.STATUS_CODE_ERROR
        span.start_time_unix_nano = 1_764_000_000_000_000_000
        span.end_time_unix_nano = 1_764_000_000_500_000_000
        span.attributes.extend(kv(k, v) for k, v in attrs.items())
    return req


def test_openllmetry_spellings_map_and_workflow_spans_do_not_count() -> None:
    decoded = otlp.to_rows(request(
        {"_name": "workflow", "traceloop.span.kind": "workflow", "gen_ai.usage.prompt_tokens": 500},
        {"_name": "openai.chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o", "llm.request.type": "chat",
         "gen_ai.usage.prompt_tokens": 300, "gen_ai.usage.completion_tokens": 20,
         "gen_ai.usage.cache_read_input_tokens": 100, "gen_ai.usage.cache_creation_input_tokens": 50,
         "llm.usage.total_tokens": 320, "traceloop.association.properties.session_id": "s-9"},
        resource={"deployment.environment": "staging"},
    ))  # fmt: skip
    [call] = decoded.rows
    assert (decoded.spans, decoded.skipped, decoded.unknown_attributes) == (2, 1, 0)
    assert (call["provider"], call["model"], call["input_tokens"], call["output_tokens"]) == (
        "openai",
        "gpt-4o",
        300,
        20,
    )
    assert (call["cache_read_tokens"], call["cache_write_tokens"]) == (100, 50)
    assert (call["environment"], call["session_id"], call["trace_name"]) == ("staging", "s-9", "workflow")
    assert call["latency_ms"] == 500.0


def test_current_spellings_win_over_deprecated_ones() -> None:
    [call] = otlp.to_rows(request(
        {"gen_ai.provider.name": "anthropic", "gen_ai.system": "old", "gen_ai.response.model": "claude-3-5-sonnet-20241022",
         "gen_ai.request.model": "claude-3-5-sonnet-latest", "gen_ai.usage.input_tokens": 10,
         "gen_ai.usage.cache_write.input_tokens": 4, "gen_ai.usage.cache_creation.input_tokens": 99,
         "deployment.environment.name": "prod", "deployment.environment": "old-env"},
    )).rows  # fmt: skip
    assert (call["provider"], call["model"], call["cache_write_tokens"], call["environment"]) == (
        "anthropic", "claude-3-5-sonnet-20241022", 4, "prod",
    )  # fmt: skip


def test_openinference_spans_and_chain_spans() -> None:
    decoded = otlp.to_rows(request(
        {"openinference.span.kind": "CHAIN", "llm.token_count.prompt": 1000},
        {"openinference.span.kind": "LLM", "llm.provider": "openai", "llm.model_name": "gpt-4o-mini",
         "llm.token_count.prompt": 40, "llm.token_count.completion": 4,
         "llm.token_count.prompt_details.cache_read": 8, "llm.token_count.completion_details.reasoning": 2,
         "input.value": "the prompt", "output.value": "the answer"},
    ))  # fmt: skip
    [call] = decoded.rows
    assert (
        call["input_tokens"],
        call["output_tokens"],
        call["cache_read_tokens"],
        call["reasoning_tokens"],
    ) == (40, 4, 8, 2)
    assert (call["request_json"], call["response_text"]) == ("the prompt", "the answer")


def test_unknown_attributes_are_counted_and_errors_kept() -> None:
    decoded = otlp.to_rows(request(
        {"_error": True, "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
         "gen_ai.future.thing": "x", "llm.other": 1, "http.method": "POST", "error.type": "Timeout"},
    ))  # fmt: skip
    [call] = decoded.rows
    assert decoded.unknown_attributes == 2
    assert (call["error"], call["error_type"], call["status"]) == (True, "Timeout", "error")
