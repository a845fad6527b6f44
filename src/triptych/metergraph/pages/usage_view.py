"""The usage overview's data: per-group totals from ``metergraph_get_usage_aggregates``'s own service call,
and per-day series of cost, calls, errors and p95 latency from the same rollups (``UsageService.grouped``),
the top groups by cost charted one by one and the rest as "other"."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import numpy as np

from triptych.metergraph import histogram
from triptych.metergraph.call_model import AggRow, CallFilter
from triptych.metergraph.contract import MAX_DAYS, MAX_ROWS
from triptych.metergraph.errors import InvalidArgument
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.scope import DAY_MS, clip_to_retention, environment_scope, resolve_window
from triptych.metergraph.usage import UNKNOWN, UNROUTED, UsageService, measures

DIMENSIONS = ("provider", "model", "route")
_DAYS = re.compile(r"[0-9]{1,3}")
DIMENSION_FILTERS = {"provider": "providers", "model": "models", "route": "routes"}
CHARTED = 8  # series per chart; the rest are merged into "other"
OTHER = "(other)"
METRICS = (
    ("cost_usd", "Cost (USD)"),
    ("calls", "Calls"),
    ("errors", "Errors"),
    ("p95_latency_ms", "p95 latency (ms)"),
)


def parse_query(days: str | None, by: str | None) -> tuple[int, str]:
    by = by or "provider"
    if by not in DIMENSIONS:
        raise InvalidArgument("by must be provider, model or route")
    if days is None:
        return 7, by
    # ASCII digits only: str.isdigit() takes "²", which int() then refuses.
    if not _DAYS.fullmatch(days) or not 1 <= int(days) <= MAX_DAYS:
        raise InvalidArgument(f"days must be a whole number from 1 to {MAX_DAYS}")
    return int(days), by


def _label(dim: str, value: Any) -> str:
    if value is None:
        return UNROUTED if dim == "route" else UNKNOWN
    return str(value)


def overview(usage: UsageService, principal: AgentPrincipal, days: int, by: str) -> dict[str, Any]:
    table = usage.aggregates(principal, group_by=[by], days=days, limit=MAX_ROWS)
    # Charted: the top groups by cost that a filter can name ("(unknown)" / "(unrouted)" go to "other").
    charted = [item[by] for item in table["items"] if item[by] not in (UNKNOWN, UNROUTED)][:CHARTED]

    now = usage.clock()
    window = clip_to_retention(resolve_window(days, None, None, now), usage.store.retention_days, now)
    envs = environment_scope(principal, None)
    whole = CallFilter(principal.workspace, window.since_ms, window.until_ms, environments=envs)
    # Two rollup reads: the charted groups by day, and every call by day; "other" is the difference
    # (sums and latency histograms are both additive, so its p95 is a real p95 too). Reading every group
    # by day instead costs days x groups rows (27,000 for 90 days of 300 routes).
    per_group: dict[tuple[Any, ...], AggRow] = {}
    if charted:
        only = CallFilter(**{**whole.__dict__, DIMENSION_FILTERS[by]: charted})
        per_group, _ = usage.grouped(only, window, ["day", by], None)
    per_day, _ = usage.grouped(whole, window, ["day"], None)

    first, last = window.since_ms // DAY_MS, (window.until_ms - 1) // DAY_MS
    day_numbers = list(range(first, last + 1))
    cells: dict[tuple[str, int], AggRow] = {}
    for (day, value), agg in per_group.items():
        cells[(_label(by, value), int(day))] = agg
    for (day,), agg in per_day.items():
        rest = AggRow((OTHER, day), agg.sums.copy(), agg.hist.astype(np.int64))
        for name in charted:
            mine = cells.get((name, int(day)))
            if mine is not None:
                rest.sums = rest.sums - mine.sums
                rest.hist = rest.hist - mine.hist
        if rest.get("calls") > 0:
            rest.sums = np.clip(rest.sums, 0, None)
            rest.hist = np.clip(rest.hist, 0, None).astype(histogram.DTYPE)
            cells[(OTHER, int(day))] = rest
    series = []
    gap_calls, gap_days = 0, set[int]()
    for name in [*charted, OTHER]:
        per = [cells.get((name, day)) for day in day_numbers]
        if name == OTHER and not any(per):
            continue
        values = [measures(agg) if agg is not None else None for agg in per]
        unpriced = [_without_price(agg) for agg in per]
        cost: list[float | None] = []
        for day, cell, v in zip(day_numbers, per, values, strict=True):
            if cell is not None and _unpriced_only(cell):
                # Nothing that day has a price: a gap, not a $0 that reads as free.
                cost.append(None)
                gap_calls += int(cell.get("calls"))
                gap_days.add(day)
            else:
                cost.append(v["cost_usd"] if v is not None else 0)
        series.append(
            {
                "name": name,
                "cost_usd": cost,
                **{
                    key: [
                        (v[key] if v is not None else (None if key == "p95_latency_ms" else 0))
                        for v in values
                    ]
                    for key, _ in METRICS
                    if key != "cost_usd"
                },
                "unpriced": unpriced,
            }
        )
    dates = [datetime.fromtimestamp(day * 86_400, UTC) for day in day_numbers]
    chart = {
        "x": [day * 86_400 for day in day_numbers],  # seconds since the epoch, at each UTC day's midnight
        # Labels made here, in UTC, so the browser's time zone never moves a day (charts.js does no dates).
        "days": [d.date().isoformat() for d in dates],
        "labels": [f"{d:%b} {d.day}" for d in dates],
        "metrics": [{"key": key, "label": label} for key, label in METRICS],
        "series": series,
        "unpriced": {"calls": gap_calls, "days": len(gap_days)},
    }
    return {"table": table, "chart": chart, "by": by, "days": days}


def _without_price(agg: AggRow | None) -> int:
    return 0 if agg is None else int(agg.get("unpriced")) + int(agg.get("unknown"))


def _unpriced_only(agg: AggRow) -> bool:
    """Calls that day, none of them with a price (not even a partial or a known zero)."""
    has_price = agg.get("priced") + agg.get("partial") + agg.get("zero")
    return agg.get("calls") > 0 and has_price == 0
