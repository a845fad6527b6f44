"""The embedded engine's trace reads, the ``CallStore`` trace methods ``SqliteCallStore`` inherits:
pages of traces newest first, their summaries, samples and one trace's spans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from triptych.core.db import Database
from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.sqlite_sql import call_where, placeholders


class SqliteTraceReads:
    db: Database  # the metergraph file (``SqliteCallStore`` sets it)

    def trace_page(
        self,
        f: CallFilter,
        trace_filter_envs: Sequence[str] | None,
        cursor: tuple[int, int] | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Traces (grouped by trace id; a call without one is its own trace) newest first.

        Walks matching calls newest first along the (workspace, ts_ms) index and stops after ``limit``
        distinct traces, so a page costs about ``limit`` traces' worth of rows, not the whole window. A
        trace's position is its newest matching call (ts_ms, id), returned as ``position``; a cursor
        resumes after it.
        """
        params: list[Any] = []
        where = call_where(f, params)
        if cursor is not None:
            where += " AND ts_ms <= ?"
            params.append(cursor[0])
        sql = f"SELECT id, ts_ms, trace_id FROM calls WHERE {where} ORDER BY ts_ms DESC, id DESC"
        seen: set[str] = set()
        keys: list[str] = []
        positions: dict[str, tuple[int, int]] = {}
        for call_id, ts_ms, trace_id in self.db.conn.execute(sql, params):
            key = trace_id if trace_id is not None else f"call:{call_id}"
            if key in seen:
                continue
            seen.add(key)
            position = (ts_ms, call_id)
            if cursor is not None:
                if trace_id is not None:
                    position = self._newest_matching(f, trace_id)
                if position >= cursor:
                    continue  # listed on an earlier page
            if (
                trace_filter_envs is not None
                and trace_id is not None
                and self._has_span_outside(f.workspace, trace_id, trace_filter_envs)
            ):
                continue
            keys.append(key)
            positions[key] = position
            if len(keys) >= limit:
                break
        summaries = self.trace_summaries(f, keys)
        for summary in summaries:
            summary["position"] = positions[summary["trace_key"]]
        return summaries

    def _newest_matching(self, f: CallFilter, trace_id: str) -> tuple[int, int]:
        params: list[Any] = []
        where = call_where(f, params)
        row = self.db.conn.execute(
            f"SELECT ts_ms, id FROM calls WHERE {where} AND trace_id = ? ORDER BY ts_ms DESC, id DESC LIMIT 1",
            [*params, trace_id],
        ).fetchone()
        return int(row[0]), int(row[1])

    def _has_span_outside(self, workspace: str, trace_id: str, envs: Sequence[str]) -> bool:
        row = self.db.conn.execute(
            "SELECT 1 FROM calls WHERE workspace = ? AND trace_id = ?"
            f" AND (environment IS NULL OR environment NOT IN ({placeholders(envs)})) LIMIT 1",
            [workspace, trace_id, *envs],
        ).fetchone()
        return row is not None

    def trace_summaries(self, f: CallFilter, keys: Sequence[str]) -> list[dict[str, Any]]:
        if not keys:
            return []
        trace_ids = [k for k in keys if not k.startswith("call:")]
        call_ids = [int(k[5:]) for k in keys if k.startswith("call:") and k[5:].isdigit()]
        parts: list[str] = []
        params: list[Any] = []
        if trace_ids:
            where = call_where(f, params)
            parts.append(
                f"SELECT *, trace_id AS trace_key FROM calls WHERE {where} AND trace_id IN ({placeholders(trace_ids)})"
            )
            params.extend(trace_ids)
        if call_ids:
            where = call_where(f, params)
            parts.append(
                f"SELECT *, 'call:' || id AS trace_key FROM calls WHERE {where} AND id IN ({placeholders(call_ids)})"
            )
            params.extend(call_ids)
        sql = (
            "SELECT trace_key, MAX(trace_name) AS trace_name, MIN(ts_ms) AS first_ms,"
            " MAX(ts_ms) AS last_ms, COUNT(*) AS span_count,"
            " COALESCE(SUM(input_tokens), 0) AS input_tokens, COALESCE(SUM(output_tokens), 0) AS output_tokens,"
            " COALESCE(SUM(cache_read_tokens), 0) AS cache_read_tokens,"
            " COALESCE(SUM(cache_write_tokens), 0) AS cache_write_tokens,"
            " COALESCE(SUM(reasoning_tokens), 0) AS reasoning_tokens, SUM(cost_usd) AS cost_usd,"
            " SUM(cost_status IN ('unpriced', 'partial')) AS unpriced_calls, MAX(error) AS error,"
            " json_group_array(DISTINCT route) AS routes, json_group_array(DISTINCT provider) AS providers,"
            " json_group_array(DISTINCT model) AS models, json_group_array(DISTINCT environment) AS envs,"
            " SUM(latency_ms) AS latency_ms"
            f" FROM ({' UNION ALL '.join(parts)}) GROUP BY trace_key"
        )
        rows = {r["trace_key"]: dict(r) for r in self.db.conn.execute(sql, params)}
        return [rows[k] for k in keys if k in rows]

    def sample_calls(self, f: CallFilter, slices: Sequence[tuple[int, int]]) -> list[str]:
        """For each [start, end) slice, the trace key of the matching call nearest the slice's middle."""
        found: list[str] = []
        for start, end in slices:
            lo, hi = max(f.since_ms, start), min(f.until_ms, end)
            middle = (start + end) // 2
            best: tuple[int, int, str] | None = None
            for side_lo, side_hi, order in ((middle, hi, "ASC"), (lo, middle, "DESC")):
                params: list[Any] = []
                sub = CallFilter(**{**f.__dict__, "since_ms": side_lo, "until_ms": side_hi})
                row = self.db.conn.execute(
                    f"SELECT ts_ms, id, COALESCE(trace_id, 'call:' || id) FROM calls WHERE {call_where(sub, params)}"
                    f" ORDER BY ts_ms {order}, id LIMIT 1",
                    params,
                ).fetchone()
                if row is not None:
                    candidate = (abs(row[0] - middle), row[1], row[2])
                    best = candidate if best is None or candidate < best else best
            if best is not None:
                found.append(best[2])
        return found

    def trace_spans(self, workspace: str, trace_key: str, limit: int) -> list[dict[str, Any]]:
        if trace_key.startswith("call:") and trace_key[5:].isdigit():
            where, arg = "c.id = ?", int(trace_key[5:])
        else:
            where, arg = "c.trace_id = ?", trace_key  # type: ignore[assignment]
        sql = (
            "SELECT c.*, cc.request_text, cc.response_text, cc.tool_calls AS content_tool_calls"
            f" FROM calls c LEFT JOIN call_content cc ON cc.call_id = c.id AND cc.workspace = c.workspace"
            f" WHERE c.workspace = ? AND {where} ORDER BY c.ts_ms, c.id LIMIT ?"
        )
        return [dict(r) for r in self.db.conn.execute(sql, (workspace, arg, limit))]
