"""What each materialized view adds to an INSERT into ClickHouse's ``calls``: ClickHouse CPU per INSERT
for schema variants, from the same Native bodies inserted straight into chdb (no HTTP, no Python rows).

    flock /tmp/triptych-bench.lock .venv/bin/python bench/metergraph_ch_views.py --batches 20 --rounds 2

Bodies: ``metergraph_bench.generate``'s first rows of a 10 M-call stream (a 5,000-row batch spans about
an hour), normalised and inserted through the ClickHouse engine into the test endpoint, then read back as
``FORMAT Native``, one body per batch (what the engine's client sends). Each variant runs in its own
process (chdb holds one engine per process) on a fresh data directory: its statements, ``--warmup``
bodies, then the measured bodies one per INSERT and ``--group`` per INSERT. CPU time of the whole process
(every ClickHouse thread, background merges included), not wall time: the machine is shared. Variants
alternate within each round, so a variant's figures and the base's are taken side by side.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
from metergraph_bench import generate
from metergraph_engines import start_clickhouse

from triptych.metergraph import clickhouse_schema as schema
from triptych.metergraph.store import CALL_COLUMNS

RETENTION = 3650
_COLUMNS = ", ".join(("id", *CALL_COLUMNS))


def _without_views(statements: list[str], *tables: str) -> list[str]:
    return [s for s in statements if not any(s.startswith(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {t}_mv ") for t in tables)]


def _only(*tables: str) -> Callable[[], list[str]]:
    every = (*schema.ROLLUPS, schema.META_ROLLUP, schema.META_WEEKLY, schema.TRACE_BOUNDS)
    return lambda: _without_views(schema.statements(RETENTION), *(t for t in every if t not in tables))


VARIANTS: dict[str, Callable[[], list[str]]] = {
    "base": lambda: schema.statements(RETENTION),
    "none": _only(),
}


def _legacy() -> list[str]:
    """The schema before this module's variants (``clickhouse_schema.LEGACY`` when it exists)."""
    legacy = getattr(schema, "legacy_statements", None)
    return legacy(RETENTION) if legacy is not None else schema.statements(RETENTION)


VARIANTS["legacy"] = _legacy
_CASCADES = ("rollup_daily_coarse", "rollup_weekly_coarse", schema.META_WEEKLY)
VARIANTS["no cascades"] = lambda: _without_views(schema.statements(RETENTION), *_CASCADES)
VARIANTS["no meta"] = lambda: _without_views(schema.statements(RETENTION), schema.META_ROLLUP, schema.META_WEEKLY)
VARIANTS["no meta weekly"] = lambda: _without_views(schema.statements(RETENTION), schema.META_WEEKLY)
VARIANTS["only meta daily+weekly"] = _only(schema.META_ROLLUP, schema.META_WEEKLY)
VARIANTS["only hourly+daily+weekly coarse"] = _only("rollup_hourly_coarse", "rollup_daily_coarse", "rollup_weekly_coarse")
_COUNTS = "countResample(0, 96, 1)(ifNull(lat_bucket, 255))"
_HIST_FROM_COUNTS = (
    f"CAST((arrayFilter((k, c) -> c > 0, arrayMap(i -> toUInt8(i), range(96)), {_COUNTS}),"
    f" arrayFilter(c -> c > 0, {_COUNTS})), 'Tuple(Array(UInt8), Array(UInt64))')"
)
# One row per call (per call and key for the metadata rollup), no GROUP BY: each row is already a valid
# state of its SimpleAggregateFunction columns, and the table's merges add the rows up.
_ROW_MEASURES = {
    "calls": "toInt64(1)", "errors": "toInt64(error)", "cost_usd": "ifNull(cost_usd, 0)",
    **{t: f"toInt64(ifNull({t}, 0))" for t in ("input_tokens", "output_tokens", "cache_read_tokens",
                                                  "cache_write_tokens", "reasoning_tokens")},
    "latency_sum": "ifNull(latency_ms, 0)", "latency_count": "toInt64(latency_ms IS NOT NULL)",
    "priced": "toInt64(cost_status = 'priced')", "partial": "toInt64(cost_status = 'partial')",
    "zero": "toInt64(cost_status = 'zero')", "unpriced": "toInt64(cost_status = 'unpriced' AND cost_unknown = 0)",
    "unknown": "toInt64(cost_unknown)",
}  # fmt: skip
_ROW_HIST = (
    "(if(lat_bucket IS NULL, [], [assumeNotNull(lat_bucket)]), if(lat_bucket IS NULL, [], [toUInt64(1)]))"
)
_ROW_SUMS = ", ".join(f"{e} AS {n}" for n, e in _ROW_MEASURES.items())
_KEYS_ROW = ", ".join(f"ifNull({k}, '') AS {k}" for k in ("route", "provider", "model", "environment"))


