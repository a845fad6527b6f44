"""App pages benchmark: what the usage overview costs next to the tool read it shows, in the same run.

    .venv/bin/python bench/app_pages.py --calls 500000

Loads ``--calls`` generated calls (bench/metergraph_bench.py's generator: 90 days, hundreds of routes,
tens of models) in process, then times, for each grouping and window, the
``metergraph_get_usage_aggregates`` service read alone (the baseline) and the whole usage page: that read,
the per-day series from the rollups and the HTML render. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metergraph_bench import generate

from triptych.metergraph.keys import AgentPrincipal, AppPrincipal
from triptych.metergraph.pages import usage_view
from triptych.metergraph.pages.render import page
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings


def timed(fn: Callable[[], Any], runs: int) -> dict[str, float]:
    fn()  # warm: caches and the first template compile are not what a person waits for twice
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": round(statistics.median(samples), 2), "max_ms": round(max(samples), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mg-pages-bench-") as tmp:
        mg = Metergraph.open(Path(tmp), load_metergraph_settings())
        try:
            app = AppPrincipal("default", "static")
            loaded = 0
            for batch in generate(args.calls):
                mg.ingest.ingest_rows(app, batch, "sdk")
                loaded += len(batch)
                print(f"\rloaded {loaded:,} calls", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
            who = AgentPrincipal("default", "metadata", "bench")
            results = []
            for by in usage_view.DIMENSIONS:
                for days in (7, 90):

                    def tool(by: str = by, days: int = days) -> Any:
                        return mg.usage.aggregates(who, group_by=[by], days=days, limit=200)

                    def whole_page(by: str = by, days: int = days) -> Any:
                        data = usage_view.overview(mg.usage, who, days, by)
                        return page("usage.html", signed_in=True, workspace="default", role="Metadata",
                                    environments=[], nav=[], sign_out="/app/sign-out", **data,
                                    dimensions=usage_view.DIMENSIONS, day_choices=(1, 7, 30, 90))  # fmt: skip

                    base, full = timed(tool, args.runs), timed(whole_page, args.runs)
                    body = whole_page().body
                    results.append({"by": by, "days": days, "tool_read": base, "usage_page": full,
                                    "page_over_tool": round(full["p50_ms"] / base["p50_ms"], 2),
                                    "page_bytes": len(body)})  # fmt: skip
                    print(json.dumps(results[-1]), file=sys.stderr)
        finally:
            mg.close()
    print(json.dumps({"calls": args.calls, "runs": args.runs, "machine": {"nproc": os.cpu_count(),
                      "cpu": platform.processor() or platform.machine(), "load": os.getloadavg()},
                      "results": results}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
