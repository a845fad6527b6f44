"""Incident persistence. Embedded: one SQLite file (``metergraph-incidents.db``) apart from the telemetry
store, so detector writes never queue behind ingest transactions and a telemetry engine swap leaves them
alone (``SqliteIncidentStore``). Server mode: the ``metergraph`` schema of the PostgreSQL database
(``PostgresIncidentStore``, decision record 0160). Both run the SQL of ``_IncidentSql``, spelled by the
store's dialect (``control_sql.py``) and sent as written; each engine's DDL is in ``sqlite_control_schema.py``
and ``pg_schema.py``.

At most one incident per (workspace, kind, grain, series) is open at a time (a partial unique index), so
two workers sweeping the same workspace cannot open the same episode twice. A save holds its workspace's
lock (SQLite's single writer; an advisory lock of that workspace on PostgreSQL), so the event a change
announces is judged against the row as the previous save left it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metergraph import pg_schema, sqlite_control_schema
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Connection, Dialect

COMPONENT = "incidents"


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


@functools.cache
def _insert(d: Dialect, new: bool) -> str:
    """The INSERT of an incident's row (``Incident.params``): a new episode's, which leaves a row another
    worker opened a moment ago as it is, or an update of a known one."""
    insert = f"INSERT INTO incidents ({', '.join(_COLUMNS)}) VALUES ({', '.join(map(d.named, _COLUMNS))})"
    if new:
        return insert + " ON CONFLICT DO NOTHING"
    kept = ("id", "workspace", "first_seen_ms")
    return (
        insert
        + " ON CONFLICT (id) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in kept)
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
    def db(self) -> Database | NativeDatabase:
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
    """The incident SQL both engines run, over ``db`` (a ``Database`` or a ``NativeDatabase``)."""

    dialect: Dialect
    db: Any

    def __init__(self) -> None:
        self.outbox: Outbox | None = None
        # Called after a commit that wrote events: the sender wakes once the rows are visible (woken
        # inside the transaction, it would wait on the write lock in SQLite's busy back-off).
        self.outbox_committed: Callable[[], None] | None = None

    def cursor(self, workspace: str, grain: str) -> tuple[int, int] | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT anchor_bucket, evaluated_through FROM incident_cursors WHERE workspace = {p} AND grain = {p}",
            (workspace, grain),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def open_incidents(self, workspace: str, grain: str) -> list[Incident]:
        p = self.dialect.p
        rows = self.db.conn.execute(
            f"SELECT * FROM incidents WHERE workspace = {p} AND grain = {p} AND status = 'open'",
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
        announced, d = False, self.dialect
        with self.db.transaction() as conn:
            d.lock(conn, "metergraph-incidents", workspace)
            for incident in incidents:
                sql = _insert(d, incident.id in created)
                before = None
                if self.outbox is not None:
                    before = conn.execute(
                        f"SELECT status, severity, occurrences FROM incidents WHERE id = {d.p}",
                        (incident.id,),
                    ).fetchone()
                written = conn.execute(sql, incident.params()).rowcount > 0
                event = transition(before, incident, written) if self.outbox is not None else None
                if event is not None and self.outbox is not None:
                    self.outbox(conn, event, incident)
                    announced = True
            if cursor is not None:
                conn.execute(
                    f"INSERT INTO incident_cursors VALUES ({d.marks(4)}) ON CONFLICT (workspace, grain) DO UPDATE"
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
        bound, bound_params = self.dialect.limit(limit)
        rows = self.db.conn.execute(
            f"SELECT * FROM incidents WHERE {where} ORDER BY status = 'open' DESC, last_seen_ms DESC, id{bound}",
            [*params, *bound_params],
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

    def _visible(self, workspace: str, environments: Sequence[str] | None) -> tuple[str, list[Any]]:
        mine = f"workspace = {self.dialect.p}"
        if environments is None:
            return mine, [workspace]
        if not environments:
            return f"{mine} AND series = '[]'", [workspace]
        allowed, params = self.dialect.one_of("environment", environments)
        return f"{mine} AND (series = '[]' OR {allowed})", [workspace, *params]

    def prune(self, before_ms: int) -> None:
        """Forget incidents resolved before ``before_ms`` (older than any window a read may ask for)."""
        with self.db.transaction() as conn:
            conn.execute(
                f"DELETE FROM incidents WHERE status = 'resolved' AND resolved_ms < {self.dialect.p}",
                (before_ms,),
            )


class SqliteIncidentStore(_IncidentSql):
    """Incidents in their own SQLite file."""

    dialect = SQLITE
    db: Database

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.db = Database(path, sqlite_control_schema.INCIDENTS, component=COMPONENT)

    def close(self) -> None:
        self.db.close()


class PostgresIncidentStore(_IncidentSql):
    """Incidents in Metergraph's PostgreSQL schema, shared by every worker of every machine."""

    dialect = POSTGRES

    def __init__(self, db: NativeDatabase) -> None:
        super().__init__()
        self.db = db
        db.migrate(COMPONENT, pg_schema.INCIDENTS)

    def close(self) -> None:
        """Nothing: the database belongs to the ``Metergraph`` that opened it."""
