"""Where an ingest batch's time goes: CPU microseconds per row for each step of ``POST /v1/ingest``'s
work, measured in-process on the benchmark's rows (gzip batches of 5,000, the first rows of a 10 M-call
stream), into a fresh database.

    .venv/bin/python bench/metergraph_ingest_phases.py --batches 20

Steps: gunzip, JSON decode, normalisation and pricing (``IngestService.normalize``), building the
INSERT parameters, the calls INSERT, COMMIT (the WAL synced). Then, off the ingest path, the rollup fold
of every ingested call (``SqliteCallStore.fold_rollups``, 100,000 calls per transaction) three ways:
from the batches kept in memory (what the server's folder does), read back from the table (after a
restart, or another process's calls), and, for the record, a pure-SQL fold (``INSERT ... SELECT ...
GROUP BY ... ON CONFLICT DO UPDATE``, the histogram pivoted by 96 ``CASE`` sums) that was measured and
not kept. The server adds HTTP and the thread handoffs; ``metergraph_engines.py`` measures it end to end.
CPU time is reported next to wall time because this machine is shared.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import itertools
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from metergraph_bench import generate

from triptych.metergraph import call_model as model
from triptych.metergraph import histogram, sqlite_sql
from triptych.metergraph import sqlite_rollups as rollups
from triptych.metergraph.ingest import IngestService, gc_paused
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.sqlite_call_store import SqliteCallStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="batches of 5,000 rows")
    parser.add_argument("--stream", type=int, default=10_000_000, help="calls in the stream (batch span)")
    args = parser.parse_args()
    bodies = [
        gzip.compress(json.dumps({"schema_version": 1, "rows": b}).encode(), 1)
        for b in itertools.islice(generate(args.stream, seed=99), args.batches)
    ]
    store = SqliteCallStore.open(Path(tempfile.mkdtemp(prefix="mg-phases-")) / "metergraph.db")
    service = IngestService(store, store.metadata, Pricer(), 5000)
    app = AppPrincipal("default", "static")
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}

    @contextmanager
    def step(name: str) -> Iterator[None]:
        c, w = time.process_time(), time.perf_counter()
        yield
        cpu[name] = cpu.get(name, 0.0) + time.process_time() - c
        wall[name] = wall.get(name, 0.0) + time.perf_counter() - w

    def run(name: str, fn: Callable[[], Any]) -> Any:
        with step(name):
            return fn()

    rows = 0
    kept: list[rollups.Unfolded] = []
    conn = store.db.conn
    for body in bodies:
        with gc_paused():
            raw = run("gunzip", lambda b=body: gzip.decompress(b))
            document = run("json decode", lambda r=raw: orjson.loads(r))
            normalized = run(
                "normalise + price", lambda d=document: service.normalize(app, d["rows"], "sdk", False)
            )
            calls = normalized.calls
            with step("insert parameters"):
                columns = [calls.column(name) for name in model.CALL_COLUMNS]
                mask = tuple(column.count(None) != len(column) for column in columns)
                params = list(zip(*itertools.compress(columns, mask), strict=True))
            conn.execute("BEGIN IMMEDIATE")
            run(
                "calls INSERT",
                lambda p=params, m=mask: sqlite_sql.insert_many(
                    conn, lambda n: sqlite_sql.insert_call(m, n), p, sum(m)
                ),
            )
            run("COMMIT (WAL synced)", lambda: conn.execute("COMMIT"))
            kept.append(rollups.Unfolded(rows + 1, "default", calls))
            rows += calls.size
    for name, fold in (
        ("rollup fold, read back", read_back_fold),
        ("rollup fold, pure SQL (not kept)", sql_fold),
    ):
        with step(name):
            conn.execute("BEGIN IMMEDIATE")
            fold(conn, rows)
            conn.execute("ROLLBACK")
    store.rollups.unfolded = {u.first_id: u for u in kept}
    run("rollup fold, batches in memory (the server)", store.fold_rollups)
    run("WAL checkpoint (background in the server)", lambda: conn.execute("PRAGMA wal_checkpoint(PASSIVE)"))
    store.close()
    result = {
        "rows": rows,
        "load_average": os.getloadavg(),
        "cpu_us_per_row": {k: round(v * 1e6 / rows, 2) for k, v in cpu.items()},
        "wall_us_per_row": {k: round(v * 1e6 / rows, 2) for k, v in wall.items()},
        "cpu_us_per_row_total": round(sum(cpu.values()) * 1e6 / rows, 1),
    }
    print(json.dumps(result, indent=2))


def read_back_fold(conn: Any, rows: int) -> None:
    for after in range(0, rows, rollups.FOLD_CHUNK):
        rollups.fold_parts(conn, rollups.read_back(conn, after, min(rows, after + rollups.FOLD_CHUNK)))


def sql_fold(conn: Any, rows: int) -> None:
    for after in range(0, rows, rollups.FOLD_CHUNK):
        fold_chunk(conn, after, rollups.FOLD_CHUNK)


# The pure-SQL fold, measured and not kept: grouping the calls by hour, key and latency bucket sorts them
# by text keys, and the histogram's pivot evaluates 96 CASE expressions per group and table.
_FOLD_FINE = "fold_fine"  # a temporary table: one chunk's calls grouped by hour, key and latency bucket


def _floor_div(expr: str, width: int) -> str:
    """``expr // width`` as in Python (SQLite's integer division truncates a negative value toward zero)."""
    return f"(({expr}) - ((({expr}) % {width}) + {width}) % {width}) / {width}"


