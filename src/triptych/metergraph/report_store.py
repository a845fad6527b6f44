"""Persistence of report artifacts and analysis runs, per workspace.

Embedded: its own SQLite file (``metergraph-analysis.db``) next to the telemetry, so a report import or a
run's progress never waits on the ingest writer's lock (``SqliteReportStore``). Server mode: Metergraph's
PostgreSQL schema (``PostgresReportStore``), where every worker of every machine sees every run: a run
started through one worker is listed, cancelled and read through any other. Both run the SQL of
``_ReportSql``, spelled by the store's dialect (``control_sql.py``) and sent as written; each engine's DDL is
in ``sqlite_control_schema.py`` and ``pg_schema.py``. The workspace is part of every key, so one workspace can never read another's rows; the
numbering of a workspace's reports and runs (``seq``) is taken under that workspace's lock only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metergraph import pg_schema, sqlite_control_schema
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Dialect

COMPONENT = "analysis"


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
        d = self.dialect
        d.lock(conn, "metergraph-reports", workspace)  # one numbering (seq) at a time
        row = conn.execute(
            f"SELECT sha256 FROM reports WHERE workspace = {d.p} AND analysis_id = {d.p}",
            (workspace, report.analysis_id),
        ).fetchone()
        if row is not None:
            if row["sha256"] == report.sha256:
                return False
            raise ReportExists(report.analysis_id)
        seq = conn.execute(
            f"SELECT COALESCE(MAX(seq), 0) + 1 FROM reports WHERE workspace = {d.p}", (workspace,)
        ).fetchone()[0]
        conn.execute(
            f"INSERT INTO reports (workspace, {_REPORT_COLUMNS}, artifact) VALUES ({d.marks(12)})",
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
        p = self.dialect.p
        sql = f"SELECT {_REPORT_COLUMNS} FROM reports WHERE workspace = {p}"
        params: list[Any] = [workspace]
        if environments is not None:
            if environments:
                allowed, values = self.dialect.one_of("environment", environments)
                sql += f" AND {allowed}"
                params.extend(values)
            else:
                sql += " AND 1 = 0"  # an empty allowlist matches nothing
        if before_seq is not None:
            sql += f" AND seq < {p}"
            params.append(before_seq)
        sql += f" ORDER BY seq DESC LIMIT {p}"
        params.append(limit)
        return [StoredReport(**dict(r)) for r in self.db.conn.execute(sql, params)]

    def report(self, workspace: str, analysis_id: str) -> StoredReport | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT {_REPORT_COLUMNS} FROM reports WHERE workspace = {p} AND analysis_id = {p}",
            (workspace, analysis_id),
        ).fetchone()
        return None if row is None else StoredReport(**dict(row))

    def artifact(self, workspace: str, analysis_id: str) -> bytes | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT artifact FROM reports WHERE workspace = {p} AND analysis_id = {p}",
            (workspace, analysis_id),
        ).fetchone()
        return None if row is None else bytes(row["artifact"])

    # -- runs ------------------------------------------------------------------------------------

    def insert_run(self, workspace: str, run: dict[str, Any]) -> None:
        d = self.dialect
        with self.db.transaction() as conn:
            d.lock(conn, "metergraph-runs", workspace)  # one numbering (seq) at a time
            seq = conn.execute(
                f"SELECT COALESCE(MAX(seq), 0) + 1 FROM analysis_runs WHERE workspace = {d.p}", (workspace,)
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO analysis_runs (workspace, run_id, seq, kind, analysis_id, request_key, request_hash,"
                f" status, created_at, progress, arguments, heartbeat_ms) VALUES ({d.marks(12)})",
                (workspace, run["run_id"], seq, run["kind"], run["analysis_id"], run.get("request_key"),
                 run.get("request_hash"), run["status"], run["created_at"], json.dumps(run.get("progress") or {}),
                 json.dumps(run.get("arguments") or {}, sort_keys=True), run.get("heartbeat_ms")),
            )  # fmt: skip

    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT * FROM analysis_runs WHERE workspace = {p} AND run_id = {p}", (workspace, run_id)
        ).fetchone()
        return None if row is None else _run_row(row)

    def run_by_request_key(self, workspace: str, request_key: str) -> dict[str, Any] | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT * FROM analysis_runs WHERE workspace = {p} AND request_key = {p}",
            (workspace, request_key),
        ).fetchone()
        return None if row is None else _run_row(row)

    def active_run(self, workspace: str, kind: str) -> dict[str, Any] | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT * FROM analysis_runs WHERE workspace = {p} AND kind = {p} AND status IN ('queued', 'running')"
            " ORDER BY seq DESC LIMIT 1",
            (workspace, kind),
        ).fetchone()
        return None if row is None else _run_row(row)

    def list_runs(
        self, workspace: str, limit: int, before: tuple[str, int] | None = None
    ) -> list[dict[str, Any]]:
        """Newest first by (created_at, seq); ``before`` is the key of the last run already listed."""
        p = self.dialect.p
        sql = f"SELECT * FROM analysis_runs WHERE workspace = {p}"
        params: list[Any] = [workspace]
        if before is not None:
            sql += f" AND (created_at < {p} OR (created_at = {p} AND seq < {p}))"
            params.extend([before[0], before[0], before[1]])
        sql += f" ORDER BY created_at DESC, seq DESC LIMIT {p}"
        params.append(limit)
        return [_run_row(r) for r in self.db.conn.execute(sql, params)]

    def update_run(self, workspace: str, run_id: str, **fields: Any) -> None:
        if "progress" in fields:
            fields["progress"] = json.dumps(fields["progress"], sort_keys=True)
        p = self.dialect.p
        assignments = ", ".join(f"{name} = {p}" for name in fields)
        with self.db.transaction() as conn:
            conn.execute(
                f"UPDATE analysis_runs SET {assignments} WHERE workspace = {p} AND run_id = {p}",
                (*fields.values(), workspace, run_id),
            )

    def start_run(self, workspace: str, run_id: str, started_at: str) -> None:
        """queued -> running; raises ``RunEnded`` when the run was cancelled or failed meanwhile."""
        p = self.dialect.p
        with self.db.transaction() as conn:
            cursor = conn.execute(
                f"UPDATE analysis_runs SET status = 'running', started_at = {p}"
                f" WHERE workspace = {p} AND run_id = {p} AND status = 'queued' AND cancel_requested = 0",
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
        p = self.dialect.p
        with self.db.transaction() as conn:
            conn.execute(
                f"UPDATE analysis_runs SET status = {p}, error_code = {p}, error_message = {p}, finished_at = {p}"
                f" WHERE workspace = {p} AND run_id = {p} AND status IN ('queued', 'running')",
                (status, code, message, finished_at, workspace, run_id),
            )

    def request_cancel(self, workspace: str, run_id: str) -> bool:
        p = self.dialect.p
        with self.db.transaction() as conn:
            cursor = conn.execute(
                "UPDATE analysis_runs SET cancel_requested = 1"
                f" WHERE workspace = {p} AND run_id = {p} AND status IN ('queued', 'running')",
                (workspace, run_id),
            )
            return int(cursor.rowcount) > 0

    def cancel_requested(self, workspace: str, run_id: str) -> bool:
        """True once the run was asked to stop, or was ended elsewhere (failed as abandoned)."""
        p = self.dialect.p
        row = self.db.conn.execute(
            "SELECT cancel_requested <> 0 OR status NOT IN ('queued', 'running') FROM analysis_runs"
            f" WHERE workspace = {p} AND run_id = {p}",
            (workspace, run_id),
        ).fetchone()
        return bool(row is None or row[0])

    def finish_run_with_report(
        self, workspace: str, run_id: str, finished_at: str, report: StoredReport, artifact: bytes
    ) -> None:
        """The run's end: the report and the run's final state commit together, or neither does."""
        p = self.dialect.p
        with self.db.transaction() as conn:
            ended = conn.execute(
                f"UPDATE analysis_runs SET status = 'succeeded', finished_at = {p}"
                f" WHERE workspace = {p} AND run_id = {p} AND status = 'running' AND cancel_requested = 0",
                (finished_at, workspace, run_id),
            )
            if ended.rowcount == 0:
                raise RunEnded(run_id)  # cancelled or failed meanwhile: the transaction writes nothing
            self._insert_report(conn, workspace, report, artifact)

    def heartbeat(self, workspace: str, run_id: str, now_ms: int) -> None:
        p = self.dialect.p
        with self.db.transaction() as conn:
            conn.execute(
                f"UPDATE analysis_runs SET heartbeat_ms = {p} WHERE workspace = {p} AND run_id = {p}",
                (now_ms, workspace, run_id),
            )

    def fail_abandoned_runs(self, finished_at: str, stale_before_ms: int) -> int:
        """Runs left queued or running whose heartbeat stopped before ``stale_before_ms`` can never
        finish (their process is gone): mark them failed."""
        p = self.dialect.p
        with self.db.transaction() as conn:
            cursor = conn.execute(
                f"UPDATE analysis_runs SET status = 'failed', error_code = 'server_restarted', finished_at = {p}"
                f" WHERE status IN ('queued', 'running') AND COALESCE(heartbeat_ms, 0) < {p}",
                (finished_at, stale_before_ms),
            )
            return int(cursor.rowcount)


class SqliteReportStore(_ReportSql):
    """Reports and runs in their own SQLite file."""

    dialect = SQLITE
    db: Database

    def __init__(self, path: Path) -> None:
        self.db = Database(path, sqlite_control_schema.ANALYSIS, component=COMPONENT)

    def close(self) -> None:
        self.db.close()


class PostgresReportStore(_ReportSql):
    """Reports and runs in Metergraph's PostgreSQL schema, shared by every worker of every machine."""

    dialect = POSTGRES

    def __init__(self, db: NativeDatabase) -> None:
        self.db = db
        db.migrate(COMPONENT, pg_schema.ANALYSIS)

    def close(self) -> None:
        """Nothing: the database belongs to the ``Metergraph`` that opened it."""


def _run_row(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["progress"] = json.loads(out["progress"] or "{}")
    out["arguments"] = json.loads(out["arguments"] or "{}")
    return out
