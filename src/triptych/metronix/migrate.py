"""``triptych migrate``: move Metronix's data between the embedded engine and PostgreSQL, both ways.

``--to postgresql://...`` copies a data directory's ``metronix.db`` into a PostgreSQL database;
``--from postgresql://...`` copies a PostgreSQL database back into a new data directory. Everything Metronix keeps in ``metronix.db`` (knowledge base: workspaces, documents, chunks and their
vectors; agent memory: records, tags, entities, links, conversation adjacency, the review queue, audit
events and queued freshness checks) is copied row for row, ids and sequence numbers included, in one
transaction of the target: it holds all of it or none. The source is only read (the way back reads one
consistent snapshot). A target that already holds Metronix data is refused, so a second run cannot mix
two copies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector import Vector
from psycopg import Connection, sql

from triptych.core.db import Database
from triptych.core.errors import Invalid
from triptych.core.pg import PgDatabase, one, redacted
from triptych.core.transfer import Copied, Progress, remove_database, snapshot
from triptych.metronix import memory_schema_sqlite, memory_store, store
from triptych.metronix.pg_store import PostgresKnowledgeStore

# Rows read and written per batch: bounded memory whatever the size of the data directory.
BATCH = 1_000
# Each copied table: (SQLite table, PostgreSQL table, columns, identity column or None). Columns
# are listed, not ``*``: the embedded tables keep a few unused ones of their history.
TABLES: list[tuple[str, str, tuple[str, ...], str | None]] = [
    ("meta", "kb_meta", ("key", "value"), None),
    ("workspaces", "kb_workspaces", ("id", "created_at", "generation", "last_sync"), None),
    (
        "documents",
        "kb_documents",
        (
            "id",
            "workspace_id",
            "doc_label",
            "title",
            "content",
            "source_type",
            "url",
            "date",
            "metadata",
            "content_hash",
            "body_hash",
            "created_at",
            "updated_at",
        ),
        "id",
    ),  # fmt: skip
    ("chunks", "kb_chunks", ("id", "document_id", "workspace_id", "ordinal", "text", "embedding"), "id"),
    (
        "memory_records",
        "memory_records",
        (
            "seq",
            "id",
            "workspace_id",
            "agent_id",
            "scope",
            "session_id",
            "kind",
            "content",
            "content_hash",
            "tags",
            "importance_score",
            "source_type",
            "metadata",
            "status",
            "verification_state",
            "superseded_by",
            "ttl_expires_at",
            "created_at",
            "updated_at",
            "embedding",
            "dedup_key",
        ),
        "seq",
    ),  # fmt: skip
    ("memory_tags", "memory_tags", ("seq", "tag"), None),
    ("memory_entities", "memory_entities", ("seq", "entity"), None),
    ("memory_links", "memory_links", ("seq", "related_id", "kind"), None),
    ("memory_follows", "memory_follows", ("seq", "follows"), None),
    ("memory_generations", "memory_generations", ("workspace_id", "generation", "attributes"), None),
    ("memory_meta", "memory_meta", ("key", "value"), None),
    (
        "review_entries",
        "review_entries",
        (
            "id",
            "workspace_id",
            "target_id",
            "target_kind",
            "reason",
            "related_record_id",
            "content",
            "confidence",
            "created_at",
        ),
        None,
    ),  # fmt: skip
    (
        "machine_events",
        "machine_events",
        ("id", "workspace_id", "event_type", "actor", "target_id", "payload", "created_at"),
        None,
    ),
    ("freshness_queue", "freshness_queue", ("record_id", "workspace_id", "enqueued_at"), None),
]


def _summary(rows: Mapping[str, int]) -> str:
    kb = f"{rows.get('documents', 0)} documents ({rows.get('chunks', 0)} chunks)"
    memory = f"{rows.get('memory_records', 0)} memory records"
    reviews = f"{rows.get('review_entries', 0)} review entries"
    return f"{kb}, {memory} and {reviews}"


def _source(data_dir: Path) -> Database:
    path = data_dir / "metronix.db"
    if not path.is_file():
        raise Invalid(
            f"There is no Metronix database at {path}: nothing to migrate",
            hint="Pass the data directory the embedded server used (--data-dir or TRIPTYCH_DATA_DIR)",
        )
    db = Database(path, store.MIGRATIONS)  # brings an older file to the current schema first
    db.migrate("memory", memory_schema_sqlite.MIGRATIONS)
    return db


def _dimension(db: Database) -> int | None:
    for table in ("meta", "memory_meta"):
        row = db.conn.execute(f"SELECT value FROM {table} WHERE key = 'embedding_dim'").fetchone()
        if row is not None and int(row[0]) > 0:
            return int(row[0])
    return None


def _rows(db: Database, table: str, columns: Sequence[str]) -> Iterator[list[tuple[Any, ...]]]:
    cursor = db.conn.execute(f"SELECT {', '.join(columns)} FROM {table}")
    while batch := cursor.fetchmany(BATCH):
        yield [tuple(row) for row in batch]


def _converted(table: str, columns: Sequence[str], row: tuple[Any, ...]) -> tuple[Any, ...]:
    if table == "chunks":  # float32 bytes -> a pgvector value
        position = columns.index("embedding")
        vector = np.frombuffer(row[position], dtype=np.float32)
        return (*row[:position], vector, *row[position + 1 :])
    if table == "documents" and row[columns.index("body_hash")] is None:
        position = columns.index("body_hash")
        return (*row[:position], store.body_hash(row[columns.index("content")]), *row[position + 1 :])
    return row


def _ensure_empty(conn: Connection[Any], url: str) -> None:
    for table in ("kb_documents", "memory_records"):
        statement = sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(table))
        if conn.execute(statement).fetchone() != (False,):
            raise Invalid(
                f"The PostgreSQL database {redacted(url)} already holds Metronix data: nothing was copied",
                hint="Migrate into an empty database (createdb a new one), or drop its Metronix tables first",
            )


def migrate_to_postgres(data_dir: Path, url: str, progress: Progress, default_dim: int) -> Copied:
    """Copy ``data_dir``'s Metronix data into ``url``; all or nothing."""
    source = _source(data_dir)
    try:
        pg = PgDatabase(url)
        try:
            dim = _dimension(source) or default_dim
            PostgresKnowledgeStore(pg, dim)  # creates (or checks) the schema and its vector index
            memory_store.PostgresMemoryStore(pg, dim)  # creates the memory schema
            copied = Copied(redacted(url), _summary)
            with pg.transaction() as conn:
                _ensure_empty(conn, url)
                for table, target, columns, identity in TABLES:
                    total = int(source.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
                    advance = progress(table, total)
                    insert = sql.SQL("INSERT INTO {} ({}) {} VALUES ({})").format(
                        sql.Identifier(target),
                        sql.SQL(", ").join(map(sql.Identifier, columns)),
                        sql.SQL("OVERRIDING SYSTEM VALUE" if identity else ""),
                        sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                    )
                    with conn.cursor() as cursor:
                        for batch in _rows(source, table, columns):
                            cursor.executemany(insert, [_converted(table, columns, row) for row in batch])
                            advance(len(batch))
                    if identity is not None:  # the next id after the copied ones
                        conn.execute(
                            sql.SQL(
                                "SELECT setval(pg_get_serial_sequence({t}, {c}), coalesce(max({i}), 0) + 1, false)"
                                " FROM {table}"
                            ).format(
                                t=sql.Literal(target),
                                c=sql.Literal(identity),
                                i=sql.Identifier(identity),
                                table=sql.Identifier(target),
                            )
                        )
                    copied.rows[table] = total
                # Statistics now, not whenever autovacuum gets to it: without them the planner ignores
                # the HNSW index and sorts every chunk (1-2 s a search at 100,000 chunks).
                for _, target, _, _ in TABLES:
                    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(target)))
        finally:
            pg.close()
    finally:
        source.close()
    return copied


