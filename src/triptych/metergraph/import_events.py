"""Import identities already stored: a row imported from a provider (``import_source``,
``import_source_scope``, ``import_event_id``) is stored once per workspace, however often a sync pulls it
again (the relay's windows overlap by design, and a failed window is pulled again whole).

The identities live in the SQLite metadata file on both engines (its own migration component), or in
PostgreSQL with the metadata there, keyed by (workspace, source, scope, event id): claiming them is one
``INSERT ... ON CONFLICT DO NOTHING`` a row in a write
transaction, so two batches (or two worker processes) carrying the same row cannot both store it. On the
embedded engine the claim commits with the calls, stored at once. On ClickHouse it commits first as
pending, is confirmed once the calls' INSERT returned and released if it failed; a pending claim older
than ``STALE_MS`` (its worker died between the two) is claimed again by the next batch that carries it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from triptych.core.db import Database

COMPONENT = "import_events"
MIGRATIONS = [
    """
    CREATE TABLE import_events (
        workspace TEXT NOT NULL,
        source TEXT NOT NULL,
        scope TEXT NOT NULL,
        event_id TEXT NOT NULL,
        stored INTEGER NOT NULL,      -- 0: claimed by a batch whose engine write has not returned yet
        claimed_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, source, scope, event_id)
    ) WITHOUT ROWID;
    """,
]
STALE_MS = 10 * 60 * 1000  # far longer than any engine write of one batch
_KEY = "workspace = ? AND source = ? AND scope = ? AND event_id = ?"


class SqlConnection(Protocol):
    """A connection running ``?``-placeholder SQL: ``sqlite3.Connection`` or ``core.pg.PortableConnection``."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any: ...
    def executemany(self, sql: str, parameters: Sequence[Sequence[Any]], /) -> Any: ...


class ImportKey(NamedTuple):
    source: str
    scope: str
    event_id: str


def migrate(db: Database) -> None:
    db.migrate(COMPONENT, MIGRATIONS)


def claim(
    conn: SqlConnection, workspace: str, keys: Sequence[ImportKey | None], stored: bool = True
) -> list[bool]:
    """Which rows to store, in the caller's write transaction: a row without an identity, or the first
    row carrying an identity not claimed before (a repeat inside the batch is a duplicate too).
    ``stored=False`` claims them pending (``confirm`` or ``release`` follows)."""
    now = int(time.time() * 1000)
    fresh = [True] * len(keys)
    for i, key in enumerate(keys):
        if key is None:
            continue
        values = (workspace, *key, int(stored), now)
        if conn.execute(
            "INSERT INTO import_events VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", values
        ).rowcount:
            continue
        taken = conn.execute(
            f"UPDATE import_events SET stored = ?, claimed_ms = ? WHERE {_KEY} AND stored = 0 AND claimed_ms < ?",
            (int(stored), now, workspace, *key, now - STALE_MS),
        )
        fresh[i] = taken.rowcount == 1
    return fresh


def confirm(conn: SqlConnection, workspace: str, keys: Sequence[ImportKey]) -> None:
    """The pending identities' rows are stored."""
    conn.executemany(f"UPDATE import_events SET stored = 1 WHERE {_KEY}", [(workspace, *k) for k in keys])


def release(conn: SqlConnection, workspace: str, keys: Sequence[ImportKey]) -> None:
    """Forget pending identities whose rows were not stored after all (a failed engine write)."""
    conn.executemany(
        f"DELETE FROM import_events WHERE {_KEY} AND stored = 0", [(workspace, *k) for k in keys]
    )
