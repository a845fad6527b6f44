"""Write throughput across tenants in server mode (issue 30 item 1, docs/decisions/0170 and 0171):
4 tenants x 2 clients each, on 2 worker processes over one PostgreSQL (each tenant's two clients on
different workers). ``memory``: each client inserts records into its workspace through
`PostgresMemoryStore.insert` (memory_store's store path; random dim-64 vectors, no embedder). ``hadron``:
each client creates nodes in its organization's memory through `NodeService.create` (hadron_create_node's
service path; memories without embeddings). ``team``: each client alternates a post to its organization's
App Channel (`ChannelService.post`, hadron_channel_post's service path) and a work session start in that
App (`SessionService.start`, hadron_start_session's), docs/decisions/0180. Arms, alternating rounds in one
run: per-tenant locks (as served) and the global lock of before (every write takes the store-wide key; for
memory, one in-process gate too); with ``--main-src`` a third, ``main``: the same clients on the code at
that path (the branch's base), imported by the worker processes in place of this tree's.

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/tenant_writes.py
        [--surface memory,hadron,team] [--writes 60] [--rounds 2] [--main-src /path/to/main/src]

Prints, per surface and arm: writes/s over the round (all clients), p50/p95/mean latency per write (the
mean minus the per-tenant arm's mean is the waiting the global lock adds per write), and the throughput
ratio. A throwaway PostgreSQL from ``tests/postgres.py``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "metronix"))

import numpy as np  # noqa: E402
from common import machine_facts  # noqa: E402
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)
from test_memory_tenant_writes import record  # noqa: E402  (the same record as the tests write)

import triptych  # noqa: E402
from triptych.core.pg import NativeDatabase, PgDatabase  # noqa: E402
from triptych.hadron.identity import HadronCaller  # noqa: E402
from triptych.hadron.services.nodes import NodeFields  # noqa: E402
from triptych.hadron.services.sessions import SessionStart  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402
from triptych.metronix.memory_store import PostgresMemoryStore  # noqa: E402

DIM = 64
TENANTS = 4
CLIENTS_PER_TENANT = 2
WORKERS = 2


class GlobalLockDatabase(NativeDatabase):
    """The "before" arm: every write takes the store-wide key, whatever tenant it names."""

    def lock_statement(self, tenant: str | Sequence[str] | None) -> tuple[bytes, tuple[str, ...]] | None:
        return super().lock_statement(None)


def memory_client(url: str, number: int, arm: str) -> Callable[[int, int], None]:
    """This worker's memory store; a write is one insert into tenant ``t``'s workspace."""
    store = PostgresMemoryStore(PgDatabase(url, max_size=8), DIM)
    if arm == "global":
        store.db.__class__ = GlobalLockDatabase
        store._gate._keyed = False  # one in-process gate, as before
    rng = np.random.default_rng(number)

    def one(tenant: int, i: int) -> None:
        vec = rng.standard_normal(DIM).astype(np.float32)
        store.insert(
            record(f"note {number} {i} {uuid.uuid4().hex}", f"ws-{tenant}"), vec, set(), enqueue=False
        )

    return one


def _open_hadron(url: str, number: int, arm: str, data: str) -> tuple[Hadron, list[HadronCaller], list[Any]]:
    """This worker's Hadron (under the emulated global lock for the ``global`` arm), each tenant's owner as
    a caller, and a selection session per caller."""
    hadron = Hadron.open(Path(data) / f"w{number}" / "hadron.db", database_url=url)
    if arm == "global":
        hadron.stores.db.__class__ = GlobalLockDatabase
    callers = [
        HadronCaller("user", f"owner{t}", user=hadron.tenancy.user_by_handle(f"owner{t}"))
        for t in range(TENANTS)
    ]
    states = [hadron.selections.session(c, f"bench-{number}", None) for c in callers]
    return hadron, callers, states


def hadron_client(url: str, number: int, arm: str, data: str) -> Callable[[int, int], None]:
    """This worker's Hadron; a write is one node created in tenant ``t``'s organization's memory."""
    hadron, callers, states = _open_hadron(url, number, arm, data)

    def one(tenant: int, i: int) -> None:
        fields = NodeFields({"name": f"note {number} {i}"}, frozenset({"name"}))
        urn = f"hrn:node:org{tenant}.example:plans:n{number}x{i}x{uuid.uuid4().hex[:8]}"
        hadron.nodes.create(callers[tenant], states[tenant], urn, fields, None)

    return one


def team_client(url: str, number: int, arm: str, data: str) -> Callable[[int, int], None]:
    """This worker's Hadron; a write is a post to tenant ``t``'s App Channel (even ``i``) or a work session
    started in that App (odd ``i``)."""
    hadron, callers, states = _open_hadron(url, number, arm, data)
    admin = hadron.admin()
    apps = [admin.app(f"hrn:app:org{t}.example:bot") for t in range(TENANTS)]
    rooms = [admin.memory(f"hrn:mem:org{t}.example:room") for t in range(TENANTS)]
    channels = [hadron.team.store.channel_at(room.id, "ops") for room in rooms]

    def one(tenant: int, i: int) -> None:
        if i % 2 == 0:
            channel = channels[tenant]
            assert channel is not None
            hadron.team.channels.post(
                callers[tenant], channel, rooms[tenant], f"note {number} {i}", None, None
            )
        else:
            start = SessionStart(f"bench {number} {i}")
            hadron.team.sessions.start(callers[tenant], states[tenant], apps[tenant], start, None, False)

    return one


