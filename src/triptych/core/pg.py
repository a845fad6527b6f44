"""PostgreSQL databases (server mode): a connection pool, pgvector, and versioned migrations.

The server-mode twin of ``core.db``: stores take a ``PgDatabase`` and write only through
``transaction()``, so the writes of one call commit together or not at all. Several workers may start
at once on one database: migrations run under an advisory lock, so exactly one of them applies each
version and the others find it applied.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from triptych.core.errors import StorageUnavailable

Migration = str  # one SQL script; its position in the list is its version
log = logging.getLogger(__name__)
# The databases open in this process (for /metrics); a closed one leaves with its last reference.
OPEN: weakref.WeakSet[PgDatabase] = weakref.WeakSet()
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


def pool_use() -> list[tuple[list[str], float]]:
    """Connections of this process's pools by state, and requests waiting for one: for /metrics."""
    totals = {"size": 0, "idle": 0, "waiting": 0}
    for db in list(OPEN):
        stats = db.pool.get_stats()
        totals["size"] += stats.get("pool_size", 0)
        totals["idle"] += stats.get("pool_available", 0)
        totals["waiting"] += stats.get("requests_waiting", 0)
    return [([state], float(n)) for state, n in totals.items()]


def ensure_extension(conn: psycopg.Connection[TupleRow], url: str, name: str) -> None:
    """``CREATE EXTENSION IF NOT EXISTS name``, or ``StorageUnavailable`` saying in one line what to run
    when the server lacks the extension or the user may not create it (pgvector needs a superuser
    once): a newcomer got a 30-line traceback from both."""
    try:
        conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{name}"'.encode())
        return
    except psycopg.errors.InsufficientPrivilege as exc:
        error: psycopg.Error = exc
        message = (
            f"The PostgreSQL database {redacted(url)} has no {name} extension yet, and its user"
            f" {conn.info.user!r} may not create it (CREATE EXTENSION {name} needs a superuser once)"
        )
        hint = f'Run once as a superuser: psql -d {conn.info.dbname} -c "CREATE EXTENSION {name}"'
        hint, reason = hint + " (e.g. sudo -u postgres psql ...)", "extension_needs_superuser"
    except (psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as exc:
        # "extension is not available" (PostgreSQL 15+) or "could not open extension control file"
        error = exc
        first = str(exc).splitlines()[0]
        message = f"The PostgreSQL server of {redacted(url)} has no {name} extension installed ({first})"
        hint = f"Install {EXTENSION_PACKAGES.get(name, name)} on the database server (README: Server mode)"
        reason = "extension_missing"
    raise StorageUnavailable(
        message + ": nothing was written",
        hint=hint + ", then start triptych again",
        details={"reason": reason, "extension": name},
    ) from error


# What to install for an extension the server lacks, as the README names it.
EXTENSION_PACKAGES = {"vector": "pgvector"}


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
                # Autocommit: a read is one round trip, with no COMMIT or ROLLBACK after it (about 2 ms
                # of 2.8 per statement on a busy machine here); writes BEGIN in ``transaction()``.
                kwargs={"autocommit": True},
                open=True,
                name="triptych",
            )
            self.pool.wait(timeout=timeout)
        except (psycopg.OperationalError, OSError) as exc:
            raise unavailable(url, exc) from exc
        OPEN.add(self)

    def _bootstrap(self) -> None:
        """The vector extension, before any pooled connection registers its type."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            # Two workers running CREATE EXTENSION IF NOT EXISTS at once can both miss it and one fail.
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                ensure_extension(conn, self.url, "vector")
                try:
                    conn.execute(
                        "CREATE TABLE IF NOT EXISTS schema_version"
                        " (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
                    )
                except psycopg.errors.InsufficientPrivilege as exc:
                    # PostgreSQL 15+: only the database's owner may create tables in ``public``.
                    user, database = conn.info.user, conn.info.dbname
                    raise StorageUnavailable(
                        f"The PostgreSQL user {user!r} may not create tables in {redacted(self.url)}:"
                        " nothing was written",
                        hint=f'Run once as a superuser: psql -d {database} -c "GRANT CREATE ON SCHEMA public TO'
                        f" {user}\" (or make {user!r} the database's owner), then start triptych again",
                        details={"reason": "cannot_create_tables"},
                    ) from exc
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[TupleRow]]:
        """A pooled connection in autocommit mode: each statement commits by itself."""
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
        # The pool's connections autocommit: this session lock spans the transactions below.
        with self.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                conn.execute("INSERT INTO schema_version VALUES (%s, 0) ON CONFLICT DO NOTHING", (component,))
                row = conn.execute("SELECT version FROM schema_version WHERE component = %s", (component,))
                current = int(one(row.fetchone())[0])
                for version, script in enumerate(migrations[current:], start=current + 1):
                    with conn.transaction():
                        conn.execute(script.encode())  # several statements: the simple protocol
                        update = "UPDATE schema_version SET version = %s WHERE component = %s"
                        conn.execute(update, (version, component))
                    applied += 1
                    log.info("migrated %s to version %d", component, version)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        return applied

    @contextmanager
    def lease(self, name: str) -> Iterator[bool]:
        """Whether this process holds the named lease for the block: True in at most one process (of any
        worker on the database) at a time, False at once elsewhere. A session advisory lock, so a worker
        that dies mid-job releases it with its connection."""
        with self.connection() as conn:
            held = bool(one(conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (name,)).fetchone())[0])
            try:
                yield held
            finally:
                if held:
                    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))

    def close(self) -> None:
        OPEN.discard(self)
        self.pool.close()


# -- a store's handle: statements on a thread's transaction or a pooled connection, rows by name ------------


class Row(tuple[Any, ...]):
    """A result row readable by position and by column name, as ``sqlite3.Row`` is (``dict(row)`` too)."""

    __slots__ = ()
    _names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


_ROW_TYPES: dict[tuple[str, ...], type[Row]] = {}


def named_rows(cursor: Any) -> Any:
    """psycopg's row factory of ``Row``s (pass it to ``cursor(row_factory=...)``)."""
    columns = tuple(column.name for column in cursor.description or ())
    row_type = _ROW_TYPES.get(columns)
    if row_type is None:  # one class per distinct column list: a store has a few dozen
        names = {name: i for i, name in enumerate(columns)}
        row_type = _ROW_TYPES.setdefault(columns, type("Row", (Row,), {"__slots__": (), "_names": names}))
    return row_type