def _meta_rows() -> str:
    return f"""SELECT workspace, kv.1 AS key, intDiv(ts_ms, 86400000) AS bucket, {_KEYS_ROW}, kv.2 AS cls, kv.3 AS value,
  {_ROW_SUMS}, {_ROW_HIST} AS hist
FROM calls ARRAY JOIN {schema._META_PAIRS} AS kv"""


def _route_rows() -> str:
    return f"""SELECT workspace, intDiv(ts_ms, 86400000) AS bucket, {_KEYS_ROW}, {_ROW_SUMS}, {_ROW_HIST} AS hist FROM calls"""


def _trace_rows() -> str:
    return "SELECT workspace, assumeNotNull(trace_id) AS trace_id, ts_ms AS first_ms, ts_ms AS last_ms FROM calls WHERE trace_id IS NOT NULL"


def _replace_view(statements: list[str], table: str, select: str) -> list[str]:
    head = f"CREATE MATERIALIZED VIEW IF NOT EXISTS {table}_mv TO {table} AS "
    return [head + select if s.startswith(head) else s for s in statements]


def _rows_variant(*tables: str) -> Callable[[], list[str]]:
    selects = {schema.META_ROLLUP: _meta_rows, "rollup_daily": _route_rows, schema.TRACE_BOUNDS: _trace_rows}

    def statements() -> list[str]:
        out = schema.statements(RETENTION)
        for t in tables:
            out = _replace_view(out, t, selects[t]())
        return out

    return statements


VARIANTS["rows meta"] = _rows_variant(schema.META_ROLLUP)
VARIANTS["rows meta+route"] = _rows_variant(schema.META_ROLLUP, "rollup_daily")
VARIANTS["rows meta+route+trace"] = _rows_variant(schema.META_ROLLUP, "rollup_daily", schema.TRACE_BOUNDS)
VARIANTS["hist counts"] = lambda: [s.replace(schema.HIST, _HIST_FROM_COUNTS) for s in schema.statements(RETENTION)]
for _table in (*schema.ROLLUPS, schema.META_ROLLUP, schema.TRACE_BOUNDS):
    VARIANTS[f"only {_table}"] = _only(_table)


def capture(work: Path, batches: int) -> list[Path]:
    """Native bodies of ``batches`` normalised batches, as the engine's client sends them."""
    from triptych.metergraph.clickhouse_store import ClickHouseTelemetryStore
    from triptych.metergraph.keys import AppPrincipal
    from triptych.metergraph.service import Metergraph
    from triptych.metergraph.settings import load_metergraph_settings

    clickhouse, url = start_clickhouse(work)
    try:
        settings = load_metergraph_settings(tokens=[], clickhouse_url=f"{url}/capture")
        mg = Metergraph.open(work / "capture", settings)
        store = mg.store
        assert isinstance(store, ClickHouseTelemetryStore)
        paths = []
        try:
            first = 1
            for i, rows in enumerate(generate(10_000_000, seed=99)):
                if i == batches:
                    break
                body = gzip.compress(json.dumps({"schema_version": 1, "rows": rows}).encode(), 1)
                normalized = mg.ingest.normalize(
                    AppPrincipal("default", "bench"), orjson.loads(gzip.decompress(body))["rows"], "sdk", False
                )
                n = normalized.calls.size
                store._insert_calls([list(range(first, first + n)), *(normalized.calls.column(c) for c in CALL_COLUMNS)])
                sql = f"SELECT {_COLUMNS} FROM capture.calls WHERE id >= {first} AND id < {first + n} ORDER BY id FORMAT Native"
                path = work / f"batch-{i:03d}.native"
                path.write_bytes(httpx.get(url, params={"query": sql}, timeout=120).content)
                paths.append(path)
                first += n
        finally:
            mg.close()
    finally:
        clickhouse.send_signal(signal.SIGINT)
        clickhouse.wait(timeout=60)
    return paths


