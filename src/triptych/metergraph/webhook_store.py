"""Incident webhooks' persistence: the endpoints and the delivery outbox, in the incidents' database (the
SQLite file ``metergraph-incidents.db``, or Metergraph's PostgreSQL schema in server mode) so a delivery
row commits in the same transaction as the incident change it announces (``IncidentStore.save`` calls
the outbox hook with its open connection). ``SqliteWebhookStore`` and ``PostgresWebhookStore`` run the
SQL of ``_WebhookSql``, spelled by the store's dialect (``control_sql.py``) and sent as written; each
engine's DDL is in ``sqlite_control_schema.py`` and ``pg_schema.py``.

A delivery is one event for one endpoint: its body is stored as the exact bytes sent, so every attempt
(and a resend after a restart) carries the same ``delivery_id``. Senders claim due rows with a lease
(``lease_until_ms``): under SQLite's single writer, or skipping the rows another PostgreSQL transaction is
claiming, so several workers never send a row at the same time; a lease left by a process that died expires and the row is sent again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metergraph import pg_schema, sqlite_control_schema
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Connection, Dialect

COMPONENT = "webhooks"


_ENDPOINT_COLUMNS = "id, workspace, url, description, created_ms"


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivery a sender holds the lease of."""

    id: str
    endpoint_id: str
    url: str
    sealed_secret: str
    body: str
    event_type: str
    attempts: int  # including this one
    created_ms: int


class WebhookStore(Protocol):
    """Webhook endpoints and the delivery outbox of one engine."""

    def add_endpoint(
        self, endpoint_id: str, workspace: str, url: str, description: str | None, sealed: str, now_ms: int
    ) -> None: ...
    def endpoints(self, workspace: str | None = None) -> list[dict[str, Any]]: ...
    def endpoint(self, endpoint_id: str) -> tuple[dict[str, Any], str] | None: ...
    def remove_endpoint(self, endpoint_id: str, now_ms: int) -> int | None: ...
    def workspace_endpoints(self, conn: Connection, workspace: str) -> list[str]: ...
    def enqueue(self, conn: Connection, rows: list[dict[str, Any]]) -> None: ...
    def record(self, row: dict[str, Any]) -> None: ...
    def claim(self, now_ms: int, lease_ms: int, limit: int) -> list[Claimed]: ...
    def finish(self, outcomes: list[dict[str, Any]]) -> None: ...
    def next_due_ms(self) -> int | None: ...
    def deliveries(
        self, workspace: str | None, endpoint_id: str | None, status: str | None, limit: int
    ) -> list[dict[str, Any]]: ...
    def prune(self, before_ms: int) -> int: ...
    def body(self, delivery_id: str) -> str | None: ...


