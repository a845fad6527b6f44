"""Incident persistence. Embedded: one SQLite file (``metergraph-incidents.db``) apart from the telemetry
store, so detector writes never queue behind ingest transactions and a telemetry engine swap leaves them
alone (``SqliteIncidentStore``). Server mode: the ``metergraph`` schema of the PostgreSQL database
(``PostgresIncidentStore``, decision record 0160). Both run the SQL of ``_IncidentSql``; where the
engines differ they ask the dialect (``control_sql.py``).

At most one incident per (workspace, kind, grain, series) is open at a time (a partial unique index), so
two workers sweeping the same workspace cannot open the same episode twice. A save holds its workspace's
lock (SQLite's single writer; an advisory lock of that workspace on PostgreSQL), so the event a change
announces is judged against the row as the previous save left it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import PortableDatabase
from triptych.metergraph.control_pg import pg_ddl
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Connection, Dialect, limit_clause, limit_params

COMPONENT = "incidents"

MIGRATIONS = [
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
PG_MIGRATIONS = [pg_ddl(MIGRATIONS[0])]


@dataclass
class Incident:
    id: str
    workspace: str
    kind: str
    grain: str
    series: str
    route: str | None
    provider: str | None
    model: str | None
    environment: str | None
    status: str
    severity: str
    title: str
    window_start_ms: int
    window_end_ms: int
    first_seen_ms: int
    last_seen_ms: int
    resolved_ms: int | None
    occurrences: int
    generation: int
    clear_windows: int
    last_trigger_bucket: int | None
    diagnosis: dict[str, Any]

    @classmethod
    def from_row(cls, row: Any) -> Incident:
        values = dict(row)
        values["diagnosis"] = json.loads(values["diagnosis"])
        return cls(**values)

    def params(self) -> dict[str, Any]:
        values = {name: getattr(self, name) for name in _COLUMNS}  # asdict would deep-copy the diagnosis
        values["diagnosis"] = json.dumps(self.diagnosis, sort_keys=True, separators=(",", ":"))
        return values


_COLUMNS = tuple(Incident.__dataclass_fields__)
_UPSERT = (
    f"INSERT INTO incidents ({', '.join(_COLUMNS)}) VALUES ({', '.join(':' + c for c in _COLUMNS)})"
    " ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in ("id", "workspace", "first_seen_ms"))
)


_INSERT_NEW = (
    f"INSERT INTO incidents ({', '.join(_COLUMNS)}) VALUES ({', '.join(':' + c for c in _COLUMNS)})"
    " ON CONFLICT DO NOTHING"
)


# Called inside ``save``'s transaction with each transition (``incident.opened|updated|resolved``): the
# webhook outbox (webhooks.py), so an event commits, or not, with the change it announces.
Outbox = Callable[[Connection, str, Incident], None]


def transition(before: Any, after: Incident, written: bool) -> str | None:
    """The event a write of ``after`` over the stored ``before`` is, if any. Updated means the signal was
    seen in a new window or escalated; a re-judged window or a clear window counted is no event. Read
    under the write lock, so two workers saving the same change announce it once."""
    if not written:
        return None  # another worker opened this episode a moment ago
    if before is None:
        return "incident.opened" if after.status == "open" else None
    if before["status"] != "open":
        return None
    if after.status == "resolved":
        return "incident.resolved"
    if after.occurrences > before["occurrences"] or after.severity != before["severity"]:
        return "incident.updated"
    return None


class IncidentStore(Protocol):
    """Incidents and the detectors' cursors of one engine."""

    @property
    def db(self) -> Database | PortableDatabase:
        """The database the webhook store shares: deliveries commit with the change they announce."""
        ...

    outbox: Outbox | None
    outbox_committed: Callable[[], None] | None

    def close(self) -> None: ...
    def cursor(self, workspace: str, grain: str) -> tuple[int, int] | None: ...
    def open_incidents(self, workspace: str, grain: str) -> list[Incident]: ...
    def save(
        self,
        workspace: str,
        grain: str,
        cursor: tuple[int, int] | None,
        incidents: Sequence[Incident],
        created: set[str],
    ) -> None: ...
    def for_workspace(
        self, workspace: str, environments: Sequence[str] | None = None, limit: int = -1
    ) -> list[Incident]: ...
    def counts(self, workspace: str, environments: Sequence[str] | None) -> tuple[int, int, int]: ...
    def prune(self, before_ms: int) -> None: ...


