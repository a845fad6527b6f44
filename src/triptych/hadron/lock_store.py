"""Memory locks (hadron_lock_memory): at most one holder per memory, with an expiry, kept in the database so
that every worker process sees the same lock. Its own migration component (``hadron-locks``);
``LockStore`` is the engine-neutral interface, ``LockSql`` holds the SQL of both engines,
``SqliteLockStore`` and ``PostgresLockStore`` their schemas.

Acquire and release read and write the row inside one write transaction (SQLite's single writer, the
Hadron advisory lock on PostgreSQL), so two workers racing for one memory never both get it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from triptych.hadron import pg_schema, sqlite_schema, write_keys
from triptych.hadron.dialect import POSTGRES, SQLITE, EngineStore

COMPONENT = "hadron-locks"


@dataclass(frozen=True, slots=True)
class MemoryLock:
    memory_id: str
    holder: str  # the principal's stable key (``HadronCaller.key``)
    locked_by: str  # how the holder reads (its actor URN)
    reason: str | None
    locked_at: str
    expires_at: str


class LockStore(Protocol):
    def lock(self, memory_id: str, now: str) -> MemoryLock | None: ...
    def acquire(self, wanted: MemoryLock, now: str) -> tuple[MemoryLock, bool]: ...
    def release(self, memory_id: str, holder: str | None, now: str) -> bool: ...


_COLUMNS = "memory_id, holder, locked_by, reason, locked_at, expires_at"


class LockSql(EngineStore):
    """The SQL both engines run."""

    def lock(self, memory_id: str, now: str) -> MemoryLock | None:
        """The memory's lock unless it has expired."""
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT {_COLUMNS} FROM memory_locks WHERE memory_id = {p} AND expires_at > {p}",
            (memory_id, now),
        ).fetchone()
        return MemoryLock(*row) if row else None

    def acquire(self, wanted: MemoryLock, now: str) -> tuple[MemoryLock, bool]:
        """Take or renew the lock for ``wanted.holder``; returns (the lock that stands, whether it is theirs).
        A live lock of another holder stands unchanged; an expired one is replaced."""
        p = self.dialect.p
        with self.atomic(write_keys.memory(wanted.memory_id)) as tx:
            row = tx.execute(
                f"SELECT {_COLUMNS} FROM memory_locks WHERE memory_id = {p}", (wanted.memory_id,)
            ).fetchone()
            current = MemoryLock(*row) if row else None
            if current is not None and current.holder != wanted.holder and current.expires_at > now:
                return current, False
            if current is not None and current.holder == wanted.holder and current.expires_at > now:
                wanted = MemoryLock(
                    wanted.memory_id, wanted.holder, wanted.locked_by, wanted.reason, current.locked_at,
                    wanted.expires_at,
                )  # fmt: skip
            tx.execute(f"DELETE FROM memory_locks WHERE memory_id = {p}", (wanted.memory_id,))
            tx.execute(
                f"INSERT INTO memory_locks ({_COLUMNS}) VALUES ({self.dialect.marks(6)})",
                (wanted.memory_id, wanted.holder, wanted.locked_by, wanted.reason, wanted.locked_at,
                 wanted.expires_at),
            )  # fmt: skip
        return wanted, True

    def release(self, memory_id: str, holder: str | None, now: str) -> bool:
        """Remove a live lock (``holder``'s, or anyone's when None); True when one was removed."""
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            if holder is None:
                cursor = tx.execute(
                    f"DELETE FROM memory_locks WHERE memory_id = {p} AND expires_at > {p}", (memory_id, now)
                )
            else:
                cursor = tx.execute(
                    f"DELETE FROM memory_locks WHERE memory_id = {p} AND holder = {p} AND expires_at > {p}",
                    (memory_id, holder, now),
                )
            removed = cursor.rowcount > 0
            # An expired row is nobody's lock: clear it on the way.
            tx.execute(
                f"DELETE FROM memory_locks WHERE memory_id = {p} AND expires_at <= {p}", (memory_id, now)
            )
        return removed


class SqliteLockStore(LockSql):
    dialect = SQLITE
    schema = ((COMPONENT, sqlite_schema.LOCKS),)


class PostgresLockStore(LockSql):
    dialect = POSTGRES
    schema = ((COMPONENT, pg_schema.LOCKS),)
