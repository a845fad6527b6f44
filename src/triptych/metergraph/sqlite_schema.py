"""The embedded engine's SQLite schema: one file, ``metergraph.db``, holding the metadata
(``metadata_store.SqliteMetadataStore``: workspaces, keys, sessions, routes, ingest batches) and the calls
with their content and rollups (``sqlite_call_store.SqliteCallStore``).

Both stores share this one migration list: its versions are recorded in every existing file, so the
history stays one list; a later change to only one side may go into a component of its own
(``Database.migrate``). On ClickHouse the same file holds the metadata (its call tables stay empty).
"""

from __future__ import annotations

from pathlib import Path

from triptych.core.db import Database
from triptych.metergraph import histogram, import_events
from triptych.metergraph.call_model import HIST_COLUMNS, PRICING_COLUMNS, SUMS

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


def open_database(path: Path) -> Database:
    """The metergraph file, migrated (the import identities' component too).

    Durable before the 202: the WAL is synced at every commit. An ingest batch writes a few MB of WAL, so
    the background checkpoint runs after every commit (``core.db.Checkpointer``)."""
    db = Database(path, MIGRATIONS, synchronous="FULL", background_checkpoints=True, checkpoint_every=1)
    import_events.migrate(db)
    return db
