"""Metergraph on both engines, same data, same run: the embedded SQLite engine and ClickHouse.

    .venv/bin/python bench/metergraph_engines.py --calls 1000000 --http-rows 100000 --workers 1,2,4
    .venv/bin/python bench/metergraph_engines.py --profile 10m   # the issue's 10,000,000 calls

    # Load once (untimed, niced, one engine per process if you like), time the reads later:
    nice -n 19 .venv/bin/python bench/metergraph_engines.py --calls 10000000 --load-batch 100000 \
        --load-only --engines clickhouse --out /work/bench-10m
    flock /tmp/triptych-bench.lock .venv/bin/python bench/metergraph_engines.py --calls 10000000 \
        --reads-only --runs 9 --out /work/bench-10m
    # The ingest runs alone (rows shaped as for --calls, nothing loaded, no reads):
    flock /tmp/triptych-bench.lock .venv/bin/python bench/metergraph_engines.py --calls 1000000 \
        --http-rows 200000 --workers 1,2,4 --ingest-only --engines clickhouse

For each engine: ingest rows/s end to end through ``/v1/ingest`` (gzip JSON batches of 5,000 posted to
1, 2 and 4 ``triptych serve`` worker processes sharing one data directory, two clients per worker), then
``--calls`` calls loaded in-process (``IngestService.ingest_rows``, the code the handler runs) and the
p50 of a 90-day provider/model aggregate, a 90-day ``metadata.prompt_id`` group-by and a 7-day trace page.
The embedded engine's ingest is also given as a fraction of SQLite's own raw bulk-insert rate for the
same rows (the normalized call rows inserted into a bare ``calls`` table, one transaction per batch,
same durability), measured in the same run.

ClickHouse here is the test tree's endpoint (``tests/clickhouse_endpoint.py``: ClickHouse's HTTP
interface over chdb, in its own process, one query at a time): a real server would run inserts and reads
in parallel. The rows are the same generator as ``metergraph_bench.py``. Results print as JSON.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import multiprocessing
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import metergraph_bench
from common import free_port
from metergraph_bench import generate

from triptych.metergraph.call_model import CALL_COLUMNS, PRICING_COLUMNS
from triptych.metergraph.keys import AgentPrincipal, AppPrincipal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings
from triptych.metergraph.sqlite_call_store import SqliteCallStore
from triptych.metergraph.sqlite_schema import MIGRATIONS

ROOT = Path(__file__).resolve().parent.parent
# The figures are at 10,000,000 calls; loading them in-process takes 100,000-row ingest calls
# (one INSERT each on ClickHouse) to finish in reasonable time. The ingest runs post 200,000 rows.
PROFILES: dict[str, dict[str, Any]] = {
    "10m": {"calls": 10_000_000, "http_rows": 200_000, "workers": "1,2,4", "load_batch": 100_000, "runs": 7},
}
TRIPTYCH = Path(sys.executable).with_name("triptych")


def wait_healthy(url: str, path: str = "/healthz") -> None:
    for _ in range(900):
        try:
            if httpx.get(url + path, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy")


def start_clickhouse(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(work / "clickhouse.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "clickhouse_endpoint.py"), "--port", str(port),
         "--path", str(work / "chdb")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, "/ping")
    return process, url


def settle(url: str, limit_s: float = 300) -> dict[str, Any]:
    """Wait (up to ``limit_s``) until ClickHouse runs no merges, so the reads' timing and the endpoint's
    CPU per read are not a background merge's; returns the wait and the active parts of ``calls``."""

    def scalar(sql: str) -> int:
        return int(httpx.get(url, params={"query": sql}, timeout=60).text.strip() or 0)

    started = time.perf_counter()
    while scalar("SELECT count() FROM system.merges") and time.perf_counter() - started < limit_s:
        time.sleep(2)
    parts = scalar("SELECT count() FROM system.parts WHERE database = 'reads' AND table = 'calls' AND active")
    return {"waited_s": round(time.perf_counter() - started, 1), "calls_active_parts": parts}


