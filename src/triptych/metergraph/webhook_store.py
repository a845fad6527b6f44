"""Incident webhooks' persistence: the endpoints and the delivery outbox, in the incidents' database (the
SQLite file ``metergraph-incidents.db``, or Metergraph's PostgreSQL schema in server mode) so a delivery
row commits in the same transaction as the incident change it announces (``IncidentStore.save`` calls
the outbox hook with its open connection). ``SqliteWebhookStore`` and ``PostgresWebhookStore`` run the
SQL of ``_WebhookSql``; where the engines differ they ask the dialect (``control_sql.py``).

A delivery is one event for one endpoint: its body is stored as the exact bytes sent, so every attempt
(and a resend after a restart) carries the same ``delivery_id``. Senders claim due rows with a lease
(``lease_until_ms``): under SQLite's single writer, or skipping the rows another PostgreSQL transaction is
claiming, so several workers never send a row at the same time; a lease left by a process that died expires and the row is sent again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import PortableDatabase
from triptych.metergraph.control_pg import pg_ddl
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Connection, Dialect

COMPONENT = "webhooks"

MIGRATIONS = [
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
PG_MIGRATIONS = [pg_ddl(MIGRATIONS[0])]

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
                "INSERT INTO webhook_endpoints VALUES (?, ?, ?, ?, ?, ?)",
                (endpoint_id, workspace, url, description, sealed, now_ms),
            )

    def endpoints(self, workspace: str | None = None) -> list[dict[str, Any]]:
        where, params = ("WHERE workspace = ?", [workspace]) if workspace else ("", [])
        rows = self.db.conn.execute(
            f"SELECT {_ENDPOINT_COLUMNS} FROM webhook_endpoints {where} ORDER BY workspace, created_ms, id",
            params,
        )
        return [dict(r) for r in rows]

    def endpoint(self, endpoint_id: str) -> tuple[dict[str, Any], str] | None:
        """The endpoint and its sealed secret."""
        row = self.db.conn.execute(
            f"SELECT {_ENDPOINT_COLUMNS}, secret FROM webhook_endpoints WHERE id = ?", (endpoint_id,)
        ).fetchone()
        if row is None:
            return None
        values = dict(row)
        return values, values.pop("secret")

    def remove_endpoint(self, endpoint_id: str, now_ms: int) -> int | None:
        """Delete the endpoint and cancel its pending deliveries (their count); None if there is none."""
        with self.db.transaction() as conn:
            if conn.execute("DELETE FROM webhook_endpoints WHERE id = ?", (endpoint_id,)).rowcount == 0:
                return None
            return int(
                conn.execute(
                    "UPDATE webhook_deliveries SET status = 'cancelled', finished_ms = ?, lease_until_ms = 0"
                    " WHERE endpoint_id = ? AND status = 'pending'",
                    (now_ms, endpoint_id),
                ).rowcount
            )

    # -- the outbox -------------------------------------------------------------------------------

    @staticmethod
    def workspace_endpoints(conn: Connection, workspace: str) -> list[str]:
        """Inside the incident transaction: the ids of the endpoints an event of ``workspace`` goes to."""
        rows = conn.execute("SELECT id FROM webhook_endpoints WHERE workspace = ? ORDER BY id", (workspace,))
        return [str(r[0]) for r in rows]

    @staticmethod
    def enqueue(conn: Connection, rows: list[dict[str, Any]]) -> None:
        """Inside the caller's transaction: pending deliveries, due at once."""
        conn.executemany(
            "INSERT INTO webhook_deliveries (id, endpoint_id, workspace, event_type, incident_id, body, status,"
            " created_ms, next_attempt_ms) VALUES (:id, :endpoint_id, :workspace, :event_type, :incident_id,"
            " :body, 'pending', :created_ms, :created_ms)",
            rows,
        )

    def record(self, row: dict[str, Any]) -> None:
        """A delivery already attempted (``webhook test``), kept in the history."""
        with self.db.transaction() as conn:
            self.enqueue(conn, [row])
            conn.execute(
                "UPDATE webhook_deliveries SET status = :status, attempts = 1, last_attempt_ms = :created_ms,"
                " finished_ms = :created_ms, last_status = :last_status, last_error = :last_error,"
                " last_response = :last_response WHERE id = :id",
                row,
            )

    def claim(self, now_ms: int, lease_ms: int, limit: int) -> list[Claimed]:
        """Due deliveries nobody holds, leased to the caller until ``now_ms + lease_ms``."""
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT d.id, d.endpoint_id, e.url, e.secret, d.body, d.event_type, d.attempts, d.created_ms"
                " FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id"
                " WHERE d.status = 'pending' AND d.next_attempt_ms <= ? AND d.lease_until_ms <= ?"
                " ORDER BY d.next_attempt_ms, d.seq LIMIT ?" + self.dialect.skip_locked("d"),
                (now_ms, now_ms, limit),
            ).fetchall()
            conn.executemany(
                "UPDATE webhook_deliveries SET lease_until_ms = ?, attempts = attempts + 1, last_attempt_ms = ?"
                " WHERE id = ?",
                [(now_ms + lease_ms, now_ms, r["id"]) for r in rows],
            )
        return [
            Claimed(r["id"], r["endpoint_id"], r["url"], r["secret"], r["body"], r["event_type"],
                    int(r["attempts"]) + 1, int(r["created_ms"]))
            for r in rows
        ]  # fmt: skip

    def finish(self, outcomes: list[dict[str, Any]]) -> None:
        """Attempts' outcomes: ``status`` delivered, failed (given up) or pending (``next_attempt_ms``)."""
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE webhook_deliveries SET status = :status, next_attempt_ms = :next_attempt_ms,"
                " lease_until_ms = 0, last_status = :last_status, last_error = :last_error,"
                " last_response = :last_response, finished_ms = :finished_ms"
                " WHERE id = :id AND status = 'pending'",  # a removed endpoint's rows stay cancelled
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
                where.append(f"{column} = ?")
                params.append(value)
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        rows = self.db.conn.execute(
            "SELECT id, endpoint_id, workspace, event_type, incident_id, status, attempts, created_ms,"
            " next_attempt_ms, last_attempt_ms, last_status, last_error, last_response, finished_ms"
            f" FROM webhook_deliveries {clause} ORDER BY seq DESC LIMIT ?",
            [*params, limit],
        )
        return [dict(r) for r in rows]

    def prune(self, before_ms: int) -> int:
        """Forget finished deliveries (delivered, failed, cancelled) that ended before ``before_ms``."""
        with self.db.transaction() as conn:
            return int(
                conn.execute(
                    "DELETE FROM webhook_deliveries WHERE status != 'pending' AND finished_ms < ?",
                    (before_ms,),
                ).rowcount
            )

    def body(self, delivery_id: str) -> str | None:
        row = self.db.conn.execute(
            "SELECT body FROM webhook_deliveries WHERE id = ?", (delivery_id,)
        ).fetchone()
        return None if row is None else str(row[0])


class SqliteWebhookStore(_WebhookSql):
    """Endpoints and deliveries in the incidents' SQLite file, with their own migrations."""

    dialect = SQLITE

    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate(COMPONENT, MIGRATIONS)


class PostgresWebhookStore(_WebhookSql):
    """Endpoints and deliveries in Metergraph's PostgreSQL schema, shared by every worker."""

    dialect = POSTGRES

    def __init__(self, db: PortableDatabase) -> None:
        self.db = db
        db.migrate(COMPONENT, PG_MIGRATIONS)


def webhook_store(db: Database | PortableDatabase) -> WebhookStore:
    """The webhook store of the incident store's database, on its engine."""
    return PostgresWebhookStore(db) if isinstance(db, PortableDatabase) else SqliteWebhookStore(db)
