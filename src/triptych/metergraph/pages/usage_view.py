"""The usage overview's data: per-group totals from ``metergraph_get_usage_aggregates``'s own service call,
and per-day series of cost, calls, errors and p95 latency from the same rollups (``UsageService.grouped``),
the top groups by cost charted one by one and the rest merged into "other" (histograms merge, so the
"other" p95 is a real p95 too)."""

from __future__ import annotations

from typing import Any

from triptych.metergraph.contract import MAX_DAYS, MAX_ROWS
from triptych.metergraph.errors import InvalidArgument
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.scope import DAY_MS, environment_scope, resolve_window
from triptych.metergraph.store import AggRow, CallFilter
from triptych.metergraph.usage import UNKNOWN, UNROUTED, UsageService, measures

DIMENSIONS = ("provider", "model", "route")
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
    if not days.isdigit() or not 1 <= int(days) <= MAX_DAYS:
        raise InvalidArgument(f"days must be a whole number from 1 to {MAX_DAYS}")
    return int(days), by


def _label(dim: str, value: Any) -> str:
    if value is None:
        return UNROUTED if dim == "route" else UNKNOWN
    return str(value)


def overview(usage: UsageService, principal: AgentPrincipal, days: int, by: str) -> dict[str, Any]:
    table = usage.aggregates(principal, group_by=[by], days=days, limit=MAX_ROWS)
    charted = [item[by] for item in table["items"][:CHARTED]]

    window = resolve_window(days, None, None, usage.clock())
    envs = environment_scope(principal, None)
    f = CallFilter(principal.workspace, window.since_ms, window.until_ms, environments=envs)
    groups, _ = usage.grouped(f, window, ["day", by], None)

    first, last = window.since_ms // DAY_MS, (window.until_ms - 1) // DAY_MS
    day_numbers = list(range(first, last + 1))
    names = [*charted, OTHER]
    cells: dict[tuple[str, int], AggRow] = {}
    for (day, value), agg in groups.items():
        name = _label(by, value)
        name = name if name in charted else OTHER
        cell = cells.get((name, int(day)))
        if cell is None:
            cells[(name, int(day))] = AggRow((name, day), agg.sums.copy(), agg.hist.copy())
        else:
            cell.sums = cell.sums + agg.sums
            cell.hist = cell.hist + agg.hist
    series = []
    for name in names:
        per_day = [cells.get((name, day)) for day in day_numbers]
        if name == OTHER and not any(per_day):
            continue
        values = [measures(agg) if agg is not None else None for agg in per_day]
        series.append(
            {
                "name": name,
                **{
                    key: [
                        (v[key] if v is not None else (None if key == "p95_latency_ms" else 0))
                        for v in values
                    ]
                    for key, _ in METRICS
                },
            }
        )
    chart = {
        "x": [day * 86_400 for day in day_numbers],  # seconds, as uPlot's time axis wants
        "metrics": [{"key": key, "label": label} for key, label in METRICS],
        "series": series,
    }
    return {"table": table, "chart": chart, "by": by, "days": days}
