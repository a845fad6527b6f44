"""Metergraph reads and writes through two simulated machines next to one machine, in the same run.

A throwaway PostgreSQL (keys, control data) and ClickHouse (chdb behind the tests' HTTP endpoint, in this
process: the calls) are started once, as the tests do. A read workspace is seeded with ``--seed-rows``
calls. Then rounds alternate the layout (``1 2 2 1 ...``, so drift of the shared machine falls on both):
each round starts one or two `triptych serve` processes with data directories of their own
(tests/machines.py), always behind the same round-robin TCP balancer (tests/balancer.py; with one
machine it has one backend, so both layouts pay the same hop), and runs two phases of ``--seconds``
each with ``--clients`` threads, each keeping one connection (the balancer spreads the connections):

- writes: ``POST /v1/ingest`` batches of ``--batch`` calls to a write workspace (rows/s acknowledged);
- reads: ``metergraph_get_usage`` (days=1) on the read workspace over the stateless MCP endpoint, one
  JSON-RPC POST per call (calls/s).

Reported per layout: throughput summed over its rounds' phases and latency p50/p95, and the ratio of
two machines to one. The machines here share 2 cores (and with the engines): this measures what the
second machine's process costs or buys on one host, not a second host's capacity.

Run from the repository root:
  flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/two_machines.py [--rounds 2] [--seconds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import common
import httpx

sys.path.insert(0, str(common.REPO / "tests"))
from clickhouse_endpoint import ClickHouseEndpoint  # noqa: E402
from machines import start_machines  # noqa: E402
from postgres import PostgresCluster  # noqa: E402

from triptych.metergraph.service import Metergraph  # noqa: E402
from triptych.metergraph.settings import load_metergraph_settings  # noqa: E402

MCP = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
       "MCP-Protocol-Version": "2025-06-18"}  # fmt: skip


def rows(n: int, route: str = "bench") -> list[dict[str, Any]]:
    now = datetime.now(UTC).isoformat()
    return [{"ts": now, "route": f"{route}-{i % 7}", "provider": "openai", "model": "gpt-4o-mini",
             "input_tokens": 200 + i, "output_tokens": 40, "latency_ms": 300 + i % 50,
             "request_id": uuid.uuid4().hex} for i in range(n)]  # fmt: skip


def keys(database_url: str, clickhouse_url: str) -> tuple[str, str, str]:
    """(app token of the write workspace, app token and agent key of the read workspace), in PostgreSQL."""
    with tempfile.TemporaryDirectory() as tmp:
        mg = Metergraph.open(
            Path(tmp), load_metergraph_settings(clickhouse_url=clickhouse_url), database_url=database_url
        )
        try:
            return (mg.keys.create_app_token("bench-write")[1], mg.keys.create_app_token("bench-read")[1],
                    mg.keys.create_agent_key("bench-read", "debug", None)[1])  # fmt: skip
        finally:
            mg.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_phase(url: str, clients: int, seconds: float, step: Any, pids: list[int]) -> dict[str, Any]:
    """``step(http) -> units`` in ``clients`` threads for ``seconds``: units/s, latency p50/p95, and the
    servers' CPU per request (all machines together)."""
    stop = threading.Event()
    units: list[int] = []
    latencies: list[float] = []
    errors: list[str] = []

    def client() -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    done = step(http)
                except Exception as exc:  # noqa: BLE001 - counted, reported
                    errors.append(type(exc).__name__)
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
                units.append(done)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    cpu_before = sum(cpu_seconds(p) for p in pids)
    began = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    cpu = sum(cpu_seconds(p) for p in pids) - cpu_before
    q = statistics.quantiles(latencies, n=20) if len(latencies) >= 2 else [float("nan")] * 19
    return {"units": sum(units), "seconds": elapsed, "per_s": sum(units) / elapsed, "requests": len(latencies),
            "p50_ms": statistics.median(latencies) if latencies else None, "p95_ms": q[18],
            "errors": len(errors), "server_cpu_ms_per_request": 1000 * cpu / max(1, len(latencies))}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds per layout (alternated 1 2 2 1 ...)")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batch", type=int, default=50, help="calls per ingest batch")
    parser.add_argument("--seed-rows", type=int, default=20_000, help="calls in the read workspace")
    parser.add_argument(
        "--out", type=Path, default=Path(f"/tmp/triptych-bench/two-machines-{int(time.time())}.json")
    )
    args = parser.parse_args()

    facts = common.machine_facts()
    root = Path(tempfile.mkdtemp(prefix="triptych-two-machines-"))
    cluster = PostgresCluster().start()
    endpoint = ClickHouseEndpoint(root / "clickhouse")
    results: dict[str, list[dict[str, Any]]] = {"1": [], "2": []}
    try:
        database_url = cluster.create_database("bench")
        clickhouse_url = endpoint.database_url()
        write_token, read_token, agent_key = keys(database_url, clickhouse_url)
        ingest = {"Authorization": f"Bearer {write_token}"}
        usage = {**MCP, "Authorization": f"Bearer {agent_key}"}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "metergraph_get_usage", "arguments": {"days": 1}}}  # fmt: skip

        def write(http: httpx.Client) -> int:
            response = http.post(
                "/v1/ingest", json={"schema_version": 1, "rows": rows(args.batch)}, headers=ingest
            )
            response.raise_for_status()
            return args.batch

        def read(http: httpx.Client) -> int:
            response = http.post("/v1/agent/mcp", json=call, headers=usage)
            response.raise_for_status()
            assert "error" not in response.json(), response.text
            return 1

        order = [("1", "2", "2", "1")[i % 4] for i in range(2 * args.rounds)]
        for n, layout in enumerate(order):
            machines = start_machines(root / f"round-{n}", database_url, clickhouse_url, hadron_world=False,
                                      count=int(layout))  # fmt: skip
            try:
                if n == 0:  # the read workspace, seeded once through the first round's machines
                    common.log(f"seeding {args.seed_rows} calls")
                    for start in range(0, args.seed_rows, 1000):
                        httpx.post(machines.url + "/v1/ingest", timeout=120,
                                   json={"schema_version": 1, "rows": rows(min(1000, args.seed_rows - start), "read")},
                                   headers={"Authorization": f"Bearer {read_token}"}).raise_for_status()  # fmt: skip
                pids = [s.process.pid for s in machines.servers if s.process is not None]
                run_phase(machines.url, args.clients, 2.0, read, pids)  # warm-up, not counted
                writes = run_phase(machines.url, args.clients, args.seconds, write, pids)
                reads = run_phase(machines.url, args.clients, args.seconds, read, pids)
                spread = [machines.balancer.served.count(i) for i in range(int(layout))]
            finally:
                machines.stop()
            results[layout].append({"writes": writes, "reads": reads, "connections_per_machine": spread})
            common.log(f"round {n + 1}/{len(order)}: {layout} machine(s): writes {writes['per_s']:.0f} rows/s, "
                       f"reads {reads['per_s']:.1f} calls/s")  # fmt: skip
    finally:
        endpoint.close()
        cluster.stop()

    def total(layout: str, phase: str) -> float:
        done = results[layout]
        return sum(r[phase]["units"] for r in done) / sum(r[phase]["seconds"] for r in done)

    def median(layout: str, phase: str, key: str) -> float:
        return statistics.median(r[phase][key] for r in results[layout])

    summary = {
        phase: {
            **{f"{layout}_machine_per_s": round(total(layout, phase), 1) for layout in ("1", "2")},
            **{
                f"{layout}_machine_p50_ms": round(median(layout, phase, "p50_ms"), 1) for layout in ("1", "2")
            },
            **{
                f"{layout}_machine_p95_ms": round(median(layout, phase, "p95_ms"), 1) for layout in ("1", "2")
            },
            **{
                f"{layout}_machine_server_cpu_ms_per_request": round(
                    median(layout, phase, "server_cpu_ms_per_request"), 1
                )
                for layout in ("1", "2")
            },
            "ratio_2_to_1": round(total("2", phase) / total("1", phase), 2),
        }
        for phase in ("writes", "reads")
    }
    facts["loadavg_at_end"] = os.getloadavg()
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "machine": facts, "summary": summary,
               "rounds": results}  # fmt: skip
    common.write_json(args.out, payload)
    print(f"writes (ingest rows/s): {summary['writes']}")
    print(f"reads (metergraph_get_usage calls/s): {summary['reads']}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
