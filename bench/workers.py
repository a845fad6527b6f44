"""Throughput of ``triptych serve --workers 1`` vs ``--workers 2`` on one PostgreSQL database under
``--clients`` concurrent MCP clients with a mixed read/write load, plus the cost of the per-call
generation read that keeps every worker's caches coherent.

A throwaway PostgreSQL 18 with pgvector is started here (as the tests do) and seeded through the server
with ``--docs`` knowledge-base documents and ``--memories`` memory records over four workspaces. Then
rounds alternate between one and two workers (``1 2 2 1 ...``, so drift of the shared machine falls on
both): each round starts the server, lets the clients run ``--warmup`` seconds, counts the calls that
complete in the next ``--seconds`` and stops the server. Each client is the official MCP client (one
session per client, kept for the round) and loops over: 40 % ``metronix_search_fast``, 30 %
``memory_search``, 20 % ``metronix_store``, 10 % ``memory_store``. Every response names its worker
(``X-Triptych-Worker``), so the spread of the calls over the workers is reported too. Each round also
reports its CPU ceiling: the calls/s the machine's cores allow at the CPU per call measured in it
(server + PostgreSQL + clients), and the share of it reached. Before the rounds, in process: what a
store through another worker costs a worker's next search (its keyword index reloaded, or followed
from the change log).

Run from the repository root:  .venv/bin/python bench/workers.py [--clients 16] [--seconds 30] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import common
import httpx2
import numpy as np
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from triptych.core.pg import PgDatabase
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import NewDocument

sys.path.insert(0, str(common.REPO / "tests"))
from harness import McpSession, ServerProcess  # noqa: E402  (the tests' real server processes)
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)

WORKSPACES = [f"bench-{i}" for i in range(4)]
WORDS = (
    "lighthouse harbour tide compass ledger orbit quantum protein enzyme glacier savanna zebra okapi "
    "rainforest delta turbine battery lithium cobalt neuron synapse cortex vaccine antibody genome "
    "telescope nebula comet asteroid reactor fusion plasma magnet circuit silicon wafer photon laser"
).split()
MIX = ["kb_search"] * 4 + ["memory_search"] * 3 + ["kb_store"] * 2 + ["memory_store"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=30.0, help="timed seconds per round")
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=4, help="rounds, alternating 1 2 2 1 ...")
    p.add_argument(
        "--plan",
        help="the rounds instead, as workers[:embedding threads per worker] separated by commas, e.g."
        " 2,2:1,2:1,2 (TRIPTYCH_EMBED_THREADS; unset: the server's default)",
    )
    p.add_argument("--client-processes", type=int, default=4, help="processes the clients are spread over")
    p.add_argument("--docs", type=int, default=200)
    p.add_argument("--memories", type=int, default=200)
    p.add_argument("--json", type=Path, help="also write the results here")
    return p.parse_args(argv)


def sentence(rng: random.Random, n: int = 14) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


async def call(session: McpSession, rng: random.Random, op: str, client: int, n: int) -> None:
    workspace = rng.choice(WORKSPACES)
    if op == "kb_search":
        result = await session.call("metronix_search_fast", query=sentence(rng, 3), workspace_id=workspace)
    elif op == "memory_search":
        result = await session.call(
            "memory_search", query=sentence(rng, 4), workspace_id=workspace, agent_id="bench"
        )
    elif op == "kb_store":
        result = await session.call(
            "metronix_store",
            content=sentence(rng, 60),
            doc_label=f"c{client}-{n % 50}",
            workspace_id=workspace,
        )
    else:
        result = await session.call(
            "memory_store", content=sentence(rng), workspace_id=workspace, agent_id="bench"
        )
    if result.is_error:
        raise RuntimeError(f"{op}: {result.data}")


async def client_loop(
    url: str, client: int, start: float, warmup: float, seconds: float, out: dict[str, Any]
) -> None:
    rng = random.Random(client)
    workers: Counter[str] = out["workers"]

    async def note(response: httpx2.Response) -> None:
        if time.time() >= start + warmup:
            workers[response.headers.get("x-triptych-worker", "1")] += 1

    async with httpx2.AsyncClient(timeout=120.0, event_hooks={"response": [note]}) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as mcp:
            session = McpSession(mcp)
            n = 0
            while (now := time.time()) < start + warmup + seconds:
                op = MIX[(n + client) % len(MIX)]
                began = time.perf_counter()
                await call(session, rng, op, client, n)
                if now >= start + warmup and time.time() <= start + warmup + seconds:
                    out["calls"][op] += 1
                    out["latency"].append((time.perf_counter() - began) * 1000)
                n += 1


def run_clients(url: str, clients: list[int], start: float, warmup: float, seconds: float) -> dict[str, Any]:
    """One client process's share of the sessions (several processes, so the clients' own CPU is not
    what limits the server)."""
    out: dict[str, Any] = {"calls": Counter(), "workers": Counter(), "latency": []}

    async def run() -> None:
        await asyncio.gather(*(client_loop(url, c, start, warmup, seconds, out) for c in clients))

    asyncio.run(run())
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds the processes have used so far (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    used = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used += (int(fields[11]) + int(fields[12])) / tick
    return used


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def load(
    url: str,
    clients: int,
    processes: int,
    warmup: float,
    seconds: float,
    cpu_of: dict[str, int],
) -> dict[str, Any]:
    start = time.time() + 3.0  # every client process has started its sessions by then
    shares = [list(range(i, clients, processes)) for i in range(processes)]
    calls: Counter[str] = Counter()
    workers: Counter[str] = Counter()
    latency: list[float] = []
    with ProcessPoolExecutor(max_workers=processes) as pool:
        futures = [pool.submit(run_clients, url, share, start, warmup, seconds) for share in shares]
        time.sleep(max(0.0, start + warmup - time.time()))
        server = cpu_of["server"]
        client_pids = [pid for pid in children(os.getpid()) if pid != server]  # the client processes
        cpu_of = {**cpu_of, "clients": -1}

        def pids(root: int) -> list[int]:
            return client_pids if root == -1 else [root, *children(root)]

        before = {name: cpu_seconds(pids(root)) for name, root in cpu_of.items()}
        time.sleep(max(0.0, start + warmup + seconds - time.time()))
        cpu = {name: cpu_seconds(pids(root)) - before[name] for name, root in cpu_of.items()}
        for future in futures:
            out = future.result()
            calls.update(out["calls"])
            workers.update(out["workers"])
            latency += out["latency"]
    total = sum(calls.values())
    per_call = {name: 1000 * used / max(total, 1) for name, used in cpu.items()}
    # What the machine's cores allow at this much CPU per call (server, PostgreSQL and clients all
    # share them): throughput can only approach it if nothing else runs and every process scales.
    ceiling = (os.cpu_count() or 1) * 1000 / max(sum(per_call.values()), 1e-9)
    return {
        "calls_per_s": total / seconds,
        "cpu_ms_per_call": per_call,
        "cpu_ceiling_calls_per_s": ceiling,
        "of_ceiling": total / seconds / ceiling,
        "calls": dict(calls),
        "by_worker": dict(sorted(workers.items())),
        "p50_ms": statistics.median(latency) if latency else None,
    }


async def seed(url: str, docs: int, memories: int) -> None:
    rng = random.Random(7)
    async with httpx2.AsyncClient(timeout=120.0) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http)) as mcp:
            session = McpSession(mcp)
            for i in range(docs):
                await session.call(
                    "metronix_store", content=sentence(rng, 80), doc_label=f"seed-{i}",
                    workspace_id=WORKSPACES[i % 4],
                )  # fmt: skip
            for i in range(memories):
                await session.call(
                    "memory_store", content=sentence(rng), workspace_id=WORKSPACES[i % 4], agent_id="bench"
                )


def generation_read_ms(url: str, samples: int = 300) -> float:
    """p50 of the one statement a search adds to stay coherent across workers (the workspace's
    generation), on an idle pool."""
    db = PgDatabase(url, max_size=1)
    try:
        times = []
        with db.connection() as conn:
            for i in range(samples):
                began = time.perf_counter()
                conn.execute(
                    "SELECT generation FROM kb_workspaces WHERE id = %s", (WORKSPACES[i % 4],)
                ).fetchone()
                times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times)
    finally:
        db.close()


def plan(args: argparse.Namespace) -> list[tuple[int, int | None]]:
    if not args.plan:
        return [((1, 2, 2, 1)[i % 4], None) for i in range(args.rounds)]
    rounds = []
    for item in args.plan.split(","):
        workers, _, threads = item.strip().partition(":")
        rounds.append((int(workers), int(threads) if threads else None))
    return rounds


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per variant, one worker vs two (when both ran) and how near two got to the CPU ceiling."""
    found: dict[str, Any] = {}
    for variant in dict.fromkeys(r["variant"] for r in rounds):
        of = [r for r in rounds if r["variant"] == variant]
        found[variant] = {
            "calls_per_s": statistics.median(r["calls_per_s"] for r in of),
            "cpu_ceiling_calls_per_s": statistics.median(r["cpu_ceiling_calls_per_s"] for r in of),
            "server_cpu_ms_per_call": statistics.median(r["cpu_ms_per_call"]["server"] for r in of),
        }
        found[variant]["of_ceiling"] = (
            found[variant]["calls_per_s"] / found[variant]["cpu_ceiling_calls_per_s"]
        )
        print(
            f"median of {variant}: {found[variant]['calls_per_s']:.1f} calls/s, CPU ceiling"
            f" {found[variant]['cpu_ceiling_calls_per_s']:.0f} calls/s ({100 * found[variant]['of_ceiling']:.0f} %"
            f" reached), server CPU {found[variant]['server_cpu_ms_per_call']:.1f} ms per call",
            file=sys.stderr,
        )
    if "1" in found and "2" in found:
        one, two = found["1"], found["2"]
        # The best ratio the cores allow: two workers at their ceiling over one worker as measured.
        found["ratio"] = two["calls_per_s"] / one["calls_per_s"]
        found["ceiling_ratio"] = two["cpu_ceiling_calls_per_s"] / one["calls_per_s"]
        print(
            f"2 workers / 1 worker: {found['ratio']:.2f} (the cores allow at most {found['ceiling_ratio']:.2f})",
            file=sys.stderr,
            flush=True,
        )
    return found


