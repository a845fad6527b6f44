"""SQLite databases: one file per surface in the data directory, WAL mode, versioned migrations.

Connections are per thread (services run blocking work in worker threads); ``transaction()`` is the
only way to write, so the writes of one call commit together or not at all.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from triptych.core.errors import StorageUnavailable

Migration = str  # one SQL script; its position in the list is its version
log = logging.getLogger(__name__)
# With background checkpoints, a connection checkpoints by itself only past this many WAL pages (40 MB):
# a bound in case the checkpoint thread falls behind.
FALLBACK_AUTOCHECKPOINT = 10_000
# Commits between two background checkpoints. Waking it after every commit cost a memory write 1.2 ms
# at p50 (the checkpoint's sync competes with the next request); a few dozen small commits fill a few
# hundred WAL pages, under SQLite's own threshold of 1,000.
CHECKPOINT_EVERY = 32


class Checkpointer:
    """Copies the WAL back into the database in a background thread, woken every few commits.

    With SQLite's default autocheckpoint (every 1,000 pages) the committing connection copies the WAL
    back and syncs the database file inside COMMIT: one write in a few dozen pays tens of milliseconds
    for all of them (a ``memory_store`` every ~35 writes: 80 ms instead of 20). Connections that
    check point only past ``FALLBACK_AUTOCHECKPOINT`` pages wake this thread instead: a PASSIVE
    checkpoint never blocks writers or readers, and runs in C with the GIL released. Durability is
    unchanged: the WAL itself is what a commit syncs (or not), as before.
    """

    def __init__(self, db: Database, name: str) -> None:
        self._db = db
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:
                log.warning("background WAL checkpoint of %s failed", self._db.path, exc_info=True)

    def close(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()


class Database:
    """One SQLite file. Several stores may share it, each with its own ``component`` and migrations."""

    def __init__(
        self,
        path: Path,
        migrations: Sequence[Migration],
        component: str = "main",
        synchronous: str = "NORMAL",
        background_checkpoints: bool = False,
        checkpoint_every: int = CHECKPOINT_EVERY,
    ) -> None:
        self.path = path
        # NORMAL survives a crash of the process; FULL also of the machine (the WAL is synced at
        # every commit), for stores whose acknowledgement promises durability.
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[tuple[threading.Thread, sqlite3.Connection]] = []  # each with the thread it serves
        self._all_lock = threading.Lock()
        # Threads a close left their connections to (see ``close``), until they end.
        self._spared: set[threading.Thread] = set()
        path.parent.mkdir(parents=True, exist_ok=True)
        # Every ``checkpoint_every`` commits wake the checkpoint thread; the connections' own
        # autocheckpoint is a fallback.
        self._checkpointer = Checkpointer(self, f"checkpoint-{path.stem}") if background_checkpoints else None
        self._checkpoint_every = checkpoint_every
        self._commits = 0  # counted loosely across threads: it only paces the checkpoints
        self.migrate(component, migrations)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA cache_size=-65536")
        if self._checkpointer is not None:
            conn.execute(f"PRAGMA wal_autocheckpoint={FALLBACK_AUTOCHECKPOINT}")
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._all_lock:
                self._all.append((threading.current_thread(), conn))
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception: never half-written."""
        try:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite itself rolls back after a full disk or an I/O error
                    conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            storage = storage_failure(exc, self.path.parent)
            if storage is None:
                raise
            raise storage from exc
        if self._checkpointer is not None:
            self._commits += 1
            if self._commits % self._checkpoint_every == 0:
                self._checkpointer.poke()

    def migrate(self, component: str, migrations: Sequence[Migration]) -> None:
        """Apply the component's migrations not yet applied, each in its own transaction."""
        with self.transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version"
                " (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            conn.execute("INSERT OR IGNORE INTO schema_version VALUES (?, 0)", (component,))
        query = "SELECT version FROM schema_version WHERE component = ?"
        current = int(self.conn.execute(query, (component,)).fetchone()[0])
        for version, script in enumerate(migrations[current:], start=current + 1):
            with self.transaction() as conn:
                # Read again under the write lock: another process opening the same file at the same
                # time (two server workers) may have applied this one since the read above.
                if int(conn.execute(query, (component,)).fetchone()[0]) >= version:
                    continue
                for statement in _statements(script):
                    conn.execute(statement)
                update = "UPDATE schema_version SET version = ? WHERE component = ?"
                conn.execute(update, (version, component))

    def close(self, spare: Collection[threading.Thread] = ()) -> None:
        """Close every thread's connection but those of the threads in ``spare``: threads that may be
        inside a query now (a store's background work that did not stop in time). Closing a connection
        under a query another thread runs on it crashes the interpreter (CPython's sqlite3 reads the
        closed handle); a spared connection is closed when its thread lets go of it.

        A thread stays spared by later closes while it runs: several stores share one file and each
        closes it, and a spared thread that goes on to its next query opens a connection again."""
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._all_lock:
            self._spared = {thread for thread in (*self._spared, *spare) if thread.is_alive()}
            for thread, conn in self._all:
                if thread in self._spared:
                    log.warning(
                        "left the connection of %s to %s open: it may be in a query", thread.name, self.path
                    )
                    continue
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
        self._local = threading.local()