IMPORTED: dict[str, set[str]] = {}  # arm -> where its workers imported triptych from
CLIENTS: dict[str, Callable[[str, int, str, str], Callable[[int, int], None]]] = {
    "hadron": hadron_client,
    "team": team_client,
}


def worker(
    surface: str, url: str, data: str, number: int, arm: str, writes: int, start: Any, ready: Any, out: Any
) -> None:
    """One worker process and its clients, one per tenant (the tenant's other client is on the other
    worker)."""
    one = memory_client(url, number, arm) if surface == "memory" else CLIENTS[surface](url, number, arm, data)
    times: list[float] = []
    lock = threading.Lock()
    ready.put(triptych.__file__)  # opened: the clock starts once every worker is

    def client(tenant: int) -> None:
        mine = []
        for i in range(writes):
            began = time.perf_counter()
            one(tenant, i)
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
    out.close()
    out.join_thread()  # the result is sent: leave without waiting for the surface's background threads
    os._exit(0)


def round_of(
    surface: str, url: str, data: str, arm: str, writes: int, main_src: str | None
) -> tuple[float, list[float]]:
    ctx = multiprocessing.get_context("spawn")
    start, ready, out = ctx.Event(), ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(surface, url, data, n, arm, writes, start, ready, out))
        for n in range(WORKERS)
    ]
    saved = list(sys.path)
    if arm == "main":  # a spawned worker starts on the parent's sys.path: the base's tree in place of ours
        assert main_src is not None
        ours = str(Path(triptych.__file__).resolve().parents[1])
        sys.path[:] = [main_src] + [p for p in saved if str(Path(p or ".").resolve()) != ours]
    try:
        for proc in procs:
            proc.start()
    finally:
        sys.path[:] = saved
    sources = {ready.get() for _ in procs}  # the workers open their pools and caches before the clock starts
    IMPORTED.setdefault(arm, sources)
    began = time.perf_counter()
    start.set()
    times = [t for _ in procs for t in out.get()]
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    return len(times) / elapsed, times


def prepare(surface: str, url: str, data: str) -> None:
    """The schema (and Hadron's tenants) once, before any round."""
    if surface == "memory":
        PostgresMemoryStore(PgDatabase(url), DIM).db.pg.close()
        return
    hadron = Hadron.open(Path(data) / "setup" / "hadron.db", database_url=url)
    admin = hadron.admin()
    for t in range(TENANTS):
        admin.create_org(f"org{t}.example")
        admin.create_user(f"owner{t}")
        admin.add_org_member(f"org{t}.example", f"owner{t}", "OWNER")
        admin.create_memory("plans", "knowledge", org=f"org{t}.example", embedding="none")
        if surface == "team":
            owner = HadronCaller("user", f"owner{t}", user=hadron.tenancy.user_by_handle(f"owner{t}"))
            admin.create_app("bot", "Bot", f"org{t}.example", None)
            admin.create_memory("room", "app", app=f"hrn:app:org{t}.example:bot", embedding="none")
            hadron.team.channels.create_channel(owner, f"hrn:mem:org{t}.example:room", "ops", "Ops")
    hadron.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--surface", default="memory,hadron,team", help="memory, hadron, team (comma-separated)"
    )
    parser.add_argument("--writes", type=int, default=60, help="writes per client per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--main-src", help="a third arm: the worker processes on the code at this src path")
    args = parser.parse_args()
    print(machine_facts())
    cluster = PostgresCluster()
    cluster.start()
    try:
        for surface in args.surface.split(","):
            IMPORTED.clear()
            with tempfile.TemporaryDirectory(prefix="tenant-writes-") as data:
                url = cluster.create_database(surface)
                prepare(surface, url, data)
                arms: dict[str, tuple[list[float], list[float]]] = {
                    "per-tenant": ([], []),
                    "global": ([], []),
                }
                if args.main_src:
                    arms["main"] = ([], [])
                for _ in range(args.rounds):
                    for arm, (rates, times) in arms.items():
                        rate, round_times = round_of(surface, url, data, arm, args.writes, args.main_src)
                        rates.append(rate)
                        times.extend(round_times)
            print(
                f"{surface}: {TENANTS} tenants x {CLIENTS_PER_TENANT} clients on {WORKERS} workers,"
                f" {args.writes} writes per client per round, {args.rounds} rounds per arm"
            )
            for arm, sources in IMPORTED.items():
                print(f"  {arm:>10}: triptych from {', '.join(sorted(sources))}")
            for arm, (rates, times) in arms.items():
                p50, p95 = statistics.median(times), statistics.quantiles(times, n=20)[18]
                print(
                    f"  {arm:>10}: {statistics.median(rates):7.1f} writes/s  p50 {p50:6.2f} ms"
                    f"  p95 {p95:6.2f} ms  mean {statistics.fmean(times):6.2f} ms"
                )
            for base in [a for a in arms if a != "per-tenant"]:
                ratio = statistics.median(arms["per-tenant"][0]) / statistics.median(arms[base][0])
                print(f"  throughput per-tenant / {base}: {ratio:.2f}x")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
