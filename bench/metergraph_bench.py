"""Metergraph benchmark: ingest throughput end to end through /v1/ingest, and the read paths over a
generated workload (90 days, realistic cardinality), each next to a raw-scan baseline from the same run.

    .venv/bin/python bench/metergraph_bench.py --calls 1000000 --http-rows 200000 --out /tmp/mg-bench

Data: tens of providers and models (most known to genai-prices, a few not), hundreds of routes (each
using 1-3 models), a ``prompt_id`` tag on 85% of calls, 1-4 calls per trace, four environments (one
untagged). The bulk of the calls is loaded in-process through ``IngestService.ingest_rows`` (the same
code the HTTP handler runs); the ingest figure comes from the HTTP phase only. Results print as JSON.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from common import free_port

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.keys import AgentPrincipal, AppPrincipal
from triptych.metergraph.service import COLUMNS_DIR, Metergraph
from triptych.metergraph.settings import load_metergraph_settings

MODELS = {
    "openai": ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o3", "o4-mini", "gpt-3.5-turbo"],
    "anthropic": [
        "claude-3-5-sonnet-latest",
        "claude-3-5-haiku-latest",
        "claude-sonnet-4-0",
        "claude-opus-4-0",
    ],
    "google": ["gemini-1.5-flash", "gemini-1.5-pro", "gemini-2.0-flash", "gemini-2.5-pro"],
    "mistral": ["mistral-large-latest", "mistral-small-latest", "codestral-latest"],
    "groq": ["llama-3.1-8b-instant", "llama-3.3-70b-versatile"],
    "deepseek": ["deepseek-chat", "deepseek-reasoner"],
    "x-ai": ["grok-3", "grok-3-mini"],
    "cohere": ["command-r-plus", "command-r"],
    "together": ["meta-llama/Llama-3.3-70B-Instruct-Turbo"],
    "fireworks": ["accounts/fireworks/models/llama-v3p1-70b-instruct"],
    "azure": ["gpt-4o"],
    "aws": ["anthropic.claude-3-5-sonnet-20240620-v1:0"],
    "in-house": ["ft-support-v7", "ft-router-v2"],  # unknown to the price data: unpriced
}
PAIRS = [(p, m) for p, ms in MODELS.items() for m in ms]
ROUTES = [f"route-{i:03d}" for i in range(300)]
ENVS = ["prod", "prod", "prod", "staging", "dev", None]
NOW = datetime.now(UTC).replace(microsecond=0)


def generate(count: int, seed: int = 7) -> Iterator[list[dict[str, Any]]]:
    """Batches of 5,000 SDK-shaped rows spread over the last 90 days, newest last."""
    rnd = random.Random(seed)
    span_ms = 90 * 86_400_000
    start = NOW - timedelta(days=90)
    pair_weights = [1.0 / (i + 1) for i in range(len(PAIRS))]
    route_weights = [1.0 / (i + 1) ** 0.7 for i in range(len(ROUTES))]
    # A route uses a few models (its main one, a fallback, sometimes a canary), not all of them.
    layout = random.Random(1)
    route_pairs = {r: layout.choices(PAIRS, pair_weights, k=layout.randint(1, 3)) for r in ROUTES}
    batch: list[dict[str, Any]] = []
    trace_left, trace_id, environment = 0, "", None
    for i in range(count):
        if trace_left == 0:
            trace_left = rnd.randint(1, 4)
            trace_id = f"{seed:02x}{i:014x}"
            environment = rnd.choice(ENVS)
        trace_left -= 1
        route = rnd.choices(ROUTES, route_weights)[0]
        provider, model = rnd.choice(route_pairs[route])
        tags = (
            {"prompt_id": f"{route}-p{rnd.randint(1, 6)}", "team": rnd.choice("abcd")}
            if rnd.random() < 0.85
            else {}
        )
        ts = start + timedelta(milliseconds=int(span_ms * (i + rnd.random()) / count))
        input_tokens = int(rnd.lognormvariate(6.5, 1.0))
        batch.append({
            "ts": ts.isoformat(), "route": route, "provider": provider, "model": model,
            "input_tokens": input_tokens, "output_tokens": int(rnd.lognormvariate(5, 1)),
            "cache_read_tokens": input_tokens // 3 if rnd.random() < 0.3 else None,
            "latency_ms": round(rnd.lognormvariate(6.5, 0.8), 1), "status": "success",
            "error": rnd.random() < 0.02, "trace_id": trace_id, "span_id": f"{i:016x}", "tags": tags,
            "environment": environment, "sdk": "python", "sdk_version": "0.6.12",
        })  # fmt: skip
        if len(batch) == 5000:
            yield batch
            batch = []
    if batch:
        yield batch


def http_ingest(
    data_dir: Path, rows: int, clients: int, stream: int, extra_env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Rows/s through a real `triptych serve`: gzip JSON batches of 5,000, pre-encoded before timing.

    The rows are the first ``rows`` of a ``stream``-call stream over 90 days, so a batch spans the time
    it would at that volume (about an hour at 10 M calls): what the rollups see per batch depends on it.
    """
    port = free_port()
    env = {**os.environ, "TRIPTYCH_DATA_DIR": str(data_dir), "MG_TOKENS": "bench-app-token", "MG_MAX_ROWS": "5000",
           "TRIPTYCH_LOG_LEVEL": "warning", **(extra_env or {})}  # fmt: skip
    log = open(data_dir.parent / "server.log", "wb")  # noqa: SIM115
    server = subprocess.Popen([str(Path(sys.executable).with_name("triptych")), "serve", "--port", str(port)],
                              env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if (
                    httpx.get(url + "/healthz", timeout=1).status_code == 200
                    and httpx.get(url + "/health", timeout=1).status_code == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        bodies = [
            gzip.compress(json.dumps({"schema_version": 1, "rows": b}).encode(), 1)
            for b in itertools.islice(generate(max(rows, stream), seed=99), -(-rows // 5000))
        ]
        headers = {
            "Authorization": "Bearer bench-app-token",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }
        queue = list(bodies)
        lock = threading.Lock()

        def worker() -> None:
            with httpx.Client(timeout=120) as client:
                while True:
                    with lock:
                        if not queue:
                            return
                        body = queue.pop()
                    response = client.post(url + "/v1/ingest", content=body, headers=headers)
                    assert response.status_code == 202, response.text

        started = time.perf_counter()
        cpu_before = process_cpu_seconds(server.pid)
        threads = [threading.Thread(target=worker) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        server_cpu = process_cpu_seconds(server.pid) - cpu_before
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        log.close()
    return {
        "rows": rows,
        "stream_calls": stream,
        "clients": clients,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed),
        # The server's own CPU time: on a shared machine this says what a core of it would do alone.
        "server_cpu_s": round(server_cpu, 2),
        "rows_per_server_cpu_s": round(rows / server_cpu) if server_cpu else None,
        "load_average": os.getloadavg(),
    }


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn: Callable[[], Any], runs: int, keep: list[Any] | None = None) -> dict[str, Any]:
    """p50 of ``runs`` calls; ``keep`` receives the last answer."""
    samples, cpu = [], []
    for _ in range(runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        answer = fn()
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
    if keep is not None:
        keep.append(answer)
    return {
        "p50_ms": round(statistics.median(samples), 1),
        "runs": runs,
        "min_ms": round(min(samples), 1),
        # CPU time of this process: what the read costs when it is not waiting for a shared core.
        "cpu_p50_ms": round(statistics.median(cpu), 1),
    }


def timed_catch_up(mg: Metergraph) -> dict[str, Any]:
    """Open the projection (loading its files) and project the calls it lacks."""
    started, cpu_started = time.perf_counter(), time.process_time()
    projected = mg.columns.catch_up(lambda n: print(f"projected {n}", file=sys.stderr, flush=True))
    mg.columns.flush()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    calls = sum(mg.columns.status()["calls"].values())
    return {
        "calls_loaded_from_files": calls - projected,
        "calls_projected": projected,
        "seconds": round(elapsed, 2),
        "cpu_s": round(cpu, 2),
        "calls_per_s": round(projected / elapsed) if projected and elapsed else None,
        "load_average": os.getloadavg(),
    }


def columns_phase(mg: Metergraph, data_dir: Path) -> dict[str, Any]:
    """Catch the projection up with the calls (from scratch on a database built before it), then close."""
    figures = timed_catch_up(mg)
    figures["bytes_on_disk"] = sum(
        p.stat().st_size for p in (data_dir / COLUMNS_DIR).rglob("*") if p.is_file()
    )
    print(json.dumps(figures), file=sys.stderr, flush=True)
    mg.close()
    return figures


def detectors_compare(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Ingest rows/s with the incident detectors off and on, alternating rounds in the same run (the
    machine is shared: the ratio of medians is the figure), the detectors sweeping every
    ``--detectors-tick`` seconds (the server's default is 5)."""
    stream = args.http_stream_calls or args.calls
    runs: dict[str, list[float]] = {"off": [], "on": []}
    for round_no in range(args.detectors_compare):
        for mode in ("off", "on"):
            data_dir = work / f"detectors-{mode}-{round_no}" / "data"
            data_dir.mkdir(parents=True, exist_ok=True)
            env = {
                "MG_INCIDENTS_ENABLED": "true" if mode == "on" else "false",
                "MG_INCIDENT_TICK_SECONDS": str(args.detectors_tick),
            }
            result = http_ingest(data_dir, args.http_rows, args.clients, stream, env)
            runs[mode].append(result["rows_per_s"])
            print(json.dumps({"mode": mode, **result}), file=sys.stderr, flush=True)
    off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    return {"tick_seconds": args.detectors_tick, "rows_per_s": runs, "median_off": off, "median_on": on,
            "on_over_off": round(on / off, 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls loaded for the read benchmarks")
    parser.add_argument("--http-rows", type=int, default=200_000, help="rows posted through /v1/ingest")
    parser.add_argument("--clients", type=int, default=2, help="concurrent HTTP clients")
    parser.add_argument(
        "--http-stream-calls",
        type=int,
        default=None,
        help="post the first --http-rows of a stream this dense over 90 days (default: --calls)",
    )
    parser.add_argument("--out", type=Path, default=None, help="work directory (default: a temp dir)")
    parser.add_argument(
        "--reads-only", action="store_true", help="reuse the data in --out: only time the reads"
    )
    parser.add_argument("--ingest-only", action="store_true", help="only the /v1/ingest phase")
    parser.add_argument(
        "--detectors-tick", type=float, default=5.0, help="sweep interval for --detectors-compare"
    )
    parser.add_argument(
        "--detectors-compare",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="only /v1/ingest, ROUNDS times each with the incident detectors off and on (alternating)",
    )
    parser.add_argument(
        "--baseline-runs", type=int, default=3, help="runs of each raw SQL scan baseline (0: skip them)"
    )
    args = parser.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="mg-bench-"))
    data_dir = work / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "calls": args.calls,
        "machine": f"{os.cpu_count()} cores",
        "date": NOW.isoformat(),
        "load_average_at_start": os.getloadavg(),
    }

    if args.detectors_compare:
        print(json.dumps({**results, "detectors": detectors_compare(work, args)}, indent=2))
        return
    if not args.reads_only:
        stream = args.http_stream_calls or args.calls
        results["ingest_http"] = http_ingest(data_dir, args.http_rows, args.clients, stream)
        print(json.dumps(results["ingest_http"]), file=sys.stderr, flush=True)
        if args.ingest_only:
            print(json.dumps(results, indent=2))
            return
    mg = Metergraph.open(data_dir, load_metergraph_settings(tokens=[], agent_rate_per_minute=0))
    if not args.reads_only:
        app = AppPrincipal("default", "static")
        loaded = args.http_rows
        started, cpu_started = time.perf_counter(), time.process_time()
        for batch in generate(max(0, args.calls - args.http_rows)):
            mg.ingest.ingest_rows(app, batch, "sdk")
            loaded += len(batch)
            if loaded % 500_000 < 5000:
                print(f"loaded {loaded}", file=sys.stderr, flush=True)
        load_s, load_cpu = time.perf_counter() - started, time.process_time() - cpu_started
        bulk = loaded - args.http_rows
        results["bulk_load_in_process"] = {
            "rows": bulk,
            "rows_per_s": round(bulk / load_s) if load_s else None,
            "rows_per_cpu_s": round(bulk / load_cpu) if load_cpu else None,  # generation included
        }
        mg.calls.db.conn.execute("ANALYZE")
    results["calls_stored"] = mg.calls.count_calls("default")
    results["columns"] = columns_phase(mg, data_dir)
    mg = Metergraph.open(data_dir, load_metergraph_settings(tokens=[], agent_rate_per_minute=0))
    results["columns_reopen"] = timed_catch_up(mg)
    print(json.dumps(results["columns_reopen"]), file=sys.stderr, flush=True)

    who = AgentPrincipal("default", "debug", "bench")
    now_ms = int(NOW.timestamp() * 1000) + 86_400_000

    def agg(days: int, group_by: list[str] | None = None) -> Callable[[], Any]:
        return lambda: mg.usage.aggregates(
            who, group_by or ["provider", "model"], days, None, None, None, None, None, None, None, 100
        )

    def raw(
        days: int, dims: list[str], meta: str | None = None, pairs: list[tuple[str, str]] | None = None
    ) -> Callable[[], Any]:
        """The raw SQL scan of the calls (JSON extraction per row): the baseline."""
        since = int((NOW.replace(hour=0, minute=0, second=0) - timedelta(days=days - 1)).timestamp() * 1000)
        f = CallFilter("default", since, now_ms, metadata=pairs or [])
        return lambda: mg.calls.aggregate_calls_sql(f, dims, meta)

    def baseline(name: str, fn: Callable[[], Any], runs: int) -> list[Any]:
        keep: list[Any] = []
        if args.baseline_runs:
            results[name] = timed(fn, min(runs, args.baseline_runs), keep)
            print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)
        return keep

    def projected(
        days: int, dims: list[str], meta: str | None, pairs: list[tuple[str, str]] | None = None
    ) -> Any:
        since = int((NOW.replace(hour=0, minute=0, second=0) - timedelta(days=days - 1)).timestamp() * 1000)
        return mg.calls.aggregate_raw(CallFilter("default", since, now_ms, metadata=pairs or []), dims, meta)

    def check_same(name: str, expected: list[Any], found: Any) -> None:
        """The projection's groups equal the SQL scan's (sums to 1e-9, histograms exactly)."""
        if not expected:
            return
        [sql] = expected
        same = set(sql) == set(found) and all(
            np.allclose(found[k].sums, sql[k].sums, rtol=1e-9) and (found[k].hist == sql[k].hist).all()
            for k in sql
        )
        results[name + "_equals_raw_baseline"] = same
        assert same, name

    results["aggregate_provider_model_7d"] = timed(agg(7), 7)
    baseline("aggregate_provider_model_7d_raw_baseline", raw(7, ["provider", "model"]), 3)
    results["aggregate_provider_model_90d"] = timed(agg(90), 7)
    baseline("aggregate_provider_model_90d_raw_baseline", raw(90, ["provider", "model"]), 3)
    # Metadata reads scan the columnar projection; the first read of a key builds its tag codes.
    results["aggregate_metadata_prompt_id_90d_first_read"] = timed(agg(90, ["metadata.prompt_id"]), 1)
    results["aggregate_metadata_prompt_id_90d"] = timed(agg(90, ["metadata.prompt_id"]), 7)
    results["aggregate_metadata_prompt_id_90d_store"] = timed(lambda: projected(90, [], "prompt_id"), 7)
    sql = baseline("aggregate_metadata_prompt_id_90d_raw_baseline", raw(90, [], "prompt_id"), 3)
    check_same("aggregate_metadata_prompt_id_90d", sql, projected(90, [], "prompt_id"))
    results["aggregate_metadata_prompt_id_7d"] = timed(agg(7, ["metadata.prompt_id"]), 7)
    sql = baseline("aggregate_metadata_prompt_id_7d_raw_baseline", raw(7, [], "prompt_id"), 1)
    check_same("aggregate_metadata_prompt_id_7d", sql, projected(7, [], "prompt_id"))
    results["aggregate_route_metadata_prompt_id_90d"] = timed(agg(90, ["route", "metadata.prompt_id"]), 7)
    sql = baseline("aggregate_route_metadata_prompt_id_90d_raw_baseline", raw(90, ["route"], "prompt_id"), 1)
    check_same("aggregate_route_metadata_prompt_id_90d", sql, projected(90, ["route"], "prompt_id"))
    team = [("team", "b")]

    def filtered() -> Any:
        return mg.usage.aggregates(
            who, ["provider", "model"], 90, None, None, None, None, None, None, dict(team), 100
        )

    results["aggregate_provider_model_90d_metadata_filter"] = timed(filtered, 7)
    sql = baseline(
        "aggregate_provider_model_90d_metadata_filter_raw_baseline",
        raw(90, ["provider", "model"], None, team),
        1,
    )
    check_same(
        "aggregate_provider_model_90d_metadata_filter", sql, projected(90, ["provider", "model"], None, team)
    )
    results["trace_page_7d_limit50"] = timed(lambda: mg.traces.query(who, days=7, limit=50), 15)
    cursor = mg.traces.query(who, days=7, limit=50)["next_cursor"]
    results["trace_page_7d_limit50_second_page"] = timed(
        lambda: mg.traces.query(who, days=7, limit=50, cursor=cursor), 15
    )
    since7 = int((NOW.replace(hour=0, minute=0, second=0) - timedelta(days=6)).timestamp() * 1000)

    def group_by_trace_scan() -> Any:
        return mg.calls.db.conn.execute(
            "SELECT COALESCE(trace_id, 'call:' || id) AS k, MAX(ts_ms) AS m FROM calls WHERE workspace = ? AND ts_ms >= ?"
            " GROUP BY k ORDER BY m DESC LIMIT 50", ("default", since7)
        ).fetchall()  # fmt: skip

    baseline("trace_page_7d_raw_baseline", group_by_trace_scan, 3)
    results["aggregate_route_model_90d"] = timed(agg(90, ["route", "model"]), 3)
    baseline("aggregate_route_model_90d_raw_baseline", raw(90, ["route", "model"]), 3)
    results["trace_sample_spread_7d"] = timed(
        lambda: mg.traces.query(who, days=7, limit=10, sample="spread"), 5
    )
    results["db_bytes"] = (data_dir / "metergraph.db").stat().st_size
    results["load_average_at_end"] = os.getloadavg()
    mg.close()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
