"""Metergraph's call model: the columns of a stored call, the batches ingest hands a store, the filter a
read covers and the aggregate rows reads answer with. Engine-free: every store (``call_store.CallStore``)
and service speaks these, and ``call_filters.py`` turns a ``CallFilter`` into SQL for either engine.

Rollups: every call is added to daily, hourly and weekly rollups keyed by (workspace, bucket, route,
provider, model, environment) with sums (``SUMS``) and a mergeable latency histogram; empty strings stand
for a missing route/provider/model/environment in rollup keys.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from triptych.metergraph import histogram
from triptych.metergraph.workload_match import WorkloadMatch

HIST_COLUMNS = tuple(f"h{i}" for i in range(histogram.BUCKETS))
# Rollup tables: name -> (bucket width in ms, keeps the route).
ROLLUPS: dict[str, tuple[int, bool]] = {
    "rollup_daily": (86_400_000, True),
    "rollup_daily_coarse": (86_400_000, False),
    "rollup_hourly_coarse": (3_600_000, False),
    "rollup_weekly_coarse": (7 * 86_400_000, False),
}
WEEK_DAYS = 7


# What priced each call (pricing.py), added by the SQLite schema's migration 7.
# The catalogue's model id is the price id's first part, and ``cost_provenance`` is stored only when it is
# not what the rest says (``traces.pricing_provenance``): each bound value costs every ingested row.
PRICING_COLUMNS = (
    "cache_write_5m_tokens", "cache_write_1h_tokens", "gateway", "reported_cost_source", "price_catalog",
    "price_id", "cost_provenance",
)  # fmt: skip
CALL_COLUMNS = (
    "workspace", "app", "source", "ts_ms", "route", "provider", "model", "environment", "operation",
    "latency_ms", "ttft_ms", "lat_bucket", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "status", "status_code", "finish_reason", "error", "error_type",
    "endpoint", "request_id", "session_id", "conversation_id", "trace_id", "span_id", "parent_span_id",
    "trace_name", "template_hash", "unit_name", "unit_count", "tool_names", "tool_call_count", "stream",
    "batch", "func", "module", "tags", "sdk", "sdk_version", "runtime", "cost_usd", "computed_cost_usd",
    "reported_cost_usd", "cost_status", "cost_unknown", "missing_rates", "price_source", "has_content",
    *PRICING_COLUMNS,
)  # fmt: skip


# Metadata values longer than this are not eligible for grouping; the SQL path and the columnar
# projection (``columns.py``) must agree.
ELIGIBLE_CHARS = 1000

SUMS = (
    "calls", "errors", "cost_usd", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "latency_sum", "latency_count", "priced", "partial", "zero", "unpriced", "unknown",
)  # fmt: skip
ROLLUP_KEY = ("route", "provider", "model", "environment")
DIMENSIONS = ("provider", "model", "route", "day")
# ClickHouse's TTL when no retention is set (a TTL needs a number): ten years.
DEFAULT_RETENTION_DAYS = 3650


@dataclass
class CallBatch:
    """Normalized calls, column by column, in batch order: ``constants`` holds the columns with one value
    for the whole batch (workspace, app, source), ``columns`` a list for each other ``CALL_COLUMNS`` name.
    Ingest builds and the store consumes whole columns, so no dict is built per row."""

    size: int
    constants: dict[str, Any]
    columns: dict[str, list[Any]]

    def column(self, name: str) -> list[Any]:
        if name in self.constants:
            return [self.constants[name]] * self.size
        return self.columns[name]

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]], names: Sequence[str]) -> CallBatch:
        columns = [list(c) for c in zip(*([r[name] for name in names] for r in rows), strict=True)]
        if not columns:
            columns = [[] for _ in names]
        return cls(len(rows), {}, dict(zip(names, columns, strict=True)))

    def take(self, keep: Sequence[bool]) -> CallBatch:
        """The rows marked in ``keep``, in order."""
        columns = {name: list(itertools.compress(values, keep)) for name, values in self.columns.items()}
        return CallBatch(sum(keep), self.constants, columns)

    def rows(self) -> list[dict[str, Any]]:
        """Row by row, every ``CALL_COLUMNS`` name (tests; the hot path never builds these)."""
        values = [self.column(name) for name in CALL_COLUMNS]
        return [dict(zip(CALL_COLUMNS, row, strict=True)) for row in zip(*values, strict=True)]


@dataclass
class Content:
    request_text: str | None
    response_text: str | None
    tool_calls: str | None


@dataclass
class CallFilter:
    """Which calls a read covers. ``environments`` None = every environment (untagged included)."""

    workspace: str
    since_ms: int
    until_ms: int
    routes: Sequence[str] | None = None
    providers: Sequence[str] | None = None
    models: Sequence[str] | None = None
    environments: Sequence[str] | None = None
    metadata: Sequence[tuple[str, str]] = ()
    status: str | None = None
    trace_id: str | None = None  # a trace key: a trace id, or ``call:<id>`` for a call without one
    request_id: str | None = None
    workload: WorkloadMatch | None = None  # a saved workload's calls (``workload_match.py``)

    @property
    def selects_calls(self) -> bool:
        """A filter the rollups do not hold: the raw calls answer it."""
        return bool(
            self.metadata or self.status is not None or self.trace_id is not None
            or self.request_id is not None or self.workload is not None
        )  # fmt: skip


@dataclass
class AggRow:
    key: tuple[Any, ...]
    sums: np.ndarray[Any, np.dtype[np.float64]] = field(default_factory=lambda: np.zeros(len(SUMS)))
    hist: histogram.Hist = field(default_factory=histogram.empty)

    def get(self, name: str) -> float:
        return float(self.sums[SUMS.index(name)])


class RawAggregator(Protocol):
    """A faster answer to ``aggregate_raw``, or None when the SQL scan must give it."""

    def aggregate(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow] | None: ...


PROJECTED_FIELDS = (
    "id", "workspace", "ts_ms", "route", "provider", "model", "environment", "status", "error", "latency_ms",
    "lat_bucket", "cost_usd", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "cost_status", "cost_unknown", "tags",
)  # fmt: skip
# What ``retained_calls`` gives of each call, besides its request_text and response_text.
RETAINED_FIELDS = (
    "id", "trace_id", "ts_ms", "route", "provider", "model", "input_tokens", "output_tokens", "cost_usd",
)  # fmt: skip
