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
import shutil
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
from triptych.metergraph.call_model import CALL_COLUMNS, SUMS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from clickhouse_schema_v4 import v4_rollups  # noqa: E402  (the test tree's record of version 4)

RETENTION = 3650
_COLUMNS = ", ".join(("id", *CALL_COLUMNS))


def _without_views(statements: list[str], *tables: str) -> list[str]:
    heads = tuple(f"CREATE MATERIALIZED VIEW IF NOT EXISTS {t}_mv " for t in tables)
    return [s for s in statements if not s.startswith(heads)]


_FED = (schema.ROLLUP_TABLE, schema.META_ROLLUP, schema.TRACE_BOUNDS)


def _only(*tables: str) -> Callable[[], list[str]]:
    return lambda: _without_views(schema.statements(RETENTION), *(t for t in _FED if t not in tables))


def _v4() -> list[str]:
    """Version 4's schema: this one's, its ``rollups`` replaced by version 4's four rollup tables and
    weekly metadata rollup, with their views."""
    head = f"CREATE TABLE IF NOT EXISTS {schema.ROLLUP_TABLE} ("
    mine = [
        s for s in _without_views(schema.statements(RETENTION), schema.ROLLUP_TABLE) if not s.startswith(head)
    ]
    return [*mine, *v4_rollups(RETENTION)]


VARIANTS: dict[str, Callable[[], list[str]]] = {
    "v5": lambda: schema.statements(RETENTION),
    "v4": _v4,
    "none": _only(),  # ``calls`` alone
    **{f"only {t}": _only(t) for t in _FED},
}


def capture(work: Path, batches: int) -> list[Path]:
    """Native bodies of ``batches`` normalised batches, as the engine's client sends them."""
    from triptych.metergraph.clickhouse_call_store import ClickHouseCallStore
    from triptych.metergraph.keys import AppPrincipal
    from triptych.metergraph.service import Metergraph
    from triptych.metergraph.settings import load_metergraph_settings

    # A database and call-id sequence of this capture's own (a later capture into the same directory
    # must not read back an earlier one's rows under the same ids).
    database = f"capture_{int(time.time())}"
    clickhouse, url = start_clickhouse(work)
    try:
        settings = load_metergraph_settings(tokens=[], clickhouse_url=f"{url}/{database}")
        mg = Metergraph.open(work / database, settings)
        store = mg.calls
        assert isinstance(store, ClickHouseCallStore)
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
                sql = f"SELECT {_COLUMNS} FROM {database}.calls WHERE id >= {first} AND id < {first + n} ORDER BY id FORMAT Native"
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
    shutil.rmtree(data, ignore_errors=True)
    return {
        "ms_per_insert_mean": round(statistics.fmean(singles) * 1000, 1),
        "ms_per_insert_median": round(statistics.median(singles) * 1000, 1),
        f"ms_per_{group}_batch_insert_mean": round(statistics.fmean(grouped) * 1000, 1),
        "rows_stored": rows,
        "digests": digests,
    }


# What the reads see of each rollup (its rows summed by key; on version 5 its grain of ``rollups``): its
# counts, integer sums and histograms.
_KEYS = "workspace, bucket, route, provider, model, environment"
DIGESTED = {
    **{t: _KEYS for t in ("rollup_daily", "rollup_hourly_coarse", "rollup_daily_coarse")},
    schema.META_ROLLUP: "workspace, key, bucket, route, provider, model, environment, cls, value",
}


def _digest(conn: Any, table: str) -> str:
    keys = DIGESTED[table]
    source = table
    if table in schema.GRAINS and _exists(conn, schema.ROLLUP_TABLE):
        source = f"(SELECT * FROM {schema.ROLLUP_TABLE} WHERE grain = {schema.GRAINS[table][0]})"
    sums = ", ".join(f"sum({n})" for n in SUMS if n not in ("cost_usd", "latency_sum"))
    # Float sums are left out: summed in another order they differ in the last bits (1e-9 of a latency sum
    # in the millions), which rounding to any fixed number of digits can expose.
    sql = (
        f"SELECT count(), groupBitXor(cityHash64({keys}, s, h)) FROM (SELECT {keys}, ({sums}) AS s,"
        f" sumMap(hist) AS h FROM {source} GROUP BY {keys})"
    )
    if not _exists(conn, table) and source == table:
        return "absent"
    return str(conn.query(sql, "CSV").bytes().decode().strip())


def _exists(conn: Any, table: str) -> bool:
    return conn.query(f"EXISTS TABLE {table}", "CSV").bytes().strip() == b"1"


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
        bodies = sorted(args.bodies.glob("batch-*.native"))[: args.warmup + args.batches]
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
                 str(args.warmup), "--batches", str(args.batches), "--group", str(args.group)],
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
