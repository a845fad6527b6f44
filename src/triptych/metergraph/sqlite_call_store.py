"""The embedded engine's ``CallStore``: calls, retained content and rollups in the metergraph SQLite file
(``sqlite_schema.py``), one WAL-mode file shared with the ``SqliteMetadataStore``.

Ingest commits a batch's calls, content and batch record in one transaction; the rollups are folded from
the committed calls afterwards (``sqlite_rollups.py``). Metadata reads may scan a columnar projection of
the calls instead of SQL (``columns.py``, attached by the service wiring).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from triptych.core.db import Database
from triptych.metergraph import import_events
from triptych.metergraph.call_model import (
    CALL_COLUMNS,
    ELIGIBLE_CHARS,
    PROJECTED_FIELDS,
    RETAINED_FIELDS,
    ROLLUPS,
    AggRow,
    CallBatch,
    CallFilter,
    Content,
    RawAggregator,
)
from triptych.metergraph.import_events import ImportKey
from triptych.metergraph.metadata_store import MetadataStore, SqliteMetadataStore
from triptych.metergraph.rollup_fold import RollupFolder
from triptych.metergraph.sqlite_rollups import FOLD_CHUNK, SqliteRollups
from triptych.metergraph.sqlite_schema import open_database
from triptych.metergraph.sqlite_sql import call_where, insert_call, insert_many, meta_exprs, placeholders
from triptych.metergraph.sqlite_trace_reads import SqliteTraceReads
from triptych.metergraph.workload_match import SHAPE_SQL, tags_signature

# The embedded engine deletes expired calls this often (and when it opens), this many per transaction.
PURGE_EVERY_S = 3600.0
PURGE_CHUNK = 10_000
_CALLS_AFTER = f"SELECT {', '.join(PROJECTED_FIELDS)} FROM calls WHERE id > ? ORDER BY id LIMIT ?"
# Calls with retained request text, for the workload reads (its argument is the workspace).
_RETAINED = "id IN (SELECT call_id FROM call_content WHERE workspace = ? AND request_text IS NOT NULL)"


class SqliteCallStore(SqliteTraceReads):
    """``CallStore`` on SQLite (its trace reads: ``SqliteTraceReads``); each batch's record goes to
    ``metadata`` (in the calls' transaction when it is the ``SqliteMetadataStore`` of the same file)."""

    def __init__(self, db: Database, metadata: MetadataStore, retention_days: int | None = None) -> None:
        self.db = db
        self.metadata = metadata
        self._same_file = isinstance(metadata, SqliteMetadataStore) and metadata.db is db
        self._write_lock = threading.Lock()
        self.retention_days = retention_days
        # The last purge of expired calls: none yet, so the server's folder thread purges on its first round
        # (a CLI command, which starts no folder, never waits for one).
        self._purged_at = float("-inf")
        # The columnar projection of the calls (``columns.py``), attached by the service wiring.
        self.columns: RawAggregator | None = None
        self.rollups = SqliteRollups(db, self._write_lock)
        # Folds the rollups in the background soon after ingest commits (the server starts it); while it
        # runs, the batches this process committed wait for it in memory (``SqliteRollups.keep``).
        self.folder = RollupFolder(self.fold_in_background)
        self._stuck: tuple[int, float] | None = None  # (watermark, since when) it waits on other calls
        self.stuck_s = 2.0
        conn = db.conn
        if (
            conn.execute(
                "SELECT 1 FROM calls WHERE id <= (SELECT folded FROM rollup_watermark) LIMIT 1"
            ).fetchone()
            and not conn.execute("SELECT 1 FROM rollup_daily LIMIT 1").fetchone()
        ):
            self.rebuild_rollups()  # a database from before migration 3

    @classmethod
    def open(cls, path: Path, retention_days: int | None = None) -> SqliteCallStore:
        """The calls of the metergraph file at ``path``, with its ``SqliteMetadataStore`` as ``metadata``."""
        db = open_database(path)
        return cls(db, SqliteMetadataStore(db), retention_days)

    # -- rollups (``sqlite_rollups.SqliteRollups``) --------------------------------------------

    def rebuild_rollups(self) -> None:
        """Recompute every rollup from the raw calls (one transaction)."""
        self.rollups.rebuild()

    def fold_rollups(
        self, stop: Callable[[], bool] = lambda: False, chunk: int = FOLD_CHUNK, own_only: bool = False
    ) -> int:
        return self.rollups.fold(stop, chunk, own_only)

    def rollups_pending(self) -> int:
        return self.rollups.pending()

    def catch_up_rollups(self) -> None:
        """Fold what is pending, if anything: what every rollup read does first."""
        self.rollups.catch_up()

    def fold_in_background(self, stop: Callable[[], bool]) -> int:
        """The folder's fold: this process's batches in memory; and every pending call, read back, once
        the watermark has waited ``stuck_s`` seconds on calls no process folds (another process
        stopped, calls from before a restart, a CLI import). Expired calls go once an hour. Once ``stop``
        says so, it ends at its next step: the store is closing."""
        done = self.rollups.fold(stop, own_only=True)
        if stop():
            return done
        pending = self.rollups.pending()
        watermark = self.rollups.watermark()
        now = time.monotonic()
        if not pending:
            self._stuck = None
        elif self._stuck is None or self._stuck[0] != watermark:
            self._stuck = (watermark, now)
        elif now - self._stuck[1] >= self.stuck_s:
            done += self.rollups.fold(stop)
            self._stuck = None
        if self.retention_days is not None and now - self._purged_at >= PURGE_EVERY_S and not stop():
            self.purge_expired(datetime.now(UTC), stop)
        return done

    def purge_expired(self, now: datetime, stop: Callable[[], bool] = lambda: False) -> int:
        """Delete the calls older than the retention window, their content and their rollup rows, a chunk
        per transaction; returns how many calls went. The newest call (largest id) always stays: ids are
        one more than the largest, so a later call can never take an id the rollups have folded. ``stop``
        is asked between chunks (the rest, and the rollup rows, wait for the next purge)."""
        self._purged_at = time.monotonic()
        if self.retention_days is None:
            return 0
        horizon = int(now.timestamp() * 1000) - self.retention_days * 86_400_000
        gone = 0
        while True:
            with self._write_lock, self.db.transaction() as conn:
                ids = [r[0] for r in conn.execute(
                    "SELECT id FROM calls WHERE ts_ms < ? AND id < (SELECT MAX(id) FROM calls) LIMIT ?",
                    (horizon, PURGE_CHUNK),
                )]  # fmt: skip
                if ids:
                    marks = placeholders(ids)
                    conn.execute(f"DELETE FROM call_content WHERE call_id IN ({marks})", ids)
                    conn.execute(f"DELETE FROM calls WHERE id IN ({marks})", ids)
                if len(ids) < PURGE_CHUNK:
                    # A rollup row goes once its whole bucket is older than the window.
                    for table, (width, _) in ROLLUPS.items():
                        conn.execute(f"DELETE FROM {table} WHERE (bucket + 1) * ? <= ?", (width, horizon))
            gone += len(ids)
            if len(ids) < PURGE_CHUNK or stop():
                return gone

    def stop(self) -> list[threading.Thread]:
        """End the background fold (bounded, ``RollupFolder.close``); returns its thread if it is still at
        work (normally nothing). ``close`` calls it; an owner closing the file's other stores calls it
        first, to leave that thread's connection open (decision 0450)."""
        return self.folder.close()

    def close(self) -> None:
        # First: the fold writes through the database. Still at work after the wait, it keeps its
        # connection (closing one under a query crashes CPython's sqlite3, decision 0390).
        self.db.close(spare=self.stop())

    # -- ingest ---------------------------------------------------------------------------------

    def insert_batch(
        self,
        workspace: str,
        source: str,
        calls: CallBatch,
        contents: Sequence[Content | None],
        batch: dict[str, Any],
        now_iso: str,
        import_keys: Sequence[ImportKey | None] | None = None,
    ) -> None:
        """Rows, content and the batch record: one transaction, all or nothing (the record after it when
        the metadata lives elsewhere). The rollups are folded from the committed calls afterwards
        (``SqliteRollups.fold``), in the background or by the next read.
        Rows whose import identity is already stored (``import_events``) are left out, in the same
        transaction that claims the new ones."""
        # The INSERT names only the columns some row of the batch fills: binding a None costs the
        # sqlite3 module an adapter lookup, and about half of a call row's columns are NULL in every
        # row of a typical batch.
        columns = [calls.column(name) for name in CALL_COLUMNS]
        mask = tuple(column.count(None) != len(column) for column in columns)
        rows = list(zip(*itertools.compress(columns, mask), strict=True))
        width = sum(mask)

        def insert(n: int) -> str:
            return insert_call(mask, n)

        # One writer at a time in this process, queued on a lock rather than on SQLite's busy handler
        # (which sleeps up to 100 ms between tries); other processes still meet the busy timeout.
        with self._write_lock:
            with self.db.transaction() as conn:
                if import_keys is not None:
                    fresh = import_events.claim(conn, workspace, import_keys)
                    if not all(fresh):
                        calls = calls.take(fresh)
                        contents = list(itertools.compress(contents, fresh))
                        rows = list(itertools.compress(rows, fresh))
                first_id = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0]) + 1
                start = 0  # rows with content go one by one (their content needs the id), the rest in runs
                for i, content in enumerate(contents):
                    if content is None:
                        continue
                    if start < i:
                        insert_many(conn, insert, rows[start:i], width)
                    cur = conn.execute(insert(1), rows[i])
                    conn.execute(
                        "INSERT INTO call_content VALUES (?, ?, ?, ?, ?)",
                        (
                            cur.lastrowid,
                            workspace,
                            content.request_text,
                            content.response_text,
                            content.tool_calls,
                        ),
                    )
                    start = i + 1
                if start < len(rows):
                    insert_many(conn, insert, rows[start:], width)
                if self._same_file:
                    assert isinstance(self.metadata, SqliteMetadataStore)
                    self.metadata.record_batch_in(conn, workspace, source, calls.size, batch, now_iso)
                # Consecutive ids, unless the largest id was reached (SQLite then picks free ones at random).
                consecutive = (
                    conn.execute("SELECT MAX(id) FROM calls").fetchone()[0] == first_id + calls.size - 1
                )
        if not self._same_file:
            self.metadata.record_batch(workspace, source, calls.size, batch, now_iso)
        if calls.size and consecutive and self.folder.running:
            self.rollups.keep(first_id, workspace, calls)
        self.folder.note(calls.size)

    # -- reads ----------------------------------------------------------------------------------

    def aggregate_rollups(
        self, table: str, f: CallFilter, bucket_from: int, bucket_to: int, dims: Sequence[str],
        bucket_per_day: int,
    ) -> dict[tuple[Any, ...], AggRow]:  # fmt: skip
        """Group rollup rows in [bucket_from, bucket_to) by ``dims`` (route/provider/model/day)."""
        return self.rollups.aggregate(table, f, bucket_from, bucket_to, dims, bucket_per_day)

    def aggregate_raw(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]:
        """Group raw calls by ``dims`` and, when given, one metadata key's (class, value).

        The metadata class is 'v' (a string of at most 1,000 characters), 'm' (key missing) or 'i'
        (present but not an eligible string); the value is NULL unless the class is 'v'. Metadata reads
        scan the columnar projection when this process maintains one (``columns.py``), else the table.
        """
        # The projection keeps no token shapes nor key sets: a workload's calls are read by SQL.
        if self.columns is not None and (meta_key is not None or f.metadata) and f.workload is None:
            found = self.columns.aggregate(f, dims, meta_key)
            if found is not None:
                return found
        return self.aggregate_calls_sql(f, dims, meta_key)

    def aggregate_calls_sql(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]:
        """``aggregate_raw`` as one SQL scan of the ``calls`` table (JSON extraction per row)."""
        params: list[Any] = []
        inner = [f"{'ts_ms / 86400000' if d == 'day' else d} AS d{i}" for i, d in enumerate(dims)]
        select = [f"d{i}" for i in range(len(dims))]
        if meta_key is not None:
            # The key's type and value are read once per row in a subquery that LIMIT -1 keeps from being
            # flattened (flattening would parse the JSON again for every use).
            t, v, arg = meta_exprs(meta_key)
            inner += [f"{t} AS mt", f"{v} AS mv"]
            params.extend([arg, arg])
            eligible = f"mt = 'text' AND length(mv) <= {ELIGIBLE_CHARS}"
            select.append(f"CASE WHEN mt IS NULL THEN 'm' WHEN {eligible} THEN 'v' ELSE 'i' END")
            select.append(f"CASE WHEN {eligible} THEN mv END")
        measures = (
            "lat_bucket, error, cost_usd, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,"
            " reasoning_tokens, latency_ms, cost_status, cost_unknown"
        )
        sums = (
            "COUNT(*), SUM(error), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(input_tokens), 0),"
            " COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_tokens), 0),"
            " COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(reasoning_tokens), 0),"
            " COALESCE(SUM(latency_ms), 0), COUNT(latency_ms),"
            " SUM(cost_status = 'priced'), SUM(cost_status = 'partial'), SUM(cost_status = 'zero'),"
            " SUM(cost_status = 'unpriced' AND cost_unknown = 0), SUM(cost_unknown)"
        )
        where = call_where(f, params)
        group = ", ".join([str(i + 1) for i in range(len(select))] + [str(len(select) + 1)])
        sql = (
            f"SELECT {', '.join([*select, 'lat_bucket'])}, {sums}"
            f" FROM (SELECT {', '.join([*inner, measures])} FROM calls WHERE {where} LIMIT -1) GROUP BY {group}"
        )
        result: dict[tuple[Any, ...], AggRow] = {}
        n = len(select)
        for row in self.db.conn.execute(sql, params):
            key = tuple(row[:n])
            agg = result.get(key)
            if agg is None:
                agg = result[key] = AggRow(key)
            agg.sums += np.array([v or 0 for v in row[n + 1 :]], dtype=np.float64)
            if row[n] is not None:
                agg.hist[int(row[n])] += int(row[n + 1])
        return result

    def route_calls(self, f: CallFilter) -> dict[str, dict[str, Any]]:
        params: list[Any] = []
        where = call_where(f, params)
        sql = (
            "SELECT route, COUNT(*) AS calls, SUM(has_content) AS replay_eligible_calls, MAX(ts_ms) AS last_ms"
            f" FROM calls WHERE {where} AND route IS NOT NULL GROUP BY route"
        )
        return {r["route"]: dict(r) for r in self.db.conn.execute(sql, params)}

    # -- workload classification and analysis -----------------------------------------------------

    def workload_features(self, f: CallFilter) -> list[dict[str, Any]]:
        """Call counts and sums per (route, metadata keys, token shape, provider, model): ``keys`` is the
        sorted metadata keys' signature (``workload_match.tags_signature``), ``retained`` the calls with
        retained request text; several rows may share a key (one per distinct metadata object)."""
        params: list[Any] = [f.workspace]
        where = call_where(f, params)
        # Grouping by the stored metadata text and reading its keys once per distinct text is about a
        # third cheaper than parsing every call's metadata in SQL (bench/metergraph_classify.py).
        sql = (
            f"SELECT route, tags, {SHAPE_SQL} AS shape, provider, model, COUNT(*) AS calls,"
            f" SUM(has_content AND {_RETAINED}) AS retained, SUM(cost_usd) AS cost_usd,"
            " SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,"
            f" MIN(ts_ms) AS first_ms, MAX(ts_ms) AS last_ms FROM calls WHERE {where}"
            " GROUP BY route, tags, shape, provider, model"
        )
        keys: dict[str | None, str] = {}
        out = []
        # The retained-content subquery's workspace comes first, then the filter's arguments.
        for r in self.db.conn.execute(sql, params):
            row = dict(r)
            tags = row.pop("tags")
            signature = keys.get(tags)
            if signature is None:
                signature = keys[tags] = tags_signature(tags)
            row["keys"] = signature
            out.append(row)
        return out

    def replay_eligible_by_route(self, f: CallFilter) -> dict[str, int]:
        """Per route, the calls with retained request text (what replay can re-send)."""
        params: list[Any] = []
        where = call_where(f, params)
        sql = (
            f"SELECT route, COUNT(*) FROM calls WHERE {where} AND route IS NOT NULL AND has_content = 1"
            f" AND {_RETAINED} GROUP BY route"
        )
        return {r[0]: int(r[1]) for r in self.db.conn.execute(sql, [*params, f.workspace])}

    def retained_calls(self, f: CallFilter, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` successful matching calls with retained request and response text: id,
        trace_id, ts_ms, route, provider, model, tokens, cost_usd, request_text and response_text."""
        params: list[Any] = []
        where = call_where(f, params)
        rows = self.db.conn.execute(
            f"SELECT c.{', c.'.join(RETAINED_FIELDS)}, cc.request_text, cc.response_text"
            f" FROM (SELECT * FROM calls WHERE {where}) c"
            " JOIN call_content cc ON cc.call_id = c.id AND cc.workspace = c.workspace"
            " WHERE c.has_content = 1 AND c.error = 0"
            " AND cc.request_text IS NOT NULL AND cc.response_text IS NOT NULL"
            " ORDER BY c.ts_ms DESC, c.id DESC LIMIT ?",
            (*params, limit),
        )
        return [dict(r) for r in rows]

    # -- the source of the columnar projection ---------------------------------------------------

    def calls_after(self, after_id: int, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` calls with an id above ``after_id``, in id order, as tuples of ``PROJECTED_FIELDS``."""
        cursor = self.db.conn.cursor()
        cursor.row_factory = None  # plain tuples: a Row per call costs more than the projection of it
        return cursor.execute(_CALLS_AFTER, (after_id, limit)).fetchall()

    def max_call_id(self) -> int:
        return int(self.db.conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])

    def call_ts(self, call_id: int) -> int | None:
        row = self.db.conn.execute("SELECT ts_ms FROM calls WHERE id = ?", (call_id,)).fetchone()
        return None if row is None else int(row[0])

    def count_calls(self, workspace: str) -> int:
        return int(
            self.db.conn.execute("SELECT COUNT(*) FROM calls WHERE workspace = ?", (workspace,)).fetchone()[0]
        )

    def raw_calls(self, workspace: str) -> list[dict[str, Any]]:
        """Every stored call row of a workspace (tests and operators; never an agent surface)."""
        rows = self.db.conn.execute("SELECT * FROM calls WHERE workspace = ? ORDER BY id", (workspace,))
        return [dict(r) for r in rows]

    def raw_content(self, workspace: str) -> list[dict[str, Any]]:
        rows = self.db.conn.execute("SELECT * FROM call_content WHERE workspace = ?", (workspace,))
        return [dict(r) for r in rows]
