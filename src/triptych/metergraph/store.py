"""Metergraph persistence: call rows, retained content, rollups, keys, sessions and ingest batches.

``SqliteTelemetryStore`` is the embedded default (one WAL-mode SQLite file, ``metergraph.db``). The
services talk to it through plain dataclasses (``CallFilter``, ``AggRow``) and SQL-free method names, so
a ClickHouse store can implement the same methods later.

Rollups: every call is added to daily, hourly and weekly rollups keyed by (workspace, bucket, route,
provider, model, environment) with sums and a mergeable latency histogram. Empty strings stand for a
missing route/provider/model/environment in rollup keys. Ingest commits only the calls; the rollups are
folded from the committed calls afterwards, by a watermark (the highest call id folded) kept in the
database (``fold_rollups``): a background folder in the server folds soon after ingest, and every read of
a rollup table folds whatever is still pending first, so answers include every acknowledged call.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from triptych.core.db import Database
from triptych.core.errors import StorageUnavailable
from triptych.metergraph import histogram, import_events
from triptych.metergraph.call_filters import filter_clauses, key_clauses
from triptych.metergraph.import_events import ImportKey
from triptych.metergraph.rollup_fold import RollupFolder
from triptych.metergraph.workload_match import KEYS_SQL, SHAPE_SQL, WorkloadMatch, tags_signature

log = logging.getLogger(__name__)

MIGRATIONS = [
    """
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        retain_content INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE keys (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        kind TEXT NOT NULL,            -- app | agent
        role TEXT,                     -- agent keys: metadata | debug | replay
        environments TEXT,             -- JSON list, NULL = unrestricted
        token_hash TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL,
        revoked_at TEXT
    );
    CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        app TEXT NOT NULL,
        repository TEXT,
        sdk_version TEXT,
        expires_at INTEGER NOT NULL
    );
    CREATE TABLE calls (
        id INTEGER PRIMARY KEY,
        workspace TEXT NOT NULL,
        app TEXT,
        source TEXT NOT NULL,          -- sdk | otlp
        ts_ms INTEGER NOT NULL,
        route TEXT, provider TEXT, model TEXT, environment TEXT, operation TEXT,
        latency_ms REAL, ttft_ms REAL, lat_bucket INTEGER,
        input_tokens INTEGER, output_tokens INTEGER, cache_read_tokens INTEGER,
        cache_write_tokens INTEGER, reasoning_tokens INTEGER,
        status TEXT, status_code TEXT, finish_reason TEXT, error INTEGER NOT NULL DEFAULT 0, error_type TEXT,
        endpoint TEXT, request_id TEXT, session_id TEXT, conversation_id TEXT,
        trace_id TEXT, span_id TEXT, parent_span_id TEXT, trace_name TEXT, template_hash TEXT,
        unit_name TEXT, unit_count REAL, tool_names TEXT, tool_call_count INTEGER,
        stream INTEGER, batch INTEGER, func TEXT, module TEXT, tags TEXT,
        sdk TEXT, sdk_version TEXT, runtime TEXT,
        cost_usd REAL, computed_cost_usd REAL, reported_cost_usd REAL,
        cost_status TEXT NOT NULL, cost_unknown INTEGER NOT NULL DEFAULT 0, missing_rates TEXT, price_source TEXT,
        has_content INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX calls_by_time ON calls (workspace, ts_ms);
    CREATE INDEX calls_by_trace ON calls (workspace, trace_id);
    CREATE INDEX calls_by_route ON calls (workspace, route, ts_ms);
    -- Retained prompt/response content lives apart from the call rows; only Debug reads reach it.
    CREATE TABLE call_content (
        call_id INTEGER PRIMARY KEY REFERENCES calls(id),
        workspace TEXT NOT NULL,
        request_text TEXT,
        response_text TEXT,
        tool_calls TEXT
    );
    CREATE TABLE rollup_daily (
        workspace TEXT NOT NULL, bucket INTEGER NOT NULL,
        route TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL, environment TEXT NOT NULL,
        calls INTEGER NOT NULL, errors INTEGER NOT NULL, cost_usd REAL NOT NULL,
        input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
        latency_sum REAL NOT NULL, latency_count INTEGER NOT NULL,
        priced INTEGER NOT NULL, partial INTEGER NOT NULL, zero INTEGER NOT NULL, unpriced INTEGER NOT NULL,
        unknown INTEGER NOT NULL, hist BLOB NOT NULL,
        PRIMARY KEY (workspace, bucket, route, provider, model, environment)
    ) WITHOUT ROWID;
    CREATE TABLE rollup_hourly (
        workspace TEXT NOT NULL, bucket INTEGER NOT NULL,
        route TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL, environment TEXT NOT NULL,
        calls INTEGER NOT NULL, errors INTEGER NOT NULL, cost_usd REAL NOT NULL,
        input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
        latency_sum REAL NOT NULL, latency_count INTEGER NOT NULL,
        priced INTEGER NOT NULL, partial INTEGER NOT NULL, zero INTEGER NOT NULL, unpriced INTEGER NOT NULL,
        unknown INTEGER NOT NULL, hist BLOB NOT NULL,
        PRIMARY KEY (workspace, bucket, route, provider, model, environment)
    ) WITHOUT ROWID;
    CREATE TABLE ingest_batches (
        id INTEGER PRIMARY KEY,
        workspace TEXT NOT NULL,
        source TEXT NOT NULL,
        received_ms INTEGER NOT NULL,
        processed_ms INTEGER,
        status TEXT NOT NULL,          -- processed | failed
        failure_class TEXT,            -- permanent | recoverable | NULL
        accepted INTEGER NOT NULL DEFAULT 0,
        ignored INTEGER NOT NULL DEFAULT 0,
        dropped INTEGER NOT NULL DEFAULT 0,
        transport_errors INTEGER NOT NULL DEFAULT 0,
        unknown_attributes INTEGER NOT NULL DEFAULT 0,
        content_dropped INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX batches_by_time ON ingest_batches (workspace, received_ms);
    CREATE TABLE routes (
        workspace TEXT NOT NULL,
        route TEXT NOT NULL,
        description TEXT,
        constraints TEXT NOT NULL DEFAULT '{}',
        config TEXT NOT NULL DEFAULT '{}',
        updated_at TEXT NOT NULL,
        PRIMARY KEY (workspace, route)
    );
    """,
    # 2: route-free rollups, so provider/model reads touch a few hundred rows a day instead of one per
    # route; the route-keyed hourly rollup (about as large as the raw calls) is dropped.
    """
    DROP TABLE rollup_hourly;
    CREATE TABLE rollup_daily_coarse AS SELECT * FROM rollup_daily WHERE 0;
    CREATE TABLE rollup_hourly_coarse AS SELECT * FROM rollup_daily WHERE 0;
    CREATE UNIQUE INDEX rollup_daily_coarse_key
        ON rollup_daily_coarse (workspace, bucket, route, provider, model, environment);
    CREATE UNIQUE INDEX rollup_hourly_coarse_key
        ON rollup_hourly_coarse (workspace, bucket, route, provider, model, environment);
    """,
]
# 3: histogram buckets as integer columns (h0..h95) instead of a blob: SQLite sums them in C, zero
# counts cost one header byte, and the upsert needs no Python function. Rollups are rebuilt from calls.
_ROLLUP_TABLES = ("rollup_daily", "rollup_daily_coarse", "rollup_hourly_coarse")
_HIST_DDL = ", ".join(f"h{i} INTEGER NOT NULL DEFAULT 0" for i in range(histogram.BUCKETS))


def _rollup_ddl(table: str) -> str:
    return f"""CREATE TABLE {table} (
    workspace TEXT NOT NULL, bucket INTEGER NOT NULL,
    route TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL, environment TEXT NOT NULL,
    calls INTEGER NOT NULL, errors INTEGER NOT NULL, cost_usd REAL NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
    latency_sum REAL NOT NULL, latency_count INTEGER NOT NULL,
    priced INTEGER NOT NULL, partial INTEGER NOT NULL, zero INTEGER NOT NULL, unpriced INTEGER NOT NULL,
    unknown INTEGER NOT NULL, {_HIST_DDL},
    PRIMARY KEY (workspace, bucket, route, provider, model, environment)
) WITHOUT ROWID;"""


MIGRATIONS.append(
    "\n".join([f"DROP TABLE {t};" for t in _ROLLUP_TABLES] + [_rollup_ddl(t) for t in _ROLLUP_TABLES])
)
HIST_COLUMNS = tuple(f"h{i}" for i in range(histogram.BUCKETS))
# Rollup tables: name -> (bucket width in ms, keeps the route).
ROLLUPS: dict[str, tuple[int, bool]] = {
    "rollup_daily": (86_400_000, True),
    "rollup_daily_coarse": (86_400_000, False),
    "rollup_hourly_coarse": (3_600_000, False),
    "rollup_weekly_coarse": (7 * 86_400_000, False),
}
WEEK_DAYS = 7

# What priced each call (pricing.py), added by migration 6.
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


@functools.lru_cache(maxsize=256)
def _insert_call(present: tuple[bool, ...], rows: int = 1) -> str:
    """An INSERT of ``rows`` rows naming the columns marked present (the others default to NULL)."""
    columns = list(itertools.compress(CALL_COLUMNS, present))
    one = f"({', '.join('?' * len(columns))})"
    return f"INSERT INTO calls ({', '.join(columns)}) VALUES {', '.join([one] * rows)}"


# Rows per multi-row INSERT: one statement step inserts them all in C with the GIL released, so another
# batch's decoding and normalisation runs meanwhile (``executemany`` takes the GIL back after every row,
# and then waits for it behind the other thread). Bounded by SQLite's limit on bound parameters. The
# sizes are powers of two, so each table needs only a few prepared statements (the sqlite3 module keeps
# 128 per connection), whatever the number of rows.
_ROWS_PER_INSERT = 1024
_MAX_PARAMS = 32_766  # SQLITE_MAX_VARIABLE_NUMBER's default since SQLite 3.32


def _insert_many(
    conn: sqlite3.Connection, sql: Callable[[int], str], rows: Sequence[Sequence[Any]], width: int
) -> None:
    """``rows`` (each ``width`` values) inserted in order by multi-row statements; ``sql(n)`` inserts n."""
    limit = min(_MAX_PARAMS, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))  # 999 before 3.32
    per = _ROWS_PER_INSERT
    while per > 1 and per * width > limit:
        per //= 2
    start = 0
    while start < len(rows):
        while per > len(rows) - start:
            per //= 2
        chunk = rows[start : start + per]
        conn.execute(sql(per), list(itertools.chain.from_iterable(chunk)))
        start += per


# Metadata values longer than this are not eligible for grouping; the SQL path and the columnar
# projection (``columns.py``) must agree.
ELIGIBLE_CHARS = 1000

SUMS = (
    "calls", "errors", "cost_usd", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "latency_sum", "latency_count", "priced", "partial", "zero", "unpriced", "unknown",
)  # fmt: skip
# 4: a weekly route-free rollup (bucket = UTC day // 7), so a 90-day provider/model read sums about a
# quarter of the rows: whole weeks from it, the days at a window's edges from the daily one. Backfilled
# from the daily rollup.
MIGRATIONS.append(
    _rollup_ddl("rollup_weekly_coarse")
    # Floor division, as in Python (SQLite's integer division truncates a negative bucket toward zero).
    + "\nINSERT INTO rollup_weekly_coarse SELECT workspace, (bucket - (bucket % 7 + 7) % 7) / 7 AS week,"
    + " route, provider, model, environment, "
    + ", ".join(f"SUM({c})" for c in (*SUMS, *HIST_COLUMNS))
    + " FROM rollup_daily_coarse GROUP BY workspace, week, route, provider, model, environment;"
)
ROLLUP_KEY = ("route", "provider", "model", "environment")
# Calls folded per write transaction: the write lock is held for a fraction of a second, and the
# per-chunk cost (one upsert per rollup group) is spread over many calls.
FOLD_CHUNK = 100_000
# 5: the rollups' watermark: the highest call id folded into them (``fold_rollups``). Until now every
# call was added to the rollups in its own ingest transaction, so the existing rollups hold every call.
MIGRATIONS.append(
    "CREATE TABLE rollup_watermark (id INTEGER PRIMARY KEY CHECK (id = 1), folded INTEGER NOT NULL);"
    "\nINSERT INTO rollup_watermark SELECT 1, COALESCE(MAX(id), 0) FROM calls;"
    # Whole batches folded above the watermark (a process folds its own batches from memory).
    "\nCREATE TABLE rollup_folded (first_id INTEGER PRIMARY KEY, last_id INTEGER NOT NULL);"
)
# 6: a route's constraints in their own column: ``route set --config`` kept them inside the config, where
# no read looked (``metergraph_list_routes`` answered {}), so they move out of it.
MIGRATIONS.append(
    "UPDATE routes SET constraints = json_extract(config, '$.constraints'),"
    " config = json_remove(config, '$.constraints') WHERE json_type(config, '$.constraints') = 'object';"
)
# 7: what priced each call (pricing.py): the catalogue, its entry and model id, where the cost came from,
# the cache-write split and the gateway evidence it was decided on. Calls stored before keep NULL there.
_PRICING_TYPES = ("INTEGER", "INTEGER", "TEXT", "TEXT", "TEXT", "TEXT", "TEXT")
MIGRATIONS.append(
    "\n".join(
        f"ALTER TABLE calls ADD COLUMN {c} {t};" for c, t in zip(PRICING_COLUMNS, _PRICING_TYPES, strict=True)
    )
)
DIMENSIONS = ("provider", "model", "route", "day")
# ClickHouse's TTL when no retention is set (a TTL needs a number): ten years.
DEFAULT_RETENTION_DAYS = 3650
# The embedded engine deletes expired calls this often (and when it opens), this many per transaction.
PURGE_EVERY_S = 3600.0
PURGE_CHUNK = 10_000
UNTAGGED = ""
_UNTAGGED_SQL = "(environment IS NULL OR trim(environment) = '')"


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
_CALLS_AFTER = f"SELECT {', '.join(PROJECTED_FIELDS)} FROM calls WHERE id > ? ORDER BY id LIMIT ?"


def _placeholders(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def _json_path(key: str) -> str | None:
    # SQLite JSON paths cannot quote a label containing '"' or '\'; those keys use json_each instead.
    if '"' in key or "\\" in key:
        return None
    return '$."' + key + '"'


def _meta_exprs(key: str) -> tuple[str, str, str]:
    """(type SQL, value SQL, the one argument each of them takes) for one tags key of a ``calls`` row."""
    path = _json_path(key)
    if path is not None:
        return "json_type(tags, ?)", "json_extract(tags, ?)", path
    return (
        "(SELECT type FROM json_each(calls.tags) WHERE key = ?)",
        "(SELECT value FROM json_each(calls.tags) WHERE key = ?)",
        key,
    )


class _SqliteParams:
    """``call_filters.Dialect`` for SQLite: ``?`` placeholders, their arguments appended to ``params``."""

    keys_sql = KEYS_SQL

    def __init__(self, params: list[Any]) -> None:
        self.params = params

    def param(self, value: Any, kind: str) -> str:
        self.params.append(value)
        return "?"

    def one_of(self, column: str, values: Sequence[Any], kind: str) -> str:
        self.params.extend(values)
        return f"{column} IN ({_placeholders(values)})"

    def metadata_equals(self, key: str, value: str) -> str:
        type_sql, value_sql, arg = _meta_exprs(key)
        self.params.extend([arg, arg, value])
        return f"{type_sql} = 'text' AND {value_sql} = ?"


def _key_clauses(f: CallFilter, clauses: list[str], params: list[Any]) -> None:
    """The route, provider, model and environment filters, shared by raw calls and rollups."""
    clauses.extend(key_clauses(f, _SqliteParams(params)))


def call_where(f: CallFilter, params: list[Any]) -> str:
    return " AND ".join(filter_clauses(f, _SqliteParams(params)))


# Calls with retained request text, for the workload reads (its argument is the workspace).
_RETAINED = "id IN (SELECT call_id FROM call_content WHERE workspace = ? AND request_text IS NOT NULL)"
# What ``retained_calls`` gives of each call, besides its request_text and response_text.
RETAINED_FIELDS = (
    "id", "trace_id", "ts_ms", "route", "provider", "model", "input_tokens", "output_tokens", "cost_usd",
)  # fmt: skip


class TelemetryStore(Protocol):
    """What the services need from a telemetry engine: ``SqliteTelemetryStore`` (embedded default) and
    ``clickhouse_store.ClickHouseTelemetryStore`` (server mode) implement it. Services read calls only
    through these methods; a new read over calls is a new method here, implemented by both engines."""

    # Days calls are kept (``MetergraphSettings.retention_days``); None: kept for good.
    retention_days: int | None

    def close(self) -> None: ...
    def purge_expired(self, now: datetime) -> int: ...
    def workspace(self, workspace: str) -> dict[str, Any] | None: ...
    def set_retain_content(self, workspace: str, retain: bool, now_iso: str) -> None: ...
    def insert_key(
        self, key_id: str, workspace: str, kind: str, role: str | None, environments: Sequence[str] | None,
        token_hash: str, now_iso: str,
    ) -> None: ...  # fmt: skip
    def key_by_hash(self, token_hash: str) -> dict[str, Any] | None: ...
    def list_keys(self, workspace: str | None = None) -> list[dict[str, Any]]: ...
    def revoke_key(self, key_id: str, now_iso: str) -> bool: ...
    def insert_session(
        self, token_hash: str, workspace: str, app: str, repository: str, sdk_version: str, expires_at: int
    ) -> None: ...
    def session_by_hash(self, token_hash: str) -> dict[str, Any] | None: ...
    def insert_batch(
        self, workspace: str, source: str, calls: CallBatch, contents: Sequence[Content | None],
        batch: dict[str, Any], now_iso: str, import_keys: Sequence[ImportKey | None] | None = None,
    ) -> None: ...  # fmt: skip
    def record_failed_batch(
        self, workspace: str, source: str, received_ms: int, failure_class: str
    ) -> None: ...
    def aggregate_rollups(
        self,
        table: str,
        f: CallFilter,
        bucket_from: int,
        bucket_to: int,
        dims: Sequence[str],
        bucket_per_day: int,
    ) -> dict[tuple[Any, ...], AggRow]: ...
    def aggregate_raw(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]: ...
    def trace_page(
        self,
        f: CallFilter,
        trace_filter_envs: Sequence[str] | None,
        cursor: tuple[int, int] | None,
        limit: int,
    ) -> list[dict[str, Any]]: ...
    def trace_summaries(self, f: CallFilter, keys: Sequence[str]) -> list[dict[str, Any]]: ...
    def sample_calls(self, f: CallFilter, slices: Sequence[tuple[int, int]]) -> list[str]: ...
    def trace_spans(self, workspace: str, trace_key: str, limit: int) -> list[dict[str, Any]]: ...
    def routes(self, f: CallFilter) -> list[dict[str, Any]]: ...
    def route_config(self, workspace: str) -> dict[str, Any]: ...
    def set_route(
        self,
        workspace: str,
        route: str,
        description: str | None,
        config: dict[str, Any],
        now_iso: str,
        constraints: dict[str, Any] | None = None,
    ) -> None: ...
    def batch_health(self, workspace: str, since_ms: int) -> dict[str, Any]: ...
    def count_calls(self, workspace: str) -> int: ...
    def raw_calls(self, workspace: str) -> list[dict[str, Any]]: ...
    def raw_content(self, workspace: str) -> list[dict[str, Any]]: ...
    def recent_batches(self, workspace: str, limit: int) -> list[tuple[str, int]]: ...
    # Workload classification and analysis (content-free but for ``retained_calls``).
    def workload_features(self, f: CallFilter) -> list[dict[str, Any]]: ...
    def replay_eligible_by_route(self, f: CallFilter) -> dict[str, int]: ...
    def retained_calls(self, f: CallFilter, limit: int) -> list[dict[str, Any]]: ...


class SqliteTelemetryStore:
    def __init__(self, path: Path, retention_days: int | None = None) -> None:
        # Durable before the 202: the WAL is synced at every commit. An ingest batch writes a few MB of
        # WAL, so the background checkpoint runs after every commit (``core.db.Checkpointer``).
        self.db = Database(
            path, MIGRATIONS, synchronous="FULL", background_checkpoints=True, checkpoint_every=1
        )
        import_events.migrate(self.db)
        self._write_lock = threading.Lock()
        self.retention_days = retention_days
        # The last purge of expired calls: none yet, so the server's folder thread purges on its first round
        # (a CLI command, which starts no folder, never waits for one).
        self._purged_at = float("-inf")
        # The columnar projection of the calls (``columns.py``), attached by the service wiring.
        self.columns: RawAggregator | None = None
        # Folds the rollups in the background soon after ingest commits (the server starts it); while it
        # runs, the batches this process committed wait for it in memory, so the fold need not read them
        # back (at most ``max_unfolded`` calls: beyond, the fold reads them back).
        self.folder = RollupFolder(self.fold_in_background)
        self._stuck: tuple[int, float] | None = None  # (watermark, since when) it waits on other calls
        self.stuck_s = 2.0
        self._unfolded: dict[int, Unfolded] = {}
        self._unfolded_lock = threading.Lock()
        self.max_unfolded = FOLD_CHUNK
        conn = self.db.conn
        if (
            conn.execute(
                "SELECT 1 FROM calls WHERE id <= (SELECT folded FROM rollup_watermark) LIMIT 1"
            ).fetchone()
            and not conn.execute("SELECT 1 FROM rollup_daily LIMIT 1").fetchone()
        ):
            self.rebuild_rollups()  # a database from before migration 3

    def rebuild_rollups(self) -> None:
        """Recompute every rollup from the raw calls (one transaction)."""
        with self._write_lock, self.db.transaction() as conn:
            for table in ROLLUPS:
                conn.execute(f"DELETE FROM {table}")
            top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])
            for after in range(0, top, FOLD_CHUNK):
                fold_parts(conn, read_back(conn, after, min(top, after + FOLD_CHUNK)))
            conn.execute("UPDATE rollup_watermark SET folded = ?", (top,))
            with self._unfolded_lock:
                self._unfolded.clear()

    def fold_rollups(
        self, stop: Callable[[], bool] = lambda: False, chunk: int = FOLD_CHUNK, own_only: bool = False
    ) -> int:
        """Fold committed calls into the rollups, about ``chunk`` calls per write transaction (each reads
        what is folded, folds, and records it, all or nothing); returns how many calls it folded.

        What is folded: every call id up to the watermark, and the id ranges in ``rollup_folded`` above
        it (whole batches a process folded from memory while an earlier call was not folded yet). Call
        ids are assigned under the write lock, one more than the largest, and calls are never deleted,
        so a call committed later never has an id in either. Safe with several processes on one file:
        SQLite serialises the transactions, and each reads what is folded inside its own.

        The batches this process committed are taken from memory (``Unfolded``). Without ``own_only``
        (a read catching up) every other call up to the newest is read back from the table, and the
        watermark reaches the newest call; with it (the background folder) only the batches in memory
        are folded, so two server processes do not read back each other's calls. ``stop`` is asked
        between chunks.
        """
        done = 0
        while not stop():
            with self._write_lock:
                with self.db.transaction() as conn:
                    folded = self._fold_chunk(conn, chunk, own_only)
                # Committed: forget the batches now folded (a failed fold leaves them to the next one).
                with self._unfolded_lock:
                    for first in [k for k, u in self._unfolded.items() if u.first_id in folded.gone]:
                        del self._unfolded[first]
            done += folded.calls
            if not folded.more:
                break
        return done

    def _fold_chunk(self, conn: sqlite3.Connection, chunk: int, own_only: bool) -> _Folded:
        """One transaction's fold (see ``fold_rollups``)."""
        watermark = int(conn.execute("SELECT folded FROM rollup_watermark").fetchone()[0])
        top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])
        ranges = dict(conn.execute("SELECT first_id, last_id FROM rollup_folded").fetchall())
        with self._unfolded_lock:
            own = {k: u for k, u in self._unfolded.items() if k > watermark and k not in ranges}
            gone = set(self._unfolded) - set(own)  # folded by now, one way or another
        if (own_only and not own) or top <= watermark:
            return _Folded(0, gone, False)  # nothing to fold: nothing written
        parts: list[tuple[str, CallBatch]] = []
        calls = 0
        if own_only:
            taken = 0
            for first in sorted(own):
                if calls >= chunk:
                    break
                parts.append((own[first].workspace, own[first].calls))
                calls += own[first].calls.size
                ranges[first] = own[first].last_id
                gone.add(first)
                taken += 1
            more = taken < len(own)
        else:
            position = _unfolded_parts(conn, watermark, min(top, watermark + chunk), own, ranges, parts)
            calls = sum(b.size for _, b in parts)
            gone.update(k for k in own if k <= position)
            watermark = position  # everything up to it is folded now
            more = position < top
        fold_parts(conn, parts)
        # The watermark moves over the folded ranges that now follow it.
        while watermark + 1 in ranges:
            watermark = ranges.pop(watermark + 1)
        conn.execute("UPDATE rollup_watermark SET folded = ?", (watermark,))
        conn.execute("DELETE FROM rollup_folded")
        above = sorted((first, last) for first, last in ranges.items() if first > watermark)
        conn.executemany("INSERT INTO rollup_folded VALUES (?, ?)", above)
        return _Folded(calls, gone, more)

    def fold_in_background(self, stop: Callable[[], bool]) -> int:
        """The folder's fold: this process's batches in memory; and every pending call, read back, once
        the watermark has waited ``stuck_s`` seconds on calls no process folds (another process
        stopped, calls from before a restart, a CLI import)."""
        done = self.fold_rollups(stop, own_only=True)
        pending = self.rollups_pending()
        watermark = int(self.db.conn.execute("SELECT folded FROM rollup_watermark").fetchone()[0])
        now = time.monotonic()
        if not pending:
            self._stuck = None
        elif self._stuck is None or self._stuck[0] != watermark:
            self._stuck = (watermark, now)
        elif now - self._stuck[1] >= self.stuck_s:
            done += self.fold_rollups(stop)
            self._stuck = None
        if self.retention_days is not None and now - self._purged_at >= PURGE_EVERY_S:
            self.purge_expired(datetime.now(UTC))
        return done

    def purge_expired(self, now: datetime) -> int:
        """Delete the calls older than the retention window, their content and their rollup rows, a chunk
        per transaction; returns how many calls went. The newest call (largest id) always stays: ids are
        one more than the largest, so a later call can never take an id the rollups have folded."""
        self._purged_at = time.monotonic()
        if self.retention_days is None:
            return 0
        horizon = int(now.timestamp() * 1000) - self.retention_days * 86_400_000
        gone = 0
        while True:
            with self._write_lock, self.db.transaction() as conn:
                ids = [r[0] for r in conn.execute(
                    "SELECT id FROM calls WHERE ts_ms < ? AND id < (SELECT MAX(id) FROM calls) LIMIT ?",
                    (horizon, PURGE_CHUNK),
                )]  # fmt: skip
                if ids:
                    marks = _placeholders(ids)
                    conn.execute(f"DELETE FROM call_content WHERE call_id IN ({marks})", ids)
                    conn.execute(f"DELETE FROM calls WHERE id IN ({marks})", ids)
                if len(ids) < PURGE_CHUNK:
                    # A rollup row goes once its whole bucket is older than the window.
                    for table, (width, _) in ROLLUPS.items():
                        conn.execute(f"DELETE FROM {table} WHERE (bucket + 1) * ? <= ?", (width, horizon))
            gone += len(ids)
            if len(ids) < PURGE_CHUNK:
                return gone

    def _with_unfolded(self, table: str) -> str:
        """``table`` with the calls not folded yet added, for a read when the fold cannot write (a full
        disk): their groups go to a table in an in-memory database attached to this thread's
        connection, and the read is over both."""
        conn = self.db.conn
        try:
            conn.execute("ATTACH DATABASE ':memory:' AS unfolded")
        except sqlite3.OperationalError:
            pass  # attached by an earlier read on this connection
        conn.execute(f"CREATE TABLE IF NOT EXISTS unfolded.{table} AS SELECT * FROM main.{table} WHERE 0")
        conn.execute(f"DELETE FROM unfolded.{table}")
        watermark = int(conn.execute("SELECT folded FROM rollup_watermark").fetchone()[0])
        top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])
        ranges = dict(conn.execute("SELECT first_id, last_id FROM rollup_folded").fetchall())
        parts: list[tuple[str, CallBatch]] = []
        _unfolded_parts(conn, watermark, top, {}, ranges, parts)
        by_workspace: dict[str, list[CallBatch]] = {}
        for workspace, calls in parts:
            by_workspace.setdefault(workspace, []).append(calls)
        insert = f"INSERT INTO unfolded.{table} ({', '.join(ROLLUP_PARAMS)}) VALUES ({_placeholders(ROLLUP_PARAMS)})"
        for workspace, batches in by_workspace.items():
            conn.executemany(insert, rollup_deltas(concat_batches(batches), workspace)[table])
        return f"(SELECT * FROM main.{table} UNION ALL SELECT * FROM unfolded.{table})"

    def rollups_pending(self) -> int:
        """How far the rollups are behind the calls, in call ids (0: every committed call is folded)."""
        row = self.db.conn.execute(
            "SELECT (SELECT COALESCE(MAX(id), 0) FROM calls) - folded FROM rollup_watermark"
        ).fetchone()
        return max(0, int(row[0]))

    def catch_up_rollups(self) -> None:
        """Fold what is pending, if anything (the check is two index lookups): before every rollup read."""
        if self.rollups_pending():
            self.fold_rollups()

    def close(self) -> None:
        self.folder.close()  # first: it writes through the database
        self.db.close()

    # -- workspaces, keys, sessions -------------------------------------------------------------

    def ensure_workspace(self, conn: sqlite3.Connection, workspace: str, now_iso: str) -> None:
        conn.execute("INSERT OR IGNORE INTO workspaces (id, created_at) VALUES (?, ?)", (workspace, now_iso))

    def workspace(self, workspace: str) -> dict[str, Any] | None:
        row = self.db.conn.execute("SELECT * FROM workspaces WHERE id = ?", (workspace,)).fetchone()
        return dict(row) if row else None

    def set_retain_content(self, workspace: str, retain: bool, now_iso: str) -> None:
        with self.db.transaction() as conn:
            self.ensure_workspace(conn, workspace, now_iso)
            conn.execute("UPDATE workspaces SET retain_content = ? WHERE id = ?", (int(retain), workspace))

    def insert_key(
        self,
        key_id: str,
        workspace: str,
        kind: str,
        role: str | None,
        environments: Sequence[str] | None,
        token_hash: str,
        now_iso: str,
    ) -> None:
        with self.db.transaction() as conn:
            self.ensure_workspace(conn, workspace, now_iso)
            conn.execute(
                "INSERT INTO keys (id, workspace, kind, role, environments, token_hash, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key_id, workspace, kind, role, json.dumps(list(environments)) if environments else None,
                 token_hash, now_iso),
            )  # fmt: skip

    def key_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            "SELECT * FROM keys WHERE token_hash = ? AND revoked_at IS NULL", (token_hash,)
        ).fetchone()
        return dict(row) if row else None

    def list_keys(self, workspace: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, workspace, kind, role, environments, created_at, revoked_at FROM keys"
        args: tuple[Any, ...] = ()
        if workspace is not None:
            sql += " WHERE workspace = ?"
            args = (workspace,)
        return [dict(r) for r in self.db.conn.execute(sql + " ORDER BY created_at", args)]

    def revoke_key(self, key_id: str, now_iso: str) -> bool:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now_iso, key_id)
            )
            return cur.rowcount > 0

    def insert_session(
        self, token_hash: str, workspace: str, app: str, repository: str, sdk_version: str, expires_at: int
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM sessions WHERE expires_at < ?", (expires_at - 7 * 86_400,))
            conn.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)",
                (token_hash, workspace, app, repository, sdk_version, expires_at),
            )

    def session_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        row = self.db.conn.execute("SELECT * FROM sessions WHERE token_hash = ?", (token_hash,)).fetchone()
        return dict(row) if row else None

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
        """Rows, content and the batch record: one transaction, all or nothing. The rollups are folded
        from the committed calls afterwards (``fold_rollups``), in the background or by the next read.
        Rows whose import identity is already stored (``import_events``) are left out, in the same
        transaction that claims the new ones."""
        # The INSERT names only the columns some row of the batch fills: binding a None costs the
        # sqlite3 module an adapter lookup, and about half of a call row's columns are NULL in every
        # row of a typical batch.
        columns = [calls.column(name) for name in CALL_COLUMNS]
        mask = tuple(column.count(None) != len(column) for column in columns)
        rows = list(zip(*itertools.compress(columns, mask), strict=True))
        width = sum(mask)

        def insert(n: int) -> str:
            return _insert_call(mask, n)

        # One writer at a time in this process, queued on a lock rather than on SQLite's busy handler
        # (which sleeps up to 100 ms between tries); other processes still meet the busy timeout.
        with self._write_lock:
            with self.db.transaction() as conn:
                if import_keys is not None:
                    fresh = import_events.claim(conn, workspace, import_keys)
                    if not all(fresh):
                        calls = calls.take(fresh)
                        contents = list(itertools.compress(contents, fresh))
                        rows = list(itertools.compress(rows, fresh))
                first_id = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0]) + 1
                self.ensure_workspace(conn, workspace, now_iso)
                start = 0  # rows with content go one by one (their content needs the id), the rest in runs
                for i, content in enumerate(contents):
                    if content is None:
                        continue
                    if start < i:
                        _insert_many(conn, insert, rows[start:i], width)
                    cur = conn.execute(insert(1), rows[i])
                    conn.execute(
                        "INSERT INTO call_content VALUES (?, ?, ?, ?, ?)",
                        (
                            cur.lastrowid,
                            workspace,
                            content.request_text,
                            content.response_text,
                            content.tool_calls,
                        ),
                    )
                    start = i + 1
                if start < len(rows):
                    _insert_many(conn, insert, rows[start:], width)
                self.record_batch(conn, workspace, source, calls.size, batch)
                # Consecutive ids, unless the largest id was reached (SQLite then picks free ones at random).
                consecutive = (
                    conn.execute("SELECT MAX(id) FROM calls").fetchone()[0] == first_id + calls.size - 1
                )
        if calls.size and consecutive and self.folder.running:
            with self._unfolded_lock:
                if sum(u.calls.size for u in self._unfolded.values()) < self.max_unfolded:
                    # Only the columns the fold reads: the rest of the batch (tags, ids, text) is freed.
                    slim = CallBatch(calls.size, {}, {name: calls.column(name) for name in _ROLLUP_INPUTS})
                    self._unfolded[first_id] = Unfolded(first_id, workspace, slim)
        self.folder.note(calls.size)

    def record_batch(
        self, conn: sqlite3.Connection, workspace: str, source: str, accepted: int, batch: dict[str, Any]
    ) -> None:
        """The record of a processed ingest batch (in the caller's transaction)."""
        conn.execute(
            "INSERT INTO ingest_batches (workspace, source, received_ms, processed_ms, status, accepted,"
            " ignored, dropped, transport_errors, unknown_attributes, content_dropped)"
            " VALUES (?, ?, ?, ?, 'processed', ?, ?, ?, ?, ?, ?)",
            (workspace, source, batch["received_ms"], batch["processed_ms"], accepted, batch["ignored"],
             batch["dropped"], batch["transport_errors"], batch["unknown_attributes"], batch["content_dropped"]),
        )  # fmt: skip

    def record_failed_batch(self, workspace: str, source: str, received_ms: int, failure_class: str) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO ingest_batches (workspace, source, received_ms, status, failure_class)"
                " VALUES (?, ?, ?, 'failed', ?)",
                (workspace, source, received_ms, failure_class),
            )

    # -- reads ----------------------------------------------------------------------------------

    def aggregate_rollups(
        self,
        table: str,
        f: CallFilter,
        bucket_from: int,
        bucket_to: int,
        dims: Sequence[str],
        bucket_per_day: int,
    ) -> dict[tuple[Any, ...], AggRow]:
        """Group rollup rows in [bucket_from, bucket_to) by ``dims`` (route/provider/model/day)."""
        assert table in ROLLUPS
        params: list[Any] = [f.workspace, bucket_from, bucket_to]
        where = ["workspace = ?", "bucket >= ?", "bucket < ?"]
        _key_clauses(f, where, params)
        exprs = [f"bucket / {bucket_per_day}" if d == "day" else d for d in dims]
        group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(exprs)))}" if exprs else ""
        cols = ", ".join([*exprs, *(f"SUM({c})" for c in (*SUMS, *HIST_COLUMNS))])
        sql = f"SELECT {cols} FROM @source WHERE {' AND '.join(where)}{group}"
        conn = self.db.conn
        try:
            self.catch_up_rollups()  # every acknowledged call counts, folded or not yet
            rows = conn.execute(sql.replace("@source", table), params).fetchall()
        except StorageUnavailable:
            # The disk refuses the fold (full): reads keep working, exactly, from one snapshot of what is
            # folded, the calls that are not, and the rollup.
            conn.execute("BEGIN")
            try:
                rows = conn.execute(sql.replace("@source", self._with_unfolded(table)), params).fetchall()
            finally:
                conn.execute("COMMIT")
        result: dict[tuple[Any, ...], AggRow] = {}
        n, m = len(exprs), len(SUMS)
        for row in rows:
            if row[n] is None:
                continue  # nothing matched (an aggregate without GROUP BY still returns one row)
            key = tuple(None if v == "" and d != "day" else v for v, d in zip(row[:n], dims, strict=True))
            measured = np.array(row[n:], dtype=np.float64)
            result[key] = AggRow(key, measured[:m], measured[m:].astype(histogram.DTYPE))
        return result

    def aggregate_raw(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]:
        """Group raw calls by ``dims`` and, when given, one metadata key's (class, value).

        The metadata class is 'v' (a string of at most 1,000 characters), 'm' (key missing) or 'i'
        (present but not an eligible string); the value is NULL unless the class is 'v'. Metadata reads
        scan the columnar projection when this process maintains one (``columns.py``), else the table.
        """
        # The projection keeps no token shapes nor key sets: a workload's calls are read by SQL.
        if self.columns is not None and (meta_key is not None or f.metadata) and f.workload is None:
            found = self.columns.aggregate(f, dims, meta_key)
            if found is not None:
                return found
        return self.aggregate_calls_sql(f, dims, meta_key)

    def aggregate_calls_sql(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]:
        """``aggregate_raw`` as one SQL scan of the ``calls`` table (JSON extraction per row)."""
        params: list[Any] = []
        inner = [f"{'ts_ms / 86400000' if d == 'day' else d} AS d{i}" for i, d in enumerate(dims)]
        select = [f"d{i}" for i in range(len(dims))]
        if meta_key is not None:
            # The key's type and value are read once per row in a subquery that LIMIT -1 keeps from being
            # flattened (flattening would parse the JSON again for every use).
            t, v, arg = _meta_exprs(meta_key)
            inner += [f"{t} AS mt", f"{v} AS mv"]
            params.extend([arg, arg])
            eligible = f"mt = 'text' AND length(mv) <= {ELIGIBLE_CHARS}"
            select.append(f"CASE WHEN mt IS NULL THEN 'm' WHEN {eligible} THEN 'v' ELSE 'i' END")
            select.append(f"CASE WHEN {eligible} THEN mv END")
        measures = (
            "lat_bucket, error, cost_usd, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,"
            " reasoning_tokens, latency_ms, cost_status, cost_unknown"
        )
        sums = (
            "COUNT(*), SUM(error), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(input_tokens), 0),"
            " COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_tokens), 0),"
            " COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(reasoning_tokens), 0),"
            " COALESCE(SUM(latency_ms), 0), COUNT(latency_ms),"
            " SUM(cost_status = 'priced'), SUM(cost_status = 'partial'), SUM(cost_status = 'zero'),"
            " SUM(cost_status = 'unpriced' AND cost_unknown = 0), SUM(cost_unknown)"
        )
        where = call_where(f, params)
        group = ", ".join([str(i + 1) for i in range(len(select))] + [str(len(select) + 1)])
        sql = (
            f"SELECT {', '.join([*select, 'lat_bucket'])}, {sums}"
            f" FROM (SELECT {', '.join([*inner, measures])} FROM calls WHERE {where} LIMIT -1) GROUP BY {group}"
        )
        result: dict[tuple[Any, ...], AggRow] = {}
        n = len(select)
        for row in self.db.conn.execute(sql, params):
            key = tuple(row[:n])
            agg = result.get(key)
            if agg is None:
                agg = result[key] = AggRow(key)
            agg.sums += np.array([v or 0 for v in row[n + 1 :]], dtype=np.float64)
            if row[n] is not None:
                agg.hist[int(row[n])] += int(row[n + 1])
        return result

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
            f" AND (environment IS NULL OR environment NOT IN ({_placeholders(envs)})) LIMIT 1",
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
                f"SELECT *, trace_id AS trace_key FROM calls WHERE {where} AND trace_id IN ({_placeholders(trace_ids)})"
            )
            params.extend(trace_ids)
        if call_ids:
            where = call_where(f, params)
            parts.append(
                f"SELECT *, 'call:' || id AS trace_key FROM calls WHERE {where} AND id IN ({_placeholders(call_ids)})"
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

    def routes(self, f: CallFilter) -> list[dict[str, Any]]:
        params: list[Any] = []
        where = call_where(f, params)
        sql = (
            "SELECT route, COUNT(*) AS calls, SUM(has_content) AS replay_eligible_calls, MAX(ts_ms) AS last_ms"
            f" FROM calls WHERE {where} AND route IS NOT NULL GROUP BY route"
        )
        found = {r["route"]: dict(r) for r in self.db.conn.execute(sql, params)}
        return self.merge_route_config(f.workspace, found)

    # -- workload classification and analysis -----------------------------------------------------

    def workload_features(self, f: CallFilter) -> list[dict[str, Any]]:
        """Call counts and sums per (route, metadata keys, token shape, provider, model): ``keys`` is the
        sorted metadata keys' signature (``workload_match.tags_signature``), ``retained`` the calls with
        retained request text; several rows may share a key (one per distinct metadata object)."""
        params: list[Any] = [f.workspace]
        where = call_where(f, params)
        # Grouping by the stored metadata text and reading its keys once per distinct text is about a
        # third cheaper than parsing every call's metadata in SQL (bench/metergraph_classify.py).
        sql = (
            f"SELECT route, tags, {SHAPE_SQL} AS shape, provider, model, COUNT(*) AS calls,"
            f" SUM(has_content AND {_RETAINED}) AS retained, SUM(cost_usd) AS cost_usd,"
            " SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,"
            f" MIN(ts_ms) AS first_ms, MAX(ts_ms) AS last_ms FROM calls WHERE {where}"
            " GROUP BY route, tags, shape, provider, model"
        )
        keys: dict[str | None, str] = {}
        out = []
        # The retained-content subquery's workspace comes first, then the filter's arguments.
        for r in self.db.conn.execute(sql, params):
            row = dict(r)
            tags = row.pop("tags")
            signature = keys.get(tags)
            if signature is None:
                signature = keys[tags] = tags_signature(tags)
            row["keys"] = signature
            out.append(row)
        return out

    def replay_eligible_by_route(self, f: CallFilter) -> dict[str, int]:
        """Per route, the calls with retained request text (what replay can re-send)."""
        params: list[Any] = []
        where = call_where(f, params)
        sql = (
            f"SELECT route, COUNT(*) FROM calls WHERE {where} AND route IS NOT NULL AND has_content = 1"
            f" AND {_RETAINED} GROUP BY route"
        )
        return {r[0]: int(r[1]) for r in self.db.conn.execute(sql, [*params, f.workspace])}

    def retained_calls(self, f: CallFilter, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` successful matching calls with retained request and response text: id,
        trace_id, ts_ms, route, provider, model, tokens, cost_usd, request_text and response_text."""
        params: list[Any] = []
        where = call_where(f, params)
        rows = self.db.conn.execute(
            f"SELECT c.{', c.'.join(RETAINED_FIELDS)}, cc.request_text, cc.response_text"
            f" FROM (SELECT * FROM calls WHERE {where}) c"
            " JOIN call_content cc ON cc.call_id = c.id AND cc.workspace = c.workspace"
            " WHERE c.has_content = 1 AND c.error = 0"
            " AND cc.request_text IS NOT NULL AND cc.response_text IS NOT NULL"
            " ORDER BY c.ts_ms DESC, c.id DESC LIMIT ?",
            (*params, limit),
        )
        return [dict(r) for r in rows]

    def merge_route_config(self, workspace: str, found: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """Per-route call counts (``found``) with every configured route's description and constraints."""
        for r in self.db.conn.execute("SELECT * FROM routes WHERE workspace = ?", (workspace,)):
            entry = found.setdefault(
                r["route"], {"route": r["route"], "calls": 0, "replay_eligible_calls": 0}
            )
            entry.update(description=r["description"], constraints=json.loads(r["constraints"]),
                         updated_at=r["updated_at"])  # fmt: skip
        return [found[k] for k in sorted(found)]

    def route_config(self, workspace: str) -> dict[str, Any]:
        rows = self.db.conn.execute("SELECT route, config FROM routes WHERE workspace = ?", (workspace,))
        return {r["route"]: json.loads(r["config"]) for r in rows}

    def set_route(
        self,
        workspace: str,
        route: str,
        description: str | None,
        config: dict[str, Any],
        now_iso: str,
        constraints: dict[str, Any] | None = None,
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO routes (workspace, route, description, constraints, config, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (workspace, route) DO UPDATE SET description = excluded.description,"
                " constraints = excluded.constraints, config = excluded.config, updated_at = excluded.updated_at",
                (workspace, route, description, json.dumps(constraints or {}, sort_keys=True),
                 json.dumps(config, sort_keys=True), now_iso),
            )  # fmt: skip

    def batch_health(self, workspace: str, since_ms: int) -> dict[str, Any]:
        row = self.db.conn.execute(
            "SELECT SUM(status = 'processed') AS processed, SUM(status = 'failed') AS failed,"
            " SUM(failure_class = 'permanent') AS permanent, SUM(failure_class = 'recoverable') AS recoverable,"
            " SUM(status = 'failed' AND failure_class IS NULL) AS unclassified,"
            " MAX(received_ms) AS last_received, MAX(processed_ms) AS last_processed,"
            " SUM(accepted) AS accepted, SUM(ignored) AS ignored, MAX(dropped) AS dropped,"
            " MAX(transport_errors) AS transport_errors, SUM(unknown_attributes) AS unknown_attributes,"
            " SUM(content_dropped) AS content_dropped"
            " FROM ingest_batches WHERE workspace = ? AND received_ms >= ?",
            (workspace, since_ms),
        ).fetchone()
        return {k: row[k] for k in row.keys()}

    def recent_batches(self, workspace: str, limit: int) -> list[tuple[str, int]]:
        """The newest ``limit`` ingest batches of a workspace, newest first: (status, received_ms)."""
        rows = self.db.conn.execute(
            "SELECT status, received_ms FROM ingest_batches WHERE workspace = ? ORDER BY id DESC LIMIT ?",
            (workspace, limit),
        )
        return [(str(r[0]), int(r[1])) for r in rows]

    # -- the source of the columnar projection ---------------------------------------------------

    def calls_after(self, after_id: int, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` calls with an id above ``after_id``, in id order, as tuples of ``PROJECTED_FIELDS``."""
        cursor = self.db.conn.cursor()
        cursor.row_factory = None  # plain tuples: a Row per call costs more than the projection of it
        return cursor.execute(_CALLS_AFTER, (after_id, limit)).fetchall()

    def max_call_id(self) -> int:
        return int(self.db.conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])

    def call_ts(self, call_id: int) -> int | None:
        row = self.db.conn.execute("SELECT ts_ms FROM calls WHERE id = ?", (call_id,)).fetchone()
        return None if row is None else int(row[0])

    def count_calls(self, workspace: str) -> int:
        return int(
            self.db.conn.execute("SELECT COUNT(*) FROM calls WHERE workspace = ?", (workspace,)).fetchone()[0]
        )

    def raw_calls(self, workspace: str) -> list[dict[str, Any]]:
        """Every stored call row of a workspace (tests and operators; never an agent surface)."""
        rows = self.db.conn.execute("SELECT * FROM calls WHERE workspace = ? ORDER BY id", (workspace,))
        return [dict(r) for r in rows]

    def raw_content(self, workspace: str) -> list[dict[str, Any]]:
        rows = self.db.conn.execute("SELECT * FROM call_content WHERE workspace = ?", (workspace,))
        return [dict(r) for r in rows]


def group_sum(
    positions: np.ndarray[Any, Any], matrix: np.ndarray[Any, Any], groups: int
) -> np.ndarray[Any, Any]:
    """Row sums of ``matrix`` per group index (a sort and ``reduceat``: far faster than ``np.add.at``)."""
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out = np.zeros((groups, matrix.shape[1]), dtype=matrix.dtype)
    out[ordered[starts]] = np.add.reduceat(matrix[order], starts, axis=0)
    return out


_ROLLUP_INPUTS = (
    "ts_ms", "route", "provider", "model", "environment", "latency_ms", "lat_bucket", "error", "cost_usd",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "cost_status", "cost_unknown",
)  # fmt: skip


def _floats(values: list[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A column as float64, None as 0 (``value or 0``)."""
    column = np.array(values, dtype=np.float64)  # None -> NaN
    if None in values:
        column[np.isnan(column)] = 0.0
    return column


def batch_measures(calls: CallBatch) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, Any]]:
    """The summed columns (``SUMS``) of every call, and its latency bucket (-1 without a latency)."""
    n = calls.size
    status = np.array(calls.column("cost_status"), dtype=object)
    unknown = np.array(calls.column("cost_unknown"), dtype=np.float64)
    latency = calls.column("latency_ms")
    values = np.column_stack(
        [
            np.ones(n),
            np.array(calls.column("error"), dtype=np.float64),
            _floats(calls.column("cost_usd")),
            *(_floats(calls.column(name)) for name in SUMS[3:8]),
            _floats(latency),
            np.array([v is not None for v in latency], dtype=np.float64),
            status == "priced",
            status == "partial",
            status == "zero",
            (status == "unpriced") & (unknown == 0),
            unknown,
        ]
    ).astype(np.float64)
    lat_bucket = calls.column("lat_bucket")
    buckets = np.array([-1 if b is None else b for b in lat_bucket] if None in lat_bucket else lat_bucket,
                       dtype=np.int64).reshape(n)  # fmt: skip
    return values.reshape(n, len(SUMS)), buckets


