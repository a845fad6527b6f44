"""Persistence of report artifacts and analysis runs, per workspace.

Embedded: its own SQLite file (``metergraph-analysis.db``) next to the telemetry, so a report import or a
run's progress never waits on the ingest writer's lock (``SqliteReportStore``). Server mode: Metergraph's
PostgreSQL schema (``PostgresReportStore``), where every worker of every machine sees every run: a run
started through one worker is listed, cancelled and read through any other. Both run the SQL of
``_ReportSql``. The workspace is part of every key, so one workspace can never read another's rows; the
numbering of a workspace's reports and runs (``seq``) is taken under that workspace's lock only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import PortableDatabase
from triptych.metergraph.control_pg import pg_ddl
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Dialect

COMPONENT = "analysis"

MIGRATIONS = [
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
PG_MIGRATIONS = [pg_ddl(m) for m in MIGRATIONS]

_REPORT_COLUMNS = (
    "analysis_id, schema_version, generated_at, imported_at, import_source, outcome, environment, sha256, bytes,"
    " seq"
)
ACTIVE = ("queued", "running")


@dataclass(frozen=True, slots=True)
class StoredReport:
    analysis_id: str
    schema_version: int
    generated_at: str
    imported_at: str
    import_source: str
    outcome: str
    environment: str | None
    sha256: str
    bytes: int
    seq: int


class RunEnded(Exception):
    """The run was cancelled or ended elsewhere before its report could be committed."""


class ReportExists(Exception):
    """A workspace already holds a different report under this analysis id."""


class ReportStore(Protocol):
    """Report artifacts and analysis runs of one engine."""

    def close(self) -> None: ...
    def insert_report(self, workspace: str, report: StoredReport, artifact: bytes) -> bool: ...
    def list_reports(
        self,
        workspace: str,
        limit: int,
        before_seq: int | None = None,
        environments: tuple[str, ...] | None = None,
    ) -> list[StoredReport]: ...
    def report(self, workspace: str, analysis_id: str) -> StoredReport | None: ...
    def artifact(self, workspace: str, analysis_id: str) -> bytes | None: ...
    def insert_run(self, workspace: str, run: dict[str, Any]) -> None: ...
    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None: ...
    def run_by_request_key(self, workspace: str, request_key: str) -> dict[str, Any] | None: ...
    def active_run(self, workspace: str, kind: str) -> dict[str, Any] | None: ...
    def list_runs(
        self, workspace: str, limit: int, before: tuple[str, int] | None = None
    ) -> list[dict[str, Any]]: ...
    def update_run(self, workspace: str, run_id: str, **fields: Any) -> None: ...
    def start_run(self, workspace: str, run_id: str, started_at: str) -> None: ...
    def end_active_run(
        self,
        workspace: str,
        run_id: str,
        status: str,
        code: str,
        finished_at: str,
        message: str | None = None,
    ) -> None: ...
    def request_cancel(self, workspace: str, run_id: str) -> bool: ...
    def cancel_requested(self, workspace: str, run_id: str) -> bool: ...
    def finish_run_with_report(
        self, workspace: str, run_id: str, finished_at: str, report: StoredReport, artifact: bytes
    ) -> None: ...
    def heartbeat(self, workspace: str, run_id: str, now_ms: int) -> None: ...
    def fail_abandoned_runs(self, finished_at: str, stale_before_ms: int) -> int: ...


class _ReportSql:
    """The report and run SQL both engines run, over ``db``."""

    dialect: Dialect
    db: Any

    # -- reports ---------------------------------------------------------------------------------

    def insert_report(self, workspace: str, report: StoredReport, artifact: bytes) -> bool:
        """Store one artifact; False when the same bytes are already there (an idempotent re-import).
        Raises ``ReportExists`` for different bytes under the same id."""
        with self.db.transaction() as conn:
            return self._insert_report(conn, workspace, report, artifact)

    def _insert_report(self, conn: Any, workspace: str, report: StoredReport, artifact: bytes) -> bool:
        self.dialect.lock(conn, "metergraph-reports", workspace)  # one numbering (seq) at a time
        row = conn.execute(
            "SELECT sha256 FROM reports WHERE workspace = ? AND analysis_id = ?",
            (workspace, report.analysis_id),
        ).fetchone()
        if row is not None:
            if row["sha256"] == report.sha256:
                return False
            raise ReportExists(report.analysis_id)
        seq = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM reports WHERE workspace = ?", (workspace,)
        ).fetchone()[0]
        conn.execute(
            f"INSERT INTO reports (workspace, {_REPORT_COLUMNS}, artifact) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (workspace, report.analysis_id, report.schema_version, report.generated_at, report.imported_at,
             report.import_source, report.outcome, report.environment, report.sha256, report.bytes, seq, artifact),
        )  # fmt: skip
        return True

    def list_reports(
        self,
        workspace: str,
        limit: int,
        before_seq: int | None = None,
        environments: tuple[str, ...] | None = None,
    ) -> list[StoredReport]:
        """Newest first; ``environments`` (a restricted key's allowlist) keeps only reports tied to one of them."""
        sql = f"SELECT {_REPORT_COLUMNS} FROM reports WHERE workspace = ?"
        params: list[Any] = [workspace]
        if environments is not None:
            # An empty allowlist matches nothing (PostgreSQL has no empty ``IN ()``).
            sql += (
                f" AND environment IN ({', '.join('?' * len(environments))})"
                if environments
                else " AND 1 = 0"
            )
            params.extend(environments)
        if before_seq is not None:
            sql += " AND seq < ?"
            params.append(before_seq)
        sql += " ORDER BY seq DESC LIMIT ?"
        params.append(limit)
        return [StoredReport(**dict(r)) for r in self.db.conn.execute(sql, params)]

    def report(self, workspace: str, analysis_id: str) -> StoredReport | None:
        row = self.db.conn.execute(
            f"SELECT {_REPORT_COLUMNS} FROM reports WHERE workspace = ? AND analysis_id = ?",
            (workspace, analysis_id),
        ).fetchone()
        return None if row is None else StoredReport(**dict(row))

    def artifact(self, workspace: str, analysis_id: str) -> bytes | None:
        row = self.db.conn.execute(
            "SELECT artifact FROM reports WHERE workspace = ? AND analysis_id = ?", (workspace, analysis_id)
        ).fetchone()
        return None if row is None else bytes(row["artifact"])

    # -- runs ------------------------------------------------------------------------------------

    def insert_run(self, workspace: str, run: dict[str, Any]) -> None:
        with self.db.transaction() as conn:
            self.dialect.lock(conn, "metergraph-runs", workspace)  # one numbering (seq) at a time
            seq = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM analysis_runs WHERE workspace = ?", (workspace,)
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO analysis_runs (workspace, run_id, seq, kind, analysis_id, request_key, request_hash,"
                " status, created_at, progress, arguments, heartbeat_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (workspace, run["run_id"], seq, run["kind"], run["analysis_id"], run.get("request_key"),
                 run.get("request_hash"), run["status"], run["created_at"], json.dumps(run.get("progress") or {}),
                 json.dumps(run.get("arguments") or {}, sort_keys=True), run.get("heartbeat_ms")),
            )  # fmt: skip

    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            "SELECT * FROM analysis_runs WHERE workspace = ? AND run_id = ?", (workspace, run_id)
        ).fetchone()
        return None if row is None else _run_row(row)

    def run_by_request_key(self, workspace: str, request_key: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            "SELECT * FROM analysis_runs WHERE workspace = ? AND request_key = ?", (workspace, request_key)
        ).fetchone()
        return None if row is None else _run_row(row)

    def active_run(self, workspace: str, kind: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            "SELECT * FROM analysis_runs WHERE workspace = ? AND kind = ? AND status IN ('queued', 'running')"
            " ORDER BY seq DESC LIMIT 1",
            (workspace, kind),
        ).fetchone()
        return None if row is None else _run_row(row)

    def list_runs(
        self, workspace: str, limit: int, before: tuple[str, int] | None = None
    ) -> list[dict[str, Any]]:
        """Newest first by (created_at, seq); ``before`` is the key of the last run already listed."""
        sql = "SELECT * FROM analysis_runs WHERE workspace = ?"
        params: list[Any] = [workspace]
        if before is not None:
            sql += " AND (created_at < ? OR (created_at = ? AND seq < ?))"
            params.extend([before[0], before[0], before[1]])
        sql += " ORDER BY created_at DESC, seq DESC LIMIT ?"
        params.append(limit)
        return [_run_row(r) for r in self.db.conn.execute(sql, params)]

    def update_run(self, workspace: str, run_id: str, **fields: Any) -> None:
        if "progress" in fields:
            fields["progress"] = json.dumps(fields["progress"], sort_keys=True)
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self.db.transaction() as conn:
            conn.execute(
                f"UPDATE analysis_runs SET {assignments} WHERE workspace = ? AND run_id = ?",
                (*fields.values(), workspace, run_id),
            )

    def start_run(self, workspace: str, run_id: str, started_at: str) -> None:
        """queued -> running; raises ``RunEnded`` when the run was cancelled or failed meanwhile."""
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE analysis_runs SET status = 'running', started_at = ?"
                " WHERE workspace = ? AND run_id = ? AND status = 'queued' AND cancel_requested = 0",
                (started_at, workspace, run_id),
            )
            if cursor.rowcount == 0:
                raise RunEnded(run_id)

    def end_active_run(
        self,
        workspace: str,
        run_id: str,
        status: str,
        code: str,
        finished_at: str,
        message: str | None = None,
    ) -> None:
        """A queued or running run ends (cancelled or failed); a run already ended keeps its state."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE analysis_runs SET status = ?, error_code = ?, error_message = ?, finished_at = ?"
                " WHERE workspace = ? AND run_id = ? AND status IN ('queued', 'running')",
                (status, code, message, finished_at, workspace, run_id),
            )

    def request_cancel(self, workspace: str, run_id: str) -> bool:
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE analysis_runs SET cancel_requested = 1"
                " WHERE workspace = ? AND run_id = ? AND status IN ('queued', 'running')",
                (workspace, run_id),
            )
            return int(cursor.rowcount) > 0

    def cancel_requested(self, workspace: str, run_id: str) -> bool:
        """True once the run was asked to stop, or was ended elsewhere (failed as abandoned)."""
        row = self.db.conn.execute(
            "SELECT cancel_requested <> 0 OR status NOT IN ('queued', 'running') FROM analysis_runs"
            " WHERE workspace = ? AND run_id = ?",
            (workspace, run_id),
        ).fetchone()
        return bool(row is None or row[0])

    def finish_run_with_report(
        self, workspace: str, run_id: str, finished_at: str, report: StoredReport, artifact: bytes
    ) -> None:
        """The run's end: the report and the run's final state commit together, or neither does."""
        with self.db.transaction() as conn:
            ended = conn.execute(
                "UPDATE analysis_runs SET status = 'succeeded', finished_at = ?"
                " WHERE workspace = ? AND run_id = ? AND status = 'running' AND cancel_requested = 0",
                (finished_at, workspace, run_id),
            )
            if ended.rowcount == 0:
                raise RunEnded(run_id)  # cancelled or failed meanwhile: the transaction writes nothing
            self._insert_report(conn, workspace, report, artifact)

    def heartbeat(self, workspace: str, run_id: str, now_ms: int) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE analysis_runs SET heartbeat_ms = ? WHERE workspace = ? AND run_id = ?",
                (now_ms, workspace, run_id),
            )

    def fail_abandoned_runs(self, finished_at: str, stale_before_ms: int) -> int:
        """Runs left queued or running whose heartbeat stopped before ``stale_before_ms`` can never
        finish (their process is gone): mark them failed."""
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE analysis_runs SET status = 'failed', error_code = 'server_restarted', finished_at = ?"
                " WHERE status IN ('queued', 'running') AND COALESCE(heartbeat_ms, 0) < ?",
                (finished_at, stale_before_ms),
            )
            return int(cursor.rowcount)


class SqliteReportStore(_ReportSql):
    """Reports and runs in their own SQLite file."""

    dialect = SQLITE
    db: Database

    def __init__(self, path: Path) -> None:
        self.db = Database(path, MIGRATIONS, component=COMPONENT)

    def close(self) -> None:
        self.db.close()


class PostgresReportStore(_ReportSql):
    """Reports and runs in Metergraph's PostgreSQL schema, shared by every worker of every machine."""

    dialect = POSTGRES

    def __init__(self, db: PortableDatabase) -> None:
        self.db = db
        db.migrate(COMPONENT, PG_MIGRATIONS)

    def close(self) -> None:
        """Nothing: the database belongs to the ``Metergraph`` that opened it."""


def _run_row(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["progress"] = json.loads(out["progress"] or "{}")
    out["arguments"] = json.loads(out["arguments"] or "{}")
    return out