class Result:
    """The fetched rows of one statement (statements here are short: fetching at once frees the
    connection for the next)."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class NativeConnection:
    """A store's ``conn``: ``execute(sql, params)`` of statements written for psycopg (``%s`` or
    ``%(name)s`` placeholders, ``%%`` for a literal ``%``), sent as written: nothing rewrites a statement
    on its way (docs/decisions/0290). Rows read by position and by name. Inside the database's
    ``transaction()`` statements run on the transaction's connection; outside, each borrows a pooled
    one."""

    row_factory: Any = None  # accepted and ignored: rows always read both ways

    def __init__(self, db: NativeDatabase) -> None:
        self._db = db

    def cursor(self) -> Self:
        return self

    @property
    def in_transaction(self) -> bool:
        """Inside the database's ``transaction()`` on this thread (``sqlite3.Connection``'s name for it)."""
        return getattr(self._db._local, "conn", None) is not None

    @staticmethod
    def _params(params: Sequence[Any] | Mapping[str, Any]) -> tuple[Any, ...] | Mapping[str, Any]:
        return params if isinstance(params, Mapping) else tuple(params)

    def execute(self, query: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Result:
        def run(conn: psycopg.Connection[Any]) -> Result:
            with conn.cursor(row_factory=named_rows) as cursor:
                cursor.execute(query.encode(), self._params(params))
                rows = cursor.fetchall() if cursor.description is not None else []
                return Result(rows, cursor.rowcount)

        return self._db.run(run)

    def executemany(self, query: str, params: Iterable[Sequence[Any] | Mapping[str, Any]]) -> Result:
        batch = [self._params(p) for p in params]

        def run(conn: psycopg.Connection[Any]) -> Result:
            if not batch:
                return Result([], 0)
            with conn.cursor() as cursor:
                cursor.executemany(query.encode(), batch)
                return Result([], cursor.rowcount)

        return self._db.run(run)


def tenant_keys(tenant: str | Sequence[str]) -> tuple[str, ...]:
    """One tenant or several as the sorted, distinct names their write keys are taken in."""
    return (tenant,) if isinstance(tenant, str) else tuple(sorted(set(tenant)))


class NativeDatabase:
    """A ``PgDatabase`` as a store uses it: ``conn``, ``transaction()`` (with the store's write lock),
    ``batched()`` and ``migrate()``, the shape of ``core.db.Database``. A store's SQL is written for
    PostgreSQL (psycopg's placeholders, from its dialect): nothing is rewritten (docs/decisions/0290)."""

    def __init__(self, pg: PgDatabase, write_lock: str | None = None) -> None:
        self.pg = pg
        # Writers of one store's tenant go one at a time across every worker, as SQLite's single writer
        # does: the store's read-then-write steps (its per-tenant generation counters) rely on it. Writers
        # of different tenants do not wait for each other (``lock_statement``).
        self._write_lock = write_lock
        self._local = threading.local()
        self._conn = NativeConnection(self)

    @property
    def conn(self) -> NativeConnection:
        return self._conn

    def run(self, work: Callable[[psycopg.Connection[Any]], Result]) -> Result:
        current: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if current is not None:
            return work(current)
        with self.pg.connection() as conn:
            return work(conn)

    def lock_statement(self, tenant: str | Sequence[str] | None) -> tuple[bytes, tuple[str, ...]] | None:
        """The statement that takes this store's write lock for a write to ``tenant`` (None: to the
        whole store), or None when the store has no write lock (docs/decisions/0170).

        Two levels, both transaction-scoped: a tenant's write holds the store's key *shared* and the
        (store, tenant) pair exclusively, so writes to two tenants run at once and two writes to one
        tenant queue; a store-wide write holds the store's key exclusively, so it waits for every tenant
        write in progress and they for it. The pair is PostgreSQL's two-``int4`` key space, apart from the
        store's one-``bigint`` key: a hash collision of two tenants only makes them queue.

        No tenant (an empty sequence): the store's key shared only. Several tenants (a write that touches
        two, such as a move between two memories): every pair, in one statement, in a fixed order (sorted
        by name), so two such writes never wait for each other in a circle (docs/decisions/0180)."""
        if self._write_lock is None:
            return None
        if tenant is None:
            return b"SELECT pg_advisory_xact_lock(hashtext(%s))", (self._write_lock,)
        tenants = tenant_keys(tenant)
        if not tenants:  # a write that needs no tenant serialized: it waits only for a store-wide one
            return b"SELECT pg_advisory_xact_lock_shared(hashtext(%s))", (self._write_lock,)
        pairs = ", ".join(["pg_advisory_xact_lock(hashtext(%s), hashtext(%s))"] * len(tenants))
        params = [self._write_lock]
        for name in tenants:
            params += [self._write_lock, name]
        return f"SELECT pg_advisory_xact_lock_shared(hashtext(%s)), {pairs}".encode(), tuple(params)

    def held_tenants(self) -> tuple[str, ...] | None:
        """The tenants whose write keys this thread's transaction holds; None outside one or for a
        store-wide write (which holds them all)."""
        return getattr(self._local, "tenants", None)

    @contextmanager
    def transaction(self, tenant: str | Sequence[str] | None = None) -> Iterator[NativeConnection]:
        """BEGIN ... COMMIT, or ROLLBACK on any exception; this thread's statements join it meanwhile.
        ``tenant``: the tenant (or tenants) the transaction writes to, if it writes to named ones
        (``lock_statement``)."""
        if getattr(self._local, "conn", None) is not None:
            raise RuntimeError("transactions do not nest")
        lock = self.lock_statement(tenant)
        with self.pg.transaction() as conn:
            if lock is not None:
                conn.execute(*lock)
            self._local.conn = conn
            self._local.tenants = None if tenant is None else tenant_keys(tenant)
            try:
                yield self._conn
            finally:
                self._local.conn = None
                self._local.tenants = None

    def batched(
        self, statement: bytes, params: dict[str, Any], tenant: str | Sequence[str] | None = None
    ) -> list[Any]:
        """``statement`` as its own write transaction, with this store's write lock taken first, in one
        round trip: lock and statement go in one pipeline (psycopg pipeline mode) closed by a single
        Sync, which PostgreSQL runs as one implicit transaction (all or nothing); the statement's
        snapshot is taken after the lock is held. Returns the statement's rows. For a write folded into
        one statement, where BEGIN, lock, statement and COMMIT would be four round trips. (A
        simple-protocol message of both measured 0.6 ms slower here: parsed, planned and its
        parameters quoted every time.) ``tenant``: as for ``transaction``."""
        if getattr(self._local, "conn", None) is not None:
            raise RuntimeError("transactions do not nest")
        lock = self.lock_statement(tenant)
        with self.pg.connection() as conn:
            with conn.pipeline():
                if lock is not None:
                    conn.execute(*lock)
                cursor = conn.execute(statement, params)
            return cursor.fetchall()

    def migrate(self, component: str, migrations: Sequence[Migration]) -> int:
        return self.pg.migrate(component, migrations)

    def close(self) -> None:
        """Nothing: the ``PgDatabase`` belongs to whoever opened it (it closes its pool)."""