def keyword_catch_up_ms(url: str, samples: int = 15) -> dict[str, float]:
    """p50 of what one worker pays for another worker's store on its next search: its keyword index of
    the workspace reloaded whole (how every store through another worker was followed before the change
    log) vs the log's entries applied (now). In process, on the seeded database, idle."""
    dim = 384  # the bundled model's: the tables' vectors are that size
    reader = PostgresKnowledgeStore(PgDatabase(url, max_size=2), dim)
    writer = PostgresKnowledgeStore(PgDatabase(url, max_size=2), dim)  # the other worker
    rng = random.Random(11)
    workspace = WORKSPACES[0]
    reload, follow = [], []
    try:
        for i in range(samples):
            text = sentence(rng, 60)
            vector = rng_unit(rng, dim)
            writer.put_document(
                NewDocument(workspace, f"catch-up-{i % 5}", None, text, "text", None, None, {}, str(i), [text], vector)
            )  # fmt: skip
            generation = reader._generation(workspace)
            reader.keywords.sync(workspace, generation - 1)  # a copy one write behind, as the other worker's
            if i % 2:
                began = time.perf_counter()
                reader._catch_up(workspace, generation)
                follow.append((time.perf_counter() - began) * 1000)
            else:
                reader.keywords.forget(workspace)
                began = time.perf_counter()
                reader.keywords.sync(workspace, generation)
                reload.append((time.perf_counter() - began) * 1000)
        return {"reload_p50_ms": statistics.median(reload), "follow_p50_ms": statistics.median(follow)}
    finally:
        reader.close()
        writer.close()


