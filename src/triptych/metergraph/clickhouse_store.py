"""Metergraph's ClickHouse engine (server mode): calls, content and rollups in ClickHouse.

Chosen by ``TRIPTYCH_METERGRAPH_CLICKHOUSE_URL`` (``service.py``). It implements ``store.TelemetryStore``
with the same answers as the embedded engine: calls, retained content and rollups live in ClickHouse
(``clickhouse_schema.py``); keys, sessions, workspaces, route configuration and the ingest batch records
stay in the SQLite metadata store it wraps (``meta``). Call ids come from a sequence in that SQLite file,
so several workers ingest at once and a call without a trace id gets the same ``call:<id>`` trace key as
on the embedded engine.

Every value reaches ClickHouse as a server-side query parameter (``{name:Type}``) or in the Native
insert body, never inside the SQL text. An ingest batch is one ``INSERT`` (the rollup views run inside
it), sent before the 202.
"""

from __future__ import annotations

import fcntl
import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np

from triptych.core.errors import StorageUnavailable
from triptych.metergraph import histogram
from triptych.metergraph.call_filters import filter_clauses, key_clauses
from triptych.metergraph.clickhouse_inserts import GroupInserter
from triptych.metergraph.clickhouse_schema import (
    BACKFILLED,
    CALL_TYPES,
    GRAINS,
    MEASURES,
    META_ROLLUP,
    ROLLUP_TABLE,
    TRACE_BOUNDS,
    statements,
    ttl_statements,
)
from triptych.metergraph.scope import DAY_MS
from triptych.metergraph.store import (
    CALL_COLUMNS,
    DEFAULT_RETENTION_DAYS,
    ELIGIBLE_CHARS,
    RETAINED_FIELDS,
    ROLLUPS,
    SUMS,
    AggRow,
    CallBatch,
    CallFilter,
    Content,
    SqliteTelemetryStore,
)
from triptych.metergraph.workload_match import SHAPE_SQL

DEFAULT_DATABASE = "metergraph"
_SEQUENCE_DDL = "CREATE TABLE IF NOT EXISTS clickhouse_call_ids (next_id INTEGER NOT NULL)"
_INSERT_COLUMNS = ("id", *CALL_COLUMNS)
_MEASURES_SQL = ", ".join(MEASURES.values())
# The class of one metadata key on a call (``mv`` is ``metadata[key]``, '' when the key is missing): 'v' an
# eligible string, 'i' present but not eligible, 'm' missing. Most calls carry a non-empty value, so the
# map is searched once for them.
_META_CLASS = (
    f"multiIf(mv != '', if(lengthUTF8(mv) <= {ELIGIBLE_CHARS}, 'v', 'i'),"
    " mapContains(metadata, {mk:String}), 'v', has(metadata_other, {mk:String}), 'i', 'm')"
)
# A group's latency histogram straight from the calls: the count of each of the 96 buckets (a call
# without a latency falls outside the range). About half the cost of a per-call sumMap.
_HIST_COUNTS = f"countResample(0, {histogram.BUCKETS}, 1)(ifNull(lat_bucket, 255))"
# The same counts from rollup rows' (buckets, counts) maps: about a quarter of ``sumMap``'s cost, which
# builds a map per group where this adds into 96 fixed slots.
_HIST_SUM = f"sumResampleArray(0, {histogram.BUCKETS}, 1)(hist.2, hist.1)"
_TRACE_KEY = "ifNull(trace_id, concat('call:', toString(id)))"
# One trace's summary over its matching calls (``trace_summaries``).
_SUMMARY = (
    f"{_TRACE_KEY} AS trace_key, max(trace_name), min(ts_ms), max(ts_ms), count(),"
    " sum(ifNull(input_tokens, 0)), sum(ifNull(output_tokens, 0)), sum(ifNull(cache_read_tokens, 0)),"
    " sum(ifNull(cache_write_tokens, 0)), sum(ifNull(reasoning_tokens, 0)), sum(cost_usd),"
    " countIf(cost_status IN ('unpriced', 'partial')), max(error), groupUniqArray(route),"
    " groupUniqArray(provider), groupUniqArray(model), groupUniqArray(environment), sum(latency_ms),"
    " countIf(environment IS NULL)"
)


