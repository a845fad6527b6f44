"""The row-by-row ingest normalisation and rollup deltas as they were before the columnar rewrite
(commit 6e77b55), kept verbatim as the reference ``test_ingest_columns.py`` compares the new code with,
but for two later rules: a row holding a refused value is ignored (not the batch refused), and costs are
read by ``ingest.parse_cost`` (decimal strings too)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson

from triptych.metergraph import histogram
from triptych.metergraph.call_model import ROLLUPS, SUMS, Content
from triptych.metergraph.errors import BadBatch
from triptych.metergraph.ingest import parse_cost
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.sqlite_rollups import group_sum

_MAX_TEXT = 512  # identifiers (route, model, ids, ...) are cut to this many characters
_STR_FIELDS = (
    "route", "provider", "model", "endpoint", "request_id", "status", "status_code", "finish_reason",
    "error_type", "session_id", "conversation_id", "trace_id", "span_id", "parent_span_id", "trace_name",
    "template_hash", "unit_name", "func", "module", "sdk", "sdk_version", "runtime", "environment", "operation",
    "gateway", "reported_cost_source",
)  # fmt: skip
_INT_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "cache_write_5m_tokens", "cache_write_1h_tokens",
)  # fmt: skip
_FLOAT_FIELDS = ("latency_ms", "ttft_ms", "unit_count")


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


def clean_environment(value: str | None) -> str | None:
    """NULL, empty and whitespace-only environments are untagged (stored as NULL)."""
    if value is None or not value.strip():
        return None
    return value


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


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


def normalize_rows(
    pricer: Pricer, app: AppPrincipal, rows: Sequence[Any], source: str, retain: bool
) -> tuple[list[dict[str, Any]], list[Content | None], int, int]:
    """``IngestService.ingest_rows`` up to the store call: (calls, contents, ignored, content_dropped)."""
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
        try:
            call = _normalize(pricer, app, row, index, source)
        except BadBatch:
            ignored += 1  # a row with a value the rules refuse is ignored, the others stored
            continue
        content = _content_of(row)
        if content is not None and not (retain and row.get("content_opted_in", True) is not False):
            content_dropped += 1
            content = None
        call["has_content"] = int(content is not None)
        calls.append(call)
        contents.append(content)
    return calls, contents, ignored, content_dropped


def _normalize(
    pricer: Pricer, app: AppPrincipal, row: Mapping[str, Any], index: int, source: str
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
        call[name] = value if type(value) is float and math.isfinite(value) else _opt_float(row, name, index)
    call["lat_bucket"] = histogram.bucket_of(call["latency_ms"])
    error = get("error")
    status = call["status"]
    # The SDK sends error as a boolean; the raw API may send a message. Either marks a failed call.
    call["error"] = int(
        bool(error) or call["status_code"] == "error" or (status is not None and status.lower() == "error")
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
    reported_f = parse_cost(reported, "cost", index)
    # Only a call with a model and some usage is looked up at its time (a day past year 9999 fails there).
    priced = call["model"] and any(call[name] is not None for name in _INT_FIELDS)
    price = pricer.price(
        call["provider"],
        call["model"],
        datetime.fromtimestamp(ts_ms / 1000 if priced else 0, UTC),
        call["input_tokens"],
        call["output_tokens"],
        call["cache_read_tokens"],
        call["cache_write_tokens"],
        call["reasoning_tokens"],
        reported_f,
        cache_write_5m_tokens=call["cache_write_5m_tokens"],
        cache_write_1h_tokens=call["cache_write_1h_tokens"],
        endpoint=call["endpoint"],
        batch=call["batch"],
        gateway=call["gateway"],
        reported_cost_source=call["reported_cost_source"],
    )
    call["cost_usd"] = price.cost_usd
    call["computed_cost_usd"] = price.computed_cost_usd
    call["reported_cost_usd"] = reported_f
    call["cost_status"] = price.status
    call["cost_unknown"] = int(price.unknown)
    call["missing_rates"] = json.dumps(list(price.missing_rates)) if price.missing_rates else None
    call["price_source"] = price.source_json
    call["price_catalog"] = price.catalog
    call["price_id"] = price.price_id
    call["cost_provenance"] = price.provenance if price.provenance == "gateway_reported" else None
    return call


def _content_of(row: Mapping[str, Any]) -> Content | None:
    request = _as_text(row.get("request_json"))
    response = _as_text(row.get("response_text"))
    tool_calls = row.get("tool_calls")
    tools = _as_text(tool_calls) if isinstance(tool_calls, list) and tool_calls else None
    if request is None and response is None and tools is None:
        return None
    return Content(request, response, tools)


def _measures(call: dict[str, Any]) -> tuple[float, ...]:
    status = call["cost_status"]
    latency = call["latency_ms"]
    return (
        1.0,
        call["error"],
        call["cost_usd"] or 0.0,
        call["input_tokens"] or 0,
        call["output_tokens"] or 0,
        call["cache_read_tokens"] or 0,
        call["cache_write_tokens"] or 0,
        call["reasoning_tokens"] or 0,
        latency or 0.0,
        0 if latency is None else 1,
        status == "priced",
        status == "partial",
        status == "zero",
        status == "unpriced" and not call["cost_unknown"],
        call["cost_unknown"],
    )


Measures = tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.int64]]]


def batch_measures(calls: Sequence[dict[str, Any]]) -> Measures:
    """The summed columns of every call, and its latency bucket (-1 without a latency), once per batch."""
    values = np.array([_measures(c) for c in calls], dtype=np.float64).reshape(len(calls), len(SUMS))
    buckets = np.array([-1 if c["lat_bucket"] is None else c["lat_bucket"] for c in calls], dtype=np.int64)
    return values, buckets


_HOUR_MS = 3_600_000
_INT_SUMS = tuple(i for i, name in enumerate(SUMS) if name not in ("cost_usd", "latency_sum"))


def rollup_deltas(calls: Sequence[dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """For every rollup table: per (bucket, route, provider, model, environment), the summed measures
    and a latency histogram of the batch.

    Rows are grouped once, by hour and the full key; each table's groups are then folded from those
    hourly groups (a few hundred per batch), so the per-row work does not grow with the number of tables.
    """
    if not calls:
        return {table: [] for table in ROLLUPS}
    values, buckets = batch_measures(calls)
    index: dict[tuple[Any, ...], int] = {}
    positions = np.fromiter(
        (
            index.setdefault((c["ts_ms"] // _HOUR_MS, c["route"] or "", c["provider"] or "", c["model"] or "",
                              c["environment"] or ""), len(index))
            for c in calls
        ),
        dtype=np.int64,
        count=len(calls),
    )  # fmt: skip
    fine_sums = group_sum(positions, values, len(index))
    timed = buckets >= 0
    cells = np.bincount(
        positions[timed] * histogram.BUCKETS + buckets[timed], minlength=len(index) * histogram.BUCKETS
    )
    fine_hists = cells.reshape(len(index), histogram.BUCKETS).astype(np.int64)
    out: dict[str, list[tuple[Any, ...]]] = {}
    for table, (width, keep_route) in ROLLUPS.items():
        per = width // _HOUR_MS  # every rollup width is a whole number of hours
        folded: dict[tuple[Any, ...], int] = {}
        to = np.fromiter(
            (
                folded.setdefault(
                    (hour // per, route if keep_route else "", provider, model, env), len(folded)
                )
                for hour, route, provider, model, env in index
            ),
            dtype=np.int64,
            count=len(index),
        )
        sums = group_sum(to, fine_sums, len(folded))
        hists = group_sum(to, fine_hists, len(folded)).tolist()
        columns = [
            [int(v) for v in sums[:, j].tolist()] if j in _INT_SUMS else sums[:, j].tolist()
            for j in range(len(SUMS))
        ]
        out[table] = [
            (*key, *measured, *hist)
            for key, measured, hist in zip(folded, zip(*columns, strict=True), hists, strict=True)
        ]
    return out
