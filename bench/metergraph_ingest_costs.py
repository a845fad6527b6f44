"""Ingest on the embedded engine, this tree against a base tree (``main``), in one run: rows without a
reported cost (the SDK's), with a numeric reported cost, and with a decimal-string one (as metergraphrelay
sends gateway amounts, which only this tree reads).

    flock /tmp/triptych-bench.lock .venv/bin/python bench/metergraph_ingest_costs.py \\
        --base BASE/src --batches 20 --rounds 5

The parent builds the batches once (``metergraph_bench.generate``, gzip JSON of 5,000 rows; every row gets
a reported cost of up to nine decimals in the cost variants) and writes them to a temporary folder. Each
round then runs every variant, in alternation, in a fresh process whose ``PYTHONPATH`` is the tree under
test: it ingests all the batches into a fresh SQLite file the way ``POST /v1/ingest`` does in process
(gunzip, ``core.jsonbody.parse``, ``IngestService.ingest_document`` under the GC pause: normalise, price,
INSERT, COMMIT). Reported per variant, best of the rounds: rows/s (wall) and CPU microseconds per row (this
process's CPU time: less sensitive to a shared machine), and each figure's ratio to the base tree's on
the same rows (the base cannot read decimal strings: that variant is compared with its numeric costs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from metergraph_bench import generate

_WORKER = r"""
import gzip, json, shutil, sys, tempfile, time
from pathlib import Path
from triptych.core import jsonbody
from triptych.metergraph.ingest import IngestService, gc_paused
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.sqlite_call_store import SqliteCallStore

files = sorted(Path(sys.argv[1]).glob("*.json.gz"))
bodies = [f.read_bytes() for f in files]
data = Path(tempfile.mkdtemp(prefix="mg-costs-"))
store = SqliteCallStore.open(data / "metergraph.db")
service = IngestService(store, store.metadata, Pricer(), 5000)
app = AppPrincipal("default", "static")
rows = 0
cpu, wall = time.process_time(), time.perf_counter()
for body in bodies:
    with gc_paused():
        result = service.ingest_document(app, jsonbody.parse(gzip.decompress(body), allow_nan=True))
    assert result.ignored == 0, result
    rows += result.accepted
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
store.close()
shutil.rmtree(data)
print(json.dumps({"rows": rows, "cpu_s": cpu, "wall_s": wall}))
"""


def _batches(out: Path, batches: list[list[dict[str, Any]]], costs: str) -> Path:
    folder = out / costs
    folder.mkdir()
    rnd = random.Random(5)
    for i, batch in enumerate(batches):
        rows = []
        for row in batch:
            row = dict(row)
            if costs != "none":
                amount = f"{rnd.randint(1, 10**8) / 10**9:.9f}".rstrip("0")  # up to $0.1, nine decimals
                row["reported_cost_usd"] = amount if costs == "string" else float(amount)
            rows.append(row)
        document = json.dumps({"schema_version": 1, "rows": rows}).encode()
        (folder / f"{i:04d}.json.gz").write_bytes(gzip.compress(document, 1))
    return folder


def _run(src: Path, folder: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, str(folder)], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"worker failed on {src}:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base", type=Path, required=True, help="the src/ folder of the tree to compare with"
    )
    parser.add_argument("--batches", type=int, default=20, help="batches of 5,000 rows")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of all variants")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1] / "src"
    out = Path(tempfile.mkdtemp(prefix="mg-costs-bench-"))
    batches = list(generate(args.batches * 5000, seed=99))[: args.batches]
    folders = {costs: _batches(out, batches, costs) for costs in ("none", "number", "string")}
    variants = [
        ("base, no cost", args.base, "none"),
        ("this, no cost", here, "none"),
        ("base, numeric cost", args.base, "number"),
        ("this, numeric cost", here, "number"),
        ("this, decimal-string cost", here, "string"),
    ]
    try:
        _compare(args.rounds, args.batches, variants, folders)
    finally:
        shutil.rmtree(out)


def _compare(
    rounds: int, batches: int, variants: list[tuple[str, Path, str]], folders: dict[str, Path]
) -> None:
    rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    cpus: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for _ in range(rounds):
        for name, src, costs in variants:
            got = _run(src, folders[costs])
            rates[name].append(got["rows"] / got["wall_s"])
            cpus[name].append(got["cpu_s"] / got["rows"] * 1e6)
    print(f"{batches * 5000:,} rows a variant, {rounds} rounds; ratios against the base tree")
    print(f"{'variant':28} {'best rows/s':>11} {'ratio':>6} {'best CPU µs/row':>15} {'ratio':>6} "
          f"{'median CPU':>10} {'ratio':>6}")  # fmt: skip
    for name, _, costs in variants:
        base = "base, no cost" if costs == "none" else "base, numeric cost"
        rate, cpu, mid = max(rates[name]), min(cpus[name]), statistics.median(cpus[name])
        print(f"{name:28} {rate:11,.0f} {rate / max(rates[base]):6.3f} {cpu:15.1f} {cpu / min(cpus[base]):6.3f} "
              f"{mid:10.1f} {mid / statistics.median(cpus[base]):6.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
