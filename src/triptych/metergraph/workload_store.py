"""Persistence of workloads and classification runs (migration component ``workloads``). Embedded, and
with ClickHouse telemetry on one machine: the metergraph SQLite file (``SqliteWorkloadStore``). Server
mode (``TRIPTYCH_DATABASE_URL``): Metergraph's PostgreSQL schema (``PostgresWorkloadStore``). Both run
the SQL of ``_WorkloadSql``. The calls classification reads come from the ``CallStore``
(``workload_features``), so they are read wherever the engine keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import PortableDatabase
from triptych.metergraph.control_pg import pg_ddl

COMPONENT = "workloads"

MIGRATIONS = [
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
PG_MIGRATIONS = [pg_ddl(MIGRATIONS[0])]


class WorkloadStore(Protocol):
    """Saved workloads and classification runs of one engine."""

    def replace_workloads(
        self, workspace: str, run_id: str, rows: Sequence[dict[str, Any]], run: dict[str, Any]
    ) -> None: ...
    def insert_run(self, run: dict[str, Any]) -> None: ...
    def workloads(
        self, workspace: str, routes: Sequence[str | None] | None = None
    ) -> list[dict[str, Any]]: ...
    def workload(self, workspace: str, workload_id: str) -> dict[str, Any] | None: ...
    def runs(self, workspace: str, limit: int) -> list[dict[str, Any]]: ...
    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None: ...


class _WorkloadSql:
    """The workload SQL both engines run, over ``db``."""

    db: Any

    # -- workloads ---------------------------------------------------------------------------

    def replace_workloads(
        self, workspace: str, run_id: str, rows: Sequence[dict[str, Any]], run: dict[str, Any]
    ) -> None:
        """The workspace's workloads become ``rows`` and the run is recorded, in one transaction."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM workloads WHERE workspace = ?", (workspace,))
            conn.executemany(
                "INSERT INTO workloads (workspace, workload_id, run_id, name, route, tag_keys, shapes, calls,"
                " replay_eligible_calls, cost_usd, stats, classified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (workspace, r["workload_id"], run_id, r["name"], r["route"], json.dumps(r["tag_keys"]),
                     json.dumps(r["shapes"]), r["calls"], r["replay_eligible_calls"], r["cost_usd"],
                     json.dumps(r["stats"], sort_keys=True), r["classified_at"])
                    for r in rows
                ],
            )  # fmt: skip
            self._upsert_run(conn, run)

    def insert_run(self, run: dict[str, Any]) -> None:
        with self.db.transaction() as conn:
            self._upsert_run(conn, run)

    @staticmethod
    def _upsert_run(conn: Any, run: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO classification_runs (run_id, workspace, status, created_at, started_at, finished_at,"
            " error_code, days, calls, workloads) VALUES (:run_id, :workspace, :status, :created_at, :started_at,"
            " :finished_at, :error_code, :days, :calls, :workloads) ON CONFLICT (run_id) DO UPDATE SET"
            " status = excluded.status, started_at = excluded.started_at, finished_at = excluded.finished_at,"
            " error_code = excluded.error_code, calls = excluded.calls, workloads = excluded.workloads",
            run,
        )

    def workloads(self, workspace: str, routes: Sequence[str | None] | None = None) -> list[dict[str, Any]]:
        """The saved workloads, largest first (of these routes only, None standing for unrouted)."""
        sql, params = "SELECT * FROM workloads WHERE workspace = ?", [workspace]
        if routes is not None:
            named = [r for r in routes if r is not None]
            clauses = [f"route IN ({', '.join('?' * len(named))})"] if named else []
            if None in routes:
                clauses.append("route IS NULL")
            sql += f" AND ({' OR '.join(clauses) or '1 = 0'})"
            params.extend(named)
        rows = self.db.conn.execute(sql + " ORDER BY calls DESC, workload_id", params)
        return [_workload(r) for r in rows]

    def workload(self, workspace: str, workload_id: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            "SELECT * FROM workloads WHERE workspace = ? AND workload_id = ?", (workspace, workload_id)
        ).fetchone()
        return None if row is None else _workload(row)

    def runs(self, workspace: str, limit: int) -> list[dict[str, Any]]:
        """Classification runs, newest first."""
        rows = self.db.conn.execute(
            "SELECT * FROM classification_runs WHERE workspace = ? ORDER BY created_at DESC, run_id LIMIT ?",
            (workspace, limit),
        )
        return [dict(r) for r in rows]

    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            "SELECT * FROM classification_runs WHERE workspace = ? AND run_id = ?", (workspace, run_id)
        ).fetchone()
        return None if row is None else dict(row)


class SqliteWorkloadStore(_WorkloadSql):
    """Workloads in the telemetry store's SQLite metadata file, with their own migrations."""

    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate(COMPONENT, MIGRATIONS)


class PostgresWorkloadStore(_WorkloadSql):
    """Workloads in Metergraph's PostgreSQL schema, shared by every worker of every machine."""

    def __init__(self, db: PortableDatabase) -> None:
        self.db = db
        db.migrate(COMPONENT, PG_MIGRATIONS)


def _workload(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["tag_keys"] = json.loads(out["tag_keys"])
    out["shapes"] = json.loads(out["shapes"])
    out["stats"] = json.loads(out["stats"])
    return out
