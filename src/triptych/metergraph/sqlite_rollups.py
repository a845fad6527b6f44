"""The embedded engine's rollups: folding committed calls into them, and the reads that fold first.

Ingest commits only the calls; the rollups are folded from the committed calls afterwards, by a
watermark (the highest call id folded) kept in the database (``SqliteRollups.fold``): a background folder
in the server folds soon after ingest, and every read of a rollup table folds whatever is still pending
first, so answers include every acknowledged call.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from triptych.core.db import Database
from triptych.core.errors import StorageUnavailable
from triptych.metergraph import histogram
from triptych.metergraph.call_model import (
    HIST_COLUMNS,
    ROLLUP_KEY,
    ROLLUPS,
    SUMS,
    AggRow,
    CallBatch,
    CallFilter,
)
from triptych.metergraph.sqlite_sql import insert_many, placeholders, rollup_key_clauses

# Calls folded per write transaction: the write lock is held for a fraction of a second, and the
# per-chunk cost (one upsert per rollup group) is spread over many calls.
FOLD_CHUNK = 100_000


def group_sum(
    positions: np.ndarray[Any, Any], matrix: np.ndarray[Any, Any], groups: int
) -> np.ndarray[Any, Any]:
    """Row sums of ``matrix`` per group index (a sort and ``reduceat``: far faster than ``np.add.at``)."""
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out = np.zeros((groups, matrix.shape[1]), dtype=matrix.dtype)
    out[ordered[starts]] = np.add.reduceat(matrix[order], starts, axis=0)
    return out


ROLLUP_INPUTS = (
    "ts_ms", "route", "provider", "model", "environment", "latency_ms", "lat_bucket", "error", "cost_usd",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "cost_status", "cost_unknown",
)  # fmt: skip


def _floats(values: list[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A column as float64, None as 0 (``value or 0``)."""
    column = np.array(values, dtype=np.float64)  # None -> NaN
    if None in values:
        column[np.isnan(column)] = 0.0
    return column


def batch_measures(calls: CallBatch) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, Any]]:
    """The summed columns (``SUMS``) of every call, and its latency bucket (-1 without a latency)."""
    n = calls.size
    status = np.array(calls.column("cost_status"), dtype=object)
    unknown = np.array(calls.column("cost_unknown"), dtype=np.float64)
    latency = calls.column("latency_ms")
    values = np.column_stack(
        [
            np.ones(n),
            np.array(calls.column("error"), dtype=np.float64),
            _floats(calls.column("cost_usd")),
            *(_floats(calls.column(name)) for name in SUMS[3:8]),
            _floats(latency),
            np.array([v is not None for v in latency], dtype=np.float64),
            status == "priced",
            status == "partial",
            status == "zero",
            (status == "unpriced") & (unknown == 0),
            unknown,
        ]
    ).astype(np.float64)
    lat_bucket = calls.column("lat_bucket")
    buckets = np.array([-1 if b is None else b for b in lat_bucket] if None in lat_bucket else lat_bucket,
                       dtype=np.int64).reshape(n)  # fmt: skip
    return values.reshape(n, len(SUMS)), buckets


_HOUR_MS = 3_600_000
_INT_SUMS = tuple(i for i, name in enumerate(SUMS) if name not in ("cost_usd", "latency_sum"))


_FLOAT_SUMS = tuple(i for i in range(len(SUMS)) if i not in _INT_SUMS)
# The upsert's parameters: integer sums and histogram buckets side by side, so a group's integers come
# out of one NumPy row (``tolist`` of an int64 matrix) instead of 111 separate columns.
ROLLUP_PARAMS = (
    "workspace", "bucket", *ROLLUP_KEY, *(SUMS[i] for i in _FLOAT_SUMS), *(SUMS[i] for i in _INT_SUMS),
    *HIST_COLUMNS,
)  # fmt: skip


