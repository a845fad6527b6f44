"""The ClickHouse engine's trace reads, the ``CallStore`` trace methods ``ClickHouseCallStore`` inherits:
the embedded engine's answers, walked along the primary key (workspace, ts_ms, id)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from triptych.metergraph.call_model import CALL_COLUMNS, CallFilter
from triptych.metergraph.clickhouse_client import ClickHouseConnection
from triptych.metergraph.clickhouse_schema import TRACE_BOUNDS
from triptych.metergraph.clickhouse_sql import (
    SUMMARY,
    TRACE_KEY,
    Where,
    call_where,
    json_list,
    workspace_where,
)
from triptych.metergraph.scope import DAY_MS


class ClickHouseTraceReads(ClickHouseConnection):
    def trace_page(
        self,
        f: CallFilter,
        trace_filter_envs: Sequence[str] | None,
        cursor: tuple[int, int] | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Traces newest first by their newest matching call (ts_ms, id), after ``cursor``.

        The embedded engine's walk, in chunks: matching calls newest first along the primary key
        (workspace, ts_ms, id), so ClickHouse reads the newest granules only and stops at the chunk's
        LIMIT; a trace's first call in the walk is its position (after a cursor, its newest matching
        call overall, which may lie after the cursor: such a trace was on an earlier page). A trace with
        a span outside ``trace_filter_envs`` is left out."""
        keys: list[str] = []
        positions: dict[str, tuple[int, int]] = {}
        seen: set[str] = set()
        after: tuple[int, int] | None = None  # the walk's last call so far
        top = min(f.until_ms, cursor[0] + 1) if cursor is not None else f.until_ms
        # Each chunk also reads only the last ``span`` ms (a day, then 8 times more) above the walk's
        # position, so ClickHouse opens the newest day's parts rather than the head of every part in the
        # window; a chunk that comes back short widens it. The first chunk's day ends at the wall clock,
        # not at the window's end (the end of the current UTC day): just after midnight today holds few
        # calls, and a first chunk of today alone would come back short and widen to the whole window.
        # Only the floor moves: calls above the clock still match, so this is a hint, never a filter.
        top = min(top, int(time.time() * 1000) + 1)
        span, want = DAY_MS, max(4 * limit, 64)
        while len(keys) < limit:
            w = call_where(f)
            if cursor is not None:
                w.add(f"ts_ms <= {w.param(cursor[0], 'Int64')}")
            if after is not None:
                w.add(f"(ts_ms, id) < ({w.param(after[0], 'Int64')}, {w.param(after[1], 'UInt64')})")
            floor = max(f.since_ms, (after[0] + 1 if after is not None else top) - span)
            w.add(f"ts_ms >= {w.param(floor, 'Int64')}")
            sql = (
                f"SELECT {TRACE_KEY} AS k, trace_id IS NULL AS single, ts_ms, id FROM calls"
                f" WHERE {w.sql()} ORDER BY ts_ms DESC, id DESC LIMIT {int(want)}"
            )
            rows = self.query(sql, parameters=w.params).result_rows
            found: list[tuple[str, bool, tuple[int, int]]] = []
            for key, single, ts_ms, call_id in rows:
                if key not in seen:
                    seen.add(key)
                    found.append((str(key), bool(single), (int(ts_ms), int(call_id))))
            if rows:
                after = (int(rows[-1][2]), int(rows[-1][3]))
            traces = [key for key, single, _ in found if not single]
            if cursor is not None and traces:
                newest = self._newest_matching(f, traces)
                found = [(k, single, newest.get(k, p)) for k, single, p in found]
                found = [c for c in found if c[2] < cursor]
            if trace_filter_envs is not None:
                outside = self._traces_outside(f.workspace, traces, trace_filter_envs)
                found = [c for c in found if c[0] not in outside]
            for key, _, position in found:
                if len(keys) < limit:
                    keys.append(key)
                    positions[key] = position
            if len(rows) < want:
                if floor <= f.since_ms:
                    break  # the window is walked to its start
                if after is None:
                    after = (floor, 0)  # nothing matched above the floor: continue below it (ids start at 1)
                span *= 8
            else:
                want *= 2
        summaries = self.trace_summaries(f, keys)
        for summary in summaries:
            summary["position"] = positions[summary["trace_key"]]
        return summaries

    def _span_bounds(self, workspace: str, trace_ids: Sequence[str], w: Where) -> str:
        """A clause selecting these traces' calls within their first and last call times (a range of
        the primary key), from ``trace_bounds``; its values go into ``w``.

        The bounds are scalar subqueries, which ClickHouse runs before it analyses the outer query's
        primary key, so the range still prunes parts and granules, without a round trip of its own
        (a trace page's fixed cost is mostly its queries' count). A trace without bounds has no calls:
        ``min``/``max`` of nothing are 0, and no call lies in [0, 0] with its id."""
        ids = w.param(list(trace_ids), "Array(String)")
        bounds = f"FROM {TRACE_BOUNDS} WHERE workspace = {w.param(workspace, 'String')} AND trace_id IN {ids}"
        first, last = f"(SELECT min(first_ms) {bounds})", f"(SELECT max(last_ms) {bounds})"
        return f"trace_id IN {ids} AND ts_ms >= {first} AND ts_ms <= {last}"

    def _newest_matching(self, f: CallFilter, trace_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        w = call_where(f)
        w.add(self._span_bounds(f.workspace, trace_ids, w))
        sql = f"SELECT trace_id, max((ts_ms, id)) FROM calls WHERE {w.sql()} GROUP BY trace_id"
        return {
            str(k): (int(pos[0]), int(pos[1])) for k, pos in self.query(sql, parameters=w.params).result_rows
        }

    def _traces_outside(self, workspace: str, trace_ids: Sequence[str], envs: Sequence[str]) -> set[str]:
        if not trace_ids:
            return set()
        w = workspace_where(workspace)
        w.add(self._span_bounds(workspace, trace_ids, w))
        if envs:
            w.add(f"(environment IS NULL OR environment NOT IN {w.param(list(envs), 'Array(String)')})")
        sql = f"SELECT DISTINCT trace_id FROM calls WHERE {w.sql()}"
        return {str(r[0]) for r in self.query(sql, parameters=w.params).result_rows}

    def trace_summaries(self, f: CallFilter, keys: Sequence[str]) -> list[dict[str, Any]]:
        """The summaries of these traces' matching calls: the traces' calls read within their bounds,
        the single calls (``call:<id>``) by id, in one query."""
        if not keys:
            return []
        trace_ids = [k for k in keys if not k.startswith("call:")]
        call_ids = [int(k[5:]) for k in keys if k.startswith("call:") and k[5:].isdigit()]
        w = call_where(f)
        base = w.sql()
        parts = []
        if trace_ids:
            parts.append(f"{base} AND {self._span_bounds(f.workspace, trace_ids, w)}")
        if call_ids:
            parts.append(f"{base} AND trace_id IS NULL AND id IN {w.param(call_ids, 'Array(UInt64)')}")
        sql = " UNION ALL ".join(
            f"SELECT {SUMMARY} FROM calls WHERE {part} GROUP BY trace_key" for part in parts
        )
        found: dict[str, dict[str, Any]] = {}
        for row in self.query(sql, parameters=w.params).result_rows:
            (key, name, first, last, count, it, ot, crt, cwt, rt, cost, unpriced, error, routes, providers,
             models, envs, latency, untagged) = row  # fmt: skip
            found[key] = {
                "trace_key": key, "trace_name": name, "first_ms": first, "last_ms": last, "span_count": count,
                "input_tokens": it, "output_tokens": ot, "cache_read_tokens": crt, "cache_write_tokens": cwt,
                "reasoning_tokens": rt, "cost_usd": cost, "unpriced_calls": unpriced, "error": error,
                "routes": json_list(routes), "providers": json_list(providers),
                "models": json_list(models), "envs": json_list(envs, with_null=bool(untagged)),
                "latency_ms": latency,
            }  # fmt: skip
        return [found[k] for k in keys if k in found]

    def sample_calls(self, f: CallFilter, slices: Sequence[tuple[int, int]]) -> list[str]:
        """For each [start, end) slice, the trace key of the matching call nearest the slice's middle
        (the earlier id on a tie)."""
        found: list[str] = []
        for start, end in slices:
            lo, hi = max(f.since_ms, start), min(f.until_ms, end)
            if lo >= hi:
                continue
            w = call_where(CallFilter(**{**f.__dict__, "since_ms": lo, "until_ms": hi}))
            middle = w.param((start + end) // 2, "Int64")
            sql = f"SELECT {TRACE_KEY} FROM calls WHERE {w.sql()} ORDER BY abs(ts_ms - {middle}), id LIMIT 1"
            rows = self.query(sql, parameters=w.params).result_rows
            if rows:
                found.append(str(rows[0][0]))
        return found

    def trace_spans(self, workspace: str, trace_key: str, limit: int) -> list[dict[str, Any]]:
        w = workspace_where(workspace)
        if trace_key.startswith("call:") and trace_key[5:].isdigit():
            w.add(f"id = {w.param(int(trace_key[5:]), 'UInt64')}")
        else:
            w.add(f"trace_id = {w.param(trace_key, 'String')}")
        spans = self.rows(f"SELECT id, {', '.join(CALL_COLUMNS)} FROM calls WHERE {w.sql()}"
                           f" ORDER BY ts_ms, id LIMIT {int(limit)}", w.params)  # fmt: skip
        content = self.content(workspace, [s["id"] for s in spans if s["has_content"]])
        for span in spans:
            text = content.get(span["id"])
            span["request_text"] = text[0] if text else None
            span["response_text"] = text[1] if text else None
            span["content_tool_calls"] = text[2] if text else None
        return spans

    def content(self, workspace: str, ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        if not ids:
            return {}
        w = workspace_where(workspace)
        w.add(f"call_id IN {w.param(list(ids), 'Array(UInt64)')}")
        sql = f"SELECT call_id, request_text, response_text, tool_calls FROM call_content WHERE {w.sql()}"
        return {int(r[0]): tuple(r[1:]) for r in self.query(sql, parameters=w.params).result_rows}
