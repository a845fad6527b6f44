"""Where an ingest batch's time goes: CPU microseconds per row for each step of ``POST /v1/ingest``'s
work, measured in-process on the benchmark's rows (gzip batches of 5,000, the first rows of a 10 M-call
stream), into a fresh database.

    .venv/bin/python bench/metergraph_ingest_phases.py --batches 20

Steps: gunzip, JSON decode, normalisation and pricing (``IngestService.normalize``), rollup deltas,
building the INSERT parameters, the calls INSERT, the rollup upserts, COMMIT (the WAL synced). The
server adds HTTP and the thread handoffs; ``metergraph_bench.py --ingest-only`` measures it end to end.
CPU time is reported next to wall time because this machine is shared.
"""

from __future__ import annotations

import argparse
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

from triptych.metergraph import store as st
from triptych.metergraph.ingest import IngestService, gc_paused
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.pricing import Pricer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="batches of 5,000 rows")
    parser.add_argument("--stream", type=int, default=10_000_000, help="calls in the stream (batch span)")
    args = parser.parse_args()
    bodies = [
        gzip.compress(json.dumps({"schema_version": 1, "rows": b}).encode(), 1)
        for b in itertools.islice(generate(args.stream, seed=99), args.batches)
    ]
    store = st.SqliteTelemetryStore(Path(tempfile.mkdtemp(prefix="mg-phases-")) / "metergraph.db")
    service = IngestService(store, Pricer(), 5000)
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
    conn = store.db.conn
    for body in bodies:
        with gc_paused():
            raw = run("gunzip", lambda b=body: gzip.decompress(b))
            document = run("json decode", lambda r=raw: orjson.loads(r))
            normalized = run(
                "normalise + price", lambda d=document: service.normalize(app, d["rows"], "sdk", False)
            )
            calls = normalized.calls
            deltas = run("rollup deltas", lambda c=calls: st.rollup_deltas(c, "default"))
            with step("insert parameters"):
                columns = [calls.column(name) for name in st.CALL_COLUMNS]
                mask = tuple(column.count(None) != len(column) for column in columns)
                params = list(zip(*itertools.compress(columns, mask), strict=True))
            conn.execute("BEGIN IMMEDIATE")
            run(
                "calls INSERT",
                lambda p=params, m=mask: st._insert_many(conn, lambda n: st._insert_call(m, n), p, sum(m)),
            )
            with step("rollup upserts"):
                for table, upserts in deltas.items():
                    st._merge_rollups(conn, table, upserts)
            run("COMMIT (WAL synced)", lambda: conn.execute("COMMIT"))
            rows += calls.size
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


if __name__ == "__main__":
    main()
