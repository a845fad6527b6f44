"""Metergraph's bookkeeping: workspaces (and whether they retain content), app and agent keys, SDK
sessions, route configuration, ingest batch records, the call-id sequence and import identities.

``MetadataStore`` is what the services need of it. ``SqliteMetadataStore`` keeps it in the metergraph file
(``sqlite_schema.py``), beside the embedded engine's calls or in front of ClickHouse's;
``postgres_metadata_store.PostgresMetadataStore`` in PostgreSQL (server mode). Both run the SQL of
``MetadataSql``, written once in what SQLite 3.35+ and PostgreSQL share with its placeholders from the
store's dialect (``control_sql.py``), and sent as written; each engine brings its DDL. The calls themselves
are a ``call_store.CallStore``'s.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.metergraph import import_events
from triptych.metergraph.control_sql import SQLITE, Dialect
from triptych.metergraph.import_events import ImportKey, SqlConnection

# The health counters of ``batch_health``, over the batches received since a time.
BATCH_HEALTH = (
    "processed", "failed", "permanent", "recoverable", "unclassified", "last_received", "last_processed",
    "accepted", "ignored", "dropped", "transport_errors", "unknown_attributes", "content_dropped",
)  # fmt: skip
# What a processed batch's record holds besides its counts (``record_batch``'s ``batch``).
BATCH_FIELDS = (
    "received_ms", "processed_ms", "ignored", "dropped", "transport_errors", "unknown_attributes",
    "content_dropped",
)  # fmt: skip


class MetadataStore(Protocol):
    """Bookkeeping every engine needs, whatever holds the calls. Rows come back as plain dicts whose
    keys are the column names of ``sqlite_schema.py`` (``environments`` a JSON text or None)."""

    def close(self) -> None: ...

    # -- workspaces ---------------------------------------------------------------------------
    def workspace(self, workspace: str) -> dict[str, Any] | None:
        """``{"id", "created_at", "retain_content"}``, or None before the workspace's first write."""
        ...

    def set_retain_content(self, workspace: str, retain: bool, now_iso: str) -> None: ...

    # -- keys and sessions --------------------------------------------------------------------
    def insert_key(
        self, key_id: str, workspace: str, kind: str, role: str | None, environments: Sequence[str] | None,
        token_hash: str, now_iso: str,
    ) -> None: ...  # fmt: skip
    def key_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        """The key with this token hash, unless revoked."""
        ...

    def list_keys(self, workspace: str | None = None) -> list[dict[str, Any]]: ...
    def revoke_key(self, key_id: str, now_iso: str) -> bool: ...
    def insert_session(
        self, token_hash: str, workspace: str, app: str, repository: str, sdk_version: str, expires_at: int
    ) -> None: ...
    def session_by_hash(self, token_hash: str) -> dict[str, Any] | None: ...

    # -- routes -------------------------------------------------------------------------------
    def set_route(
        self, workspace: str, route: str, description: str | None, config: dict[str, Any], now_iso: str,
        constraints: dict[str, Any] | None = None,
    ) -> None: ...  # fmt: skip
    def route_config(self, workspace: str) -> dict[str, Any]:
        """Route name -> its config (what SDKs poll at ``GET /v1/config``)."""
        ...

    def configured_routes(self, workspace: str) -> list[dict[str, Any]]:
        """Every configured route: ``{"route", "description", "constraints", "updated_at"}``, by name."""
        ...

    # -- ingest batches -----------------------------------------------------------------------
    def record_batch(
        self, workspace: str, source: str, accepted: int, batch: dict[str, Any], now_iso: str,
        confirm: Sequence[ImportKey] = (),
    ) -> None:  # fmt: skip
        """A processed batch (``BATCH_FIELDS``) with its stored calls, creating the workspace if new; the
        pending import identities ``confirm`` are confirmed with it (``claim_imports``)."""
        ...

    def record_failed_batch(
        self, workspace: str, source: str, received_ms: int, failure_class: str
    ) -> None: ...
    def batch_health(self, workspace: str, since_ms: int) -> dict[str, Any]:
        """``BATCH_HEALTH`` over the batches received since ``since_ms`` (None where there are none)."""
        ...

    def recent_batches(self, workspace: str, limit: int) -> list[tuple[str, int]]:
        """The newest ``limit`` batches, newest first: (status, received_ms)."""
        ...

    # -- for call stores without transactions of their own (ClickHouse) --------------------------
    def reserve_call_ids(self, n: int) -> int:
        """The first of ``n`` consecutive new call ids, never handed out before."""
        ...

    def claim_imports(self, workspace: str, keys: Sequence[ImportKey | None]) -> list[bool]:
        """Which rows to store: ``import_events.claim`` as pending (confirmed by ``record_batch``, or
        ``release_imports`` when the calls' write failed)."""
        ...

    def release_imports(self, workspace: str, keys: Sequence[ImportKey]) -> None: ...


class SqlDatabase(Protocol):
    """``core.db.Database`` or ``core.pg.NativeDatabase``: statements sent as written, rows read by name."""

    @property
    def conn(self) -> SqlConnection: ...
    def transaction(self) -> AbstractContextManager[SqlConnection]: ...