def bodies(rows: int, stream: int) -> list[bytes]:
    """Gzip JSON batches of 5,000 rows, encoded before timing: the first ``rows`` of a ``stream``-call
    stream over 90 days, so a batch spans the time it would at that volume (one UTC day's partition)."""
    return [
        gzip.compress(json.dumps({"schema_version": 1, "rows": b}).encode(), 1)
        for b in itertools.islice(generate(max(rows, stream), seed=99), -(-rows // 5000))
    ]


def http_ingest(
    data_dir: Path,
    env_extra: dict[str, str],
    payloads: list[bytes],
    rows: int,
    workers: int,
    clients: int,
    clickhouse_pid: int | None,
) -> dict[str, Any]:
    """Rows/s through ``workers`` real ``triptych serve`` processes on one data directory (they share
    its SQLite metadata file: keys, batch records and, on ClickHouse, the call-id sequence)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TRIPTYCH_DATA_DIR": str(data_dir), "MG_TOKENS": "bench-app-token",
           "MG_AGENT_TOKENS": "bench-agent-token", "MG_MAX_ROWS": "5000", "TRIPTYCH_LOG_LEVEL": "warning",
           **env_extra}  # fmt: skip
    servers: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    log = open(data_dir.parent / f"server-{data_dir.name}.log", "wb")  # noqa: SIM115
    try:
        for _ in range(workers):
            port = free_port()
            servers.append(subprocess.Popen([str(TRIPTYCH), "serve", "--port", str(port)], env=env, stdout=log,
                                            stderr=subprocess.STDOUT))  # fmt: skip
            urls.append(f"http://127.0.0.1:{port}")
            wait_healthy(urls[-1])  # one at a time: the first creates the schema
        headers = {"Authorization": "Bearer bench-app-token", "Content-Type": "application/json",
                   "Content-Encoding": "gzip"}  # fmt: skip
        queue = list(payloads)
        lock = threading.Lock()

        def client(url: str) -> None:
            with httpx.Client(timeout=300) as http:
                while True:
                    with lock:
                        if not queue:
                            return
                        body = queue.pop()
                    response = http.post(url + "/v1/ingest", content=body, headers=headers)
                    assert response.status_code == 202, response.text

        threads = [threading.Thread(target=client, args=(url,)) for url in urls for _ in range(clients)]
        cpu_before = sum(process_cpu_seconds(s.pid) for s in servers)
        ch_before = process_cpu_seconds(clickhouse_pid) if clickhouse_pid else 0.0
        client_before = time.process_time()
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        client_cpu = time.process_time() - client_before
        server_cpu = sum(process_cpu_seconds(s.pid) for s in servers) - cpu_before
        ch_cpu = process_cpu_seconds(clickhouse_pid) - ch_before if clickhouse_pid else None
        after = {} if clickhouse_pid else rollups_after_ingest(data_dir / "metergraph.db", urls[0])
    finally:
        for server in servers:
            server.send_signal(signal.SIGINT)
        for server in servers:
            server.wait(timeout=60)
        log.close()
    return {
        "workers": workers,
        "clients_per_worker": clients,
        "rows": rows,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed),
        # The workers' own CPU time: the Python work per row, whatever else the shared machine runs.
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_us_per_row": round(server_cpu / rows * 1e6, 1),
        # ClickHouse's own CPU per row (the endpoint process: parts, materialized views, HTTP).
        **({"clickhouse_cpu_us_per_row": round(ch_cpu / rows * 1e6, 1)} if ch_cpu is not None else {}),
        # The HTTP clients' CPU (this process): with the two above, what a row costs the machine in all.
        "client_cpu_us_per_row": round(client_cpu / rows * 1e6, 1),
        "load_average": os.getloadavg(),
        **after,
    }


def rollups_after_ingest(db: Path, url: str) -> dict[str, Any]:
    """The embedded engine right after the last 202: the calls not folded into the rollups yet, and the
    first aggregate read (which folds them first: the catch-up a reader may pay), then a second one."""
    with sqlite3.connect(db) as conn:
        try:
            pending = conn.execute(
                "SELECT (SELECT COALESCE(MAX(id), 0) FROM calls) - folded FROM rollup_watermark"
            ).fetchone()[0]
        except sqlite3.OperationalError:  # a version writing the rollups with the calls: none pending
            pending = 0
    params = {"group_by": "provider,model", "days": "90"}
    headers = {"Authorization": "Bearer bench-agent-token"}
    times = []
    for _ in range(2):
        started = time.perf_counter()
        response = httpx.get(url + "/v1/agent/usage/aggregates", params=params, headers=headers, timeout=300)
        times.append(round((time.perf_counter() - started) * 1000, 1))
        assert response.status_code == 200, response.text
    return {
        "rollups_pending_at_end": pending,
        "first_aggregate_ms": times[0],
        "second_aggregate_ms": times[1],
    }


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sqlite_raw_insert(work: Path, rows: int, stream: int) -> dict[str, Any]:
    """SQLite's own bulk-insert rate for the same rows: normalized call tuples into a bare ``calls``
    table (its indexes, no rollups), one transaction per 5,000-row batch, WAL with synchronous=FULL."""
    from triptych.metergraph.ingest import IngestService
    from triptych.metergraph.pricing import Pricer

    captured: list[list[tuple[Any, ...]]] = []

    class Capture:  # the normalized rows exactly as ingest hands them to a store
        def insert_batch(self, workspace: str, source: str, calls: Any, *rest: Any) -> None:
            columns = [calls.column(name) for name in CALL_COLUMNS]
            captured.append(list(zip(*columns, strict=True)))

        def workspace(self, workspace: str) -> None:
            return None

    capture = Capture()
    ingest = IngestService(capture, capture, Pricer(), 5000)  # type: ignore[arg-type]
    app = AppPrincipal("default", "bench")
    for batch in itertools.islice(generate(max(rows, stream), seed=99), -(-rows // 5000)):
        ingest.ingest_rows(app, batch, "sdk")
    path = work / "raw.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    ddl = MIGRATIONS[0]
    conn.executescript(ddl[ddl.index("CREATE TABLE calls") : ddl.index("-- Retained prompt")])
    for column in PRICING_COLUMNS:  # added by a later migration
        conn.execute(f"ALTER TABLE calls ADD COLUMN {column}")
    sql = f"INSERT INTO calls ({', '.join(CALL_COLUMNS)}) VALUES ({', '.join('?' * len(CALL_COLUMNS))})"
    started = time.perf_counter()
    for batch_rows in captured:
        conn.execute("BEGIN")
        conn.executemany(sql, batch_rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return {"rows": rows, "seconds": round(elapsed, 2), "rows_per_s": round(rows / elapsed)}


def timed(fn: Callable[[], Any], runs: int, server_pid: int | None = None) -> dict[str, Any]:
    """p50 and min wall time; with ``server_pid``, also that process's CPU per run (the server's own
    work, which the shared machine's load does not inflate as it does wall time)."""
    samples, cpu = [], []
    for _ in range(runs):
        before = process_cpu_seconds(server_pid) if server_pid else 0.0
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
        if server_pid:
            cpu.append((process_cpu_seconds(server_pid) - before) * 1000)
    out = {"p50_ms": round(statistics.median(samples), 1), "min_ms": round(min(samples), 1), "runs": runs}
    if cpu:
        out["clickhouse_cpu_ms_p50"] = round(statistics.median(cpu), 1)
    return out


def _generate_into(queue: Any, calls: int, now: str, load_batch: int) -> None:
    """Child process: the same generator, chunked into ``load_batch`` rows, so making rows overlaps
    ingesting them in the parent (None ends the stream)."""
    metergraph_bench.NOW = datetime.fromisoformat(now)
    batches = generate(calls)
    while chunk := list(itertools.chain.from_iterable(itertools.islice(batches, max(1, load_batch // 5000)))):
        queue.put(chunk)
    queue.put(None)


def start_generator(calls: int, load_batch: int, now: str) -> tuple[Any, Any]:
    """The rows' maker, forked before the store opens (no connections or threads to inherit)."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue(maxsize=3)
    maker = context.Process(target=_generate_into, args=(queue, calls, now, load_batch), daemon=True)
    maker.start()
    return maker, queue


def load_calls(mg: Metergraph, calls: int, maker: Any, queue: Any) -> dict[str, Any]:
    """Load ``calls`` calls in-process (one ingest call per chunk), the rows generated by ``maker``, a
    child process a few chunks ahead."""
    app = AppPrincipal("default", "bench")
    started = time.perf_counter()
    loaded = 0
    try:
        while (chunk := queue.get()) is not None:
            mg.ingest.ingest_rows(app, chunk, "sdk")
            loaded += len(chunk)
            if loaded % 250_000 < len(chunk):
                rate = round(loaded / (time.perf_counter() - started))
                eta = round((calls - loaded) / max(rate, 1) / 60, 1)
                print(f"loaded {loaded:,} of {calls:,} ({rate:,} rows/s, about {eta} min left)",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        maker.join(timeout=5)
        if maker.is_alive():
            maker.kill()
    seconds = time.perf_counter() - started
    return {"rows": loaded, "seconds": round(seconds, 1), "rows_per_s": round(loaded / seconds)}


def timed_reads(mg: Metergraph, runs: int, server_pid: int | None) -> dict[str, Any]:
    """The p50 of the three reads over what ``mg`` holds."""
    who = AgentPrincipal("default", "debug", "bench")

    def agg(group_by: list[str]) -> Callable[[], Any]:
        return lambda: mg.usage.aggregates(who, group_by=group_by, days=90, limit=100)

    agg(["metadata.prompt_id"])()  # the embedded engine builds its projection on the first read
    out = {
        "calls": mg.calls.count_calls("default"),
        "load_average_before_reads": os.getloadavg(),
        "aggregate_provider_model_90d": timed(agg(["provider", "model"]), runs, server_pid),
        "aggregate_metadata_prompt_id_90d": timed(agg(["metadata.prompt_id"]), runs, server_pid),
        "trace_page_7d_limit50": timed(lambda: mg.traces.query(who, days=7, limit=50), runs, server_pid),
        "load_average_after_reads": os.getloadavg(),
    }
    first = agg(["provider", "model"])()
    out["check_totals"] = {"calls": first["totals"]["calls"], "cost_usd": first["totals"]["cost_usd"]}
    return out


def reads(
    data_dir: Path, settings: dict[str, Any], args: argparse.Namespace, now: str, server_pid: int | None
) -> dict[str, Any]:
    """Load ``--calls`` calls (unless ``--reads-only``), then time the three reads (unless ``--load-only``).
    A load's figures are kept next to its data directory, so a later ``--reads-only`` reports them."""
    record = data_dir.with_name(data_dir.name + ".load.json")
    if args.load_only and record.exists():
        raise SystemExit(f"{data_dir} is already loaded ({record}): time it with --reads-only")
    maker = None if args.reads_only else start_generator(args.calls, args.load_batch, now)
    mg = Metergraph.open(data_dir, load_metergraph_settings(tokens=[], agent_rate_per_minute=0, **settings))
    try:
        out: dict[str, Any] = {}
        if maker is not None:
            folding = isinstance(mg.calls, SqliteCallStore) and hasattr(mg.calls, "folder")
            if folding:
                mg.calls.folder.start()  # as in the server: rollups folded in the background
            load = load_calls(mg, args.calls, *maker)
            if folding:
                started = time.perf_counter()
                load["rollups_pending_after_load"] = mg.calls.rollups_pending()
                mg.calls.fold_rollups()
                load["rollups_catch_up_after_load_s"] = round(time.perf_counter() - started, 2)
            record.write_text(json.dumps({**load, "load_batch": args.load_batch, "now": now}, indent=2))
        elif record.exists():
            load = json.loads(record.read_text())
        else:
            raise SystemExit(f"{data_dir} was not loaded: run with --load-only --out {data_dir.parent} first")
        out["load_in_process_rows_per_s"] = load["rows_per_s"]
        out.update({k: v for k, v in load.items() if k.startswith("rollups_")})
        if not args.load_only:
            if "clickhouse_url" in settings:
                out["merges_settled"] = settle(settings["clickhouse_url"].rsplit("/", 1)[0])
            out.update(timed_reads(mg, args.runs, server_pid))
        return out
    finally:
        mg.close()


def data_clock(work: Path, calls: int, kept: bool) -> str:
    """The generator's "now", fixed in ``work/data.json`` so every engine, loaded by one run or by
    several (``--load-only`` one engine at a time), gets the same rows."""
    path = work / "data.json"
    if path.exists():
        data = json.loads(path.read_text())
        if data["calls"] != calls:
            raise SystemExit(f"{work} holds {data['calls']:,} calls, not {calls:,}: use another --out")
    elif kept:
        raise SystemExit(f"{work} holds no loaded data (no data.json): run with --load-only first")
    else:
        data = {"calls": calls, "now": metergraph_bench.NOW.isoformat()}
        path.write_text(json.dumps(data))
    metergraph_bench.NOW = datetime.fromisoformat(data["now"])
    return str(data["now"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls loaded for the reads")
    parser.add_argument("--http-rows", type=int, default=100_000, help="rows posted per ingest run")
    parser.add_argument(
        "--stream",
        type=int,
        default=None,
        help="calls in the 90-day stream the posted rows start (default: --calls); sets how many calls a"
        " 5,000-row batch shares a rollup group with (10000000: the issue's density with fewer --calls)",
    )
    parser.add_argument("--workers", default="1,2,4", help='ingest worker counts ("": skip the ingest runs)')
    parser.add_argument("--engines", default="sqlite,clickhouse")
    parser.add_argument("--runs", type=int, default=9, help="runs of each read")
    parser.add_argument("--clients", type=int, default=2, help="HTTP clients per ingest worker")
    parser.add_argument(
        "--load-batch", type=int, default=5000, help="rows per in-process ingest call when loading --calls"
    )
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), help="preset sizes (explicit options given after it win)"
    )
    parser.add_argument("--out", type=Path, default=None, help="work directory (default: a temp dir)")
    phase = parser.add_mutually_exclusive_group()
    phase.add_argument(
        "--load-only", action="store_true", help="load --calls into --out and stop (no ingest runs, no reads)"
    )
    phase.add_argument(
        "--reads-only", action="store_true", help="time the reads over what --load-only left in --out"
    )
    phase.add_argument(
        "--ingest-only", action="store_true", help="the ingest runs only (no load of --calls, no reads)"
    )
    args = parser.parse_args()
    if args.profile:
        parser.set_defaults(**PROFILES[args.profile])
        args = parser.parse_args()
    if (args.load_only or args.reads_only) and args.out is None:
        parser.error("--load-only and --reads-only need --out (the directory the data is kept in)")
    work = args.out or Path(tempfile.mkdtemp(prefix="mg-engines-"))
    work.mkdir(parents=True, exist_ok=True)
    now = data_clock(work, args.calls, kept=args.reads_only)
    engines = args.engines.split(",")
    # --workers "", --load-only, --reads-only: no ingest runs
    workers = [int(w) for w in args.workers.split(",") if w and not (args.load_only or args.reads_only)]
    results: dict[str, Any] = {"calls": args.calls, "http_rows": args.http_rows, "stream": args.stream or args.calls,
                               "clients_per_worker": args.clients,
                               "load_batch": args.load_batch, "machine": f"{os.cpu_count()} cores",
                               "load_average_at_start": os.getloadavg()}  # fmt: skip
    clickhouse = None
    try:
        if "clickhouse" in engines:
            clickhouse, ch_url = start_clickhouse(work)
        stream = args.stream or args.calls
        payloads = bodies(args.http_rows, stream) if workers else []
        if "sqlite" in engines and workers:
            results["sqlite_raw_bulk_insert"] = sqlite_raw_insert(work, args.http_rows, stream)
            print(json.dumps(results["sqlite_raw_bulk_insert"]), file=sys.stderr, flush=True)
        for engine in engines:
            figures: dict[str, Any] = {"ingest_http": []}
            for n in workers:
                extra = (
                    {"TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": f"{ch_url}/ingest_{n}"}
                    if engine == "clickhouse"
                    else {}
                )
                run = http_ingest(
                    work / f"{engine}-ingest-{n}", extra, payloads, args.http_rows, n, args.clients,
                    clickhouse.pid if engine == "clickhouse" and clickhouse else None,
                )  # fmt: skip
                figures["ingest_http"].append(run)
                print(json.dumps({engine: run}), file=sys.stderr, flush=True)
            if engine == "sqlite" and workers:
                raw = results["sqlite_raw_bulk_insert"]["rows_per_s"]
                for run in figures["ingest_http"]:
                    figures[f"ingest_{run['workers']}_worker_fraction_of_raw_sqlite"] = round(
                        run["rows_per_s"] / raw, 3
                    )
            if args.ingest_only:
                results[engine] = figures
                continue
            settings = {"clickhouse_url": f"{ch_url}/reads"} if engine == "clickhouse" else {}
            figures["reads"] = reads(
                work / f"{engine}-reads", settings, args, now,
                clickhouse.pid if engine == "clickhouse" and clickhouse else None,
            )  # fmt: skip
            print(json.dumps({engine: figures["reads"]}), file=sys.stderr, flush=True)
            results[engine] = figures
    finally:
        if clickhouse is not None:
            clickhouse.send_signal(signal.SIGINT)
            clickhouse.wait(timeout=60)
    results["load_average_at_end"] = os.getloadavg()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