def _first_appearance(keys: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Number equal keys (rows of a 2-D int64 array) by first appearance: (group of each row, first row
    of each group)."""
    span = keys.max(axis=0) - keys.min(axis=0) + 1
    if float(np.prod(span.astype(np.float64))) < 2**62:
        # Mixed-radix packing into one int64: a 1-D unique is many times faster than a row-wise one.
        packed = np.zeros(len(keys), dtype=np.int64)
        for column, size, low in zip(keys.T, span, keys.min(axis=0), strict=True):
            packed = packed * size + (column - low)
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[order] = np.arange(len(first))
    return rank[inverse.reshape(-1)], first[order]


def _codes(values: list[Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A rollup key part (None and "" alike) as integer codes, and the value of each code."""
    if None in values:
        values = [v or "" for v in values]
    numbered = {v: i for i, v in enumerate(dict.fromkeys(values))}
    codes = np.fromiter(map(numbered.__getitem__, values), dtype=np.int64, count=len(values))
    return codes, np.array(list(numbered), dtype=object)


def rollup_deltas(calls: CallBatch, workspace: str) -> dict[str, list[list[Any]]]:
    """For every rollup table: per (bucket, route, provider, model, environment), the upsert parameters
    (``ROLLUP_PARAMS``: workspace, key, summed measures, latency histogram) of the batch.

    Rows are grouped once, by hour and the full key; each table's groups are then folded from those
    hourly groups (a few hundred per batch) with NumPy, so the per-row work does not grow with the number
    of tables. Groups are numbered in order of first appearance, and a group's sums add its hourly groups
    in that order, each of those its rows in batch order: the floats are the same whatever the tables.
    """
    if not calls.size:
        return {table: [] for table in ROLLUPS}
    values, buckets = batch_measures(calls)
    hours = np.array(calls.column("ts_ms"), dtype=np.int64) // _HOUR_MS
    parts = [_codes(calls.column(name)) for name in ROLLUP_KEY]
    row_keys = np.column_stack([hours, *(codes for codes, _ in parts)])
    positions, heads = _first_appearance(row_keys)
    fine_keys = row_keys[heads]
    fine_sums = group_sum(positions, values, len(heads))
    timed = buckets >= 0
    out: dict[str, list[list[Any]]] = {}
    for table, (width, keep_route) in ROLLUPS.items():
        keys = fine_keys.copy()
        keys[:, 0] //= width // _HOUR_MS  # every rollup width is a whole number of hours
        if not keep_route:
            keys[:, 1] = 0
        to, firsts = _first_appearance(keys)
        groups = len(firsts)
        sums = group_sum(to, fine_sums, groups)
        cells = np.bincount(
            to[positions[timed]] * histogram.BUCKETS + buckets[timed], minlength=groups * histogram.BUCKETS
        )
        int_sums = sums[:, _INT_SUMS]
        if float(np.abs(int_sums).max(initial=0.0)) < 2**62:
            integers = np.hstack(
                [int_sums.astype(np.int64), cells.reshape(groups, histogram.BUCKETS)]
            ).tolist()
        else:  # beyond int64 (SQLite refuses these anyway): exact Python integers
            integers = [[int(v) for v in row] + h for row, h in zip(int_sums.tolist(),
                        cells.reshape(groups, histogram.BUCKETS).tolist(), strict=True)]  # fmt: skip
        head = keys[firsts]
        key_columns = [
            head[:, 0].tolist(),
            parts[0][1][head[:, 1]].tolist() if keep_route else [""] * groups,
            *(names[head[:, k]].tolist() for k, (_, names) in enumerate(parts[1:], start=2)),
        ]
        floats = sums[:, _FLOAT_SUMS].tolist()
        out[table] = [
            [workspace, *key, *f, *i]
            for key, f, i in zip(zip(*key_columns, strict=True), floats, integers, strict=True)
        ]
    return out


def _merge_rollups(conn: sqlite3.Connection, table: str, deltas: list[list[Any]]) -> None:
    """Upsert: sums and histogram buckets add up in SQL."""
    if deltas:
        insert_many(conn, functools.partial(_upsert_rollup, table), deltas, len(ROLLUP_PARAMS))


@functools.lru_cache(maxsize=64)
def _upsert_rollup(table: str, rows: int = 1) -> str:
    cols = ROLLUP_PARAMS
    updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in (*SUMS, *HIST_COLUMNS))
    values = ", ".join([f"({placeholders(cols)})"] * rows)
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES {values}"
        f" ON CONFLICT (workspace, bucket, {', '.join(ROLLUP_KEY)}) DO UPDATE SET {updates}"
    )


