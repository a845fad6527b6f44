"""The ClickHouse engine's connection: the URL, the client, the schema created or upgraded once per
server, and connection failures as ``StorageUnavailable`` (ingest answers 503 + Retry-After)."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from triptych.core.errors import StorageUnavailable
from triptych.metergraph.call_model import DEFAULT_RETENTION_DAYS
from triptych.metergraph.clickhouse_schema import ADDED_COLUMNS, BACKFILLED, statements, ttl_statements
from triptych.metergraph.clickhouse_version import refuse_if_too_old

if TYPE_CHECKING:
    from triptych.core.pg import PgDatabase

DEFAULT_DATABASE = "metergraph"


def parse_url(url: str) -> dict[str, Any]:
    """``http[s]://[user[:password]@]host[:port][/database][?compress=lz4]`` as client arguments."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL must look like http://user:password@host:8123/database"
        )
    options = dict(parse_qsl(parts.query))
    return {
        "host": parts.hostname,
        "port": parts.port or (8443 if parts.scheme == "https" else 8123),
        "secure": parts.scheme == "https",
        "username": unquote(parts.username or "default"),
        "password": unquote(parts.password or ""),
        "database": parts.path.strip("/") or DEFAULT_DATABASE,
        "compress": options.get("compress", "") or False,
    }


# Next to the metadata database: the workers of one server share its data directory.
SCHEMA_LOCK = "metergraph.clickhouse-schema.lock"


