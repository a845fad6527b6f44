"""Persistence of import-sync streams and their leases, in the SQLite metadata file (its own migration
component, ``import_sync``) on both engines: the ClickHouse engine keeps its metadata there too, and every
worker of a server shares that file.

A stream is one (workspace, source, scope): its checkpoint (the end of the last completed window), a
version counting completions, and the lease holding it now, if any. Every change happens in one write
transaction (``BEGIN IMMEDIATE``) that reads the stream, lets the service decide, and writes, so two
workers (or two processes) acquiring at once are serialized by SQLite, and a partial unique index
refuses a second active lease on one stream whatever the code above does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from triptych.core.db import Database

COMPONENT = "import_sync"
MIGRATIONS = [
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


@dataclass(frozen=True)
class Stream:
    workspace: str
    source: str
    scope: str
    seed_ms: int
    checkpoint_ms: int | None
    checkpoint_version: int
    completed_ms: int | None
    lease_id: str | None


@dataclass(frozen=True)
class Lease:
    lease_id: str
    workspace: str
    source: str
    scope: str
    window_start_ms: int
    window_end_ms: int
    checkpoint_version: int
    acquired_ms: int
    expires_ms: int
    status: str
    ended_ms: int | None


class StreamTx:
    """One write transaction over the import-sync tables (``SqliteImportSyncStore.transaction``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def stream(self, workspace: str, source: str, scope: str) -> Stream | None:
        row = self.conn.execute(
            "SELECT workspace, source, scope, seed_ms, checkpoint_ms, checkpoint_version, completed_ms, lease_id"
            " FROM import_sync_streams WHERE workspace = ? AND source = ? AND scope = ?",
            (workspace, source, scope),
        ).fetchone()
        return None if row is None else Stream(*row)

    def lease(self, workspace: str, lease_id: str) -> Lease | None:
        row = self.conn.execute(
            "SELECT lease_id, workspace, source, scope, window_start_ms, window_end_ms, checkpoint_version,"
            " acquired_ms, expires_ms, status, ended_ms FROM import_sync_leases"
            " WHERE lease_id = ? AND workspace = ?",
            (lease_id, workspace),
        ).fetchone()
        return None if row is None else Lease(*row)

    def start(self, lease: Lease) -> None:
        """Record a new active lease and make it the stream's holder (a new stream starts at the lease's
        window)."""
        self.conn.execute(
            "INSERT INTO import_sync_streams (workspace, source, scope, seed_ms, checkpoint_version, lease_id)"
            " VALUES (?, ?, ?, ?, 0, ?)"
            " ON CONFLICT (workspace, source, scope) DO UPDATE SET lease_id = excluded.lease_id",
            (lease.workspace, lease.source, lease.scope, lease.window_start_ms, lease.lease_id),
        )
        self.conn.execute(
            "INSERT INTO import_sync_leases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (lease.lease_id, lease.workspace, lease.source, lease.scope, lease.window_start_ms,
             lease.window_end_ms, lease.checkpoint_version, lease.acquired_ms, lease.expires_ms, "active", None),
        )  # fmt: skip

    def end(self, lease: Lease, status: str, now_ms: int) -> None:
        """An active lease ends (completed, abandoned, expired): the stream has no holder afterwards."""
        self.conn.execute(
            "UPDATE import_sync_leases SET status = ?, ended_ms = ? WHERE lease_id = ? AND status = 'active'",
            (status, now_ms, lease.lease_id),
        )
        self.conn.execute(
            "UPDATE import_sync_streams SET lease_id = NULL"
            " WHERE workspace = ? AND source = ? AND scope = ? AND lease_id = ?",
            (lease.workspace, lease.source, lease.scope, lease.lease_id),
        )

    def extend(self, lease: Lease, expires_ms: int) -> None:
        self.conn.execute(
            "UPDATE import_sync_leases SET expires_ms = ? WHERE lease_id = ?", (expires_ms, lease.lease_id)
        )

    def advance(self, lease: Lease, now_ms: int) -> None:
        """The stream's checkpoint moves to the end of the lease's window, one version on."""
        self.conn.execute(
            "UPDATE import_sync_streams SET checkpoint_ms = ?, checkpoint_version = checkpoint_version + 1,"
            " completed_ms = ? WHERE workspace = ? AND source = ? AND scope = ?",
            (lease.window_end_ms, now_ms, lease.workspace, lease.source, lease.scope),
        )


class SqliteImportSyncStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate(COMPONENT, MIGRATIONS)

    @contextmanager
    def transaction(self) -> Iterator[StreamTx]:
        """A write transaction: what the service reads in it cannot change before it commits."""
        with self.db.transaction() as conn:
            yield StreamTx(conn)

    def stream(self, workspace: str, source: str, scope: str) -> tuple[Stream | None, Lease | None]:
        """A stream and its holder's lease (maybe expired), read outside any write."""
        tx = StreamTx(self.db.conn)
        stream = tx.stream(workspace, source, scope)
        lease = tx.lease(workspace, stream.lease_id) if stream is not None and stream.lease_id else None
        return stream, lease