def read_back(conn: sqlite3.Connection, after_id: int, last_id: int) -> list[tuple[str, CallBatch]]:
    """The committed calls with ids in (after_id, last_id], per workspace in id order, as the columns
    ``rollup_deltas`` reads."""
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: a Row per call costs more than the call's fold
    rows = cursor.execute(_READ_BACK, (after_id, last_id)).fetchall()
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    workspaces = columns[0]
    first = workspaces[0]
    if workspaces.count(first) == len(workspaces):  # the usual case: one workspace
        return [
            (first, CallBatch(len(rows), {}, dict(zip(ROLLUP_INPUTS, map(list, columns[1:]), strict=True))))
        ]
    out = []
    for workspace in dict.fromkeys(workspaces):
        keep = [i for i, w in enumerate(workspaces) if w == workspace]
        picked = {
            name: [column[i] for i in keep] for name, column in zip(ROLLUP_INPUTS, columns[1:], strict=True)
        }
        out.append((workspace, CallBatch(len(keep), {}, picked)))
    return out


def _unfolded_parts(
    conn: sqlite3.Connection,
    watermark: int,
    end: int,
    own: dict[int, Unfolded],
    ranges: dict[int, int],
    parts: list[tuple[str, CallBatch]],
) -> int:
    """Append to ``parts`` the calls after ``watermark`` up to ``end`` not in a folded range: batches
    in memory (``own``, by first id) whole, the others read back. Returns the last id covered (``end``,
    or the end of a batch in memory that crosses it)."""
    position = watermark
    while position < end:
        if position + 1 in own:
            kept = own[position + 1]
            parts.append((kept.workspace, kept.calls))
            position = kept.last_id
        elif position + 1 in ranges:
            position = ranges[position + 1]
        else:
            upto = min([end, *(first - 1 for first in (*own, *ranges) if first > position)])
            parts.extend(read_back(conn, position, upto))
            position = upto
    return position


_READ_BACK = f"SELECT workspace, {', '.join(ROLLUP_INPUTS)} FROM calls WHERE id > ? AND id <= ? ORDER BY id"


def concat_batches(batches: Sequence[CallBatch]) -> CallBatch:
    """One batch of the ``rollup_deltas`` columns of several, in order."""
    if len(batches) == 1:
        return batches[0]
    columns = {
        name: list(itertools.chain.from_iterable(b.column(name) for b in batches)) for name in ROLLUP_INPUTS
    }
    return CallBatch(sum(b.size for b in batches), {}, columns)


def fold_parts(conn: sqlite3.Connection, parts: Sequence[tuple[str, CallBatch]]) -> None:
    """Add calls (per workspace, in id order) to every rollup, in the caller's write transaction: one
    group sum per workspace over all its parts, so a chunk costs one upsert per rollup group."""
    by_workspace: dict[str, list[CallBatch]] = {}
    for workspace, calls in parts:
        by_workspace.setdefault(workspace, []).append(calls)
    for workspace, batches in by_workspace.items():
        for table, params in rollup_deltas(concat_batches(batches), workspace).items():
            _merge_rollups(conn, table, params)


@dataclass
class _Folded:
    calls: int  # how many calls this fold added to the rollups
    gone: set[int]  # the batches in memory (first ids) folded by now
    more: bool  # whether another chunk may have work


@dataclass
class Unfolded:
    """A batch this process committed, kept in memory until it is folded: its calls have the ids
    first_id .. first_id + calls.size - 1 (ids are assigned one more than the largest, under the write
    lock, so a batch's ids are consecutive)."""

    first_id: int
    workspace: str
    calls: CallBatch

    @property
    def last_id(self) -> int:
        return self.first_id + self.calls.size - 1


