"""OTLP/HTTP traces -> call rows, mapping the OpenTelemetry GenAI conventions and their relatives.

Current and deprecated GenAI spellings, OpenInference (``llm.*``) and OpenLLMetry (``traceloop.*``) are
read. Only model-call spans become calls; agent, workflow, chain and tool spans carry no usage of their
own (their token attributes would double count the calls beneath them). Attributes under the GenAI,
OpenInference or OpenLLMetry prefixes that are not mapped are counted in ingestion health; they are
never a reason to drop a span.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from triptych.core import jsonbody

PROVIDER = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
MODEL = (
    "gen_ai.response.model",
    "gen_ai.request.model",
    "llm.model_name",
    "llm.response.model",
    "llm.request.model",
)
INPUT = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "llm.usage.prompt_tokens",
)
OUTPUT = (
    "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion",
    "llm.usage.completion_tokens",
)  # fmt: skip
CACHE_READ = (
    "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)  # fmt: skip
CACHE_WRITE = (
    "gen_ai.usage.cache_write.input_tokens", "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens", "llm.token_count.prompt_details.cache_write",
)  # fmt: skip
REASONING = (
    "gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
)  # fmt: skip
ENVIRONMENT = ("deployment.environment.name", "deployment.environment")
CONVERSATION = ("gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id")
REQUEST_TEXT = (
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "input.value",
    "llm.input_messages",
    "traceloop.entity.input",
)
RESPONSE_TEXT = (
    "gen_ai.output.messages", "gen_ai.completion", "output.value", "llm.output_messages", "traceloop.entity.output",
)  # fmt: skip
OTHER_KNOWN = (
    "gen_ai.operation.name", "gen_ai.response.id", "gen_ai.response.finish_reasons", "error.type",
    "metergraph.route", "gen_ai.request.temperature", "gen_ai.request.max_tokens", "gen_ai.request.top_p",
    "llm.usage.total_tokens", "llm.token_count.total", "gen_ai.usage.total_tokens", "openinference.span.kind",
    "traceloop.span.kind", "traceloop.workflow.name", "traceloop.entity.name", "llm.request.type",
    "gen_ai.agent.name", "gen_ai.agent.id", "gen_ai.tool.name", "llm.is_streaming", "gen_ai.request.stream",
)  # fmt: skip
KNOWN = frozenset(
    PROVIDER + MODEL + INPUT + OUTPUT + CACHE_READ + CACHE_WRITE + REASONING + ENVIRONMENT + CONVERSATION
    + REQUEST_TEXT + RESPONSE_TEXT + OTHER_KNOWN
)  # fmt: skip
WATCHED_PREFIXES = ("gen_ai.", "llm.", "traceloop.")
# Prompt/response attributes indexed by message (gen_ai.prompt.0.content, llm.input_messages.0....).
CONTENT_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.", "llm.input_messages.", "llm.output_messages.")
NOT_CALLS_OPERATIONS = frozenset({"invoke_agent", "create_agent", "execute_tool", "invoke_workflow"})
NOT_CALLS_KINDS = frozenset(
    {"agent", "chain", "tool", "workflow", "task", "retriever", "guardrail", "evaluator"}
)


class OtlpDecodeError(Exception):
    pass


@dataclass
class Decoded:
    rows: list[dict[str, Any]]
    spans: int
    skipped: int
    unknown_attributes: int


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def _attrs(values: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in values}


def _first(attrs: Mapping[str, Any], names: Iterable[str]) -> Any:
    for name in names:
        value = attrs.get(name)
        if value is not None and value != "":
            return value
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value) if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _hex_ids_to_base64(document: Any) -> Any:
    """OTLP/JSON spells trace and span ids in hex; protobuf's JSON mapping wants base64."""
    for resource in document.get("resourceSpans", []) if isinstance(document, dict) else []:
        for scope in resource.get("scopeSpans", []) or []:
            for span in scope.get("spans", []) or []:
                for field in ("traceId", "spanId", "parentSpanId"):
                    value = span.get(field)
                    if isinstance(value, str) and value:
                        try:
                            span[field] = base64.b64encode(bytes.fromhex(value)).decode()
                        except ValueError:
                            raise OtlpDecodeError(f"{field} must be hex") from None
    return document


def parse_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if content_type.startswith("application/json"):
        try:
            document = jsonbody.parse(body, want_object=True)
            json_format.ParseDict(_hex_ids_to_base64(document), request, ignore_unknown_fields=True)
        except jsonbody.JsonRefused as exc:
            raise OtlpDecodeError(f"invalid OTLP/JSON: {exc.message}") from None
        # A well-formed document of the wrong shape (a list where a message belongs, a string where a
        # number does) fails inside the protobuf mapping with one of these.
        except (json_format.ParseError, OtlpDecodeError, ValueError, TypeError, AttributeError) as exc:
            raise OtlpDecodeError(f"invalid OTLP/JSON: {exc}") from None
        return request
    try:
        request.ParseFromString(body)
    except DecodeError:
        raise OtlpDecodeError("invalid OTLP protobuf body") from None
    return request