_HOUR_MS = 3_600_000
_INT_SUMS = tuple(i for i, name in enumerate(SUMS) if name not in ("cost_usd", "latency_sum"))


_FLOAT_SUMS = tuple(i for i in range(len(SUMS)) if i not in _INT_SUMS)
# The upsert's parameters: integer sums and histogram buckets side by side, so a group's integers come
# out of one NumPy row (``tolist`` of an int64 matrix) instead of 111 separate columns.
ROLLUP_PARAMS = (
    "workspace", "bucket", *ROLLUP_KEY, *(SUMS[i] for i in _FLOAT_SUMS), *(SUMS[i] for i in _INT_SUMS),
    *HIST_COLUMNS,
)  # fmt: skip


def _first_appearance(keys: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Number equal keys (rows of a 2-D int64 array) by first appearance: (group of each row, first row
    of each group)."""
    span = keys.max(axis=0) - keys.min(axis=0) + 1
    if float(np.prod(span.astype(np.float64))) < 2**62:
        # Mixed-radix packing into one int64: a 1-D unique is many times faster than a row-wise one.
        packed = np.zeros(len(keys), dtype=np.int64)
        for column, size, low in zip(keys.T, span, keys.min(axis=0), strict=True):
            packed = packed * size + (column - low)
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[order] = np.arange(len(first))
    return rank[inverse.reshape(-1)], first[order]


def _codes(values: list[Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A rollup key part (None and "" alike) as integer codes, and the value of each code."""
    if None in values:
        values = [v or "" for v in values]
    numbered = {v: i for i, v in enumerate(dict.fromkeys(values))}
    codes = np.fromiter(map(numbered.__getitem__, values), dtype=np.int64, count=len(values))
    return codes, np.array(list(numbered), dtype=object)


def rollup_deltas(calls: CallBatch, workspace: str) -> dict[str, list[list[Any]]]:
    """For every rollup table: per (bucket, route, provider, model, environment), the upsert parameters
    (``ROLLUP_PARAMS``: workspace, key, summed measures, latency histogram) of the batch.

    Rows are grouped once, by hour and the full key; each table's groups are then folded from those
    hourly groups (a few hundred per batch) with NumPy, so the per-row work does not grow with the number
    of tables. Groups are numbered in order of first appearance, and a group's sums add its hourly groups
    in that order, each of those its rows in batch order: the floats are the same whatever the tables.
    """
    if not calls.size:
        return {table: [] for table in ROLLUPS}
    values, buckets = batch_measures(calls)
    hours = np.array(calls.column("ts_ms"), dtype=np.int64) // _HOUR_MS
    parts = [_codes(calls.column(name)) for name in ROLLUP_KEY]
    row_keys = np.column_stack([hours, *(codes for codes, _ in parts)])
    positions, heads = _first_appearance(row_keys)
    fine_keys = row_keys[heads]
    fine_sums = group_sum(positions, values, len(heads))
    timed = buckets >= 0
    out: dict[str, list[list[Any]]] = {}
    for table, (width, keep_route) in ROLLUPS.items():
        keys = fine_keys.copy()
        keys[:, 0] //= width // _HOUR_MS  # every rollup width is a whole number of hours
        if not keep_route:
            keys[:, 1] = 0
        to, firsts = _first_appearance(keys)
        groups = len(firsts)
        sums = group_sum(to, fine_sums, groups)
        cells = np.bincount(
            to[positions[timed]] * histogram.BUCKETS + buckets[timed], minlength=groups * histogram.BUCKETS
        )
        int_sums = sums[:, _INT_SUMS]
        if float(np.abs(int_sums).max(initial=0.0)) < 2**62:
            integers = np.hstack(
                [int_sums.astype(np.int64), cells.reshape(groups, histogram.BUCKETS)]
            ).tolist()
        else:  # beyond int64 (SQLite refuses these anyway): exact Python integers
            integers = [[int(v) for v in row] + h for row, h in zip(int_sums.tolist(),
                        cells.reshape(groups, histogram.BUCKETS).tolist(), strict=True)]  # fmt: skip
        head = keys[firsts]
        key_columns = [
            head[:, 0].tolist(),
            parts[0][1][head[:, 1]].tolist() if keep_route else [""] * groups,
            *(names[head[:, k]].tolist() for k, (_, names) in enumerate(parts[1:], start=2)),
        ]
        floats = sums[:, _FLOAT_SUMS].tolist()
        out[table] = [
            [workspace, *key, *f, *i]
            for key, f, i in zip(zip(*key_columns, strict=True), floats, integers, strict=True)
        ]
    return out


def _merge_rollups(conn: sqlite3.Connection, table: str, deltas: list[list[Any]]) -> None:
    """Upsert: sums and histogram buckets add up in SQL."""
    if deltas:
        _insert_many(conn, functools.partial(_upsert_rollup, table), deltas, len(ROLLUP_PARAMS))


@functools.lru_cache(maxsize=64)
def _upsert_rollup(table: str, rows: int = 1) -> str:
    cols = ROLLUP_PARAMS
    updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in (*SUMS, *HIST_COLUMNS))
    values = ", ".join([f"({_placeholders(cols)})"] * rows)
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES {values}"
        f" ON CONFLICT (workspace, bucket, {', '.join(ROLLUP_KEY)}) DO UPDATE SET {updates}"
    )


