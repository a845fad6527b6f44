"""``triptych migrate --to/--from`` for Metergraph's control data: incidents, webhook endpoints and
deliveries, reports and analysis runs, workloads and classification runs, import-sync streams and leases,
and the metadata store's workspaces, keys, SDK sessions, routes, ingest batch records and import
identities (record 0091), between the data directory's SQLite files and the PostgreSQL database's
``metergraph`` schema (decision record 0160). Each direction is all or nothing, and refuses a target that
already holds Metergraph control data. The calls are not copied (they stay in the data directory's file,
or in ClickHouse).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from psycopg import Connection, sql

from triptych.core.db import Database
from triptych.core.errors import Invalid
from triptych.core.pg import NativeDatabase, one, redacted
from triptych.core.transfer import Copied, Progress, remove_database, snapshot
from triptych.metergraph.control_pg import close_control_database, open_control_database, schema_url
from triptych.metergraph.control_stores import ANALYSIS_FILE
from triptych.metergraph.import_sync_store import PostgresImportSyncStore, SqliteImportSyncStore
from triptych.metergraph.incident_store import PostgresIncidentStore, SqliteIncidentStore
from triptych.metergraph.incidents import DB_FILE as INCIDENTS_FILE
from triptych.metergraph.metadata_store import SqliteMetadataStore
from triptych.metergraph.postgres_metadata_store import PostgresMetadataStore
from triptych.metergraph.report_store import PostgresReportStore, SqliteReportStore
from triptych.metergraph.sqlite_schema import open_database
from triptych.metergraph.webhook_store import PostgresWebhookStore, SqliteWebhookStore
from triptych.metergraph.workload_store import PostgresWorkloadStore, SqliteWorkloadStore

BATCH = 1_000
METADATA_FILE = "metergraph.db"  # the metadata store's file, where workloads and import sync live too
# The metadata store's tables (its call-id sequence, one row, is carried apart: ``_carry_call_ids``).
METADATA_TABLES = ("workspaces", "keys", "sessions", "routes", "ingest_batches", "import_events")
# Each SQLite file's control tables, in copy order.
FILES: dict[str, tuple[str, ...]] = {
    INCIDENTS_FILE: ("incidents", "incident_cursors", "webhook_endpoints", "webhook_deliveries"),
    ANALYSIS_FILE: ("reports", "analysis_runs"),
    METADATA_FILE: (
        "workloads",
        "classification_runs",
        "import_sync_streams",
        "import_sync_leases",
        *METADATA_TABLES,
    ),
}
TABLES = tuple(t for tables in FILES.values() for t in tables)
# Identity columns on PostgreSQL copied as they are: their sequence moves on. (``keys.seq``, PostgreSQL's
# alone, numbers the copied keys in their SQLite order.)
IDENTITIES = {"webhook_deliveries": "seq", "ingest_batches": "id"}
HELD = "SELECT " + " OR ".join(f"EXISTS (SELECT 1 FROM {t})" for t in TABLES)


def _summary(rows: Mapping[str, int]) -> str:
    names = ("incidents", "webhook_endpoints", "reports", "analysis_runs", "workloads", "import_sync_streams",
             "keys", "routes")  # fmt: skip
    counts = ", ".join(f"{rows.get(t, 0)} {t}" for t in names)
    return f"Metergraph's control data: {counts} (and {len(rows)} tables in all)"


def _open_sqlite(stack: ExitStack, data_dir: Path, name: str) -> Database:
    """One of the data directory's files, brought to the current schema of its control components."""
    path = data_dir / name
    if name == INCIDENTS_FILE:
        incidents = SqliteIncidentStore(path)
        stack.callback(incidents.close)
        SqliteWebhookStore(incidents.db)
        return incidents.db
    if name == ANALYSIS_FILE:
        reports = SqliteReportStore(path)
        stack.callback(reports.close)
        return reports.db
    db = open_database(path)
    stack.callback(db.close)
    SqliteMetadataStore(db)
    SqliteWorkloadStore(db)
    SqliteImportSyncStore(db)
    return db


def _migrate_postgres(db: NativeDatabase) -> None:
    PostgresIncidentStore(db)
    PostgresWebhookStore(db)
    PostgresReportStore(db)
    PostgresWorkloadStore(db)
    PostgresImportSyncStore(db)
    PostgresMetadataStore(db)


def _call_ids(conn: Any) -> int | None:
    """The next ClickHouse call id a file or database hands out (None: the sequence never moved)."""
    row = conn.execute("SELECT next_id FROM clickhouse_call_ids").fetchone()
    return None if row is None else int(row[0])


def holds_data(data_dir: Path) -> bool:
    """Whether the data directory holds Metergraph control data to copy (read only)."""
    for name, tables in FILES.items():
        path = data_dir / name
        if not path.is_file():
            continue
        try:
            with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
                present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if any(
                    conn.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchone()[0]
                    for t in tables
                    if t in present
                ):
                    return True
        except sqlite3.Error:
            return True  # an odd file: the copy itself says what is wrong with it
    return False