@contextmanager
def _schema_lock(lock_dir: Path, shared: PgDatabase | None) -> Iterator[None]:
    """Held while a store creates or upgrades the ClickHouse schema, released when the process dies. In
    server mode a session advisory lock of the shared PostgreSQL database, so one process of every
    machine at a time (a file of one data directory holds only that machine's workers: two machines
    upgrading at once both backfilled, counting the stored calls twice; decision record 0202); else a
    file lock in the data directory."""
    if shared is not None:
        with shared.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (SCHEMA_LOCK,))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (SCHEMA_LOCK,))
        return
    with (lock_dir / SCHEMA_LOCK).open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class ClickHouseConnection:
    """One ClickHouse database with Metergraph's schema (``clickhouse_schema.py``) in it. ``lock_dir`` is
    the data directory the workers of one server share (the schema lock's file lives there); ``shared``,
    the PostgreSQL database of server mode, whose advisory lock replaces the file across machines."""

    def __init__(
        self, url: str, lock_dir: Path, retention_days: int | None = None, shared: PgDatabase | None = None
    ) -> None:
        try:
            import clickhouse_connect
            import clickhouse_connect.driver.exceptions
        except ImportError:  # pragma: no cover - the extra is installed wherever tests run
            raise StorageUnavailable(
                "the ClickHouse engine needs clickhouse-connect: pip install 'triptych[clickhouse]'",
                details={"reason": "clickhouse_client_missing"},
            ) from None
        # The tables' TTL: the setting, or ten years (a TTL needs a number).
        self.retention_days: int | None = retention_days or DEFAULT_RETENTION_DAYS
        self.data_error: type[Exception] = clickhouse_connect.driver.exceptions.DataError
        self._unreachable: type[Exception] = clickhouse_connect.driver.exceptions.OperationalError
        options = parse_url(url)
        database = options.pop("database")
        version = refuse_if_too_old(options)
        try:
            admin = clickhouse_connect.get_client(**options, autogenerate_session_id=False)
            admin.command(f"CREATE DATABASE IF NOT EXISTS `{database.replace('`', '')}`")
            admin.close()
            # No session: a client without one may run queries from several threads at once.
            self.client = clickhouse_connect.get_client(
                **options, database=database, autogenerate_session_id=False
            )
            # One process at a time (``serve --workers N`` opens N stores at once, several machines too):
            # the second finds the tables there and backfills nothing, so an upgrade never counts the
            # stored calls twice.
            with _schema_lock(lock_dir, shared):
                # A new database has no calls to backfill from: the views feed its tables from the start.
                new = not self.exists("calls")
                missing = [] if new else [table for table in BACKFILLED if not self.exists(table)]
                calls: set[str] | None = None  # the calls table's columns, read once it exists
                for statement in statements(self.retention_days):
                    column = ADDED_COLUMNS.get(statement)
                    if column is not None:
                        calls = self.column_names("calls") if calls is None else calls
                        if column in calls:
                            continue
                    self.client.command(statement)
                # Tables created with another retention take this one (metadata only: merges expire).
                for statement in ttl_statements(self.retention_days):
                    self.client.command(statement, settings={"materialize_ttl_after_modify": 0})
                for table in missing:
                    # A database from before this table: its view feeds it from now on, the calls
                    # already stored go in once (upgrade with ingest paused: a batch in flight may count
                    # twice).
                    self.client.command(f"INSERT INTO {table} {BACKFILLED[table]()}")
        except Exception as exc:
            raise StorageUnavailable(
                f"ClickHouse{' ' + version if version else ''} at {options['host']}:{options['port']} is not"
                f" reachable or refused the schema: {exc}",
                hint="check TRIPTYCH_METERGRAPH_CLICKHOUSE_URL and that the server is up",
                details={"reason": "clickhouse_unavailable"},
            ) from exc
        self.insert_options = insert_settings(self.client.server_settings)

    def exists(self, table: str) -> bool:
        return bool(self.client.command("EXISTS TABLE {t:Identifier}", parameters={"t": table}))

    def column_names(self, table: str) -> set[str]:
        rows = self.client.query(
            "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {t:String}",
            parameters={"t": table},
        ).result_rows
        return {str(row[0]) for row in rows}

    # -- the client, with connection failures as StorageUnavailable (ingest answers 503 + Retry-After) ----

    def unavailable(self, exc: Exception) -> StorageUnavailable:
        return StorageUnavailable(
            f"ClickHouse did not answer: {exc}",
            hint="check that the ClickHouse server is up; ingest clients retry the batch later",
            details={"reason": "clickhouse_unavailable"},
        )

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        try:
            return self.client.query(sql, parameters=parameters)
        except self._unreachable as exc:
            raise self.unavailable(exc) from exc

    def insert(self, table: str, data: Any, **options: Any) -> None:
        try:
            self.client.insert(table, data, **options)
        except self._unreachable as exc:
            raise self.unavailable(exc) from exc

    def command(self, sql: str) -> None:
        try:
            self.client.command(sql)
        except self._unreachable as exc:
            raise self.unavailable(exc) from exc

    def rebuild_rollups(self) -> None:
        """Recompute every rollup from the raw calls (operators; the views keep them current)."""
        for table in BACKFILLED:
            self.command(f"TRUNCATE TABLE {table}")
        for table, select in BACKFILLED.items():
            self.command(f"INSERT INTO {table} {select()}")

    def close(self) -> None:
        self.client.close()

    def rows(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        result = self.query(sql, parameters=params)
        names = result.column_names
        return [dict(zip(names, row, strict=True)) for row in result.result_rows]


def insert_settings(server: Mapping[str, Any]) -> dict[str, int]:
    """The settings each ``calls`` INSERT asks for, given the server's ``system.settings``.

    Async inserts let the server gather inserts that arrive together from every worker into one INSERT
    (the group commit of ``clickhouse_inserts`` gathers only one worker's), and waiting for them is what
    keeps an acknowledged row safe. A setting the server's profile makes read-only cannot be asked for
    (the client refuses the INSERT): with ``async_insert`` locked off, or ``wait_for_async_insert`` locked
    off, inserts are plain (the worker's group commit alone); async inserts locked on without the wait
    would acknowledge rows the server still holds only in memory, so that server is refused.
    """
    asynchronous, wait = server.get("async_insert"), server.get("wait_for_async_insert")
    if asynchronous is None or wait is None:  # a server from before async inserts
        return {}
    on = asynchronous.value == "1" if asynchronous.readonly else True
    waits = wait.value == "1" if wait.readonly else True
    if on and not waits:
        if asynchronous.readonly:
            raise StorageUnavailable(
                "ClickHouse's settings profile locks async_insert on and wait_for_async_insert off: an"
                " acknowledged batch could be lost in the server's buffer",
                hint="let this user change wait_for_async_insert (or lock it to 1) in the server's profile",
                details={"reason": "clickhouse_unsafe_settings"},
            )
        return {}  # plain inserts: the wait cannot be asked for
    if not on:
        return {}
    settings: dict[str, int] = {}
    if not asynchronous.readonly:
        settings["async_insert"] = 1
    if not wait.readonly:
        settings["wait_for_async_insert"] = 1
    return settings