class Where:
    """A WHERE clause whose values are all server-side parameters (named p0, p1, ...); the
    ``call_filters.Dialect`` of ClickHouse."""

    # A call's sorted metadata keys joined by U+001F, as ``workload_match.tags_signature`` (byte order).
    keys_sql = "arrayStringConcat(arraySort(JSONExtractKeys(ifNull(tags, '{}'))), char(31))"

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.params: dict[str, Any] = {}

    def param(self, value: Any, kind: str) -> str:
        name = f"p{len(self.params)}"
        self.params[name] = value
        return f"{{{name}:{kind}}}"

    def one_of(self, column: str, values: Sequence[Any], kind: str) -> str:
        return f"{column} IN {self.param(list(values), f'Array({kind})')}"

    def metadata_equals(self, key: str, value: str) -> str:
        k = self.param(key, "String")
        return f"mapContains(metadata, {k}) AND metadata[{k}] = {self.param(value, 'String')}"

    def add(self, clause: str) -> None:
        self.clauses.append(clause)

    def sql(self) -> str:
        return " AND ".join(self.clauses) if self.clauses else "1"


def _keys(f: CallFilter, w: Where, rollup: bool) -> None:
    """The route/provider/model/environment filters (a rollup's keys hold '' where a call has NULL)."""
    w.clauses.extend(key_clauses(f, w))
    del rollup


def call_where(f: CallFilter, w: Where | None = None) -> Where:
    w = w or Where()
    w.clauses.extend(filter_clauses(f, w))
    return w


def _hist(counts: Sequence[int]) -> histogram.Hist:
    return np.array(counts, dtype=histogram.DTYPE)


