"""``triptych hadron migrate``: move Hadron's data between the embedded engine and PostgreSQL, both ways.

``--to postgresql://...`` copies a data directory's ``hadron.db`` into a PostgreSQL database for server
mode; ``--from postgresql://...`` copies a server-mode database back into a new ``hadron.db``.

Every table the two engines share (tenancy, graph, revisions, vectors, scopes, selections, keys, and the
team, action-run, abstract and Git tables) is copied row for row, ids and node rowids included, in one
PostgreSQL transaction: the target holds all of it or none. Sealed rows stay sealed (their ciphertext is
copied as it is; serve with the same key). The two logs the in-process indexes follow
(``node_text_changes``, ``vector_generations``) are not copied: the target's triggers write them as the
rows arrive (on SQLite too: every live node inserted logs its rowid, every vector bumps its memory's
generation), so a fresh server's first search loads both indexes from the copied rows. The source is
only read (the way back reads one consistent snapshot); a target that already holds Hadron data is
refused, and a new ``hadron.db`` that fails half way is removed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg import Connection, sql

from triptych.core.errors import Invalid
from triptych.core.pg import one, redacted
from triptych.core.transfer import Copied, Progress, remove_database, snapshot
from triptych.hadron.engines import open_stores
from triptych.hadron.sealing import attach

BATCH = 1_000
# Written by the target's triggers as the copied rows arrive.
DERIVED = {"node_text_changes", "vector_generations", "schema_version"}


def _summary(rows: Mapping[str, int]) -> str:
    counts = ", ".join(f"{rows.get(t, 0)} {t}" for t in ("orgs", "memories", "nodes", "edges"))
    return f"{counts} (and {len(rows)} tables in all)"


HELD = "SELECT EXISTS (SELECT 1 FROM orgs) OR EXISTS (SELECT 1 FROM nodes)"


def _order(conn: Connection[Any], tables: set[str]) -> list[str]:
    """``tables`` with every table after those its foreign keys point at."""
    edges = conn.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint WHERE contype = 'f'"
    ).fetchall()
    needs = {
        t: {parent for child, parent in edges if child == t and parent != t and parent in tables}
        for t in tables
    }
    ordered: list[str] = []
    while needs:
        ready = sorted(t for t, parents in needs.items() if parents <= set(ordered))
        if not ready:
            raise RuntimeError(f"foreign keys form a cycle among {sorted(needs)}")
        ordered += ready
        for t in ready:
            del needs[t]
    return ordered


def _tables(conn: Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    return {str(r[0]) for r in rows}


def _columns(conn: Connection[Any], table: str) -> dict[str, tuple[str, bool]]:
    """The target table's columns: (data type, is an identity column)."""
    rows = conn.execute(
        "SELECT column_name, data_type, is_identity = 'YES' FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return {r[0]: (r[1], bool(r[2])) for r in rows}


def migrate_to_postgres(data_dir: Path, url: str, progress: Progress) -> Copied:
    """Copy ``data_dir``'s ``hadron.db`` into ``url``; all or nothing."""
    path = data_dir / "hadron.db"
    if not path.is_file():
        raise Invalid(
            f"There is no Hadron database at {path}: nothing to migrate",
            hint="Pass the data directory the embedded server used (--data-dir or TRIPTYCH_DATA_DIR)",
        )
    source = open_stores(path, None, None, None)  # brings an older file to the current schema first
    try:
        attach(source.db)
        target = open_stores(path, url, None, None)  # creates (or checks) every component's schema
        try:
            assert target.pg is not None
            attach(target.db)
            copied = Copied(redacted(url), _summary)
            conn_src = source.db.conn
            names = {r[0] for r in conn_src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            with target.pg.transaction() as conn:
                if conn.execute(HELD).fetchone() != (False,):
                    raise Invalid(
                        f"The PostgreSQL database {redacted(url)} already holds Hadron data: nothing was copied",
                        hint="Migrate into an empty database (createdb a new one)",
                    )
                for table in _order(conn, (names & _tables(conn)) - DERIVED):
                    _copy(conn_src, conn, table, progress, copied)
        finally:
            target.close()
    finally:
        source.close()
    return copied


def _copy(source: Any, conn: Connection[Any], table: str, progress: Progress, copied: Copied) -> None:
    target = _columns(conn, table)
    have = [r[1] for r in source.execute(f'PRAGMA table_info("{table}")').fetchall()]
    # ``rowid`` is a column on PostgreSQL and SQLite's implicit key: the in-process indexes key nodes by it.
    columns = [c for c in target if c in have or c == "rowid"]
    booleans = {i for i, c in enumerate(columns) if target[c][0] == "boolean"}
    identities = [c for c in columns if target[c][1]]
    total = int(source.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    advance = progress(table, total)
    insert = sql.SQL("INSERT INTO {} ({}) {} VALUES ({})").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, columns)),
        sql.SQL("OVERRIDING SYSTEM VALUE" if identities else ""),
        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
    )
    cursor = source.execute(f'SELECT {", ".join(columns)} FROM "{table}"')
    with conn.cursor() as out:
        while batch := cursor.fetchmany(BATCH):
            rows = [
                tuple(bool(v) if i in booleans and v is not None else v for i, v in enumerate(row))
                for row in batch
            ]
            out.executemany(insert, rows)
            advance(len(rows))
    for column in identities:  # the next id after the copied ones
        conn.execute(
            sql.SQL(
                "SELECT setval(pg_get_serial_sequence({}, {}), coalesce(max({}), 0) + 1, false) FROM {}"
            ).format(sql.Literal(table), sql.Literal(column), sql.Identifier(column), sql.Identifier(table))
        )
    copied.rows[table] = total