class _WebhookSql:
    """The webhook SQL both engines run, over the incident store's database ``db``."""

    dialect: Dialect
    db: Any

    # -- endpoints --------------------------------------------------------------------------------

    def add_endpoint(
        self, endpoint_id: str, workspace: str, url: str, description: str | None, sealed: str, now_ms: int
    ) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                f"INSERT INTO webhook_endpoints VALUES ({self.dialect.marks(6)})",
                (endpoint_id, workspace, url, description, sealed, now_ms),
            )

    def endpoints(self, workspace: str | None = None) -> list[dict[str, Any]]:
        where, params = (f"WHERE workspace = {self.dialect.p}", [workspace]) if workspace else ("", [])
        rows = self.db.conn.execute(
            f"SELECT {_ENDPOINT_COLUMNS} FROM webhook_endpoints {where} ORDER BY workspace, created_ms, id",
            params,
        )
        return [dict(r) for r in rows]

    def endpoint(self, endpoint_id: str) -> tuple[dict[str, Any], str] | None:
        """The endpoint and its sealed secret."""
        row = self.db.conn.execute(
            f"SELECT {_ENDPOINT_COLUMNS}, secret FROM webhook_endpoints WHERE id = {self.dialect.p}",
            (endpoint_id,),
        ).fetchone()
        if row is None:
            return None
        values = dict(row)
        return values, values.pop("secret")

    def remove_endpoint(self, endpoint_id: str, now_ms: int) -> int | None:
        """Delete the endpoint and cancel its pending deliveries (their count); None if there is none."""
        p = self.dialect.p
        with self.db.transaction() as conn:
            if conn.execute(f"DELETE FROM webhook_endpoints WHERE id = {p}", (endpoint_id,)).rowcount == 0:
                return None
            return int(
                conn.execute(
                    f"UPDATE webhook_deliveries SET status = 'cancelled', finished_ms = {p}, lease_until_ms = 0"
                    f" WHERE endpoint_id = {p} AND status = 'pending'",
                    (now_ms, endpoint_id),
                ).rowcount
            )

    # -- the outbox -------------------------------------------------------------------------------

    def workspace_endpoints(self, conn: Connection, workspace: str) -> list[str]:
        """Inside the incident transaction: the ids of the endpoints an event of ``workspace`` goes to."""
        rows = conn.execute(
            f"SELECT id FROM webhook_endpoints WHERE workspace = {self.dialect.p} ORDER BY id", (workspace,)
        )
        return [str(r[0]) for r in rows]

    def enqueue(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        """Inside the caller's transaction: pending deliveries, due at once."""
        n = self.dialect.named
        conn.executemany(
            "INSERT INTO webhook_deliveries (id, endpoint_id, workspace, event_type, incident_id, body, status,"
            f" created_ms, next_attempt_ms) VALUES ({n('id')}, {n('endpoint_id')}, {n('workspace')},"
            f" {n('event_type')}, {n('incident_id')}, {n('body')}, 'pending', {n('created_ms')}, {n('created_ms')})",
            rows,
        )

    def record(self, row: dict[str, Any]) -> None:
        """A delivery already attempted (``webhook test``), kept in the history."""
        n = self.dialect.named
        with self.db.transaction() as conn:
            self.enqueue(conn, [row])
            conn.execute(
                f"UPDATE webhook_deliveries SET status = {n('status')}, attempts = 1,"
                f" last_attempt_ms = {n('created_ms')}, finished_ms = {n('created_ms')},"
                f" last_status = {n('last_status')}, last_error = {n('last_error')},"
                f" last_response = {n('last_response')} WHERE id = {n('id')}",
                row,
            )

    def claim(self, now_ms: int, lease_ms: int, limit: int) -> list[Claimed]:
        """Due deliveries nobody holds, leased to the caller until ``now_ms + lease_ms``."""
        p = self.dialect.p
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT d.id, d.endpoint_id, e.url, e.secret, d.body, d.event_type, d.attempts, d.created_ms"
                " FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id"
                f" WHERE d.status = 'pending' AND d.next_attempt_ms <= {p} AND d.lease_until_ms <= {p}"
                f" ORDER BY d.next_attempt_ms, d.seq LIMIT {p}" + self.dialect.skip_locked("d"),
                (now_ms, now_ms, limit),
            ).fetchall()
            conn.executemany(
                f"UPDATE webhook_deliveries SET lease_until_ms = {p}, attempts = attempts + 1,"
                f" last_attempt_ms = {p} WHERE id = {p}",
                [(now_ms + lease_ms, now_ms, r["id"]) for r in rows],
            )
        return [
            Claimed(r["id"], r["endpoint_id"], r["url"], r["secret"], r["body"], r["event_type"],
                    int(r["attempts"]) + 1, int(r["created_ms"]))
            for r in rows
        ]  # fmt: skip

    def finish(self, outcomes: list[dict[str, Any]]) -> None:
        """Attempts' outcomes: ``status`` delivered, failed (given up) or pending (``next_attempt_ms``)."""
        n = self.dialect.named
        with self.db.transaction() as conn:
            conn.executemany(
                f"UPDATE webhook_deliveries SET status = {n('status')}, next_attempt_ms = {n('next_attempt_ms')},"
                f" lease_until_ms = 0, last_status = {n('last_status')}, last_error = {n('last_error')},"
                f" last_response = {n('last_response')}, finished_ms = {n('finished_ms')}"
                f" WHERE id = {n('id')} AND status = 'pending'",  # a removed endpoint's rows stay cancelled
                outcomes,
            )

    def next_due_ms(self) -> int | None:
        """When the earliest pending delivery (leased or not) may be attempted."""
        row = self.db.conn.execute(
            f"SELECT MIN({self.dialect.greatest('next_attempt_ms', 'lease_until_ms')}) FROM webhook_deliveries"
            " WHERE status = 'pending'"
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def deliveries(
        self,
        workspace: str | None,
        endpoint_id: str | None,
        status: str | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """The newest deliveries first (without their bodies)."""
        where, params = [], []
        for column, value in (("workspace", workspace), ("endpoint_id", endpoint_id), ("status", status)):
            if value is not None:
                where.append(f"{column} = {self.dialect.p}")
                params.append(value)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        rows = self.db.conn.execute(
            "SELECT id, endpoint_id, workspace, event_type, incident_id, status, attempts, created_ms,"
            " next_attempt_ms, last_attempt_ms, last_status, last_error, last_response, finished_ms"
            f" FROM webhook_deliveries {clause} ORDER BY seq DESC LIMIT {self.dialect.p}",
            [*params, limit],
        )
        return [dict(r) for r in rows]

    def prune(self, before_ms: int) -> int:
        """Forget finished deliveries (delivered, failed, cancelled) that ended before ``before_ms``."""
        with self.db.transaction() as conn:
            return int(
                conn.execute(
                    f"DELETE FROM webhook_deliveries WHERE status != 'pending' AND finished_ms < {self.dialect.p}",
                    (before_ms,),
                ).rowcount
            )

    def body(self, delivery_id: str) -> str | None:
        row = self.db.conn.execute(
            f"SELECT body FROM webhook_deliveries WHERE id = {self.dialect.p}", (delivery_id,)
        ).fetchone()
        return None if row is None else str(row[0])


class SqliteWebhookStore(_WebhookSql):
    """Endpoints and deliveries in the incidents' SQLite file, with their own migrations."""

    dialect = SQLITE

    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate(COMPONENT, sqlite_control_schema.WEBHOOKS)


class PostgresWebhookStore(_WebhookSql):
    """Endpoints and deliveries in Metergraph's PostgreSQL schema, shared by every worker."""

    dialect = POSTGRES

    def __init__(self, db: NativeDatabase) -> None:
        self.db = db
        db.migrate(COMPONENT, pg_schema.WEBHOOKS)


def webhook_store(db: Database | NativeDatabase) -> WebhookStore:
    """The webhook store of the incident store's database, on its engine."""
    return PostgresWebhookStore(db) if isinstance(db, NativeDatabase) else SqliteWebhookStore(db)