class _IncidentSql:
    """The incident SQL both engines run, over ``db`` (a ``Database`` or a ``PortableDatabase``)."""

    dialect: Dialect
    db: Any

    def __init__(self) -> None:
        self.outbox: Outbox | None = None
        # Called after a commit that wrote events: the sender wakes once the rows are visible (woken
        # inside the transaction, it would wait on the write lock in SQLite's busy back-off).
        self.outbox_committed: Callable[[], None] | None = None

    def cursor(self, workspace: str, grain: str) -> tuple[int, int] | None:
        row = self.db.conn.execute(
            "SELECT anchor_bucket, evaluated_through FROM incident_cursors WHERE workspace = ? AND grain = ?",
            (workspace, grain),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def open_incidents(self, workspace: str, grain: str) -> list[Incident]:
        rows = self.db.conn.execute(
            "SELECT * FROM incidents WHERE workspace = ? AND grain = ? AND status = 'open'",
            (workspace, grain),
        )
        return [Incident.from_row(r) for r in rows]

    def save(
        self,
        workspace: str,
        grain: str,
        cursor: tuple[int, int] | None,
        incidents: Sequence[Incident],
        created: set[str],
    ) -> None:
        """The sweep's changed incidents and its new cursor, together or not at all. An incident in
        ``created`` is new: if another worker opened the same episode a moment ago, its row stays."""
        announced = False
        with self.db.transaction() as conn:
            self.dialect.lock(conn, "metergraph-incidents", workspace)
            for incident in incidents:
                sql = _INSERT_NEW if incident.id in created else _UPSERT
                before = None
                if self.outbox is not None:
                    before = conn.execute(
                        "SELECT status, severity, occurrences FROM incidents WHERE id = ?", (incident.id,)
                    ).fetchone()
                written = conn.execute(sql, incident.params()).rowcount > 0
                event = transition(before, incident, written) if self.outbox is not None else None
                if event is not None and self.outbox is not None:
                    self.outbox(conn, event, incident)
                    announced = True
            if cursor is not None:
                conn.execute(
                    "INSERT INTO incident_cursors VALUES (?, ?, ?, ?) ON CONFLICT (workspace, grain) DO UPDATE"
                    " SET anchor_bucket = excluded.anchor_bucket, evaluated_through = excluded.evaluated_through",
                    (workspace, grain, *cursor),
                )
        if announced and self.outbox_committed is not None:
            self.outbox_committed()

    def for_workspace(
        self, workspace: str, environments: Sequence[str] | None = None, limit: int = -1
    ) -> list[Incident]:
        """The workspace's incidents, open ones first, then the most recently seen; with ``environments``,
        only those environments' and the workspace-wide (no series) ones."""
        where, params = self._visible(workspace, environments)
        rows = self.db.conn.execute(
            f"SELECT * FROM incidents WHERE {where} ORDER BY status = 'open' DESC, last_seen_ms DESC, id"
            + limit_clause(limit),
            [*params, *limit_params(limit)],
        )
        return [Incident.from_row(r) for r in rows]

    def counts(self, workspace: str, environments: Sequence[str] | None) -> tuple[int, int, int]:
        """(all, open, open and critical) incidents ``for_workspace`` would list."""
        where, params = self._visible(workspace, environments)
        row = self.db.conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN status = 'open' THEN 1 ELSE 0 END), 0),"
            " COALESCE(SUM(CASE WHEN status = 'open' AND severity = 'critical' THEN 1 ELSE 0 END), 0)"
            f" FROM incidents WHERE {where}",
            params,
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    @staticmethod
    def _visible(workspace: str, environments: Sequence[str] | None) -> tuple[str, list[Any]]:
        if environments is None:
            return "workspace = ?", [workspace]
        marks = ", ".join("?" * len(environments))
        where = (
            f"workspace = ? AND (series = '[]' OR environment IN ({marks}))"
            if environments
            else ("workspace = ? AND series = '[]'")
        )
        return where, [workspace, *environments]

    def prune(self, before_ms: int) -> None:
        """Forget incidents resolved before ``before_ms`` (older than any window a read may ask for)."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM incidents WHERE status = 'resolved' AND resolved_ms < ?", (before_ms,))


class SqliteIncidentStore(_IncidentSql):
    """Incidents in their own SQLite file."""

    dialect = SQLITE
    db: Database

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.db = Database(path, MIGRATIONS, component=COMPONENT)

    def close(self) -> None:
        self.db.close()


class PostgresIncidentStore(_IncidentSql):
    """Incidents in Metergraph's PostgreSQL schema, shared by every worker of every machine."""

    dialect = POSTGRES

    def __init__(self, db: PortableDatabase) -> None:
        super().__init__()
        self.db = db
        db.migrate(COMPONENT, PG_MIGRATIONS)

    def close(self) -> None:
        """Nothing: the database belongs to the ``Metergraph`` that opened it."""
