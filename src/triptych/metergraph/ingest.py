"""Ingest: normalize rows (SDK or OTLP), drop content unless retained, price, store as one batch.

Rows are validated as a whole before anything is written: one bad row refuses the batch (HTTP 400) and
nothing is stored. Accepted rows, their rollups and the batch record commit in one transaction before
the 202 goes out.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from triptych.metergraph import histogram
from triptych.metergraph.contract import BadBatch
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.store import Content, TelemetryStore

SCHEMA_VERSIONS = (1,)
_MAX_TEXT = 512  # identifiers (route, model, ids, ...) are cut to this many characters
_STR_FIELDS = (
    "route", "provider", "model", "endpoint", "request_id", "status", "status_code", "finish_reason",
    "error_type", "session_id", "conversation_id", "trace_id", "span_id", "parent_span_id", "trace_name",
    "template_hash", "unit_name", "func", "module", "sdk", "sdk_version", "runtime", "environment", "operation",
)  # fmt: skip
_INT_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
_FLOAT_FIELDS = ("latency_ms", "ttft_ms", "unit_count")


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int
    ignored: int


def parse_ts(value: Any, index: int) -> int:
    """Epoch milliseconds from an ISO 8601 string or epoch seconds/milliseconds."""
    if isinstance(value, bool):
        raise BadBatch(f"rows[{index}].ts is not a timestamp")
    if isinstance(value, int | float):
        seconds = value / 1000 if value > 1e11 else value
        return int(seconds * 1000)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise BadBatch(f"rows[{index}].ts is not an ISO 8601 timestamp") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return int(parsed.timestamp() * 1000)
    raise BadBatch(f"rows[{index}].ts is missing or not a timestamp")


def _opt_str(row: Mapping[str, Any], name: str, index: int) -> str | None:
    value = row.get(name)
    if value is None:
        return None
    if type(value) is str:  # the common case, first
        return value[:_MAX_TEXT] if value else None
    if isinstance(value, bool | dict | list):
        raise BadBatch(f"rows[{index}].{name} must be a string")
    text = str(value)
    return text[:_MAX_TEXT] if text != "" else None


def _opt_int(row: Mapping[str, Any], name: str, index: int) -> int | None:
    value = row.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
        raise BadBatch(f"rows[{index}].{name} must be a non-negative integer")
    return int(value)


def _opt_float(row: Mapping[str, Any], name: str, index: int) -> float | None:
    value = row.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadBatch(f"rows[{index}].{name} must be a number")
    return float(value)


def clean_environment(value: str | None) -> str | None:
    """NULL, empty and whitespace-only environments are untagged (stored as NULL)."""
    if value is None or not value.strip():
        return None
    return value


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class IngestService:
    def __init__(
        self,
        store: TelemetryStore,
        pricer: Pricer,
        max_rows: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.pricer = pricer
        self.max_rows = max_rows
        self.clock = clock

    def ingest_document(self, app: AppPrincipal, document: Any) -> IngestResult:
        """``POST /v1/ingest``: ``{"schema_version": 1, "rows": [...], "meta": {...}}``."""
        if not isinstance(document, dict):
            raise BadBatch("the body must be a JSON object with a rows array")
        version = document.get("schema_version", 1)
        if version not in SCHEMA_VERSIONS or isinstance(version, bool):
            raise BadBatch("unknown schema_version: this server accepts 1")
        rows = document.get("rows")
        if not isinstance(rows, list) or not rows:
            raise BadBatch("rows must be a non-empty array")
        if len(rows) > self.max_rows:
            raise BadBatch(f"too many rows: at most {self.max_rows} per batch")
        meta = document.get("meta") or {}
        if not isinstance(meta, dict):
            raise BadBatch("meta must be an object")
        return self.ingest_rows(app, rows, "sdk", meta=meta)

    def ingest_rows(
        self,
        app: AppPrincipal,
        rows: Sequence[Any],
        source: str,
        meta: Mapping[str, Any] | None = None,
        unknown_attributes: int = 0,
    ) -> IngestResult:
        received_ms = int(self.clock() * 1000)
        workspace = self.store.workspace(app.workspace)
        retain = bool(workspace and workspace["retain_content"])
        calls: list[dict[str, Any]] = []
        contents: list[Content | None] = []
        ignored = 0
        content_dropped = 0
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise BadBatch(f"rows[{index}] must be an object")
            if row.get("event_type") == "outcome":
                ignored += 1
                continue
            call = self._normalize(app, row, index, source)
            content = _content_of(row)
            if content is not None and not (retain and row.get("content_opted_in", True) is not False):
                content_dropped += 1
                content = None
            call["has_content"] = int(content is not None)
            calls.append(call)
            contents.append(content)
        meta = meta or {}
        batch = {
            "received_ms": received_ms,
            "processed_ms": int(self.clock() * 1000),
            "ignored": ignored,
            "dropped": _meta_int(meta.get("dropped")),
            "transport_errors": _meta_int(meta.get("transport_errors")),
            "unknown_attributes": unknown_attributes,
            "content_dropped": content_dropped,
        }
        self.store.insert_batch(
            app.workspace, source, calls, contents, batch, datetime.now(UTC).isoformat(timespec="seconds")
        )
        return IngestResult(len(calls), ignored)

    def _normalize(
        self, app: AppPrincipal, row: Mapping[str, Any], index: int, source: str
    ) -> dict[str, Any]:
        # Runs once per row of every batch: common cases are tested inline and only unusual values go
        # through the checking helpers.
        get = row.get
        ts_ms = parse_ts(get("ts"), index)
        call: dict[str, Any] = {"workspace": app.workspace, "app": app.app, "source": source, "ts_ms": ts_ms}
        for name in _STR_FIELDS:
            value = get(name)
            if value is None or (type(value) is str and 0 < len(value) <= _MAX_TEXT):
                call[name] = value
            else:
                call[name] = _opt_str(row, name, index)
        call["environment"] = clean_environment(call["environment"])
        for name in _INT_FIELDS:
            value = get(name)
            call[name] = (
                value if value is None or (type(value) is int and value >= 0) else _opt_int(row, name, index)
            )
        for name in _FLOAT_FIELDS:
            value = get(name)
            call[name] = (
                value if type(value) is float and math.isfinite(value) else _opt_float(row, name, index)
            )
        call["lat_bucket"] = histogram.bucket_of(call["latency_ms"])
        error = get("error")
        status = call["status"]
        # The SDK sends error as a boolean; the raw API may send a message. Either marks a failed call.
        call["error"] = int(
            bool(error)
            or call["status_code"] == "error"
            or (status is not None and status.lower() == "error")
        )
        if isinstance(error, str) and not call["error_type"]:
            call["error_type"] = error[:_MAX_TEXT]
        tool_names = get("tool_names")
        call["tool_names"] = json.dumps(tool_names) if isinstance(tool_names, list) else None
        tool_calls = get("tool_calls")
        call["tool_call_count"] = len(tool_calls) if isinstance(tool_calls, list) else None
        stream = get("stream")
        call["stream"] = None if stream is None else int(bool(stream))
        batch = get("batch")
        call["batch"] = None if batch is None else int(bool(batch))
        tags = get("tags", get("metadata"))
        if tags is not None and not isinstance(tags, dict):
            raise BadBatch(f"rows[{index}].tags must be an object")
        call["tags"] = _tags_json(tags) if tags else None
        reported = get("reported_cost_usd", get("cost_usd"))
        reported_f = _opt_float({"cost": reported}, "cost", index) if reported is not None else None
        price = self.pricer.price_on_day(
            call["provider"],
            call["model"],
            ts_ms // 86_400_000,
            call["input_tokens"],
            call["output_tokens"],
            call["cache_read_tokens"],
            call["cache_write_tokens"],
            call["reasoning_tokens"],
            reported_f,
        )
        call["cost_usd"] = price.cost_usd
        call["computed_cost_usd"] = price.computed_cost_usd
        call["reported_cost_usd"] = reported_f
        call["cost_status"] = price.status
        call["cost_unknown"] = int(price.unknown)
        call["missing_rates"] = json.dumps(list(price.missing_rates)) if price.missing_rates else None
        call["price_source"] = price.source_json
        return call


def _tags_json(tags: dict[str, Any]) -> str:
    """Tags as compact JSON, non-ASCII kept (``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``).

    orjson writes exactly that for string keys and values, several times faster; anything else (numbers,
    nested values, lone surrogates) keeps the standard library's spelling.
    """
    if all(type(k) is str and type(v) is str for k, v in tags.items()):
        try:
            return orjson.dumps(tags).decode()
        except orjson.JSONEncodeError:
            pass
    return json.dumps(tags, ensure_ascii=False, separators=(",", ":"))


def _content_of(row: Mapping[str, Any]) -> Content | None:
    request = _as_text(row.get("request_json"))
    response = _as_text(row.get("response_text"))
    tool_calls = row.get("tool_calls")
    tools = _as_text(tool_calls) if isinstance(tool_calls, list) and tool_calls else None
    if request is None and response is None and tools is None:
        return None
    return Content(request, response, tools)


def _meta_int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
