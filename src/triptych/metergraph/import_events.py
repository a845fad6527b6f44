"""Import identities already stored: a row imported from a provider (``import_source``,
``import_source_scope``, ``import_event_id``) is stored once per workspace, however often a sync pulls it
again (the relay's windows overlap by design, and a failed window is pulled again whole).

The identities live in the SQLite metadata file on both engines (its own migration component,
``sqlite_control_schema.IMPORT_EVENTS``), or in PostgreSQL with the metadata there (``pg_schema.METADATA``;
the statements take their placeholders from the caller's dialect), keyed by (workspace, source, scope, event id): claiming them is one
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
from triptych.metergraph.control_sql import SQLITE, Dialect
from triptych.metergraph.sqlite_control_schema import IMPORT_EVENTS

COMPONENT = "import_events"
STALE_MS = 10 * 60 * 1000  # far longer than any engine write of one batch


def _key(p: str) -> str:
    return f"workspace = {p} AND source = {p} AND scope = {p} AND event_id = {p}"


class SqlConnection(Protocol):
    """A connection running its engine's SQL: ``sqlite3.Connection`` or ``core.pg.NativeConnection``."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any: ...
    def executemany(self, sql: str, parameters: Sequence[Sequence[Any]], /) -> Any: ...


class ImportKey(NamedTuple):
    source: str
    scope: str
    event_id: str


def migrate(db: Database) -> None:
    db.migrate(COMPONENT, IMPORT_EVENTS)


def claim(
    conn: SqlConnection,
    workspace: str,
    keys: Sequence[ImportKey | None],
    stored: bool = True,
    dialect: Dialect = SQLITE,
) -> list[bool]:
    """Which rows to store, in the caller's write transaction: a row without an identity, or the first
    row carrying an identity not claimed before (a repeat inside the batch is a duplicate too).
    ``stored=False`` claims them pending (``confirm`` or ``release`` follows)."""
    p = dialect.p
    now = int(time.time() * 1000)
    fresh = [True] * len(keys)
    for i, key in enumerate(keys):
        if key is None:
            continue
        values = (workspace, *key, int(stored), now)
        if conn.execute(
            f"INSERT INTO import_events VALUES ({dialect.marks(6)}) ON CONFLICT DO NOTHING", values
        ).rowcount:
            continue
        taken = conn.execute(
            f"UPDATE import_events SET stored = {p}, claimed_ms = {p}"
            f" WHERE {_key(p)} AND stored = 0 AND claimed_ms < {p}",
            (int(stored), now, workspace, *key, now - STALE_MS),
        )
        fresh[i] = taken.rowcount == 1
    return fresh


def confirm(
    conn: SqlConnection, workspace: str, keys: Sequence[ImportKey], dialect: Dialect = SQLITE
) -> None:
    """The pending identities' rows are stored."""
    conn.executemany(
        f"UPDATE import_events SET stored = 1 WHERE {_key(dialect.p)}", [(workspace, *k) for k in keys]
    )


def release(
    conn: SqlConnection, workspace: str, keys: Sequence[ImportKey], dialect: Dialect = SQLITE
) -> None:
    """Forget pending identities whose rows were not stored after all (a failed engine write)."""
    conn.executemany(
        f"DELETE FROM import_events WHERE {_key(dialect.p)} AND stored = 0", [(workspace, *k) for k in keys]
    )