class SqliteRollups:
    """The rollup tables of one metergraph file: the fold, its watermark, and the rollup reads.

    ``unfolded`` holds the batches this process committed until they are folded (``keep``), so the
    background fold need not read them back (at most ``max_unfolded`` calls: beyond, it reads them back).
    """

    def __init__(self, db: Database, write_lock: threading.Lock) -> None:
        self.db = db
        self._write_lock = write_lock  # the call store's: one writer at a time in this process
        self.unfolded: dict[int, Unfolded] = {}
        self._unfolded_lock = threading.Lock()
        self.max_unfolded = FOLD_CHUNK

    def keep(self, first_id: int, workspace: str, calls: CallBatch) -> None:
        """Hold a committed batch in memory for the background fold (while there is room)."""
        with self._unfolded_lock:
            if sum(u.calls.size for u in self.unfolded.values()) < self.max_unfolded:
                # Only the columns the fold reads: the rest of the batch (tags, ids, text) is freed.
                slim = CallBatch(calls.size, {}, {name: calls.column(name) for name in ROLLUP_INPUTS})
                self.unfolded[first_id] = Unfolded(first_id, workspace, slim)

    def rebuild(self) -> None:
        """Recompute every rollup from the raw calls (one transaction)."""
        with self._write_lock, self.db.transaction() as conn:
            for table in ROLLUPS:
                conn.execute(f"DELETE FROM {table}")
            top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])
            for after in range(0, top, FOLD_CHUNK):
                fold_parts(conn, read_back(conn, after, min(top, after + FOLD_CHUNK)))
            conn.execute("UPDATE rollup_watermark SET folded = ?", (top,))
            with self._unfolded_lock:
                self.unfolded.clear()

    def fold(
        self, stop: Callable[[], bool] = lambda: False, chunk: int = FOLD_CHUNK, own_only: bool = False
    ) -> int:
        """Fold committed calls into the rollups, about ``chunk`` calls per write transaction (each reads
        what is folded, folds, and records it, all or nothing); returns how many calls it folded.

        What is folded: every call id up to the watermark, and the id ranges in ``rollup_folded`` above
        it (whole batches a process folded from memory while an earlier call was not folded yet). Call
        ids are assigned under the write lock, one more than the largest, and calls are never deleted,
        so a call committed later never has an id in either. Safe with several processes on one file:
        SQLite serialises the transactions, and each reads what is folded inside its own.

        The batches this process committed are taken from memory (``Unfolded``). Without ``own_only``
        (a read catching up) every other call up to the newest is read back from the table, and the
        watermark reaches the newest call; with it (the background folder) only the batches in memory
        are folded, so two server processes do not read back each other's calls. ``stop`` is asked
        between chunks.
        """
        done = 0
        while not stop():
            with self._write_lock:
                with self.db.transaction() as conn:
                    folded = self._fold_chunk(conn, chunk, own_only)
                # Committed: forget the batches now folded (a failed fold leaves them to the next one).
                with self._unfolded_lock:
                    for first in [k for k, u in self.unfolded.items() if u.first_id in folded.gone]:
                        del self.unfolded[first]
            done += folded.calls
            if not folded.more:
                break
        return done

    def _fold_chunk(self, conn: sqlite3.Connection, chunk: int, own_only: bool) -> _Folded:
        """One transaction's fold (see ``fold``)."""
        watermark = self.watermark(conn)
        top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])
        ranges = dict(conn.execute("SELECT first_id, last_id FROM rollup_folded").fetchall())
        with self._unfolded_lock:
            own = {k: u for k, u in self.unfolded.items() if k > watermark and k not in ranges}
            gone = set(self.unfolded) - set(own)  # folded by now, one way or another
        if (own_only and not own) or top <= watermark:
            return _Folded(0, gone, False)  # nothing to fold: nothing written
        parts: list[tuple[str, CallBatch]] = []
        calls = 0
        if own_only:
            taken = 0
            for first in sorted(own):
                if calls >= chunk:
                    break
                parts.append((own[first].workspace, own[first].calls))
                calls += own[first].calls.size
                ranges[first] = own[first].last_id
                gone.add(first)
                taken += 1
            more = taken < len(own)
        else:
            position = _unfolded_parts(conn, watermark, min(top, watermark + chunk), own, ranges, parts)
            calls = sum(b.size for _, b in parts)
            gone.update(k for k in own if k <= position)
            watermark = position  # everything up to it is folded now
            more = position < top
        fold_parts(conn, parts)
        # The watermark moves over the folded ranges that now follow it.
        while watermark + 1 in ranges:
            watermark = ranges.pop(watermark + 1)
        conn.execute("UPDATE rollup_watermark SET folded = ?", (watermark,))
        conn.execute("DELETE FROM rollup_folded")
        above = sorted((first, last) for first, last in ranges.items() if first > watermark)
        conn.executemany("INSERT INTO rollup_folded VALUES (?, ?)", above)
        return _Folded(calls, gone, more)

    def watermark(self, conn: sqlite3.Connection | None = None) -> int:
        conn = conn or self.db.conn
        return int(conn.execute("SELECT folded FROM rollup_watermark").fetchone()[0])

    def pending(self) -> int:
        """How far the rollups are behind the calls, in call ids (0: every committed call is folded)."""
        row = self.db.conn.execute(
            "SELECT (SELECT COALESCE(MAX(id), 0) FROM calls) - folded FROM rollup_watermark"
        ).fetchone()
        return max(0, int(row[0]))

    def catch_up(self) -> None:
        """Fold what is pending, if anything (the check is two index lookups): before every rollup read."""
        if self.pending():
            self.fold()

    def with_unfolded(self, table: str) -> str:
        """``table`` with the calls not folded yet added, for a read when the fold cannot write (a full
        disk): their groups go to a table in an in-memory database attached to this thread's
        connection, and the read is over both."""
        conn = self.db.conn
        try:
            conn.execute("ATTACH DATABASE ':memory:' AS unfolded")
        except sqlite3.OperationalError:
            pass  # attached by an earlier read on this connection
        conn.execute(f"CREATE TABLE IF NOT EXISTS unfolded.{table} AS SELECT * FROM main.{table} WHERE 0")
        conn.execute(f"DELETE FROM unfolded.{table}")
        watermark = self.watermark(conn)
        top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM calls").fetchone()[0])
        ranges = dict(conn.execute("SELECT first_id, last_id FROM rollup_folded").fetchall())
        parts: list[tuple[str, CallBatch]] = []
        _unfolded_parts(conn, watermark, top, {}, ranges, parts)
        by_workspace: dict[str, list[CallBatch]] = {}
        for workspace, calls in parts:
            by_workspace.setdefault(workspace, []).append(calls)
        insert = f"INSERT INTO unfolded.{table} ({', '.join(ROLLUP_PARAMS)}) VALUES ({placeholders(ROLLUP_PARAMS)})"
        for workspace, batches in by_workspace.items():
            conn.executemany(insert, rollup_deltas(concat_batches(batches), workspace)[table])
        return f"(SELECT * FROM main.{table} UNION ALL SELECT * FROM unfolded.{table})"

    def aggregate(
        self,
        table: str,
        f: CallFilter,
        bucket_from: int,
        bucket_to: int,
        dims: Sequence[str],
        bucket_per_day: int,
    ) -> dict[tuple[Any, ...], AggRow]:
        """Group rollup rows in [bucket_from, bucket_to) by ``dims`` (route/provider/model/day)."""
        assert table in ROLLUPS
        params: list[Any] = [f.workspace, bucket_from, bucket_to]
        where = ["workspace = ?", "bucket >= ?", "bucket < ?"]
        rollup_key_clauses(f, where, params)
        exprs = [f"bucket / {bucket_per_day}" if d == "day" else d for d in dims]
        group = f" GROUP BY {', '.join(str(i + 1) for i in range(len(exprs)))}" if exprs else ""
        cols = ", ".join([*exprs, *(f"SUM({c})" for c in (*SUMS, *HIST_COLUMNS))])
        sql = f"SELECT {cols} FROM @source WHERE {' AND '.join(where)}{group}"
        conn = self.db.conn
        try:
            self.catch_up()  # every acknowledged call counts, folded or not yet
            rows = conn.execute(sql.replace("@source", table), params).fetchall()
        except StorageUnavailable:
            # The disk refuses the fold (full): reads keep working, exactly, from one snapshot of what is
            # folded, the calls that are not, and the rollup.
            conn.execute("BEGIN")
            try:
                rows = conn.execute(sql.replace("@source", self.with_unfolded(table)), params).fetchall()
            finally:
                conn.execute("COMMIT")
        result: dict[tuple[Any, ...], AggRow] = {}
        n, m = len(exprs), len(SUMS)
        for row in rows:
            if row[n] is None:
                continue  # nothing matched (an aggregate without GROUP BY still returns one row)
            key = tuple(None if v == "" and d != "day" else v for v, d in zip(row[:n], dims, strict=True))
            measured = np.array(row[n:], dtype=np.float64)
            result[key] = AggRow(key, measured[:m], measured[m:].astype(histogram.DTYPE))
        return result