def _count(condition: str) -> str:
    # SUM of a comparison is SQLite's; PostgreSQL sums integers only.
    return f"SUM(CASE WHEN {condition} THEN 1 ELSE 0 END)"


_PROCESSED, _FAILED = _count("status = 'processed'"), _count("status = 'failed'")
_PERMANENT, _RECOVERABLE = _count("failure_class = 'permanent'"), _count("failure_class = 'recoverable'")
_UNCLASSIFIED = _count("status = 'failed' AND failure_class IS NULL")


@functools.cache
def _health_sql(p: str) -> str:
    """``batch_health``'s statement with the placeholder ``p``."""
    return (
        f"SELECT {_PROCESSED} AS processed, {_FAILED} AS failed, {_PERMANENT} AS permanent,"
        f" {_RECOVERABLE} AS recoverable, {_UNCLASSIFIED} AS unclassified,"
        " MAX(received_ms) AS last_received, MAX(processed_ms) AS last_processed,"
        " SUM(accepted) AS accepted, SUM(ignored) AS ignored, MAX(dropped) AS dropped,"
        " MAX(transport_errors) AS transport_errors, SUM(unknown_attributes) AS unknown_attributes,"
        " SUM(content_dropped) AS content_dropped"
        f" FROM ingest_batches WHERE workspace = {p} AND received_ms >= {p}"
    )


