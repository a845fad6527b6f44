"""Node abstracts on PostgreSQL (server mode): ``SqliteAbstractStore``'s SQL over a table of its own migration
component (``hadron-abstracts``), created after the graph's (an abstract goes with its node)."""

from __future__ import annotations

from triptych.hadron.abstract_store import SqliteAbstractStore
from triptych.hadron.pg_schema import binary_text

MIGRATIONS = [
    binary_text(
        """
    CREATE TABLE node_abstracts (
        node_id TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
        abstract TEXT NOT NULL, content_hash TEXT NOT NULL, method TEXT NOT NULL, updated_at TEXT NOT NULL
    );
    """
    ),
]


class PgAbstractStore(SqliteAbstractStore):
    migrations = MIGRATIONS
