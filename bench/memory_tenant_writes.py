"""Agent-memory write throughput across tenants in server mode (issue 30 item 1, docs/decisions/0170):
4 workspaces x 2 clients each, on 2 worker processes over one PostgreSQL, each client inserting records
into its workspace through `PostgresMemoryStore.insert` (memory_store's store path). Two arms, alternating
rounds in one run: per-workspace locks (as served) and the global lock of before (every write takes the
store-wide key, one in-process gate).

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/memory_tenant_writes.py [--writes 100] [--rounds 2]

Prints writes/s and p50/p95 per write for each arm, and the ratio. A throwaway PostgreSQL from
``tests/postgres.py``; vectors are random (dim 64): the write path, not the embedder, is measured.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "metronix"))

import numpy as np  # noqa: E402
from common import machine_facts  # noqa: E402
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)
from test_memory_tenant_writes import record  # noqa: E402  (the same record as the tests write)

from triptych.core.pg import PgDatabase, PortableDatabase  # noqa: E402
from triptych.metronix.memory_store import PostgresMemoryStore  # noqa: E402

DIM = 64
TENANTS = 4
CLIENTS_PER_TENANT = 2
WORKERS = 2


class GlobalLockDatabase(PortableDatabase):
    """The "before" arm: every write takes the store-wide key, whatever tenant it names."""

    def lock_statement(self, tenant: str | None) -> tuple[bytes, tuple[str, ...]] | None:
        return super().lock_statement(None)


def worker(url: str, number: int, arm: str, writes: int, start: Any, out: Any) -> None:
    """One worker process: a store and its clients (one per tenant: the tenant's other client is on the
    other worker)."""
    store = PostgresMemoryStore(PgDatabase(url, max_size=8), DIM)
    if arm == "global":
        store.db.__class__ = GlobalLockDatabase
        store._gate._keyed = False  # one in-process gate, as before
    rng = np.random.default_rng(number)
    times: list[float] = []
    lock = threading.Lock()

    def client(tenant: int) -> None:
        mine = []
        for i in range(writes):
            vec = rng.standard_normal(DIM).astype(np.float32)
            began = time.perf_counter()
            store.insert(
                record(f"note {number} {i} {uuid.uuid4().hex}", f"ws-{tenant}"), vec, set(), enqueue=False
            )
            mine.append((time.perf_counter() - began) * 1000)
        with lock:
            times.extend(mine)

    threads = [threading.Thread(target=client, args=(t,)) for t in range(TENANTS)]
    start.wait()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put(times)


def round_of(url: str, arm: str, writes: int) -> tuple[float, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, n, arm, writes, start, out)) for n in range(WORKERS)]
    for proc in procs:
        proc.start()
    time.sleep(3.0)  # the workers open their pools and caches before the clock starts
    began = time.perf_counter()
    start.set()
    times = [t for _ in procs for t in out.get()]
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    return len(times) / elapsed, times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=100, help="inserts per client per round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(machine_facts())
    cluster = PostgresCluster()
    cluster.start()
    try:
        url = cluster.create_database("tenants")
        PostgresMemoryStore(PgDatabase(url), DIM).db.pg.close()  # migrated once
        arms: dict[str, tuple[list[float], list[float]]] = {"per-tenant": ([], []), "global": ([], [])}
        for _ in range(args.rounds):
            for arm, (rates, times) in arms.items():
                rate, round_times = round_of(url, arm, args.writes)
                rates.append(rate)
                times.extend(round_times)
        clients = TENANTS * CLIENTS_PER_TENANT
        print(
            f"{TENANTS} workspaces x {CLIENTS_PER_TENANT} clients on {WORKERS} workers, {args.writes} inserts"
        )
        print(f"per client per round, {args.rounds} rounds per arm ({clients} clients)")
        for arm, (rates, times) in arms.items():
            p50, p95 = statistics.median(times), statistics.quantiles(times, n=20)[18]
            print(
                f"  {arm:>10}: {statistics.median(rates):7.1f} writes/s  p50 {p50:6.2f} ms  p95 {p95:6.2f} ms"
            )
        ratio = statistics.median(arms["per-tenant"][0]) / statistics.median(arms["global"][0])
        print(f"  throughput per-tenant / global: {ratio:.2f}x")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
