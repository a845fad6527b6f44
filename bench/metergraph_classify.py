"""Metergraph classification benchmark: ``metergraph_start_classification`` over N calls, next to plain
scans of the same rows measured in the same run, and a workload-matched trace page.

    .venv/bin/python bench/metergraph_classify.py --calls 1000000 --out /tmp/mg-classify.json

Data: the generator of ``bench/metergraph_bench.py`` (300 routes using 1-3 models each, a
``prompt_id``/``team`` tag pair on 85% of calls, lognormal token counts, 90 days), loaded in process
through ``IngestService.ingest_rows``. Classification covers the whole 90 days. Baselines:

- ``scan_sql``: one SQLite pass over the same rows reading the same columns (route, tags, token counts,
  provider, model, cost), summed in C: the floor of any classification that reads every call.
- ``scan_python``: the same rows fetched into Python (what classifying row by row in Python would pay
  before doing any work).

Results print as JSON (and go to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metergraph_bench import generate
from tqdm import tqdm

from triptych.metergraph.keys import AgentPrincipal, AppPrincipal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

WORKSPACE = "default"


def timed(fn: Callable[[], Any], runs: int) -> tuple[dict[str, float], Any]:
    seconds, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return {
        "median_s": round(statistics.median(seconds), 3),
        "min_s": round(min(seconds), 3),
        "runs": runs,
    }, result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls to generate (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=3, help="timed repetitions of each phase (median)")
    parser.add_argument("--out", type=Path, help="write the results JSON here too")
    parser.add_argument("--data-dir", type=Path, help="reuse (or keep) this data directory")
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="mg-classify-"))
    load_start = os.getloadavg()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    mg = Metergraph.open(data_dir, load_metergraph_settings(max_rows=5000))
    try:
        have = mg.calls.count_calls(WORKSPACE)
        if have < args.calls:
            app = AppPrincipal(WORKSPACE, "bench")
            with tqdm(total=args.calls, desc="ingest", unit="call", file=sys.stderr) as bar:
                for batch in generate(args.calls):
                    mg.ingest.ingest_rows(app, batch, "sdk")
                    bar.update(len(batch))
        calls = mg.calls.count_calls(WORKSPACE)
        conn = mg.calls.db.conn
        print(f"{calls:,} calls in {data_dir}; timing ({args.runs} runs each)", file=sys.stderr)

        def scan_sql() -> Any:
            return conn.execute(
                "SELECT COUNT(*), SUM(length(route)), SUM(length(tags)), SUM(input_tokens), SUM(output_tokens),"
                " SUM(length(provider)), SUM(length(model)), SUM(cost_usd) FROM calls WHERE workspace = ?",
                (WORKSPACE,),
            ).fetchone()[0]

        def scan_python() -> Any:
            cursor = conn.cursor()
            cursor.row_factory = None
            return len(cursor.execute(
                "SELECT route, tags, input_tokens, output_tokens, provider, model, cost_usd FROM calls"
                " WHERE workspace = ?", (WORKSPACE,)).fetchall())  # fmt: skip

        who = AgentPrincipal(WORKSPACE, "debug", "bench", None)

        def classify() -> Any:
            return mg.workloads.start_classification(who, days=90)

        scan_python()  # warm the page cache, so no phase pays for the first read of the file
        sql_t, scanned = timed(scan_sql, args.runs)
        py_t, _ = timed(scan_python, args.runs)
        cls_t, doc = timed(classify, args.runs)
        top = doc["workloads"][0]["workload_id"]
        reader = AgentPrincipal(WORKSPACE, "metadata", "bench", None)
        page_t, page = timed(lambda: mg.traces.query(reader, workload=top, days=90, limit=50), args.runs)
        route_t, _ = timed(
            lambda: mg.traces.query(reader, route=doc["workloads"][0]["route"], days=90, limit=50), args.runs
        )
        results = {
            "calls": calls,
            "scanned": scanned,
            "workloads": doc["run"]["progress"]["workloads"],
            "classified_calls": doc["run"]["progress"]["calls"],
            "classification": cls_t,
            "scan_sql": sql_t,
            "scan_python": py_t,
            "ratio_vs_scan_sql": round(cls_t["median_s"] / sql_t["median_s"], 2),
            "ratio_vs_scan_python": round(cls_t["median_s"] / py_t["median_s"], 2),
            "calls_per_s": round(calls / cls_t["median_s"]),
            "query_traces_workload_page50": page_t,
            "query_traces_route_page50": route_t,
            "workload_page_traces": len(page["traces"]),
            "machine": {
                "nproc": os.cpu_count(),
                "cpu": platform.processor() or platform.machine(),
                "load_start": load_start,
                "load_end": os.getloadavg(),
                "python": platform.python_version(),
                "commit": commit,
            },
        }  # fmt: skip
    finally:
        mg.close()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
