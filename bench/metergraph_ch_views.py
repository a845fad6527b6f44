"""What each materialized view adds to an INSERT into ClickHouse's ``calls``: ClickHouse CPU per INSERT
for schema variants, from the same Native bodies inserted straight into chdb (no HTTP, no Python rows).

    flock /tmp/triptych-bench.lock .venv/bin/python bench/metergraph_ch_views.py --batches 20 --rounds 2 \
        --variants v4,v5,none

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from clickhouse_schema_v4 import V4_WEEKLY  # noqa: E402  (the test tree's record of version 4)

RETENTION = 3650
_COLUMNS = ", ".join(("id", *CALL_COLUMNS))


def _without_views(statements: list[str], *tables: str) -> list[str]:
    heads = tuple(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {t}_mv " for t in tables)
    return [s for s in statements if not s.startswith(heads)]


_FED = (*(t for t in schema.ROLLUPS if t not in schema.DERIVED), schema.META_ROLLUP, schema.TRACE_BOUNDS)


def _only(*tables: str) -> Callable[[], list[str]]:
    return lambda: _without_views(schema.statements(RETENTION), *(t for t in _FED if t not in tables))


VARIANTS: dict[str, Callable[[], list[str]]] = {
    # This schema (version 5) and version 4's (the same plus the two weekly rollups fed by cascades).
    "v5": lambda: schema.statements(RETENTION),
    "v4": lambda: [*schema.statements(RETENTION), *V4_WEEKLY],
    "none": _only(),  # ``calls`` alone
    **{f"only {t}": _only(t) for t in _FED},
    "only rollup_hourly_coarse+cascade": _only("rollup_hourly_coarse", "rollup_daily_coarse"),
}


def _flat_cascade() -> list[str]:
    head = "CREATE MATERIALIZED VIEW IF NOT EXISTS rollup_daily_coarse_mv TO rollup_daily_coarse AS "
    keys = "route, provider, model, environment"
    flat = (
        f"SELECT workspace, coarse AS bucket, {keys}, {', '.join(schema.SUMS)}, hist"
        " FROM (SELECT *, intDiv(bucket, 24) AS coarse FROM rollup_hourly_coarse)"
    )
    return [head + flat if s.startswith(head) else s for s in schema.statements(RETENTION)]


VARIANTS["v5 flat cascade"] = _flat_cascade
VARIANTS["only hourly+flat cascade"] = lambda: _without_views(
    _flat_cascade(), "rollup_daily", schema.META_ROLLUP, schema.TRACE_BOUNDS
)


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
                    AppPrincipal("default", "bench"),
                    orjson.loads(gzip.decompress(body))["rows"],
                    "sdk",
                    False,
                )
                n = normalized.calls.size
                store._insert_calls(
                    [list(range(first, first + n)), *(normalized.calls.column(c) for c in CALL_COLUMNS)]
                )
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
    "rollup_meta_daily": "workspace, key, bucket, route, provider, model, environment, cls, value",
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
    parser.add_argument("--variants", default="v4,v5", help=f"comma-separated: {', '.join(VARIANTS)}")
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
            print(
                f"round {r + 1} {name}: {results[name][-1]} (load {os.getloadavg()[0]:.1f})", file=sys.stderr
            )
            load.append(os.getloadavg()[0])
    print(json.dumps({"load_average": [min(load), max(load)], "variants": results}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
