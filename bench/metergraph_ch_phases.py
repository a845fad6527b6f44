"""Where a ClickHouse ingest batch's time goes: CPU microseconds per row for each step of ``/v1/ingest``'s
work in-process (worker side) and in the ClickHouse endpoint's process, then the fixed and per-row cost of
an INSERT from the same rows sent one batch per INSERT and ``--group`` batches per INSERT.

    .venv/bin/python bench/metergraph_ch_phases.py --batches 10 --group 5

Rows: gzip JSON batches of 5,000 from ``metergraph_bench.generate`` (the first rows of a 10 M-call
stream, so a batch spans about an hour: one day partition). Four warm-up batches go first (imports,
the client's type tables, the schema's first parts). CPU time, not wall time, because the machine is
shared; the endpoint's figures include its HTTP handling and background merges during the step.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from metergraph_bench import generate
from metergraph_engines import process_cpu_seconds, start_clickhouse

from triptych.metergraph.call_model import CALL_COLUMNS
from triptych.metergraph.clickhouse_call_store import ClickHouseCallStore
from triptych.metergraph.ingest import gc_paused
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

WARMUP = 4


def phases(work: Path, url: str, pid: int, bodies: list[bytes]) -> dict[str, float]:
    """µs per row of each step, worker CPU and ClickHouse CPU, over the batches after the warm-up."""
    mg = Metergraph.open(work / "phases", load_metergraph_settings(tokens=[], clickhouse_url=f"{url}/phases"))
    store = mg.calls
    assert isinstance(store, ClickHouseCallStore)
    spent: dict[str, float] = {}

    def measured(obj: Any, name: str, label: str) -> None:
        inner: Callable[..., Any] = getattr(obj, name)

        def step(*args: Any, **kwargs: Any) -> Any:
            cpu, server = time.process_time(), process_cpu_seconds(pid)
            try:
                return inner(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - cpu
                spent[f"{label}: ClickHouse"] = spent.get(f"{label}: ClickHouse", 0.0) + (
                    process_cpu_seconds(pid) - server
                )

        setattr(obj, name, step)

    measured(mg.ingest, "normalize", "normalise and price")
    measured(store, "reserve_ids", "reserve call ids (SQLite)")
    measured(store._calls, "_insert", "INSERT calls (encode, send, wait)")
    measured(store.metadata, "record_batch", "batch record (SQLite)")
    app = AppPrincipal("default", "bench")
    rows = 0
    cpu = server = 0.0
    try:
        for i, body in enumerate(bodies):
            if i == WARMUP:
                spent.clear()
                cpu, server = time.process_time(), process_cpu_seconds(pid)
            started = time.process_time()
            with gc_paused():
                document = orjson.loads(gzip.decompress(body))
            spent["gunzip and JSON decode"] = (
                spent.get("gunzip and JSON decode", 0.0) + time.process_time() - started
            )
            rows += len(document["rows"]) if i >= WARMUP else 0
            mg.ingest.ingest_document(app, document)
        spent["worker, all steps"] = time.process_time() - cpu
        spent["ClickHouse, all steps"] = process_cpu_seconds(pid) - server
    finally:
        mg.close()
    return {name: round(seconds / rows * 1e6, 1) for name, seconds in spent.items()}


def grouped(work: Path, url: str, pid: int, bodies: list[bytes], group: int) -> dict[str, Any]:
    """ClickHouse CPU per row with one batch per INSERT and with ``group`` batches per INSERT."""
    out: dict[str, Any] = {}
    for per_insert in (1, group):
        database = f"grouped_{per_insert}"
        mg = Metergraph.open(
            work / database, load_metergraph_settings(tokens=[], clickhouse_url=f"{url}/{database}")
        )
        store = mg.calls
        assert isinstance(store, ClickHouseCallStore)
        try:
            batches = []
            for body in bodies:
                normalized = mg.ingest.normalize(
                    AppPrincipal("default", "bench"),
                    orjson.loads(gzip.decompress(body))["rows"],
                    "sdk",
                    False,
                )
                batches.append([list(range(1, normalized.calls.size + 1)),
                                *(normalized.calls.column(n) for n in CALL_COLUMNS)])  # fmt: skip
            store._insert_calls(batches[0])  # warm-up
            todo = batches[1:]
            rows = sum(len(b[0]) for b in todo)
            server = process_cpu_seconds(pid)
            for i in range(0, len(todo), per_insert):
                part = todo[i : i + per_insert]
                store._insert_calls(
                    [list(itertools.chain.from_iterable(b[c] for b in part)) for c in range(len(part[0]))]
                )
            out[f"clickhouse_cpu_us_per_row_{per_insert}_batches_per_insert"] = round(
                (process_cpu_seconds(pid) - server) / rows * 1e6, 1
            )
        finally:
            mg.close()
    one, many = (
        out["clickhouse_cpu_us_per_row_1_batches_per_insert"],
        out[f"clickhouse_cpu_us_per_row_{group}_batches_per_insert"],
    )
    # one = r + F/5000, many = r + F/(5000 * group): the fixed cost F per INSERT and r per row.
    fixed = (one - many) / (1 / 5000 - 1 / (5000 * group)) / 1e6
    out["fixed_ms_per_insert"] = round(fixed * 1000, 1)
    out["per_row_us"] = round(one - fixed * 1e6 / 5000, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=10, help="measured batches of 5,000 rows")
    parser.add_argument("--group", type=int, default=5, help="batches per INSERT in the grouped run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mg-ch-phases-"))
    bodies = [
        gzip.compress(json.dumps({"schema_version": 1, "rows": b}).encode(), 1)
        for b in itertools.islice(generate(10_000_000, seed=99), WARMUP + args.batches)
    ]
    clickhouse, url = start_clickhouse(work)
    try:
        results: dict[str, Any] = {"rows": 5000 * args.batches, "load_average_at_start": os.getloadavg()}
        results["us_per_row"] = phases(work, url, clickhouse.pid, bodies)
        results["insert_cost"] = grouped(work, url, clickhouse.pid, bodies[WARMUP - 1 :], args.group)
        results["load_average_at_end"] = os.getloadavg()
    finally:
        clickhouse.send_signal(signal.SIGINT)
        clickhouse.wait(timeout=60)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
