"""Persistence of workloads and classification runs (migration component ``workloads``). Embedded, and
with ClickHouse telemetry on one machine: the metergraph SQLite file (``SqliteWorkloadStore``). Server
mode (``TRIPTYCH_DATABASE_URL``): Metergraph's PostgreSQL schema (``PostgresWorkloadStore``). Both run
the SQL of ``_WorkloadSql``, spelled by the store's dialect (``control_sql.py``) and sent as written; each
engine's DDL is in ``sqlite_control_schema.py`` and ``pg_schema.py``. The calls classification reads come from the ``CallStore``
(``workload_features``), so they are read wherever the engine keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metergraph import pg_schema, sqlite_control_schema
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Dialect

COMPONENT = "workloads"
# What a classification run's row holds (``insert_run``'s ``run``).
_RUN_COLUMNS = ("run_id", "workspace", "status", "created_at", "started_at", "finished_at", "error_code", "days",
                "calls", "workloads")  # fmt: skip


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

    dialect: Dialect
    db: Any

    # -- workloads ---------------------------------------------------------------------------

    def replace_workloads(
        self, workspace: str, run_id: str, rows: Sequence[dict[str, Any]], run: dict[str, Any]
    ) -> None:
        """The workspace's workloads become ``rows`` and the run is recorded, in one transaction."""
        d = self.dialect
        with self.db.transaction() as conn:
            conn.execute(f"DELETE FROM workloads WHERE workspace = {d.p}", (workspace,))
            conn.executemany(
                "INSERT INTO workloads (workspace, workload_id, run_id, name, route, tag_keys, shapes, calls,"
                f" replay_eligible_calls, cost_usd, stats, classified_at) VALUES ({d.marks(12)})",
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

    def _upsert_run(self, conn: Any, run: dict[str, Any]) -> None:
        conn.execute(
            f"INSERT INTO classification_runs ({', '.join(_RUN_COLUMNS)})"
            f" VALUES ({', '.join(map(self.dialect.named, _RUN_COLUMNS))}) ON CONFLICT (run_id) DO UPDATE SET"
            " status = excluded.status, started_at = excluded.started_at, finished_at = excluded.finished_at,"
            " error_code = excluded.error_code, calls = excluded.calls, workloads = excluded.workloads",
            run,
        )

    def workloads(self, workspace: str, routes: Sequence[str | None] | None = None) -> list[dict[str, Any]]:
        """The saved workloads, largest first (of these routes only, None standing for unrouted)."""
        sql, params = f"SELECT * FROM workloads WHERE workspace = {self.dialect.p}", [workspace]
        if routes is not None:
            named = [r for r in routes if r is not None]
            clauses = []
            if named:
                clause, values = self.dialect.one_of("route", named)
                clauses.append(clause)
                params.extend(values)
            if None in routes:
                clauses.append("route IS NULL")
            sql += f" AND ({' OR '.join(clauses) or '1 = 0'})"
        rows = self.db.conn.execute(sql + " ORDER BY calls DESC, workload_id", params)
        return [_workload(r) for r in rows]

    def workload(self, workspace: str, workload_id: str) -> dict[str, Any] | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT * FROM workloads WHERE workspace = {p} AND workload_id = {p}", (workspace, workload_id)
        ).fetchone()
        return None if row is None else _workload(row)

    def runs(self, workspace: str, limit: int) -> list[dict[str, Any]]:
        """Classification runs, newest first."""
        p = self.dialect.p
        rows = self.db.conn.execute(
            f"SELECT * FROM classification_runs WHERE workspace = {p} ORDER BY created_at DESC, run_id LIMIT {p}",
            (workspace, limit),
        )
        return [dict(r) for r in rows]

    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT * FROM classification_runs WHERE workspace = {p} AND run_id = {p}", (workspace, run_id)
        ).fetchone()
        return None if row is None else dict(row)


class SqliteWorkloadStore(_WorkloadSql):
    """Workloads in the telemetry store's SQLite metadata file, with their own migrations."""

    dialect = SQLITE

    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate(COMPONENT, sqlite_control_schema.WORKLOADS)


class PostgresWorkloadStore(_WorkloadSql):
    """Workloads in Metergraph's PostgreSQL schema, shared by every worker of every machine."""

    dialect = POSTGRES

    def __init__(self, db: NativeDatabase) -> None:
        self.db = db
        db.migrate(COMPONENT, pg_schema.WORKLOADS)


def _workload(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["tag_keys"] = json.loads(out["tag_keys"])
    out["shapes"] = json.loads(out["shapes"])
    out["stats"] = json.loads(out["stats"])
    return out