# -- the way back: PostgreSQL -> a new hadron.db ----------------------------------------------------------


def holds_data(url: str) -> bool:
    """Whether the database at ``url`` holds Hadron data to bring back (orgs or nodes)."""
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            if not {"orgs", "nodes"} <= _tables(conn):
                return False
            return bool(one(conn.execute(HELD).fetchone())[0])
    except psycopg.Error:
        return True  # the copy itself says what is wrong with the database


def migrate_to_embedded(url: str, data_dir: Path, progress: Progress) -> Copied:
    """Copy the PostgreSQL database's Hadron data into ``data_dir``'s ``hadron.db`` (which must hold
    none); all or nothing, and a ``hadron.db`` this call created is removed again on failure."""
    path = data_dir / "hadron.db"
    created = not path.exists()
    # One snapshot for every table: rows written meanwhile by a running server are all in or all out.
    with snapshot(url) as conn:
        present = _tables(conn)
        if not {"orgs", "nodes"} <= present:
            raise Invalid(
                f"The PostgreSQL database {redacted(url)} holds no Hadron data (no table orgs or"
                " nodes): nothing was copied",
                hint="Check the URL: it should name the database a server-mode triptych used",
            )
        try:
            target = open_stores(path, None, None, None)  # the current schema, every component's
        except BaseException:
            if created:
                remove_database(path)
            raise
        try:
            attach(target.db)
            out = target.db.conn
            if out.execute(HELD).fetchone()[0]:
                raise Invalid(
                    f"The data directory {data_dir} already holds Hadron data: nothing was copied"
                    f" from {redacted(url)}",
                    hint="Pass a new, empty data directory with --data-dir",
                )
            copied = Copied(str(data_dir), _summary)
            names = {r[0] for r in out.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            with target.db.transaction():
                out.execute("PRAGMA defer_foreign_keys = ON")  # checked at COMMIT, whatever the order
                for table in _order(conn, (names & present) - DERIVED):
                    _copy_back(conn, out, table, progress, copied)
        except BaseException as exc:
            target.close()
            if created:
                remove_database(path)
            if isinstance(exc, sqlite3.Error):  # rows the embedded schema refuses
                raise Invalid(
                    f"The embedded schema refused a row of {redacted(url)} ({exc}): nothing was copied",
                    hint="Check the database with the server-mode triptych that used it, then run again",
                ) from exc
            raise
        target.close()
    return copied


def _copy_back(conn: Connection[Any], out: Any, table: str, progress: Progress, copied: Copied) -> None:
    source = _columns(conn, table)
    info = out.execute(f'PRAGMA table_info("{table}")').fetchall()
    have = [r[1] for r in info]
    # ``rowid`` is SQLite's implicit key of ``nodes`` (not in table_info): it carries the in-process
    # indexes' node keys over as they are.
    columns = [c for c in source if c in have or (c == "rowid" and "rowid" not in have)]
    total = int(
        one(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone())[0]
    )
    advance = progress(table, total)
    select = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table)
    )
    quoted = ", ".join(f'"{c}"' for c in columns)
    insert = f'INSERT INTO "{table}" ({quoted}) VALUES ({", ".join("?" * len(columns))})'
    with conn.cursor(name=f"migrate_{table}") as cursor:
        cursor.execute(select)
        while batch := cursor.fetchmany(BATCH):
            rows = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in batch]
            out.executemany(insert, rows)
            advance(len(rows))
    copied.rows[table] = total