# One chunk of calls grouped by workspace, hour, rollup key and latency bucket: the measures summed the
# way ``batch_measures`` sums them (a missing number counts 0, a missing key part is '').
_FINE_MEASURES = (
    "COUNT(*)", "SUM(error)", "TOTAL(cost_usd)", "COALESCE(SUM(input_tokens), 0)",
    "COALESCE(SUM(output_tokens), 0)", "COALESCE(SUM(cache_read_tokens), 0)",
    "COALESCE(SUM(cache_write_tokens), 0)", "COALESCE(SUM(reasoning_tokens), 0)", "TOTAL(latency_ms)",
    "COUNT(latency_ms)", "SUM(cost_status = 'priced')", "SUM(cost_status = 'partial')",
    "SUM(cost_status = 'zero')", "SUM(cost_status = 'unpriced' AND cost_unknown = 0)", "SUM(cost_unknown)",
)  # fmt: skip
_FOLD_FINE_DDL = (
    f"CREATE TEMP TABLE IF NOT EXISTS {_FOLD_FINE} (workspace TEXT, hour INTEGER, route TEXT, provider TEXT,"
    f" model TEXT, environment TEXT, lat_bucket INTEGER, {', '.join(model.SUMS)})"
)
_FOLD_FINE_FILL = (
    f"INSERT INTO temp.{_FOLD_FINE} SELECT workspace, {_floor_div('ts_ms', rollups._HOUR_MS)},"
    " COALESCE(route, ''), COALESCE(provider, ''), COALESCE(model, ''), COALESCE(environment, ''),"
    f" lat_bucket, {', '.join(_FINE_MEASURES)} FROM calls WHERE id > ? AND id <= ?"
    " GROUP BY 1, 2, 3, 4, 5, 6, 7"
)
_FOLD_CHUNK_END = "SELECT MAX(id) FROM (SELECT id FROM calls WHERE id > ? ORDER BY id LIMIT ?)"


@functools.cache
def _fold_upsert(table: str) -> str:
    """One rollup table's groups of the chunk (from the fine groups), added to its rows."""
    width, keep_route = model.ROLLUPS[table]
    hours = width // rollups._HOUR_MS
    bucket = "hour" if hours == 1 else _floor_div("hour", hours)
    route = "route" if keep_route else "''"
    hist = ", ".join(f"SUM(CASE lat_bucket WHEN {i} THEN calls ELSE 0 END)" for i in range(histogram.BUCKETS))
    sums = ", ".join(f"SUM({c})" for c in model.SUMS)
    updates = ", ".join(f"{c} = {c} + excluded.{c}" for c in (*model.SUMS, *model.HIST_COLUMNS))
    # WHERE true: an upsert's SELECT needs a WHERE clause for the parser (SQLite's documented rule).
    return (
        f"INSERT INTO {table} (workspace, bucket, {', '.join(model.ROLLUP_KEY)}, {', '.join(model.SUMS)},"
        f" {', '.join(model.HIST_COLUMNS)}) SELECT workspace, {bucket}, {route},"
        f" provider, model, environment, {sums}, {hist} FROM temp.{_FOLD_FINE} WHERE true"
        " GROUP BY 1, 2, 3, 4, 5, 6"
        f" ON CONFLICT (workspace, bucket, {', '.join(model.ROLLUP_KEY)}) DO UPDATE SET {updates}"
    )


def fold_chunk(conn: Any, after_id: int, limit: int) -> int:
    """Add the calls after ``after_id`` (up to ``limit`` of them) to every rollup, in the caller's write
    transaction; returns the highest call id folded (``after_id`` when there was none)."""
    end = conn.execute(_FOLD_CHUNK_END, (after_id, limit)).fetchone()[0]
    if end is None:
        return after_id
    conn.execute(_FOLD_FINE_DDL)
    conn.execute(f"DELETE FROM temp.{_FOLD_FINE}")
    conn.execute(_FOLD_FINE_FILL, (after_id, end))
    for table in model.ROLLUPS:
        conn.execute(_fold_upsert(table))
    conn.execute(f"DELETE FROM temp.{_FOLD_FINE}")
    return int(end)


if __name__ == "__main__":
    main()
