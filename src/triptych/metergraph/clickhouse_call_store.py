"""Metergraph's ClickHouse engine (server mode): calls, content and rollups in ClickHouse.

Chosen by ``TRIPTYCH_METERGRAPH_CLICKHOUSE_URL`` (``service.py``). ``ClickHouseCallStore`` implements
``call_store.CallStore`` with the same answers as the embedded engine; the bookkeeping (keys, routes,
batch records) is the ``MetadataStore``'s it is opened with, which also hands out the call ids (so several
workers ingest at once, and a call without a trace id gets the same ``call:<id>`` trace key as on the
embedded engine) and holds the import identities (ClickHouse has no transaction to claim them in).

Every value reaches ClickHouse as a server-side query parameter (``{name:Type}``) or in the Native
insert body, never inside the SQL text. An ingest batch is one ``INSERT`` (the rollup views run inside
it), sent before the 202.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triptych.core.errors import StorageUnavailable
from triptych.metergraph import histogram
from triptych.metergraph.call_model import (
    CALL_COLUMNS,
    RETAINED_FIELDS,
    ROLLUPS,
    SUMS,
    AggRow,
    CallBatch,
    CallFilter,
    Content,
)
from triptych.metergraph.clickhouse_inserts import GroupInserter
from triptych.metergraph.clickhouse_schema import CALL_TYPES, GRAINS, META_ROLLUP, ROLLUP_TABLE
from triptych.metergraph.clickhouse_sql import (
    HIST_COUNTS,
    HIST_SUM,
    MEASURES_SQL,
    META_CLASS,
    Where,
    call_where,
    hist,
    rollup_keys,
    workspace_where,
)
from triptych.metergraph.clickhouse_trace_reads import ClickHouseTraceReads
from triptych.metergraph.import_events import ImportKey
from triptych.metergraph.metadata_store import MetadataStore
from triptych.metergraph.scope import DAY_MS
from triptych.metergraph.workload_match import SHAPE_SQL

if TYPE_CHECKING:
    from triptych.core.pg import PgDatabase

_INSERT_COLUMNS = ("id", *CALL_COLUMNS)
_INSERT_TYPES = ["UInt64", *(CALL_TYPES[name] for name in CALL_COLUMNS)]


class ClickHouseCallStore(ClickHouseTraceReads):
    """``CallStore`` on ClickHouse (its trace reads: ``ClickHouseTraceReads``; the connection and schema:
    ``ClickHouseConnection``)."""

    def __init__(
        self,
        url: str,
        metadata: MetadataStore,
        lock_dir: Path,
        retention_days: int | None = None,
        shared: PgDatabase | None = None,
    ) -> None:
        super().__init__(url, lock_dir, retention_days, shared)
        self.metadata = metadata
        self.columns = None  # no projection: ClickHouse reads one metadata column itself
        self._calls = GroupInserter(self._insert_calls, lambda exc: not isinstance(exc, StorageUnavailable))

    def _insert_calls(self, columns: list[list[Any]]) -> None:
        self.insert(
            "calls", columns, column_names=list(_INSERT_COLUMNS), column_type_names=_INSERT_TYPES,
            column_oriented=True, settings=self.insert_options,
        )  # fmt: skip

    def purge_expired(self, now: datetime) -> int:
        """Nothing to do: the tables' TTL expires old rows as parts merge (reads clip to the window)."""
        return 0

    # -- ingest ---------------------------------------------------------------------------------

    def insert_batch(
        self,
        workspace: str,
        source: str,
        calls: CallBatch,
        contents: Sequence[Content | None],
        batch: dict[str, Any],
        now_iso: str,
        import_keys: Sequence[ImportKey | None] | None = None,
    ) -> None:
        """The batch's calls in one INSERT, shared with the batches waiting at the same time
        (``clickhouse_inserts``; content first, so no call points at missing content), then its batch
        record in the metadata store. Import identities are claimed pending there first (rows already
        stored are left out), confirmed with the batch record, and released if the calls do not reach
        ClickHouse, so a retried batch stores them."""
        claimed: list[ImportKey] = []
        if import_keys is not None:
            fresh = self.metadata.claim_imports(workspace, import_keys)
            claimed = [k for k, new in zip(import_keys, fresh, strict=True) if k is not None and new]
            if not all(fresh):
                calls = calls.take(fresh)
                contents = list(itertools.compress(contents, fresh))
        try:
            self._insert_batch_calls(workspace, calls, contents)
        except BaseException:
            if claimed:
                self.metadata.release_imports(workspace, claimed)
            raise
        self.metadata.record_batch(workspace, source, calls.size, batch, now_iso, confirm=claimed)

    def _insert_batch_calls(
        self, workspace: str, calls: CallBatch, contents: Sequence[Content | None]
    ) -> None:
        if calls.size:
            first = self.metadata.reserve_call_ids(calls.size)
            ids = list(range(first, first + calls.size))
            retained = [(i, c) for i, c in enumerate(contents) if c is not None]
            if retained:
                ts = calls.column("ts_ms")
                self.insert(
                    "call_content",
                    [[workspace, ids[i], ts[i], c.request_text, c.response_text, c.tool_calls]
                     for i, c in retained],
                    column_names=["workspace", "call_id", "ts_ms", "request_text", "response_text", "tool_calls"],
                )  # fmt: skip
            try:
                self._calls.submit([ids, *(calls.column(name) for name in CALL_COLUMNS)])
            except self.data_error as exc:
                # A value beyond its column's range fails the batch whole, as SQLite's OverflowError does.
                raise OverflowError(str(exc)) from exc

    # -- aggregates -----------------------------------------------------------------------------

    def aggregate_rollups(
        self,
        table: str,
        f: CallFilter,
        bucket_from: int,
        bucket_to: int,
        dims: Sequence[str],
        bucket_per_day: int,
    ) -> dict[tuple[Any, ...], AggRow]:
        assert table in ROLLUPS
        # The rollup's grain of ``rollups``; its bucket b is the grain's [b * per, (b + 1) * per).
        grain, per = GRAINS[table]
        bucket_from, bucket_to, bucket_per_day = bucket_from * per, bucket_to * per, bucket_per_day * per
        w = workspace_where(f.workspace)
        w.add(f"grain = {int(grain)}")
        w.add(f"bucket >= {w.param(bucket_from, 'Int64')}")
        w.add(f"bucket < {w.param(bucket_to, 'Int64')}")
        rollup_keys(f, w)
        exprs = [f"intDiv(bucket, {int(bucket_per_day)})" if d == "day" else d for d in dims]
        group = f" GROUP BY {', '.join(exprs)}" if exprs else ""
        sums = ", ".join(f"sum({name})" for name in SUMS)
        sql = f"SELECT {', '.join([*exprs, sums])}, {HIST_SUM} FROM {ROLLUP_TABLE} WHERE {w.sql()}{group}"
        result: dict[tuple[Any, ...], AggRow] = {}
        n = len(exprs)
        for row in self.query(sql, parameters=w.params).result_rows:
            if not row[n]:
                continue  # nothing matched (an aggregate without GROUP BY still returns one row)
            key = tuple(None if v == "" and d != "day" else v for v, d in zip(row[:n], dims, strict=True))
            result[key] = AggRow(key, np.array(row[n : n + len(SUMS)], dtype=np.float64), hist(row[-1]))
        return result

    def aggregate_raw(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]:
        """Calls grouped by ``dims`` and, when given, one metadata key's (class, value).

        A group-by on a metadata key reads the metadata rollup for the window's whole UTC days and
        the raw calls only at its edges, unless a filter the rollups do not hold (metadata pairs,
        status, request id, a saved workload) asks for the calls themselves."""
        first, last = -(-f.since_ms // DAY_MS), f.until_ms // DAY_MS
        if meta_key is None or f.selects_calls or first >= last:
            return self._scan(f, dims, meta_key)
        out = self._meta_days(f, first, last, dims, meta_key)
        for lo, hi in ((f.since_ms, first * DAY_MS), (last * DAY_MS, f.until_ms)):
            if lo < hi:
                edge = CallFilter(**{**f.__dict__, "since_ms": lo, "until_ms": hi})
                for key, agg in self._scan(edge, dims, meta_key).items():
                    mine = out.get(key)
                    if mine is None:
                        out[key] = agg
                    else:
                        mine.sums, mine.hist = mine.sums + agg.sums, mine.hist + agg.hist
        return out

    def _meta_days(
        self, f: CallFilter, first: int, last: int, dims: Sequence[str], meta_key: str
    ) -> dict[tuple[Any, ...], AggRow]:
        """Days [first, last) of a metadata group-by from the rollups: the key's rows from the metadata
        rollup, and its missing class as the route rollup's calls less those rows."""
        coarse = "route" not in dims and f.routes is None
        totals = self.aggregate_rollups(
            "rollup_daily_coarse" if coarse else "rollup_daily", f, first, last, dims, 1
        )
        # Every day's rows, also for whole weeks: a weekly metadata rollup would cost each INSERT a
        # cascading view over nearly as many rows as the batch's calls (schema version 5).
        exprs = ["bucket" if d == "day" else d for d in dims]
        sums = ", ".join(f"sum({name})" for name in SUMS)
        out: dict[tuple[Any, ...], AggRow] = {}
        n = len(exprs)
        w = workspace_where(f.workspace)
        w.add(f"key = {w.param(meta_key, 'String')}")
        w.add(f"bucket >= {w.param(first, 'Int64')}")
        w.add(f"bucket < {w.param(last, 'Int64')}")
        rollup_keys(f, w)
        sql = (
            f"SELECT {', '.join([*exprs, 'cls', 'value'])}, {sums}, {HIST_SUM} FROM {META_ROLLUP}"
            f" WHERE {w.sql()} GROUP BY {', '.join([*exprs, 'cls', 'value'])}"
        )
        for row in self.query(sql, parameters=w.params).result_rows:
            group = tuple(None if v == "" and d != "day" else v for v, d in zip(row[:n], dims, strict=True))
            cls, value = row[n], row[n + 1]
            key = (*group, cls, value if cls == "v" else None)
            agg = AggRow(key, np.array(row[n + 2 : n + 2 + len(SUMS)], dtype=np.float64), hist(row[-1]))
            out[key] = agg
            total = totals.get(group)
            if total is not None:
                total.sums, total.hist = total.sums - agg.sums, total.hist - agg.hist
        calls = SUMS.index("calls")
        for group, rest in totals.items():
            if rest.sums[calls] > 0:
                out[(*group, "m", None)] = AggRow((*group, "m", None), rest.sums, rest.hist)
        return out

    def _scan(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]:
        """Raw calls grouped by ``dims`` and, when given, one metadata key's (class, value)."""
        w = call_where(f)
        exprs = ["intDiv(ts_ms, 86400000)" if d == "day" else d for d in dims]
        source = "calls"
        if meta_key is not None:
            # The key's value and class are computed once per call in a subquery, then grouped.
            w.params["mk"] = meta_key
            columns = (
                "ts_ms, route, provider, model, error, cost_usd, input_tokens, output_tokens, cache_read_tokens,"
                " cache_write_tokens, reasoning_tokens, latency_ms, lat_bucket, cost_status, cost_unknown"
            )
            source = (
                f"(SELECT *, {META_CLASS} AS mc FROM (SELECT {columns}, metadata[{{mk:String}}] AS mv, metadata,"
                f" metadata_other FROM calls WHERE {w.sql()}))"
            )
            exprs += ["mc", "if(mc = 'v', mv, NULL)"]
        group = f" GROUP BY {', '.join(exprs)}" if exprs else ""
        where = "" if meta_key is not None else f" WHERE {w.sql()}"
        sql = f"SELECT {', '.join([*exprs, MEASURES_SQL])}, {HIST_COUNTS} FROM {source}{where}{group}"
        result: dict[tuple[Any, ...], AggRow] = {}
        n = len(exprs)
        for row in self.query(sql, parameters=w.params).result_rows:
            if not row[n]:
                continue
            key = tuple(row[:n])
            hist = np.array(row[-1], dtype=histogram.DTYPE)
            result[key] = AggRow(key, np.array(row[n : n + len(SUMS)], dtype=np.float64), hist)
        return result

    # -- traces ---------------------------------------------------------------------------------

    # -- routes ---------------------------------------------------------------------------------

    def route_calls(self, f: CallFilter) -> dict[str, dict[str, Any]]:
        w = call_where(f)
        sql = (
            "SELECT route, count() AS calls, toInt64(sum(has_content)) AS replay_eligible_calls,"
            f" max(ts_ms) AS last_ms FROM calls WHERE {w.sql()} AND route IS NOT NULL GROUP BY route"
        )
        return {r["route"]: r for r in self.rows(sql, w.params)}

    # -- operators and tests --------------------------------------------------------------------

    def count_calls(self, workspace: str) -> int:
        w = workspace_where(workspace)
        return int(
            self.query(f"SELECT count() FROM calls WHERE {w.sql()}", parameters=w.params).result_rows[0][0]
        )

    def raw_calls(self, workspace: str) -> list[dict[str, Any]]:
        w = workspace_where(workspace)
        return self.rows(
            f"SELECT id, {', '.join(CALL_COLUMNS)} FROM calls WHERE {w.sql()} ORDER BY id", w.params
        )

    def raw_content(self, workspace: str) -> list[dict[str, Any]]:
        w = workspace_where(workspace)
        sql = (
            "SELECT call_id, workspace, request_text, response_text, tool_calls FROM call_content"
            f" WHERE {w.sql()} ORDER BY call_id"
        )
        return self.rows(sql, w.params)

    # -- workload classification and analysis (``CallStore``'s workload reads) ---------------

    def _retained_ids(self, w: Where, f: CallFilter, response: bool = False) -> str:
        """``id IN`` the window's calls with retained request text (and response text)."""
        both = " AND response_text IS NOT NULL" if response else ""
        return (
            f"id IN (SELECT call_id FROM call_content WHERE workspace = {w.param(f.workspace, 'String')}"
            f" AND ts_ms >= {w.param(f.since_ms, 'Int64')} AND ts_ms < {w.param(f.until_ms, 'Int64')}"
            f" AND request_text IS NOT NULL{both})"
        )

    def workload_features(self, f: CallFilter) -> list[dict[str, Any]]:
        """Call counts and sums per (route, metadata keys, token shape, provider, model), as the embedded
        engine's (which may split a key over several rows; the sums are the same)."""
        w = call_where(f)
        retained = self._retained_ids(w, f)
        # No alias repeats a column's name: it would replace the column inside the shape expression.
        sql = (
            f"SELECT route, {w.keys_sql} AS signature, toInt64({SHAPE_SQL}) AS shape_code, provider, model,"
            f" count(), countIf(has_content = 1 AND {retained}), sum(cost_usd), sum(input_tokens),"
            f" sum(output_tokens), min(ts_ms), max(ts_ms) FROM calls WHERE {w.sql()}"
            " GROUP BY route, signature, shape_code, provider, model"
        )
        names = ("route", "keys", "shape", "provider", "model", "calls", "retained", "cost_usd", "input_tokens",
                 "output_tokens", "first_ms", "last_ms")  # fmt: skip
        rows = self.query(sql, parameters=w.params).result_rows
        return [dict(zip(names, r, strict=True)) for r in rows]

    def replay_eligible_by_route(self, f: CallFilter) -> dict[str, int]:
        """Per route, the calls with retained request text (what replay can re-send)."""
        w = call_where(f)
        w.add("route IS NOT NULL AND has_content = 1")
        w.add(self._retained_ids(w, f))
        sql = f"SELECT route, count() FROM calls WHERE {w.sql()} GROUP BY route"
        return {str(r[0]): int(r[1]) for r in self.query(sql, parameters=w.params).result_rows}

    def retained_calls(self, f: CallFilter, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` successful matching calls with retained request and response text."""
        w = call_where(f)
        w.add("has_content = 1 AND error = 0")
        w.add(self._retained_ids(w, f, response=True))
        sql = (
            f"SELECT {', '.join(RETAINED_FIELDS)} FROM calls WHERE {w.sql()}"
            f" ORDER BY ts_ms DESC, id DESC LIMIT {w.param(limit, 'UInt64')}"
        )
        calls = self.rows(sql, w.params)
        content = self.content(f.workspace, [c["id"] for c in calls])
        for call in calls:
            call["request_text"], call["response_text"] = content[call["id"]][:2]
        return calls