def run_variant(name: str, bodies: list[Path], warmup: int, group: int) -> dict[str, Any]:
    """In this process: the variant's schema on a fresh chdb directory, then its INSERTs, timed."""
    import chdb

    data = Path(tempfile.mkdtemp(prefix="mg-ch-views-"))
    conn = chdb.connect(str(data))
    conn.query("CREATE DATABASE IF NOT EXISTS v")
    conn.query("USE v")
    for statement in VARIANTS[name]():
        conn.query(statement)

    def insert(paths: list[Path]) -> float:
        if len(paths) == 1:
            path = paths[0]
        else:
            path = data / "grouped.native"
            path.write_bytes(b"".join(p.read_bytes() for p in paths))
        cpu = time.process_time()
        conn.query(f"INSERT INTO calls ({_COLUMNS}) FROM INFILE '{path}' FORMAT Native")
        return time.process_time() - cpu

    for path in bodies[:warmup]:
        insert([path])
    measured = bodies[warmup:]
    singles = [insert([p]) for p in measured]
    grouped = [insert(measured[i : i + group]) for i in range(0, len(measured) - group + 1, group)]
    rows = int(conn.query("SELECT count() FROM calls", "CSV").bytes().strip())
    digests = {t: _digest(conn, t) for t in DIGESTED}
    conn.close()
    return {
        "ms_per_insert_mean": round(statistics.fmean(singles) * 1000, 1),
        "ms_per_insert_median": round(statistics.median(singles) * 1000, 1),
        f"ms_per_{group}_batch_insert_mean": round(statistics.fmean(grouped) * 1000, 1),
        "rows_stored": rows,
        "digests": digests,
    }


# What the reads see of each view-fed table (its rows summed by key): equal digests, equal answers.
DIGESTED = {
    "rollup_daily": "workspace, bucket, route, provider, model, environment",
    "rollup_hourly_coarse": "workspace, bucket, route, provider, model, environment",
    "rollup_daily_coarse": "workspace, bucket, route, provider, model, environment",
    "rollup_weekly_coarse": "workspace, bucket, route, provider, model, environment",
    "rollup_meta_daily": "workspace, key, bucket, route, provider, model, environment, cls, value",
    "rollup_meta_weekly": "workspace, key, bucket, route, provider, model, environment, cls, value",
}


def _digest(conn: Any, table: str) -> str:
    keys = DIGESTED[table]
    sums = ", ".join(f"sum({n})" for n in schema.SUMS if n not in ("cost_usd", "latency_sum"))
    sql = (
        f"SELECT count(), groupBitXor(cityHash64({keys}, s, round(c, 6), round(l, 3), h)) FROM (SELECT {keys},"
        f" ({sums}) AS s, sum(cost_usd) AS c, sum(latency_sum) AS l, sumMap(hist) AS h FROM {table} GROUP BY {keys})"
    )
    try:
        return str(conn.query(sql, "CSV").bytes().decode().strip())
    except Exception as exc:  # a variant without the table
        return type(exc).__name__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="measured batches of 5,000 rows")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--group", type=int, default=5, help="batches per INSERT in the grouped inserts")
    parser.add_argument("--rounds", type=int, default=2, help="times every variant runs, alternating")
    parser.add_argument("--variants", default="base,none", help=f"comma-separated: {', '.join(VARIANTS)}")
    parser.add_argument("--bodies", type=Path, help="a directory of captured bodies (kept between runs)")
    parser.add_argument("--run-variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_variant:
        bodies = sorted(args.bodies.glob("batch-*.native"))
        print(json.dumps(run_variant(args.run_variant, bodies, args.warmup, args.group)))
        return
    work = args.bodies or Path(tempfile.mkdtemp(prefix="mg-ch-views-"))
    work.mkdir(parents=True, exist_ok=True)
    if len(list(work.glob("batch-*.native"))) < args.warmup + args.batches:
        capture(work, args.warmup + args.batches)
        print(f"captured {args.warmup + args.batches} bodies in {work}", file=sys.stderr)
    names = args.variants.split(",")
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for name in names:
            out = subprocess.run(
                [sys.executable, __file__, "--run-variant", name, "--bodies", str(work), "--warmup",
                 str(args.warmup), "--group", str(args.group)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name}: {results[name][-1]} (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
            load.append(os.getloadavg()[0])
    print(json.dumps({"load_average": [min(load), max(load)], "variants": results}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