def migrate_to_postgres(data_dir: Path, url: str, progress: Progress) -> Copied:
    """Copy the data directory's control tables into ``url``'s ``metergraph`` schema; all or nothing."""
    copied = Copied(redacted(url), _summary)
    with ExitStack() as stack:
        target = open_control_database(url)
        stack.callback(close_control_database, target)
        _migrate_postgres(target)
        sources = {name: _open_sqlite(stack, data_dir, name) for name in FILES if (data_dir / name).is_file()}
        with target.pg.transaction() as conn:
            if one(conn.execute(HELD.encode()).fetchone())[0]:
                raise Invalid(
                    f"The PostgreSQL database {redacted(url)} already holds Metergraph control data:"
                    " nothing was copied",
                    hint="Migrate into an empty database (createdb a new one)",
                )
            for name, tables in FILES.items():
                source = sources.get(name)
                for table in tables:
                    if source is not None:
                        _copy(source.conn, conn, table, progress, copied)
            # ClickHouse's call ids go on from the file's (the calls keep theirs).
            moved = _call_ids(sources[METADATA_FILE].conn) if METADATA_FILE in sources else None
            if moved is not None:
                conn.execute("UPDATE clickhouse_call_ids SET next_id = greatest(next_id, %s)", (moved,))
    return copied


def _columns(conn: Connection[Any], table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def _copy(
    source: sqlite3.Connection, conn: Connection[Any], table: str, progress: Progress, copied: Copied
) -> None:
    have = {r[1] for r in source.execute(f"PRAGMA table_info({table})").fetchall()}
    columns = [c for c in _columns(conn, table) if c in have]  # keys.seq is PostgreSQL's alone
    total = int(source.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    advance = progress(table, total)
    identity = IDENTITIES.get(table)
    insert = sql.SQL("INSERT INTO {} ({}) {} VALUES ({})").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL("OVERRIDING SYSTEM VALUE" if identity else ""),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
    )
    cursor = source.execute(f"SELECT {', '.join(columns)} FROM {table}")
    with conn.cursor() as out:
        while batch := cursor.fetchmany(BATCH):
            out.executemany(insert, [tuple(row) for row in batch])
            advance(len(batch))
    if identity is not None:  # the next id after the copied ones
        conn.execute(
            sql.SQL(
                "SELECT setval(pg_get_serial_sequence({}, {}), coalesce(max({}), 0) + 1, false) FROM {}"
            ).format(
                sql.Literal(table), sql.Literal(identity), sql.Identifier(identity), sql.Identifier(table)
            )
        )
    copied.rows[table] = total


# -- the way back: PostgreSQL -> the data directory's files ----------------------------------------------


def holds_postgres_data(url: str) -> bool:
    """Whether ``url``'s ``metergraph`` schema holds control data to bring back."""
    try:
        with snapshot(schema_url(url)) as conn:
            if not set(TABLES) <= _tables(conn):
                return False
            return bool(one(conn.execute(HELD.encode()).fetchone())[0])
    except Exception:  # noqa: BLE001 - an unreachable or odd database: the copy itself says what is wrong
        return True


def _tables(conn: Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    return {str(r[0]) for r in rows}


def migrate_to_embedded(url: str, data_dir: Path, progress: Progress) -> Copied:
    """Copy ``url``'s Metergraph control data into the data directory's files (which must hold none); all
    or nothing, and a file this call created is removed again on failure."""
    created = [name for name in FILES if not (data_dir / name).exists()]
    copied = Copied(str(data_dir), _summary)
    # One snapshot for every table: rows written meanwhile by a running server are all in or all out.
    with snapshot(schema_url(url)) as conn:
        if not set(TABLES) <= _tables(conn):
            raise Invalid(
                f"The PostgreSQL database {redacted(url)} holds no Metergraph control data (no schema"
                " metergraph): nothing was copied",
                hint="Check the URL: it should name the database a server-mode triptych used",
            )
        try:
            with ExitStack() as stack:
                targets = {name: _open_sqlite(stack, data_dir, name) for name in FILES}
                for name, tables in FILES.items():
                    out = targets[name].conn
                    if any(out.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchone()[0] for t in tables):
                        raise Invalid(
                            f"The data directory {data_dir} already holds Metergraph control data: nothing was"
                            f" copied from {redacted(url)}",
                            hint="Pass a new, empty data directory with --data-dir",
                        )
                # Each file's rows commit together; a later file's failure removes the files created here.
                for name, tables in FILES.items():
                    with targets[name].transaction() as out:
                        for table in tables:
                            _copy_back(conn, out, table, progress, copied)
                        if name == METADATA_FILE:
                            out.execute("DELETE FROM clickhouse_call_ids")
                            out.execute("INSERT INTO clickhouse_call_ids VALUES (?)", (_call_ids(conn),))
        except BaseException:
            for name in created:
                remove_database(data_dir / name)
            raise
    return copied


def _copy_back(
    conn: Connection[Any], out: sqlite3.Connection, table: str, progress: Progress, copied: Copied
) -> None:
    have = {r[1] for r in out.execute(f"PRAGMA table_info({table})").fetchall()}
    columns = [c for c in _columns(conn, table) if c in have]
    total = int(
        one(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone())[0]
    )
    advance = progress(table, total)
    select = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table)
    )
    insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
    with conn.cursor(name=f"migrate_{table}") as cursor:
        cursor.execute(select)
        while batch := cursor.fetchmany(BATCH):
            out.executemany(
                insert, [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in batch]
            )
            advance(len(batch))
    copied.rows[table] = total
