"""Persistence of import-sync streams and their leases (migration component ``import_sync``). Embedded, and
with ClickHouse telemetry on one machine: the SQLite metadata file every worker of the server shares
(``SqliteImportSyncStore``). Server mode (``TRIPTYCH_DATABASE_URL``): Metergraph's PostgreSQL schema,
shared by every worker of every machine (``PostgresImportSyncStore``). Both run the SQL of ``StreamTx``,
spelled by the store's dialect (``control_sql.py``) and sent as written; each engine's DDL is in
``sqlite_control_schema.py`` and ``pg_schema.py``.

A stream is one (workspace, source, scope): its checkpoint (the end of the last completed window), a
version counting completions, and the lease holding it now, if any. Every change happens in one write
transaction (``BEGIN IMMEDIATE``) that reads the stream, lets the service decide, and writes, so two
workers (or two processes) acquiring at once are serialized: by SQLite's single writer, or on PostgreSQL
by a transaction advisory lock of that one stream, taken before the transaction reads it (two streams
never wait for each other). A partial unique index refuses a second active lease on one stream whatever
the code above does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metergraph import pg_schema, sqlite_control_schema
from triptych.metergraph.control_sql import POSTGRES, SQLITE, Connection, Dialect

COMPONENT = "import_sync"


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
    """One write transaction over the import-sync tables (``ImportSyncStore.transaction``), or, with
    ``locking`` off, reads outside any."""

    def __init__(self, conn: Connection, dialect: Dialect = SQLITE, locking: bool = True) -> None:
        self.conn = conn
        self.dialect = dialect
        self.locking = locking

    def _lock(self, workspace: str, source: str, scope: str) -> None:
        """Hold this stream's lock to the end of the transaction (every change reads the stream first)."""
        if self.locking:
            self.dialect.lock(self.conn, "metergraph-import-sync", f"{workspace}\x1f{source}\x1f{scope}")

    def stream(self, workspace: str, source: str, scope: str) -> Stream | None:
        self._lock(workspace, source, scope)
        p = self.dialect.p
        row = self.conn.execute(
            "SELECT workspace, source, scope, seed_ms, checkpoint_ms, checkpoint_version, completed_ms, lease_id"
            f" FROM import_sync_streams WHERE workspace = {p} AND source = {p} AND scope = {p}",
            (workspace, source, scope),
        ).fetchone()
        return None if row is None else Stream(*row)

    def lease(self, workspace: str, lease_id: str) -> Lease | None:
        lease = self._lease(workspace, lease_id)
        if lease is None or not (self.locking and self.dialect.scoped_locks):
            return lease
        # The stream's lock first, then the lease as it stands under it (one lock order everywhere).
        self._lock(lease.workspace, lease.source, lease.scope)
        return self._lease(workspace, lease_id)

    def _lease(self, workspace: str, lease_id: str) -> Lease | None:
        row = self.conn.execute(
            "SELECT lease_id, workspace, source, scope, window_start_ms, window_end_ms, checkpoint_version,"
            " acquired_ms, expires_ms, status, ended_ms FROM import_sync_leases"
            f" WHERE lease_id = {self.dialect.p} AND workspace = {self.dialect.p}",
            (lease_id, workspace),
        ).fetchone()
        return None if row is None else Lease(*row)

    def start(self, lease: Lease) -> None:
        """Record a new active lease and make it the stream's holder (a new stream starts at the lease's
        window)."""
        d = self.dialect
        self.conn.execute(
            "INSERT INTO import_sync_streams (workspace, source, scope, seed_ms, checkpoint_version, lease_id)"
            f" VALUES ({d.marks(4)}, 0, {d.p})"
            " ON CONFLICT (workspace, source, scope) DO UPDATE SET lease_id = excluded.lease_id",
            (lease.workspace, lease.source, lease.scope, lease.window_start_ms, lease.lease_id),
        )
        self.conn.execute(
            f"INSERT INTO import_sync_leases VALUES ({d.marks(11)})",
            (lease.lease_id, lease.workspace, lease.source, lease.scope, lease.window_start_ms,
             lease.window_end_ms, lease.checkpoint_version, lease.acquired_ms, lease.expires_ms, "active", None),
        )  # fmt: skip

    def end(self, lease: Lease, status: str, now_ms: int) -> None:
        """An active lease ends (completed, abandoned, expired): the stream has no holder afterwards."""
        p = self.dialect.p
        self.conn.execute(
            f"UPDATE import_sync_leases SET status = {p}, ended_ms = {p} WHERE lease_id = {p} AND status = 'active'",
            (status, now_ms, lease.lease_id),
        )
        self.conn.execute(
            "UPDATE import_sync_streams SET lease_id = NULL"
            f" WHERE workspace = {p} AND source = {p} AND scope = {p} AND lease_id = {p}",
            (lease.workspace, lease.source, lease.scope, lease.lease_id),
        )

    def extend(self, lease: Lease, expires_ms: int) -> None:
        p = self.dialect.p
        self.conn.execute(
            f"UPDATE import_sync_leases SET expires_ms = {p} WHERE lease_id = {p}",
            (expires_ms, lease.lease_id),
        )

    def advance(self, lease: Lease, now_ms: int) -> None:
        """The stream's checkpoint moves to the end of the lease's window, one version on."""
        p = self.dialect.p
        self.conn.execute(
            f"UPDATE import_sync_streams SET checkpoint_ms = {p}, checkpoint_version = checkpoint_version + 1,"
            f" completed_ms = {p} WHERE workspace = {p} AND source = {p} AND scope = {p}",
            (lease.window_end_ms, now_ms, lease.workspace, lease.source, lease.scope),
        )


class ImportSyncStore(Protocol):
    """Import-sync streams and leases of one engine."""

    def transaction(self) -> AbstractContextManager[StreamTx]: ...
    def stream(self, workspace: str, source: str, scope: str) -> tuple[Stream | None, Lease | None]: ...


class _ImportSyncSql:
    dialect: Dialect
    db: Database | NativeDatabase

    @contextmanager
    def transaction(self) -> Iterator[StreamTx]:
        """A write transaction: what the service reads in it cannot change before it commits."""
        with self.db.transaction() as conn:
            yield StreamTx(conn, self.dialect)

    def stream(self, workspace: str, source: str, scope: str) -> tuple[Stream | None, Lease | None]:
        """A stream and its holder's lease (maybe expired), read outside any write."""
        tx = StreamTx(self.db.conn, self.dialect, locking=False)
        stream = tx.stream(workspace, source, scope)
        lease = tx.lease(workspace, stream.lease_id) if stream is not None and stream.lease_id else None
        return stream, lease


class SqliteImportSyncStore(_ImportSyncSql):
    """Streams and leases in the SQLite metadata file, with their own migrations."""

    dialect = SQLITE

    def __init__(self, db: Database) -> None:
        self.db = db
        db.migrate(COMPONENT, sqlite_control_schema.IMPORT_SYNC)


class PostgresImportSyncStore(_ImportSyncSql):
    """Streams and leases in Metergraph's PostgreSQL schema, shared by every worker of every machine."""

    dialect = POSTGRES

    def __init__(self, db: NativeDatabase) -> None:
        self.db = db
        db.migrate(COMPONENT, pg_schema.IMPORT_SYNC)