# -- the way back: PostgreSQL -> a new data directory ---------------------------------------------------


def _to_embedded(table: str, columns: Sequence[str], row: tuple[Any, ...]) -> tuple[Any, ...]:
    if table != "chunks":
        return tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
    position = columns.index("embedding")  # a pgvector value -> float32 bytes
    value = row[position]
    vector = value.to_numpy() if isinstance(value, Vector) else np.asarray(value)
    vector = vector.astype(np.float32, copy=False)
    return (*row[:position], vector.tobytes(), *row[position + 1 :])


def _target(data_dir: Path, url: str) -> Database:
    path = data_dir / "metronix.db"
    db = Database(path, store.MIGRATIONS)
    db.migrate("memory", memory_schema_sqlite.MIGRATIONS)
    for table in ("documents", "memory_records"):
        if db.conn.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]:
            db.close()
            raise Invalid(
                f"The data directory {data_dir} already holds Metronix data: nothing was copied from {redacted(url)}",
                hint="Pass a new, empty data directory with --data-dir",
            )
    return db


def _missing(conn: Connection[Any]) -> str | None:
    """The first of Metronix's tables the database lacks, if any."""
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    present = {str(r[0]) for r in rows}
    return next((target for _, target, _, _ in TABLES if target not in present), None)


def missing_table(url: str) -> str | None:
    """The first of Metronix's tables the database at ``url`` lacks: None when it has them all, or when
    it cannot be read (the copy itself then says what is wrong)."""
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            return _missing(conn)
    except psycopg.Error:
        return None


def migrate_to_embedded(url: str, data_dir: Path, progress: Progress) -> Copied:
    """Copy the PostgreSQL database's Metronix data into ``data_dir`` (which must hold none); all or nothing."""
    path = data_dir / "metronix.db"
    created = not path.exists()
    # One snapshot for every table: rows written meanwhile by a running server are all in or all out.
    with snapshot(url) as conn:
        missing = _missing(conn)
        if missing is not None:
            raise Invalid(
                f"The PostgreSQL database {redacted(url)} holds no Metronix data"
                f" (no table {missing}): nothing was copied",
                hint="Check TRIPTYCH_DATABASE_URL: it should name the database a server-mode triptych used",
            )
        target = _target(data_dir, url)
        copied = Copied(str(data_dir), _summary)
        try:
            with target.transaction() as out:
                for table, source, columns, _ in TABLES:
                    # Not the database's own id (it names its workers' saved indexes, pg_saved): a copy
                    # taken back to PostgreSQL is another database, and gets an id of its own.
                    where = sql.SQL(" WHERE key <> 'instance'" if source == "kb_meta" else "")
                    count = sql.SQL("SELECT count(*) FROM {}{}").format(sql.Identifier(source), where)
                    total = int(one(conn.execute(count).fetchone())[0])
                    advance = progress(table, total)
                    statement = sql.SQL("SELECT {} FROM {}{}").format(
                        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(source), where
                    )
                    insert = (
                        f"INSERT OR REPLACE INTO {table} ({', '.join(columns)})"
                        f" VALUES ({', '.join('?' * len(columns))})"
                    )
                    with conn.cursor(name=f"migrate_{source}") as cursor:
                        cursor.execute(statement)
                        while batch := cursor.fetchmany(BATCH):
                            out.executemany(insert, [_to_embedded(table, columns, tuple(r)) for r in batch])
                            advance(len(batch))
                    copied.rows[table] = total
        except BaseException:
            target.close()
            if created:
                remove_database(path)
            raise
        target.close()
    return copied
