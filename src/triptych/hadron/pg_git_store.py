"""Git-backed memories' bookkeeping on PostgreSQL (server mode): ``SqliteGitStore``'s SQL over tables of its
own migration component (``hadron-git``), on the database the graph is in, so a sync still writes nodes
and bookkeeping in one transaction."""

from __future__ import annotations

from triptych.hadron.git_store import SqliteGitStore
from triptych.hadron.pg_schema import binary_text

MIGRATIONS = [
    binary_text(
        """
    CREATE TABLE git_sources (
        memory_id TEXT PRIMARY KEY REFERENCES memories(id), url TEXT NOT NULL, branch TEXT,
        commit_sha TEXT, synced_at TEXT, attached_at TEXT NOT NULL, last_error TEXT
    );
    CREATE TABLE git_files (
        memory_id TEXT NOT NULL, path TEXT NOT NULL, node_id TEXT NOT NULL, blob TEXT NOT NULL,
        revision BIGINT NOT NULL, PRIMARY KEY (memory_id, path)
    );
    CREATE INDEX git_files_by_node ON git_files (node_id);
    """
    ),
]


class PgGitStore(SqliteGitStore):
    migrations = MIGRATIONS
