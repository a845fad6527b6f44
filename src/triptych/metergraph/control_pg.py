"""Metergraph's control data on PostgreSQL (server mode, ``TRIPTYCH_DATABASE_URL``): incidents, webhook
endpoints and deliveries, reports and analysis runs, workloads and classification runs, import-sync
streams and leases. Decision record 0160.

Every table lives in the schema ``metergraph`` of the shared database, so no name can collide with
Metronix's or Hadron's tables (which sit in ``public``) and each store keeps the table names of its
SQLite twin: the SQL the engines share is written once (``control_sql.py`` spells it for each; the
handle sends it as written), and the DDL is ``pg_schema.py``. The pool's connections search ``metergraph``
first (``options=-c search_path=...``), and that schema has its own ``schema_version`` table, so
Metergraph's migration components are versioned apart from the other surfaces'.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg

from triptych.core.pg import MIGRATION_LOCK, NativeDatabase, PgDatabase, ensure_extension, unavailable

SCHEMA = "metergraph"


def schema_url(url: str) -> str:
    """``url`` with connections that find Metergraph's tables (and only then ``public``'s) by bare name."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "options"]
    query.append(("options", f"-c search_path={SCHEMA},public"))
    # libpq decodes %20, not "+", as a space.
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def create_schema(url: str) -> None:
    """The schema (and the vector extension every server-mode pool registers, in ``public`` where the
    other surfaces look for it), under the migrations' advisory lock: two workers may start at once."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                ensure_extension(conn, url, "vector")
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}".encode())
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    except (psycopg.OperationalError, OSError) as exc:
        raise unavailable(url, exc) from exc


def open_control_database(url: str, max_size: int = 4) -> NativeDatabase:
    """Metergraph's handle on the database at ``url``, its schema created. No store-wide write lock:
    each store serializes only what its data needs (a workspace, a stream), so two tenants never wait
    for each other."""
    create_schema(url)
    return NativeDatabase(PgDatabase(schema_url(url), max_size=max_size))


def close_control_database(db: NativeDatabase) -> None:
    db.pg.close()