def rng_unit(rng: random.Random, dim: int) -> Any:
    vector = np.array([rng.gauss(0.0, 1.0) for _ in range(dim)], dtype=np.float32)
    return (vector / np.linalg.norm(vector)).reshape(1, dim)


def start(workers: int, url: str, root: Path, threads: int | None = None) -> ServerProcess:
    env = {
        **({"TRIPTYCH_EMBED_THREADS": str(threads)} if threads else {}),
        "TRIPTYCH_DATABASE_URL": url,
        "TRIPTYCH_AUTH_ENABLED": "false",
        "TRIPTYCH_WORKERS": str(workers),
        "TRIPTYCH_LOG_LEVEL": "warning",
    }
    server = ServerProcess(root / "data", env).start(timeout=300)
    deadline = time.monotonic() + 300
    while workers > 1 and f"with {workers} workers" not in server.log():
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(server.log())
        time.sleep(0.2)
    return server


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = PostgresCluster().start()
    root = Path(tempfile.mkdtemp(prefix="triptych-bench-workers-"))
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count()},
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    try:
        url = cluster.create_database("workers")
        server = start(1, url, root)
        try:
            print(
                f"seeding {args.docs} documents and {args.memories} memories ...", file=sys.stderr, flush=True
            )
            asyncio.run(seed(server.url, args.docs, args.memories))
        finally:
            server.stop()
        results["generation_read_p50_ms"] = generation_read_ms(url)
        results["keyword_catch_up"] = keyword_catch_up_ms(url)
        print(
            "another worker's store, paid on the next search: keyword index reloaded"
            f" {results['keyword_catch_up']['reload_p50_ms']:.1f} ms, followed from the change log"
            f" {results['keyword_catch_up']['follow_p50_ms']:.1f} ms (p50)",
            file=sys.stderr,
            flush=True,
        )
        order = plan(args)
        rounds: list[dict[str, Any]] = []
        for n, (workers, threads) in enumerate(order, 1):
            variant = f"{workers}" if threads is None else f"{workers}:{threads}"
            server = start(workers, url, root, threads)
            try:
                before = os.getloadavg()[0]
                supervisor = server.process.pid if server.process else 0
                postmaster = int((cluster.root / "data" / "postmaster.pid").read_text().split()[0])
                cpu_of = {"server": supervisor, "postgresql": postmaster}
                measured = load(
                    server.url, args.clients, args.client_processes, args.warmup, args.seconds, cpu_of
                )
                measured.update(
                    workers=workers,
                    embed_threads=threads,
                    variant=variant,
                    load_before=before,
                    load_after=os.getloadavg()[0],
                )
            finally:
                server.stop()
            rounds.append(measured)
            print(
                f"round {n}/{len(order)}: {workers} worker(s)"
                f"{'' if threads is None else f', {threads} embedding thread(s) each'} {measured['calls_per_s']:.1f} calls/s,"
                f" p50 {measured['p50_ms']:.0f} ms, by worker {measured['by_worker']},"
                f" CPU ceiling {measured['cpu_ceiling_calls_per_s']:.0f} calls/s"
                f" ({100 * measured['of_ceiling']:.0f} % of it),"
                f" CPU ms per call {json.dumps({k: round(v, 1) for k, v in measured['cpu_ms_per_call'].items()})},"
                f" load {measured['load_before']:.1f} -> {measured['load_after']:.1f}",
                file=sys.stderr,
                flush=True,
            )
        results["rounds"] = rounds
        results["summary"] = summary(rounds)
    finally:
        cluster.stop()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