def encode_response(content_type: str) -> tuple[bytes, str]:
    response = ExportTraceServiceResponse()
    if content_type.startswith("application/json"):
        return json.dumps(json_format.MessageToDict(response)).encode(), "application/json"
    return response.SerializeToString(), "application/x-protobuf"


def _is_call(attrs: Mapping[str, Any]) -> bool:
    operation = str(attrs.get("gen_ai.operation.name") or "").lower()
    kind = str(attrs.get("openinference.span.kind") or attrs.get("traceloop.span.kind") or "").lower()
    if operation in NOT_CALLS_OPERATIONS or kind in NOT_CALLS_KINDS:
        return False  # agent/workflow spans carry no usage of their own: no double counting
    return _first(attrs, MODEL) is not None or any(
        _first(attrs, names) is not None for names in (INPUT, OUTPUT)
    )


def _indexed_content(attrs: Mapping[str, Any], prefixes: tuple[str, ...]) -> str | None:
    parts = {k: v for k, v in attrs.items() if k.startswith(prefixes)}
    return json.dumps(parts, ensure_ascii=False, sort_keys=True) if parts else None


def to_rows(request: ExportTraceServiceRequest) -> Decoded:
    rows: list[dict[str, Any]] = []
    spans = skipped = unknown = 0
    root_names: dict[str, str] = {}
    all_spans: list[tuple[dict[str, Any], Span]] = []
    for resource_spans in request.resource_spans:
        resource = _attrs(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans += 1
                attrs = {**resource, **_attrs(span.attributes)}
                all_spans.append((attrs, span))
                if not span.parent_span_id:
                    root_names[span.trace_id.hex()] = span.name
    for attrs, span in all_spans:
        if not _is_call(attrs):
            skipped += 1
            continue
        unknown += sum(
            1
            for key in attrs
            if key.startswith(WATCHED_PREFIXES) and key not in KNOWN and not key.startswith(CONTENT_PREFIXES)
        )
        start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
        trace_id = span.trace_id.hex() or None
        error = span.status.code == Status.STATUS_CODE_ERROR or attrs.get("error.type") is not None
        finish = attrs.get("gen_ai.response.finish_reasons")
        request_text = _text(_first(attrs, REQUEST_TEXT)) or _indexed_content(attrs, CONTENT_PREFIXES[0::2])
        response_text = _text(_first(attrs, RESPONSE_TEXT)) or _indexed_content(attrs, CONTENT_PREFIXES[1::2])
        stream = attrs.get("gen_ai.request.stream", attrs.get("llm.is_streaming"))
        rows.append(
            {
                "ts": datetime.fromtimestamp(start_ns / 1e9, UTC).isoformat(),
                "route": _text(attrs.get("metergraph.route")),
                "provider": _text(_first(attrs, PROVIDER)),
                "model": _text(_first(attrs, MODEL)),
                "operation": _text(attrs.get("gen_ai.operation.name")),
                "latency_ms": (end_ns - start_ns) / 1e6 if end_ns >= start_ns > 0 else None,
                "input_tokens": _int(_first(attrs, INPUT)),
                "output_tokens": _int(_first(attrs, OUTPUT)),
                "cache_read_tokens": _int(_first(attrs, CACHE_READ)),
                "cache_write_tokens": _int(_first(attrs, CACHE_WRITE)),
                "reasoning_tokens": _int(_first(attrs, REASONING)),
                "status": "error" if error else "success",
                "status_code": "error" if error else "unset",
                "error": bool(error),
                "error_type": _text(attrs.get("error.type"))
                or (span.status.message or None if error else None),
                "finish_reason": _text(finish[0]) if isinstance(finish, list) and finish else _text(finish),
                "request_id": _text(attrs.get("gen_ai.response.id")),
                "conversation_id": _text(_first(attrs, CONVERSATION)),
                "session_id": _text(_first(attrs, CONVERSATION)),
                "trace_id": trace_id,
                "span_id": span.span_id.hex() or None,
                "parent_span_id": span.parent_span_id.hex() or None,
                "trace_name": root_names.get(span.trace_id.hex()) or span.name or None,
                "environment": _text(_first(attrs, ENVIRONMENT)),
                "stream": stream if isinstance(stream, bool) else None,
                "sdk": "otlp",
                "request_json": request_text,
                "response_text": response_text,
            }
        )
    return Decoded(rows, spans, skipped, unknown)
