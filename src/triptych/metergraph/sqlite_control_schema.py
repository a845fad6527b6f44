"""The SQLite DDL of Metergraph's control stores, one migration list per component (each component's
versions are recorded in its file's ``schema_version``): incidents and webhooks in ``metergraph-incidents.db``,
reports and analysis runs in ``metergraph-analysis.db``, workloads, import sync and import identities in the
metergraph file (``sqlite_schema.py`` holds that file's main list). PostgreSQL's are in ``pg_schema.py``.
"""

from __future__ import annotations

INCIDENTS = [
    """
    CREATE TABLE incidents (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        kind TEXT NOT NULL,
        grain TEXT NOT NULL,
        series TEXT NOT NULL,              -- JSON list of the series' dimension values
        route TEXT, provider TEXT, model TEXT, environment TEXT,
        status TEXT NOT NULL,              -- open | resolved
        severity TEXT NOT NULL,
        title TEXT NOT NULL,
        window_start_ms INTEGER NOT NULL,
        window_end_ms INTEGER NOT NULL,
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        resolved_ms INTEGER,
        occurrences INTEGER NOT NULL,
        generation INTEGER NOT NULL,
        clear_windows INTEGER NOT NULL DEFAULT 0,
        last_trigger_bucket INTEGER,
        diagnosis TEXT NOT NULL
    );
    CREATE UNIQUE INDEX incidents_one_open ON incidents (workspace, kind, grain, series) WHERE status = 'open';
    CREATE INDEX incidents_by_workspace ON incidents (workspace, status, last_seen_ms);
    CREATE TABLE incident_cursors (
        workspace TEXT NOT NULL,
        grain TEXT NOT NULL,
        anchor_bucket INTEGER NOT NULL,     -- the newest window seen (event time, never moves back)
        evaluated_through INTEGER NOT NULL, -- the newest complete window judged
        PRIMARY KEY (workspace, grain)
    );
    """,
]

WEBHOOKS = [
    """
    CREATE TABLE webhook_endpoints (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        url TEXT NOT NULL,
        description TEXT,
        secret TEXT NOT NULL,              -- sealed with the data directory's webhook key (webhook_secrets.py)
        created_ms INTEGER NOT NULL
    );
    CREATE INDEX webhook_endpoints_by_workspace ON webhook_endpoints (workspace);
    CREATE TABLE webhook_deliveries (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,           -- the delivery id the receiver deduplicates by
        endpoint_id TEXT NOT NULL,
        workspace TEXT NOT NULL,
        event_type TEXT NOT NULL,
        incident_id TEXT,
        body TEXT NOT NULL,                -- the exact JSON sent at every attempt
        status TEXT NOT NULL,              -- pending | delivered | failed | cancelled
        attempts INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL,
        next_attempt_ms INTEGER NOT NULL,
        lease_until_ms INTEGER NOT NULL DEFAULT 0,
        last_attempt_ms INTEGER,
        last_status INTEGER,               -- the receiver's HTTP status, if it answered
        last_error TEXT,
        last_response TEXT,                -- the start of the receiver's answer
        finished_ms INTEGER
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_ms);
    CREATE INDEX webhook_deliveries_by_endpoint ON webhook_deliveries (endpoint_id, seq);
    CREATE INDEX webhook_deliveries_by_workspace ON webhook_deliveries (workspace, seq);
    """,
]

ANALYSIS = [
    """
    CREATE TABLE reports (
        workspace TEXT NOT NULL,
        analysis_id TEXT NOT NULL,
        seq INTEGER NOT NULL,              -- import order, newest first in lists
        schema_version INTEGER NOT NULL,
        generated_at TEXT NOT NULL,
        imported_at TEXT NOT NULL,
        import_source TEXT NOT NULL,       -- analysis_run | cli_import
        outcome TEXT NOT NULL,
        environment TEXT,                  -- NULL: not tied to one environment
        sha256 TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        artifact BLOB NOT NULL,
        PRIMARY KEY (workspace, analysis_id)
    );
    CREATE INDEX reports_newest ON reports (workspace, seq);
    CREATE TABLE analysis_runs (
        workspace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,                -- analysis | classification
        analysis_id TEXT NOT NULL,
        request_key TEXT,
        request_hash TEXT,
        status TEXT NOT NULL,              -- queued | running | succeeded | failed | cancelled
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        error_code TEXT,
        error_message TEXT,
        progress TEXT NOT NULL DEFAULT '{}',
        arguments TEXT NOT NULL DEFAULT '{}',
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (workspace, run_id)
    );
    CREATE INDEX runs_newest ON analysis_runs (workspace, seq);
    CREATE UNIQUE INDEX runs_request_key ON analysis_runs (workspace, request_key) WHERE request_key IS NOT NULL;
    """,
    # 2: the live run's process writes a heartbeat (wall-clock ms); a restarting server fails only runs
    # whose heartbeat stopped, not those another worker is running.
    "ALTER TABLE analysis_runs ADD COLUMN heartbeat_ms INTEGER;",
]

WORKLOADS = [
    """
    CREATE TABLE workloads (
        workspace TEXT NOT NULL,
        workload_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        name TEXT NOT NULL,
        route TEXT,
        tag_keys TEXT NOT NULL,          -- JSON list, sorted
        shapes TEXT NOT NULL,            -- JSON list of shape codes (workload_match.shape_code)
        calls INTEGER NOT NULL,
        replay_eligible_calls INTEGER NOT NULL,
        cost_usd REAL,
        stats TEXT NOT NULL,             -- JSON: models, token means, first/last seen
        classified_at TEXT NOT NULL,
        PRIMARY KEY (workspace, workload_id)
    );
    CREATE TABLE classification_runs (
        run_id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        status TEXT NOT NULL,            -- running | succeeded | failed
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        error_code TEXT,
        days INTEGER NOT NULL,
        calls INTEGER NOT NULL DEFAULT 0,
        workloads INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX classification_runs_by_workspace ON classification_runs (workspace, created_at);
    """
]

IMPORT_SYNC = [
    """
    CREATE TABLE import_sync_streams (
        workspace TEXT NOT NULL,
        source TEXT NOT NULL,
        scope TEXT NOT NULL,
        seed_ms INTEGER NOT NULL,            -- initial_since of the first acquire: the first window's start
        checkpoint_ms INTEGER,               -- end of the last completed window; NULL before the first
        checkpoint_version INTEGER NOT NULL, -- completed windows so far
        completed_ms INTEGER,                -- when the last window completed
        lease_id TEXT,                       -- the lease holding the stream now (maybe expired)
        PRIMARY KEY (workspace, source, scope)
    );
    CREATE TABLE import_sync_leases (
        lease_id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        source TEXT NOT NULL,
        scope TEXT NOT NULL,
        window_start_ms INTEGER NOT NULL,
        window_end_ms INTEGER NOT NULL,
        checkpoint_version INTEGER NOT NULL, -- the stream's version when the lease was issued
        acquired_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        status TEXT NOT NULL,                -- active | completed | abandoned | expired (taken over)
        ended_ms INTEGER
    );
    CREATE UNIQUE INDEX import_sync_one_active ON import_sync_leases (workspace, source, scope)
        WHERE status = 'active';
    """,
]

IMPORT_EVENTS = [
    """
    CREATE TABLE import_events (
        workspace TEXT NOT NULL,
        source TEXT NOT NULL,
        scope TEXT NOT NULL,
        event_id TEXT NOT NULL,
        stored INTEGER NOT NULL,      -- 0: claimed by a batch whose engine write has not returned yet
        claimed_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, source, scope, event_id)
    ) WITHOUT ROWID;
    """,
]