def iter_chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def read_back(conn: sqlite3.Connection, after_id: int, last_id: int) -> list[tuple[str, CallBatch]]:
    """The committed calls with ids in (after_id, last_id], per workspace in id order, as the columns
    ``rollup_deltas`` reads."""
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: a Row per call costs more than the call's fold
    rows = cursor.execute(_READ_BACK, (after_id, last_id)).fetchall()
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    workspaces = columns[0]
    first = workspaces[0]
    if workspaces.count(first) == len(workspaces):  # the usual case: one workspace
        return [
            (first, CallBatch(len(rows), {}, dict(zip(_ROLLUP_INPUTS, map(list, columns[1:]), strict=True))))
        ]
    out = []
    for workspace in dict.fromkeys(workspaces):
        keep = [i for i, w in enumerate(workspaces) if w == workspace]
        picked = {
            name: [column[i] for i in keep] for name, column in zip(_ROLLUP_INPUTS, columns[1:], strict=True)
        }
        out.append((workspace, CallBatch(len(keep), {}, picked)))
    return out


def _unfolded_parts(
    conn: sqlite3.Connection,
    watermark: int,
    end: int,
    own: dict[int, Unfolded],
    ranges: dict[int, int],
    parts: list[tuple[str, CallBatch]],
) -> int:
    """Append to ``parts`` the calls after ``watermark`` up to ``end`` not in a folded range: batches
    in memory (``own``, by first id) whole, the others read back. Returns the last id covered (``end``,
    or the end of a batch in memory that crosses it)."""
    position = watermark
    while position < end:
        if position + 1 in own:
            kept = own[position + 1]
            parts.append((kept.workspace, kept.calls))
            position = kept.last_id
        elif position + 1 in ranges:
            position = ranges[position + 1]
        else:
            upto = min([end, *(first - 1 for first in (*own, *ranges) if first > position)])
            parts.extend(read_back(conn, position, upto))
            position = upto
    return position