class MetadataSql:
    """``MetadataStore``'s SQL, written once and spelled by the engine's ``dialect``; a subclass opens
    ``db`` with its DDL."""

    db: SqlDatabase
    # The keys' listing order: creation time, then the order they were stored in.
    key_order = "created_at"

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._ids = threading.Lock()

    def ensure_workspace(self, conn: SqlConnection, workspace: str, now_iso: str) -> None:
        p = self.dialect.p
        conn.execute(
            f"INSERT INTO workspaces (id, created_at) VALUES ({p}, {p}) ON CONFLICT DO NOTHING",
            (workspace, now_iso),
        )

    def workspace(self, workspace: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            f"SELECT * FROM workspaces WHERE id = {self.dialect.p}", (workspace,)
        ).fetchone()
        return dict(row) if row else None

    def set_retain_content(self, workspace: str, retain: bool, now_iso: str) -> None:
        p = self.dialect.p
        with self.db.transaction() as conn:
            self.ensure_workspace(conn, workspace, now_iso)
            conn.execute(
                f"UPDATE workspaces SET retain_content = {p} WHERE id = {p}", (int(retain), workspace)
            )

    def insert_key(
        self, key_id: str, workspace: str, kind: str, role: str | None, environments: Sequence[str] | None,
        token_hash: str, now_iso: str,
    ) -> None:  # fmt: skip
        with self.db.transaction() as conn:
            self.ensure_workspace(conn, workspace, now_iso)
            conn.execute(
                "INSERT INTO keys (id, workspace, kind, role, environments, token_hash, created_at)"
                f" VALUES ({self.dialect.marks(7)})",
                (key_id, workspace, kind, role, json.dumps(list(environments)) if environments else None,
                 token_hash, now_iso),
            )  # fmt: skip

    def key_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            f"SELECT * FROM keys WHERE token_hash = {self.dialect.p} AND revoked_at IS NULL", (token_hash,)
        ).fetchone()
        return dict(row) if row else None

    def list_keys(self, workspace: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, workspace, kind, role, environments, created_at, revoked_at FROM keys"
        args: tuple[Any, ...] = ()
        if workspace is not None:
            sql += f" WHERE workspace = {self.dialect.p}"
            args = (workspace,)
        return [dict(r) for r in self.db.conn.execute(f"{sql} ORDER BY {self.key_order}", args)]

    def revoke_key(self, key_id: str, now_iso: str) -> bool:
        p = self.dialect.p
        with self.db.transaction() as conn:
            cur = conn.execute(
                f"UPDATE keys SET revoked_at = {p} WHERE id = {p} AND revoked_at IS NULL", (now_iso, key_id)
            )
            return bool(cur.rowcount > 0)

    def insert_session(
        self, token_hash: str, workspace: str, app: str, repository: str, sdk_version: str, expires_at: int
    ) -> None:
        d = self.dialect
        with self.db.transaction() as conn:
            conn.execute(f"DELETE FROM sessions WHERE expires_at < {d.p}", (expires_at - 7 * 86_400,))
            conn.execute(
                f"INSERT INTO sessions VALUES ({d.marks(6)})",
                (token_hash, workspace, app, repository, sdk_version, expires_at),
            )

    def session_by_hash(self, token_hash: str) -> dict[str, Any] | None:
        row = self.db.conn.execute(
            f"SELECT * FROM sessions WHERE token_hash = {self.dialect.p}", (token_hash,)
        ).fetchone()
        return dict(row) if row else None

    # -- routes ---------------------------------------------------------------------------------

    def set_route(
        self, workspace: str, route: str, description: str | None, config: dict[str, Any], now_iso: str,
        constraints: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO routes (workspace, route, description, constraints, config, updated_at)"
                f" VALUES ({self.dialect.marks(6)})"
                " ON CONFLICT (workspace, route) DO UPDATE SET description = excluded.description,"
                " constraints = excluded.constraints, config = excluded.config, updated_at = excluded.updated_at",
                (workspace, route, description, json.dumps(constraints or {}, sort_keys=True),
                 json.dumps(config, sort_keys=True), now_iso),
            )  # fmt: skip

    def route_config(self, workspace: str) -> dict[str, Any]:
        rows = self.db.conn.execute(
            f"SELECT route, config FROM routes WHERE workspace = {self.dialect.p}", (workspace,)
        )
        return {r["route"]: json.loads(r["config"]) for r in rows}

    def configured_routes(self, workspace: str) -> list[dict[str, Any]]:
        rows = self.db.conn.execute(
            "SELECT route, description, constraints, updated_at FROM routes"
            f" WHERE workspace = {self.dialect.p} ORDER BY route",
            (workspace,),
        )
        return [{**dict(r), "constraints": json.loads(r["constraints"])} for r in rows]

    # -- ingest batches -------------------------------------------------------------------------

    def record_batch(
        self, workspace: str, source: str, accepted: int, batch: dict[str, Any], now_iso: str,
        confirm: Sequence[ImportKey] = (),
    ) -> None:  # fmt: skip
        with self.db.transaction() as conn:
            if confirm:
                import_events.confirm(conn, workspace, confirm, self.dialect)
            self.record_batch_in(conn, workspace, source, accepted, batch, now_iso)

    def record_batch_in(
        self, conn: SqlConnection, workspace: str, source: str, accepted: int, batch: dict[str, Any],
        now_iso: str,
    ) -> None:  # fmt: skip
        """``record_batch`` in the caller's transaction (the embedded engine commits a batch's calls and
        its record together)."""
        self.ensure_workspace(conn, workspace, now_iso)
        conn.execute(
            "INSERT INTO ingest_batches (workspace, source, received_ms, processed_ms, status, accepted,"
            " ignored, dropped, transport_errors, unknown_attributes, content_dropped)"
            f" VALUES ({self.dialect.marks(4)}, 'processed', {self.dialect.marks(6)})",
            (workspace, source, batch["received_ms"], batch["processed_ms"], accepted, batch["ignored"],
             batch["dropped"], batch["transport_errors"], batch["unknown_attributes"], batch["content_dropped"]),
        )  # fmt: skip

    def record_failed_batch(self, workspace: str, source: str, received_ms: int, failure_class: str) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO ingest_batches (workspace, source, received_ms, status, failure_class)"
                f" VALUES ({self.dialect.marks(3)}, 'failed', {self.dialect.p})",
                (workspace, source, received_ms, failure_class),
            )

    def batch_health(self, workspace: str, since_ms: int) -> dict[str, Any]:
        row = self.db.conn.execute(_health_sql(self.dialect.p), (workspace, since_ms)).fetchone()
        return {k: row[k] for k in BATCH_HEALTH}

    def recent_batches(self, workspace: str, limit: int) -> list[tuple[str, int]]:
        p = self.dialect.p
        rows = self.db.conn.execute(
            f"SELECT status, received_ms FROM ingest_batches WHERE workspace = {p} ORDER BY id DESC LIMIT {p}",
            (workspace, limit),
        )
        return [(str(r[0]), int(r[1])) for r in rows]

    # -- call ids and import identities ---------------------------------------------------------

    def reserve_call_ids(self, n: int) -> int:
        # One statement moves the sequence (two workers' transactions cannot read the same value); queued
        # on a lock in this process rather than on SQLite's busy handler (which sleeps).
        p = self.dialect.p
        with self._ids, self.db.transaction() as conn:
            row = conn.execute(
                f"UPDATE clickhouse_call_ids SET next_id = next_id + {p} RETURNING next_id - {p}", (n, n)
            ).fetchone()
            if row is None:  # a SQLite file whose sequence never moved (PostgreSQL's starts with its row)
                conn.execute(f"INSERT INTO clickhouse_call_ids VALUES ({p})", (1 + n,))
                return 1
        return int(row[0])

    def claim_imports(self, workspace: str, keys: Sequence[ImportKey | None]) -> list[bool]:
        with self.db.transaction() as conn:
            return import_events.claim(conn, workspace, keys, stored=False, dialect=self.dialect)

    def release_imports(self, workspace: str, keys: Sequence[ImportKey]) -> None:
        with self.db.transaction() as conn:
            import_events.release(conn, workspace, keys, self.dialect)


_ID_SEQUENCE_DDL = "CREATE TABLE IF NOT EXISTS clickhouse_call_ids (next_id INTEGER NOT NULL)"


class SqliteMetadataStore(MetadataSql):
    """``MetadataStore`` in the metergraph SQLite file (``db``, shared with the embedded call store)."""

    def __init__(self, db: Database) -> None:
        super().__init__(SQLITE)
        self.db: Database = db
        # The ClickHouse engine's call ids (its name kept from when only that engine drew from it).
        with db.transaction() as conn:
            conn.execute(_ID_SEQUENCE_DDL)

    def close(self) -> None:
        self.db.close()