_SQLITE_CAUSES = (
    ("database or disk is full", "disk_full"),
    ("readonly database", "read_only"),
    ("disk i/o error", "io_error"),
    ("unable to open database file", "read_only"),
)
_ERRNO_CAUSES = {errno.ENOSPC: "disk_full", errno.EDQUOT: "disk_full", errno.EROFS: "read_only",
                 errno.EACCES: "read_only", errno.EPERM: "read_only", errno.EIO: "io_error"}  # fmt: skip
_WHAT_TO_DO = {
    "disk_full": ("The disk holding the data directory {dir} is full: nothing was written",
                  "Free space on that disk (or point TRIPTYCH_DATA_DIR at a bigger one), then retry; reads keep working"),
    "read_only": ("The data directory {dir} is read-only or not writable by the server: nothing was written",
                  "Remount it read-write or give the server's user write access to it, then retry; reads keep working"),
    "io_error": ("Writing to the data directory {dir} failed with a disk I/O error: nothing was written",
                 "Check that disk (full, read-only or failing) and the server log, then retry; reads keep working"),
}  # fmt: skip


def storage_failure(exc: BaseException, data_dir: Path) -> StorageUnavailable | None:
    """A ``StorageUnavailable`` naming the folder and what to do, if ``exc`` is a full, read-only or
    failing disk; None for any other error."""
    reason: str | None = None
    if isinstance(exc, OSError):
        reason = _ERRNO_CAUSES.get(exc.errno or 0)
    elif isinstance(exc, sqlite3.Error):
        text = str(exc).lower()
        reason = next((cause for needle, cause in _SQLITE_CAUSES if needle in text), None)
    if reason is None:
        return None
    message, hint = _WHAT_TO_DO[reason]
    return StorageUnavailable(
        message.format(dir=data_dir), hint=hint, details={"reason": reason, "data_dir": str(data_dir)}
    )


def check_writable(data_dir: Path) -> None:
    """Create the data directory and a probe file in it, or raise ``StorageUnavailable`` saying why."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        failure = storage_failure(exc, data_dir)
        if failure is None:
            raise StorageUnavailable(
                f"The data directory {data_dir} cannot be written ({exc.strerror or exc})",
                hint="Point TRIPTYCH_DATA_DIR at a writable folder, then retry",
                details={"reason": "io_error", "data_dir": str(data_dir)},
            ) from exc
        raise failure from exc


def _statements(script: str) -> list[str]:
    # executescript() would COMMIT our transaction; split on complete statements instead.
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
