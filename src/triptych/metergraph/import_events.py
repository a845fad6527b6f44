"""Import identities already stored: a row imported from a provider (``import_source``,
``import_source_scope``, ``import_event_id``) is stored once per workspace, however often a sync pulls it
again (the relay's windows overlap by design, and a failed window is pulled again whole).

The identities live in the SQLite metadata file on both engines (its own migration component), keyed
by (workspace, source, scope, event id): claiming them is one ``INSERT OR IGNORE`` per batch in a write
transaction, so two batches (or two worker processes) carrying the same row cannot both store it. On the
embedded engine the claim commits with the calls; on ClickHouse it commits first and is released if the
calls' INSERT fails (``clickhouse_store.insert_batch``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import NamedTuple

from triptych.core.db import Database

COMPONENT = "import_events"
MIGRATIONS = [
    """
    CREATE TABLE import_events (
        workspace TEXT NOT NULL,
        source TEXT NOT NULL,
        scope TEXT NOT NULL,
        event_id TEXT NOT NULL,
        PRIMARY KEY (workspace, source, scope, event_id)
    ) WITHOUT ROWID;
    """,
]


class ImportKey(NamedTuple):
    source: str
    scope: str
    event_id: str


def migrate(db: Database) -> None:
    db.migrate(COMPONENT, MIGRATIONS)


def claim(conn: sqlite3.Connection, workspace: str, keys: Sequence[ImportKey | None]) -> list[bool]:
    """Which rows to store, in the caller's write transaction: a row without an identity, or the first
    row carrying an identity not stored before (a repeat inside the batch is a duplicate too)."""
    fresh = [True] * len(keys)
    for i, key in enumerate(keys):
        if key is not None:
            cur = conn.execute("INSERT OR IGNORE INTO import_events VALUES (?, ?, ?, ?)", (workspace, *key))
            fresh[i] = cur.rowcount == 1
    return fresh


def release(conn: sqlite3.Connection, workspace: str, keys: Sequence[ImportKey]) -> None:
    """Forget identities claimed for rows that were not stored after all (a failed engine write)."""
    conn.executemany(
        "DELETE FROM import_events WHERE workspace = ? AND source = ? AND scope = ? AND event_id = ?",
        [(workspace, *key) for key in keys],
    )
