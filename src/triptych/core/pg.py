"""PostgreSQL databases (server mode): a connection pool, pgvector, and versioned migrations.

The server-mode twin of ``core.db``: stores take a ``PgDatabase`` and write only through
``transaction()``, so the writes of one call commit together or not at all. Several workers may start
at once on one database: migrations run under an advisory lock, so exactly one of them applies each
version and the others find it applied.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from triptych.core.errors import StorageUnavailable

Migration = str  # one SQL script; its position in the list is its version
log = logging.getLogger(__name__)
# One advisory lock for every component's migrations (and the extension): they are short and rare.
MIGRATION_LOCK = 0x7472_6970_7479  # "tripty"


def one(row: TupleRow | None) -> TupleRow:
    """The row a statement that always returns one (RETURNING, FOR UPDATE after an upsert) returned."""
    if row is None:
        raise RuntimeError("the statement returned no row")
    return row


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def unavailable(url: str, exc: BaseException) -> StorageUnavailable:
    return StorageUnavailable(
        f"The PostgreSQL database {redacted(url)} cannot be reached or refused the request: nothing was written",
        hint="Check that PostgreSQL is running and TRIPTYCH_DATABASE_URL is right, then retry",
        details={"reason": "database_unavailable", "error": type(exc).__name__},
    )


class PgDatabase:
    """One PostgreSQL database. Several stores share it, each with its own ``component`` and migrations."""

    def __init__(self, url: str, min_size: int = 1, max_size: int = 8, timeout: float = 30.0) -> None:
        self.url = url
        try:
            self._bootstrap()
            self.pool = ConnectionPool(
                url,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                configure=register_vector,
                open=True,
                name="triptych",
            )
            self.pool.wait(timeout=timeout)
        except (psycopg.OperationalError, OSError) as exc:
            raise unavailable(url, exc) from exc

    def _bootstrap(self) -> None:
        """The vector extension, before any pooled connection registers its type."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            # Two workers running CREATE EXTENSION IF NOT EXISTS at once can both miss it and one fail.
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version"
                    " (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
                )
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[TupleRow]]:
        """A pooled connection for reads; its implicit transaction ends when the block does."""
        try:
            with self.pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            raise unavailable(self.url, exc) from exc

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[TupleRow]]:
        """BEGIN ... COMMIT, or ROLLBACK on any exception: never half-written."""
        with self.connection() as conn, conn.transaction():
            yield conn

    def version(self, component: str) -> int:
        with self.connection() as conn:
            row = conn.execute(
                "SELECT version FROM schema_version WHERE component = %s", (component,)
            ).fetchone()
        return int(row[0]) if row else 0

    def migrate(self, component: str, migrations: Sequence[Migration]) -> int:
        """Apply the component's migrations not yet applied, each in its own transaction; returns how many."""
        applied = 0
        with self.connection() as conn:
            conn.commit()
            conn.autocommit = True
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
                try:
                    conn.execute(
                        "INSERT INTO schema_version VALUES (%s, 0) ON CONFLICT DO NOTHING", (component,)
                    )
                    query = "SELECT version FROM schema_version WHERE component = %s"
                    row = conn.execute(query, (component,)).fetchone()
                    current = int(row[0]) if row else 0
                    for version, script in enumerate(migrations[current:], start=current + 1):
                        with conn.transaction():
                            conn.execute(script.encode())  # several statements: the simple protocol
                            update = "UPDATE schema_version SET version = %s WHERE component = %s"
                            conn.execute(update, (version, component))
                        applied += 1
                        log.info("migrated %s to version %d", component, version)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
            finally:
                conn.autocommit = False
        return applied

    def close(self) -> None:
        self.pool.close()