_READ_BACK = f"SELECT workspace, {', '.join(_ROLLUP_INPUTS)} FROM calls WHERE id > ? AND id <= ? ORDER BY id"


def concat_batches(batches: Sequence[CallBatch]) -> CallBatch:
    """One batch of the ``rollup_deltas`` columns of several, in order."""
    if len(batches) == 1:
        return batches[0]
    columns = {
        name: list(itertools.chain.from_iterable(b.column(name) for b in batches)) for name in _ROLLUP_INPUTS
    }
    return CallBatch(sum(b.size for b in batches), {}, columns)


def fold_parts(conn: sqlite3.Connection, parts: Sequence[tuple[str, CallBatch]]) -> None:
    """Add calls (per workspace, in id order) to every rollup, in the caller's write transaction: one
    group sum per workspace over all its parts, so a chunk costs one upsert per rollup group."""
    by_workspace: dict[str, list[CallBatch]] = {}
    for workspace, calls in parts:
        by_workspace.setdefault(workspace, []).append(calls)
    for workspace, batches in by_workspace.items():
        for table, params in rollup_deltas(concat_batches(batches), workspace).items():
            _merge_rollups(conn, table, params)


@dataclass
class _Folded:
    calls: int  # how many calls this fold added to the rollups
    gone: set[int]  # the batches in memory (first ids) folded by now
    more: bool  # whether another chunk may have work


@dataclass
class Unfolded:
    """A batch this process committed, kept in memory until it is folded: its calls have the ids
    first_id .. first_id + calls.size - 1 (ids are assigned one more than the largest, under the write
    lock, so a batch's ids are consecutive)."""

    first_id: int
    workspace: str
    calls: CallBatch

    @property
    def last_id(self) -> int:
        return self.first_id + self.calls.size - 1
