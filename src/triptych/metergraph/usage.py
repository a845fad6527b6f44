"""Usage reads: route/day usage and server-side aggregates, from rollups when they can answer.

Aggregates without a metadata dimension or filter read the rollups: daily rollups answer a ``days=N``
window (whole UTC days), with whole weeks from the weekly rollup when neither route nor day is asked
for; an exact ``since``/``until`` window reads those for its whole days, hourly rollups for whole hours
at its edges and raw calls only for the partial hours. Metadata reads
scan the raw calls, because rollups keep no metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from triptych.metergraph import histogram
from triptych.metergraph.call_model import DIMENSIONS, WEEK_DAYS, AggRow, CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.contract import MAX_ROWS, envelope, warning
from triptych.metergraph.errors import InvalidArgument
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.scope import (
    DAY_MS,
    HOUR_MS,
    Window,
    check_metadata_key,
    clip_to_retention,
    environment_scope,
    metadata_pairs,
    resolve_window,
)

UNKNOWN = "(unknown)"
UNROUTED = "(unrouted)"
META_PREFIX = "metadata."

Groups = dict[tuple[Any, ...], AggRow]


def _merge(into: Groups, other: Groups) -> None:
    for key, agg in other.items():
        mine = into.get(key)
        if mine is None:
            into[key] = agg
        else:
            mine.sums = mine.sums + agg.sums
            mine.hist = mine.hist + agg.hist


def pricing_summary(agg: AggRow) -> dict[str, Any]:
    partial, unpriced, unknown = int(agg.get("partial")), int(agg.get("unpriced")), int(agg.get("unknown"))
    return {
        "cost": "exact" if partial + unpriced + unknown == 0 else "lower_bound",
        "priced_calls": int(agg.get("priced")),
        "partial_calls": partial,
        "zero_cost_calls": int(agg.get("zero")),
        "unpriced_calls": unpriced,
        "unknown_calls": unknown,
    }


def measures(agg: AggRow) -> dict[str, Any]:
    calls = int(agg.get("calls"))
    # Always a number, as the product's schema requires: the cost of the calls that have a price. Where
    # some have none it is a lower bound, and the group's ``pricing.cost`` says so (``pricing_summary``).
    cost = round(agg.get("cost_usd"), 10)
    latency_count = agg.get("latency_count")
    return {
        "calls": calls,
        "errors": int(agg.get("errors")),
        "cost_usd": cost,
        "cost_per_call_usd": round(cost / calls, 10) if calls else None,
        "input_tokens": int(agg.get("input_tokens")),
        "output_tokens": int(agg.get("output_tokens")),
        "cache_read_tokens": int(agg.get("cache_read_tokens")),
        "cache_write_tokens": int(agg.get("cache_write_tokens")),
        "reasoning_tokens": int(agg.get("reasoning_tokens")),
        "avg_latency_ms": round(agg.get("latency_sum") / latency_count) if latency_count else None,
        "p95_latency_ms": histogram.quantile(agg.hist, 0.95),
    }


def _day(value: Any) -> str:
    return datetime.fromtimestamp(int(value) * 86_400, UTC).date().isoformat()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class UsageService:
    def __init__(self, store: CallStore, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock

    # -- the engine: rollups where they answer, raw calls elsewhere -----------------------------

    def grouped(
        self, f: CallFilter, window: Window, dims: Sequence[str], meta_key: str | None
    ) -> tuple[Groups, list[str]]:
        """Rollups where they answer, raw calls elsewhere.

        Route-free reads use the coarse rollups (provider, model, environment): weekly for whole weeks
        (unless grouped by day), daily for the other whole days, hourly for the whole hours at an exact
        window's edges. Reads that group or filter by route use
        the daily route rollup for whole days and raw calls for partial days. Metadata reads scan raw calls.
        """
        if meta_key is not None or f.metadata:
            return self.store.aggregate_raw(f, dims, meta_key), ["calls"]
        coarse = "route" not in dims and f.routes is None
        daily = "rollup_daily_coarse" if coarse else "rollup_daily"
        s, u = f.since_ms, f.until_ms
        groups: Groups = {}
        sources: list[str] = []

        def rollup(table: str, lo: int, hi: int, per_day: int) -> None:
            if lo < hi:
                _merge(groups, self.store.aggregate_rollups(table, f, lo, hi, dims, per_day))
                if table not in sources:
                    sources.append(table)

        def raw(lo: int, hi: int) -> None:
            if lo < hi:
                _merge(
                    groups,
                    self.store.aggregate_raw(
                        CallFilter(**{**f.__dict__, "since_ms": lo, "until_ms": hi}), dims, None
                    ),
                )
                if "calls" not in sources:
                    sources.append("calls")

        def whole_days(lo: int, hi: int) -> None:
            # Route-free reads without a day dimension take whole weeks from the weekly rollup.
            w_lo, w_hi = _ceil_div(lo, WEEK_DAYS), hi // WEEK_DAYS
            if not coarse or "day" in dims or w_lo >= w_hi:
                rollup(daily, lo, hi, 1)
                return
            rollup("rollup_weekly_coarse", w_lo, w_hi, 1)
            rollup(daily, lo, w_lo * WEEK_DAYS, 1)
            rollup(daily, w_hi * WEEK_DAYS, hi, 1)

        if window.days is not None:  # whole UTC days
            whole_days(s // DAY_MS, _ceil_div(u, DAY_MS))
            return groups, sources
        d_start, d_end = _ceil_div(s, DAY_MS), u // DAY_MS
        if not coarse:
            if d_start < d_end:
                rollup(daily, d_start, d_end, 1)
                raw(s, d_start * DAY_MS)
                raw(d_end * DAY_MS, u)
            else:
                raw(s, u)
            return groups, sources
        h_start, h_end = _ceil_div(s, HOUR_MS), u // HOUR_MS
        if h_start >= h_end:
            raw(s, u)
            return groups, sources
        if d_start < d_end:
            whole_days(d_start, d_end)
            rollup("rollup_hourly_coarse", h_start, d_start * 24, 24)
            rollup("rollup_hourly_coarse", d_end * 24, h_end, 24)
        else:
            rollup("rollup_hourly_coarse", h_start, h_end, 24)
        raw(s, h_start * HOUR_MS)
        raw(h_end * HOUR_MS, u)
        return groups, sources

    # -- metergraph_get_usage_aggregates --------------------------------------------------------

    def aggregates(
        self,
        principal: AgentPrincipal,
        *,
        group_by: Sequence[str] | None = None,
        days: int | None = None,
        since: str | None = None,
        until: str | None = None,
        routes: Sequence[str] | None = None,
        providers: Sequence[str] | None = None,
        models: Sequence[str] | None = None,
        environments: Sequence[str] | None = None,
        metadata: dict[str, str] | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        group_by = list(group_by) if group_by else ["provider", "model"]
        dims: list[str] = []
        meta_key: str | None = None
        for entry in group_by:
            if entry.startswith(META_PREFIX):
                if meta_key is not None:
                    raise InvalidArgument("group_by takes at most one metadata.<key> entry")
                meta_key = entry[len(META_PREFIX) :]
                check_metadata_key(meta_key, "the metadata group key")
            elif entry in DIMENSIONS:
                dims.append(entry)
            else:
                raise InvalidArgument("group_by entries are provider, model, route, day or metadata.<key>")
        if len(set(group_by)) != len(group_by):
            raise InvalidArgument("group_by entries must be distinct")
        now = self.clock()
        requested = resolve_window(days, since, until, now)
        window = clip_to_retention(requested, self.store.retention_days, now)
        pairs = metadata_pairs(metadata)
        envs = environment_scope(principal, environments)
        f = CallFilter(
            principal.workspace, window.since_ms, window.until_ms, routes, providers, models, envs, pairs
        )
        raw, sources = self.grouped(f, window, dims, meta_key)

        # Fold the metadata class into a (value | None) column: missing and ineligible form the null group.
        groups: Groups = {}
        missing = AggRow(("m",))
        ineligible = AggRow(("i",))
        for key, agg in raw.items():
            if meta_key is None:
                _merge(groups, {key: agg})
                continue
            *dim_values, cls, value = key
            if cls == "m":
                _merge({("m",): missing}, {("m",): agg})
            elif cls == "i":
                _merge({("i",): ineligible}, {("i",): agg})
            _merge(
                groups,
                {(*dim_values, value if cls == "v" else None): AggRow(key, agg.sums.copy(), agg.hist.copy())},
            )
        totals = AggRow(())
        for agg in groups.values():
            _merge({(): totals}, {(): AggRow((), agg.sums.copy(), agg.hist.copy())})
        # Ranked by the cost as shown (rounded): a group's cost adds rollup rows in the order the engine
        # returned them, and ClickHouse's order varies, so equal costs may differ in their last bit.
        ordered = sorted(
            groups.items(),
            key=lambda kv: (-round(kv[1].get("cost_usd"), 10), -kv[1].get("calls"), repr(kv[0])),
        )
        listed, rest = ordered[:limit], ordered[limit:]
        truncated = bool(rest)

        items = []
        for key, agg in listed:
            item: dict[str, Any] = {}
            for dim, value in zip(dims, key, strict=False):
                if dim == "day":
                    item["day"] = _day(value)
                elif dim == "route":
                    item["route"] = value if value is not None else UNROUTED
                else:
                    item[dim] = value if value is not None else UNKNOWN
            if meta_key is not None:
                item[META_PREFIX + meta_key] = key[-1]
            item.update(measures(agg))
            item["pricing"] = pricing_summary(agg)
            items.append(item)

        total_calls = int(totals.get("calls"))
        reasons: list[str] = []
        warnings: list[dict[str, str]] = []
        if truncated:
            reasons.append("row_limit")
            warnings.append(
                warning("truncated", f"{len(rest)} more groups matched than the limit of {limit}")
            )
            warnings.append(
                warning("coverage_incomplete", "items do not list every group; totals cover them all")
            )
        response_extra: dict[str, Any] = {}
        if meta_key is not None:
            missing_calls, ineligible_calls = int(missing.get("calls")), int(ineligible.get("calls"))
            if missing_calls:
                reasons.append("metadata_key_missing")
            if ineligible_calls:
                reasons.append("metadata_value_ineligible")
            other = AggRow(())
            other_groups = 0
            for key, agg in rest:
                if key[-1] is not None:
                    other_groups += 1
                    _merge({(): other}, {(): AggRow((), agg.sums.copy(), agg.hist.copy())})
            response_extra["metadata_groups"] = {
                "key": meta_key,
                "unlisted": {
                    "other_values": {"groups": other_groups, "calls": int(other.get("calls")),
                                     "cost_usd": round(other.get("cost_usd"), 10)},
                    "missing_key": {"calls": missing_calls, "cost_usd": round(missing.get("cost_usd"), 10)},
                    "ineligible_value": {"calls": ineligible_calls,
                                         "cost_usd": round(ineligible.get("cost_usd"), 10)},
                },
            }  # fmt: skip
            null_calls = missing_calls + ineligible_calls
            null_cost = missing.get("cost_usd") + ineligible.get("cost_usd")
            total_cost = totals.get("cost_usd")
            if total_calls and (
                null_calls * 2 >= total_calls or (total_cost > 0 and null_cost * 2 >= total_cost)
            ):
                if null_calls == total_calls:
                    message = (
                        "no call in the window carries this metadata key: check its spelling and that the SDK"
                        " sets it; every call is in the null group"
                    )
                else:
                    message = "at least half of the window's calls or cost carry no usable value for this key"
                warnings.append(warning("metadata_key_mostly_missing", message))
        if window.clipped:
            reasons.append("retention_clipped")
        completeness = "partial" if truncated or window.clipped else "complete"
        coverage = {
            "rows": {
                "shape": "top_n",
                "returned": len(items),
                "limit": limit,
                "truncated": truncated,
                "matched": len(groups),
            },
            "totals_scope": "population",
            "completeness": completeness,
            "reasons": reasons,
            "requested_window": requested.as_dict(),
            "effective_window": window.as_dict(),
            "filters": _filters_echo(routes, providers, models, envs, pairs),
        }
        pricing = pricing_summary(totals)
        totals_out = {**measures(totals), "pricing": pricing}
        return envelope(
            principal.workspace,
            now,
            warnings=warnings,
            content_included=False,
            window=window.as_dict(),
            group_by=group_by,
            items=items,
            totals=totals_out,
            pricing=pricing,
            coverage=coverage,
            **response_extra,
            truncated=truncated,
            page={"limit": limit, "truncated": truncated, "next_cursor": None},
            evidence={"sources": sources, "rows": total_calls, "complete": not truncated},
        )

    # -- metergraph_get_usage -------------------------------------------------------------------

    def usage(
        self, principal: AgentPrincipal, days: int, limit: int, metadata: dict[str, str] | None
    ) -> dict[str, Any]:
        now = self.clock()
        requested = resolve_window(days, None, None, now)
        window = clip_to_retention(requested, self.store.retention_days, now)
        pairs = metadata_pairs(metadata)
        envs = environment_scope(principal, None)
        f = CallFilter(
            principal.workspace, window.since_ms, window.until_ms, environments=envs, metadata=pairs
        )
        groups, sources = self.grouped(f, window, ["day", "route"], None)
        totals = AggRow(())
        for agg in groups.values():
            _merge({(): totals}, {(): AggRow((), agg.sums.copy(), agg.hist.copy())})
        ordered = sorted(groups.items(), key=lambda kv: (-int(kv[0][0]), kv[0][1] or ""))
        listed = ordered[:limit]
        truncated = len(ordered) > limit
        items = []
        for (day, route), agg in listed:
            m = measures(agg)
            items.append(
                {
                    "date": _day(day),
                    "route": route if route is not None else UNROUTED,
                    "calls": m["calls"],
                    "cost_usd": m["cost_usd"],
                    "input_tokens": m["input_tokens"],
                    "output_tokens": m["output_tokens"],
                    "cache_read_tokens": m["cache_read_tokens"],
                    "cache_write_tokens": m["cache_write_tokens"],
                    "avg_latency_ms": m["avg_latency_ms"],
                    "p95_latency_ms": m["p95_latency_ms"],
                    "error_calls": m["errors"],
                    "pricing": pricing_summary(agg),
                }
            )
        warnings = []
        if truncated:
            warnings.append(warning("truncated", f"more route/day rows matched than the limit of {limit}"))
        total_calls = int(totals.get("calls"))
        pricing = pricing_summary(totals)
        return envelope(
            principal.workspace,
            now,
            warnings=warnings,
            window=window.as_dict(),
            days=days,
            content_included=False,
            truncated=truncated,
            items=items,
            totals={**measures(totals), "pricing": pricing},
            pricing=pricing,
            coverage={
                "rows": {
                    "shape": "top_n",
                    "returned": len(items),
                    "limit": limit,
                    "truncated": truncated,
                    "matched": len(ordered),
                },
                "totals_scope": "population",
                "completeness": "partial" if truncated or window.clipped else "complete",
                "reasons": ["row_limit"] * truncated + ["retention_clipped"] * window.clipped,
                "requested_window": requested.as_dict(),
                "effective_window": window.as_dict(),
                "filters": _filters_echo(None, None, None, envs, pairs),
            },  # fmt: skip
            page={"limit": limit, "truncated": truncated, "next_cursor": None},
            evidence={"sources": sources, "rows": total_calls, "complete": not truncated},
        )


def _filters_echo(
    routes: Sequence[str] | None,
    providers: Sequence[str] | None,
    models: Sequence[str] | None,
    environments: Sequence[str] | None,
    pairs: Sequence[tuple[str, str]],
) -> dict[str, Any]:
    return {
        "route": list(routes) if routes else [],
        "provider": list(providers) if providers else [],
        "model": list(models) if models else [],
        "environment": list(environments) if environments is not None else [],
        "metadata": [{"key": k, "value": v} for k, v in pairs],
    }


__all__ = ["MAX_ROWS", "UsageService"]