def parse_url(url: str) -> dict[str, Any]:
    """``http[s]://[user[:password]@]host[:port][/database][?compress=lz4]`` as client arguments."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL must look like http://user:password@host:8123/database"
        )
    options = dict(parse_qsl(parts.query))
    return {
        "host": parts.hostname,
        "port": parts.port or (8443 if parts.scheme == "https" else 8123),
        "secure": parts.scheme == "https",
        "username": unquote(parts.username or "default"),
        "password": unquote(parts.password or ""),
        "database": parts.path.strip("/") or DEFAULT_DATABASE,
        "compress": options.get("compress", "") or False,
    }


# Next to the metadata database: the workers of one server share its data directory.
SCHEMA_LOCK = "metergraph.clickhouse-schema.lock"


@contextmanager
def _schema_lock(path: Path) -> Iterator[None]:
    """Held while a store creates or upgrades the ClickHouse schema (released when the process dies)."""
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class ClickHouseTelemetryStore:
    """``TelemetryStore`` on ClickHouse; metadata (keys, sessions, routes, batches) in ``meta``."""

    def __init__(self, url: str, meta: SqliteTelemetryStore, retention_days: int | None = None) -> None:
        try:
            import clickhouse_connect
            import clickhouse_connect.driver.exceptions
        except ImportError:  # pragma: no cover - the extra is installed wherever tests run
            raise StorageUnavailable(
                "the ClickHouse engine needs clickhouse-connect: pip install 'triptych[clickhouse]'",
                details={"reason": "clickhouse_client_missing"},
            ) from None
        self.meta = meta
        # The tables' TTL: the setting, or ten years (a TTL needs a number).
        self.retention_days: int | None = retention_days or DEFAULT_RETENTION_DAYS
        self._data_error: type[Exception] = clickhouse_connect.driver.exceptions.DataError
        self._unreachable: type[Exception] = clickhouse_connect.driver.exceptions.OperationalError
        self.columns = None  # no projection: ClickHouse reads one metadata column itself
        options = parse_url(url)
        database = options.pop("database")
        try:
            admin = clickhouse_connect.get_client(**options, autogenerate_session_id=False)
            admin.command(f"CREATE DATABASE IF NOT EXISTS `{database.replace('`', '')}`")
            admin.close()
            # No session: a client without one may run queries from several threads at once.
            self.client = clickhouse_connect.get_client(
                **options, database=database, autogenerate_session_id=False
            )
            # One process at a time (``serve --workers N`` opens N stores at once): the second finds the
            # tables there and backfills nothing, so an upgrade never counts the stored calls twice.
            with _schema_lock(meta.db.path.parent / SCHEMA_LOCK):
                missing = [table for table in BACKFILLED if not self._exists(table)]
                for statement in statements(self.retention_days):
                    self.client.command(statement)
                # Tables created with another retention take this one (metadata only: merges expire).
                for statement in ttl_statements(self.retention_days):
                    self.client.command(statement, settings={"materialize_ttl_after_modify": 0})
                for table in missing:
                    # A database from before this table: its view feeds it from now on, the calls
                    # already stored go in once (upgrade with ingest paused: a batch in flight may count
                    # twice).
                    self.client.command(f"INSERT INTO {table} {BACKFILLED[table]()}")
        except Exception as exc:
            raise StorageUnavailable(
                f"ClickHouse at {options['host']}:{options['port']} is not reachable or refused the schema: {exc}",
                hint="check TRIPTYCH_METERGRAPH_CLICKHOUSE_URL and that the server is up",
                details={"reason": "clickhouse_unavailable"},
            ) from exc
        self._insert_settings = insert_settings(self.client.server_settings)
        with meta.db.transaction() as conn:
            conn.execute(_SEQUENCE_DDL)
        self._ids = threading.Lock()
        self._calls = GroupInserter(self._insert_calls, lambda exc: not isinstance(exc, StorageUnavailable))

    def _insert_calls(self, columns: list[list[Any]]) -> None:
        self._insert(
            "calls", columns, column_names=list(_INSERT_COLUMNS), column_type_names=_INSERT_TYPES,
            column_oriented=True, settings=self._insert_settings,
        )  # fmt: skip

    def _exists(self, table: str) -> bool:
        return bool(self.client.command("EXISTS TABLE {t:Identifier}", parameters={"t": table}))

    # -- the client, with connection failures as StorageUnavailable (ingest answers 503 + Retry-After) ----

    def _unavailable(self, exc: Exception) -> StorageUnavailable:
        return StorageUnavailable(
            f"ClickHouse did not answer: {exc}",
            hint="check that the ClickHouse server is up; ingest clients retry the batch later",
            details={"reason": "clickhouse_unavailable"},
        )

    def _query(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        try:
            return self.client.query(sql, parameters=parameters)
        except self._unreachable as exc:
            raise self._unavailable(exc) from exc

    def _insert(self, table: str, data: Any, **options: Any) -> None:
        try:
            self.client.insert(table, data, **options)
        except self._unreachable as exc:
            raise self._unavailable(exc) from exc

    def _command(self, sql: str) -> None:
        try:
            self.client.command(sql)
        except self._unreachable as exc:
            raise self._unavailable(exc) from exc

    def rebuild_rollups(self) -> None:
        """Recompute every rollup from the raw calls (operators; the views keep them current)."""
        for table in BACKFILLED:
            self._command(f"TRUNCATE TABLE {table}")
        for table, select in BACKFILLED.items():
            self._command(f"INSERT INTO {table} {select()}")

    def purge_expired(self, now: datetime) -> int:
        """Nothing to do: the tables' TTL expires old rows as parts merge (reads clip to the window)."""
        return 0

    def close(self) -> None:
        self.client.close()
        self.meta.close()

    # -- metadata: the SQLite store answers (keys, sessions, workspaces, routes, batches) -------

    def workspace(self, workspace: str) -> dict[str, Any] | None:
        return self.meta.workspace(workspace)

    def set_retain_content(self, workspace: str, retain: bool, now_iso: str) -> None:
        self.meta.set_retain_content(workspace, retain, now_iso)

    def insert_key(
        self, key_id: str, workspace: str, kind: str, role: str | None, environments: Sequence[str] | None,
        token_hash: str, now_iso: str,
    ) -> None:  # fmt: skip
        self.meta.insert_key(key_id, workspace, kind, role, environments, token_hash, now_iso)

    def key_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        return self.meta.key_by_hash(token_hash)

    def list_keys(self, workspace: str | None = None) -> list[dict[str, Any]]:
        return self.meta.list_keys(workspace)

    def revoke_key(self, key_id: str, now_iso: str) -> bool:
        return self.meta.revoke_key(key_id, now_iso)

    def insert_session(
        self, token_hash: str, workspace: str, app: str, repository: str, sdk_version: str, expires_at: int
    ) -> None:
        self.meta.insert_session(token_hash, workspace, app, repository, sdk_version, expires_at)

    def session_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        return self.meta.session_by_hash(token_hash)

    def record_failed_batch(self, workspace: str, source: str, received_ms: int, failure_class: str) -> None:
        self.meta.record_failed_batch(workspace, source, received_ms, failure_class)

    def route_config(self, workspace: str) -> dict[str, Any]:
        return self.meta.route_config(workspace)

    def set_route(
        self,
        workspace: str,
        route: str,
        description: str | None,
        config: dict[str, Any],
        now_iso: str,
        constraints: dict[str, Any] | None = None,
    ) -> None:
        self.meta.set_route(workspace, route, description, config, now_iso, constraints)

    def batch_health(self, workspace: str, since_ms: int) -> dict[str, Any]:
        return self.meta.batch_health(workspace, since_ms)

    def recent_batches(self, workspace: str, limit: int) -> list[tuple[str, int]]:
        return self.meta.recent_batches(workspace, limit)

    # -- ingest ---------------------------------------------------------------------------------

    def reserve_ids(self, n: int) -> int:
        """The first of ``n`` consecutive new call ids (the same numbering as SQLite's rowids)."""
        with self._ids, self.meta.db.transaction() as conn:
            row = conn.execute("SELECT next_id FROM clickhouse_call_ids").fetchone()
            first = int(row[0]) if row is not None else 1
            if row is None:
                conn.execute("INSERT INTO clickhouse_call_ids VALUES (?)", (first + n,))
            else:
                conn.execute("UPDATE clickhouse_call_ids SET next_id = ?", (first + n,))
        return first

    def insert_batch(
        self,
        workspace: str,
        source: str,
        calls: CallBatch,
        contents: Sequence[Content | None],
        batch: dict[str, Any],
        now_iso: str,
    ) -> None:
        """The batch's calls in one INSERT, shared with the batches waiting at the same time
        (``clickhouse_inserts``; content first, so no call points at missing content), then its batch
        record in SQLite."""
        if calls.size:
            first = self.reserve_ids(calls.size)
            ids = list(range(first, first + calls.size))
            retained = [(i, c) for i, c in enumerate(contents) if c is not None]
            if retained:
                ts = calls.column("ts_ms")
                self._insert(
                    "call_content",
                    [[workspace, ids[i], ts[i], c.request_text, c.response_text, c.tool_calls]
                     for i, c in retained],
                    column_names=["workspace", "call_id", "ts_ms", "request_text", "response_text", "tool_calls"],
                )  # fmt: skip
            try:
                self._calls.submit([ids, *(calls.column(name) for name in CALL_COLUMNS)])
            except self._data_error as exc:
                # A value beyond its column's range fails the batch whole, as SQLite's OverflowError does.
                raise OverflowError(str(exc)) from exc
        with self.meta.db.transaction() as conn:
            self.meta.ensure_workspace(conn, workspace, now_iso)
            self.meta.record_batch(conn, workspace, source, calls.size, batch)

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
        w = Where()
        w.add(f"workspace = {w.param(f.workspace, 'String')}")
        w.add(f"grain = {int(grain)}")
        w.add(f"bucket >= {w.param(bucket_from, 'Int64')}")
        w.add(f"bucket < {w.param(bucket_to, 'Int64')}")
        _keys(f, w, rollup=True)
        exprs = [f"intDiv(bucket, {int(bucket_per_day)})" if d == "day" else d for d in dims]
        group = f" GROUP BY {', '.join(exprs)}" if exprs else ""
        sums = ", ".join(f"sum({name})" for name in SUMS)
        sql = f"SELECT {', '.join([*exprs, sums])}, {_HIST_SUM} FROM {ROLLUP_TABLE} WHERE {w.sql()}{group}"
        result: dict[tuple[Any, ...], AggRow] = {}
        n = len(exprs)
        for row in self._query(sql, parameters=w.params).result_rows:
            if not row[n]:
                continue  # nothing matched (an aggregate without GROUP BY still returns one row)
            key = tuple(None if v == "" and d != "day" else v for v, d in zip(row[:n], dims, strict=True))
            result[key] = AggRow(key, np.array(row[n : n + len(SUMS)], dtype=np.float64), _hist(row[-1]))
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
        w = Where()
        w.add(f"workspace = {w.param(f.workspace, 'String')}")
        w.add(f"key = {w.param(meta_key, 'String')}")
        w.add(f"bucket >= {w.param(first, 'Int64')}")
        w.add(f"bucket < {w.param(last, 'Int64')}")
        _keys(f, w, rollup=True)
        sql = (
            f"SELECT {', '.join([*exprs, 'cls', 'value'])}, {sums}, {_HIST_SUM} FROM {META_ROLLUP}"
            f" WHERE {w.sql()} GROUP BY {', '.join([*exprs, 'cls', 'value'])}"
        )
        for row in self._query(sql, parameters=w.params).result_rows:
            group = tuple(None if v == "" and d != "day" else v for v, d in zip(row[:n], dims, strict=True))
            cls, value = row[n], row[n + 1]
            key = (*group, cls, value if cls == "v" else None)
            agg = AggRow(key, np.array(row[n + 2 : n + 2 + len(SUMS)], dtype=np.float64), _hist(row[-1]))
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
                f"(SELECT *, {_META_CLASS} AS mc FROM (SELECT {columns}, metadata[{{mk:String}}] AS mv, metadata,"
                f" metadata_other FROM calls WHERE {w.sql()}))"
            )
            exprs += ["mc", "if(mc = 'v', mv, NULL)"]
        group = f" GROUP BY {', '.join(exprs)}" if exprs else ""
        where = "" if meta_key is not None else f" WHERE {w.sql()}"
        sql = f"SELECT {', '.join([*exprs, _MEASURES_SQL])}, {_HIST_COUNTS} FROM {source}{where}{group}"
        result: dict[tuple[Any, ...], AggRow] = {}
        n = len(exprs)
        for row in self._query(sql, parameters=w.params).result_rows:
            if not row[n]:
                continue
            key = tuple(row[:n])
            hist = np.array(row[-1], dtype=histogram.DTYPE)
            result[key] = AggRow(key, np.array(row[n : n + len(SUMS)], dtype=np.float64), hist)
        return result

    # -- traces ---------------------------------------------------------------------------------

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
                f"SELECT {_TRACE_KEY} AS k, trace_id IS NULL AS single, ts_ms, id FROM calls"
                f" WHERE {w.sql()} ORDER BY ts_ms DESC, id DESC LIMIT {int(want)}"
            )
            rows = self._query(sql, parameters=w.params).result_rows
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
            str(k): (int(pos[0]), int(pos[1])) for k, pos in self._query(sql, parameters=w.params).result_rows
        }

    def _traces_outside(self, workspace: str, trace_ids: Sequence[str], envs: Sequence[str]) -> set[str]:
        if not trace_ids:
            return set()
        w = Where()
        w.add(f"workspace = {w.param(workspace, 'String')}")
        w.add(self._span_bounds(workspace, trace_ids, w))
        if envs:
            w.add(f"(environment IS NULL OR environment NOT IN {w.param(list(envs), 'Array(String)')})")
        sql = f"SELECT DISTINCT trace_id FROM calls WHERE {w.sql()}"
        return {str(r[0]) for r in self._query(sql, parameters=w.params).result_rows}

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
            f"SELECT {_SUMMARY} FROM calls WHERE {part} GROUP BY trace_key" for part in parts
        )
        found: dict[str, dict[str, Any]] = {}
        for row in self._query(sql, parameters=w.params).result_rows:
            (key, name, first, last, count, it, ot, crt, cwt, rt, cost, unpriced, error, routes, providers,
             models, envs, latency, untagged) = row  # fmt: skip
            found[key] = {
                "trace_key": key, "trace_name": name, "first_ms": first, "last_ms": last, "span_count": count,
                "input_tokens": it, "output_tokens": ot, "cache_read_tokens": crt, "cache_write_tokens": cwt,
                "reasoning_tokens": rt, "cost_usd": cost, "unpriced_calls": unpriced, "error": error,
                "routes": _json_list(routes), "providers": _json_list(providers),
                "models": _json_list(models), "envs": _json_list(envs, with_null=bool(untagged)),
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
            sql = f"SELECT {_TRACE_KEY} FROM calls WHERE {w.sql()} ORDER BY abs(ts_ms - {middle}), id LIMIT 1"
            rows = self._query(sql, parameters=w.params).result_rows
            if rows:
                found.append(str(rows[0][0]))
        return found

    def trace_spans(self, workspace: str, trace_key: str, limit: int) -> list[dict[str, Any]]:
        w = Where()
        w.add(f"workspace = {w.param(workspace, 'String')}")
        if trace_key.startswith("call:") and trace_key[5:].isdigit():
            w.add(f"id = {w.param(int(trace_key[5:]), 'UInt64')}")
        else:
            w.add(f"trace_id = {w.param(trace_key, 'String')}")
        spans = self._rows(f"SELECT id, {', '.join(CALL_COLUMNS)} FROM calls WHERE {w.sql()}"
                           f" ORDER BY ts_ms, id LIMIT {int(limit)}", w.params)  # fmt: skip
        content = self._content(workspace, [s["id"] for s in spans if s["has_content"]])
        for span in spans:
            text = content.get(span["id"])
            span["request_text"] = text[0] if text else None
            span["response_text"] = text[1] if text else None
            span["content_tool_calls"] = text[2] if text else None
        return spans

    def _content(self, workspace: str, ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        if not ids:
            return {}
        w = Where()
        w.add(f"workspace = {w.param(workspace, 'String')}")
        w.add(f"call_id IN {w.param(list(ids), 'Array(UInt64)')}")
        sql = f"SELECT call_id, request_text, response_text, tool_calls FROM call_content WHERE {w.sql()}"
        return {int(r[0]): tuple(r[1:]) for r in self._query(sql, parameters=w.params).result_rows}

    def _rows(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        result = self._query(sql, parameters=params)
        names = result.column_names
        return [dict(zip(names, row, strict=True)) for row in result.result_rows]

    # -- routes ---------------------------------------------------------------------------------

    def routes(self, f: CallFilter) -> list[dict[str, Any]]:
        w = call_where(f)
        sql = (
            "SELECT route, count() AS calls, toInt64(sum(has_content)) AS replay_eligible_calls,"
            f" max(ts_ms) AS last_ms FROM calls WHERE {w.sql()} AND route IS NOT NULL GROUP BY route"
        )
        found = {r["route"]: r for r in self._rows(sql, w.params)}
        return self.meta.merge_route_config(f.workspace, found)

    # -- operators and tests --------------------------------------------------------------------

    def count_calls(self, workspace: str) -> int:
        w = Where()
        w.add(f"workspace = {w.param(workspace, 'String')}")
        return int(
            self._query(f"SELECT count() FROM calls WHERE {w.sql()}", parameters=w.params).result_rows[0][0]
        )

    def raw_calls(self, workspace: str) -> list[dict[str, Any]]:
        w = Where()
        w.add(f"workspace = {w.param(workspace, 'String')}")
        return self._rows(
            f"SELECT id, {', '.join(CALL_COLUMNS)} FROM calls WHERE {w.sql()} ORDER BY id", w.params
        )

    def raw_content(self, workspace: str) -> list[dict[str, Any]]:
        w = Where()
        w.add(f"workspace = {w.param(workspace, 'String')}")
        sql = (
            "SELECT call_id, workspace, request_text, response_text, tool_calls FROM call_content"
            f" WHERE {w.sql()} ORDER BY call_id"
        )
        return self._rows(sql, w.params)

    # -- workload classification and analysis (``TelemetryStore``'s workload reads) ---------------

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
        rows = self._query(sql, parameters=w.params).result_rows
        return [dict(zip(names, r, strict=True)) for r in rows]

    def replay_eligible_by_route(self, f: CallFilter) -> dict[str, int]:
        """Per route, the calls with retained request text (what replay can re-send)."""
        w = call_where(f)
        w.add("route IS NOT NULL AND has_content = 1")
        w.add(self._retained_ids(w, f))
        sql = f"SELECT route, count() FROM calls WHERE {w.sql()} GROUP BY route"
        return {str(r[0]): int(r[1]) for r in self._query(sql, parameters=w.params).result_rows}

    def retained_calls(self, f: CallFilter, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` successful matching calls with retained request and response text."""
        w = call_where(f)
        w.add("has_content = 1 AND error = 0")
        w.add(self._retained_ids(w, f, response=True))
        sql = (
            f"SELECT {', '.join(RETAINED_FIELDS)} FROM calls WHERE {w.sql()}"
            f" ORDER BY ts_ms DESC, id DESC LIMIT {w.param(limit, 'UInt64')}"
        )
        calls = self._rows(sql, w.params)
        content = self._content(f.workspace, [c["id"] for c in calls])
        for call in calls:
            call["request_text"], call["response_text"] = content[call["id"]][:2]
        return calls


def _json_list(values: list[Any], with_null: bool = False) -> str:
    """A ``groupUniqArray`` as the JSON list the embedded engine's ``json_group_array(DISTINCT ...)`` gives
    (the readers sort it and drop nulls; a NULL environment marks an untagged span)."""
    out: list[Any] = sorted(v for v in values if v is not None)
    if with_null:
        out.append(None)
    return json.dumps(out)


def insert_settings(server: Mapping[str, Any]) -> dict[str, int]:
    """The settings each ``calls`` INSERT asks for, given the server's ``system.settings``.

    Async inserts let the server gather inserts that arrive together from every worker into one INSERT
    (the group commit of ``clickhouse_inserts`` gathers only one worker's), and waiting for them is what
    keeps an acknowledged row safe. A setting the server's profile makes read-only cannot be asked for
    (the client refuses the INSERT): with ``async_insert`` locked off, or ``wait_for_async_insert`` locked
    off, inserts are plain (the worker's group commit alone); async inserts locked on without the wait
    would acknowledge rows the server still holds only in memory, so that server is refused.
    """
    asynchronous, wait = server.get("async_insert"), server.get("wait_for_async_insert")
    if asynchronous is None or wait is None:  # a server from before async inserts
        return {}
    on = asynchronous.value == "1" if asynchronous.readonly else True
    waits = wait.value == "1" if wait.readonly else True
    if on and not waits:
        if asynchronous.readonly:
            raise StorageUnavailable(
                "ClickHouse's settings profile locks async_insert on and wait_for_async_insert off: an"
                " acknowledged batch could be lost in the server's buffer",
                hint="let this user change wait_for_async_insert (or lock it to 1) in the server's profile",
                details={"reason": "clickhouse_unsafe_settings"},
            )
        return {}  # plain inserts: the wait cannot be asked for
    if not on:
        return {}
    settings: dict[str, int] = {}
    if not asynchronous.readonly:
        settings["async_insert"] = 1
    if not wait.readonly:
        settings["wait_for_async_insert"] = 1
    return settings


_INSERT_TYPES = ["UInt64", *(CALL_TYPES[name] for name in CALL_COLUMNS)]
