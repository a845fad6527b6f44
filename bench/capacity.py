"""Capacity inputs for docs/scaling.md (issue 30 item 5): what one call of each tool family costs in CPU on
the worker processes and on each engine, what one stored item costs in worker RAM and database bytes, and
write throughput with one tenant and with four, against a real ``triptych serve --workers N`` in server
mode (a throwaway PostgreSQL with pgvector from ``tests/postgres.py``; ClickHouse through
``tests/clickhouse_endpoint.py`` in its own process, so its CPU is its own).

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/capacity.py [--workers 2]
        [--calls 100] [--items 3000] [--nodes 1200] [--tenants 20] [--passes 2] [--budget-mb 24]
        [--budget-tenants 10] [--budget-items 1000] [--skip ram,budget,families,tenants] [--json PATH]

CPU per call: ``utime + stime`` from ``/proc/<pid>/stat`` of the workers (the supervisor's children), of
PostgreSQL (the postmaster and its backends; a backend that starts during a phase counts whole), of the
ClickHouse endpoint and of this process (the clients), read before and after a fixed number of calls made
by ``--sessions`` official MCP clients, each pinned to one worker (round robin), so every worker gets its
share. CPU seconds are what the processes themselves used: another program on the shared cores slows the
calls but does not add to them. The same-run baseline is ``GET /health`` through the same pinned HTTP
clients, measured first and last (its drift is the run's noise); every family is also given as a ratio to
it.

RAM per item (first, on workers restarted for each item kind): a new tenant of ``--items`` chunks (10 per
document) or memories, or ``--nodes`` Hadron nodes, written in four steps in this process straight through
the engine's store classes (random unit vectors under the bundled model's name and size, synthetic text;
no model run), searched through every worker after each step (which loads, then follows, its in-process
indexes of that tenant); the figure is the least-squares slope of the workers' ``VmRSS``, and beside it
the slope of their ``triptych_index_resident_bytes`` (the index budget's own account, from ``/metrics``).
Per resident tenant: ``--tenants`` workspaces of one chunk and one memory, searched through every worker.
Database bytes per item: ``pg_database_size`` before and after (ClickHouse: the ``calls`` parts' bytes on
disk per ingested row). The workers' idle CPU per second, before and after the families, gives a "net" figure too.

RAM under the index budget: workers restarted with ``TRIPTYCH_INDEX_MEMORY_MB=--budget-mb``, then tenants
written and searched one after the other (``budgeted``): RSS against the gauge once the budget is full.

Write throughput: ``memory_store`` and ``hadron_create_node`` from 8 clients (4 per worker), all to one
tenant (workspace, Hadron memory) or spread over four, rounds alternating 1 4 4 1.

``--alternate-env KEY=VALUE`` (for example ``MALLOC_ARENA_MAX=2``): the budget and families phases run
``--passes`` rounds, each on fresh workers without the variable (A), then with it (B); the families' B / A
of the workers' CPU per call comes with each round's ratio and each arm's spread.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import psycopg
from common import REPO, machine_facts, write_json
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from metergraph_bench import generate
from metergraph_engines import start_clickhouse
from prometheus_client.parser import text_string_to_metric_families
from workers import children

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "contract"))
sys.path.insert(0, str(REPO / "tests" / "metronix"))
from hadron.team_world import CREW, build_team  # noqa: E402  (the tests' Hadron tenants)
from hadron.world import HADRON_KEY  # noqa: E402
from harness import SECRET, ServerProcess, bearer, metergraph_key, token  # noqa: E402
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)
from test_memory_tenant_writes import record  # noqa: E402  (the record the tests write)
from test_server_workers import WORKER, start_workers, stop_all  # noqa: E402

from triptych.core.embed import LOCAL_MODEL_NAME  # noqa: E402
from triptych.core.metrics import SAMPLE_EVERY_S  # noqa: E402
from triptych.core.pg import PgDatabase  # noqa: E402
from triptych.hadron.identity import HadronCaller  # noqa: E402
from triptych.hadron.services.nodes import NodeFields  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402
from triptych.metronix.memory_store import PostgresMemoryStore  # noqa: E402
from triptych.metronix.pg_store import PostgresKnowledgeStore  # noqa: E402
from triptych.metronix.store import NewDocument  # noqa: E402

DIM = 384  # the bundled model's
TENANTS = 4
WARM_UP_S = 15.0  # restarted workers' background index warm-up (a few seconds at these sizes)
ORG = "acme.com"
# A Zipf-ish vocabulary of pseudo-words, so keyword indexes hold a realistic spread of terms.
_SYLLABLES = "ka lo mi nu pe ra si to vu xe ba de fi go hu ja ke li mo ny".split()
VOCAB = ["".join(p) for p in itertools.product(_SYLLABLES, repeat=3)][:6000]
WEIGHTS = np.array([1.0 / (i + 1) for i in range(len(VOCAB))])
WEIGHTS /= WEIGHTS.sum()


def text(rng: np.random.Generator, words: int) -> str:
    return " ".join(VOCAB[i] for i in rng.choice(len(VOCAB), size=words, p=WEIGHTS))


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class RandomVectors:
    """The loader's embedder for Hadron nodes written in this process: random unit vectors under the
    server's model name and size (what the workers mirror is the same bytes; the model is not timed)."""

    name, dim = LOCAL_MODEL_NAME, DIM

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return unit(self.rng, len(texts))


# -- processes: CPU and RAM ------------------------------------------------------------------------


def cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Meter:
    """CPU seconds of named process groups between two snapshots (pids looked up at each snapshot, so a
    PostgreSQL backend started meanwhile counts from zero)."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]]) -> None:
        self.groups = groups

    def snap(self) -> dict[str, dict[int, float]]:
        return {name: {pid: cpu_of(pid) for pid in pids()} for name, pids in self.groups.items()}

    def since(self, before: dict[str, dict[int, float]]) -> dict[str, float]:
        after = self.snap()
        return {
            name: sum(max(0.0, used - before[name].get(pid, 0.0)) for pid, used in now.items())
            for name, now in after.items()
        }


# -- the site: engines, tenants, server ------------------------------------------------------------


class Site:
    def __init__(self, workers: int, root: Path) -> None:
        self.root = root
        self.cluster = PostgresCluster().start()
        self.url = self.cluster.create_database("capacity")
        self.clickhouse, ch_url = start_clickhouse(root)
        try:
            self._start(workers, root, ch_url)
        except BaseException:
            self.clickhouse.terminate()
            self.cluster.stop()
            raise

    def _start(self, workers: int, root: Path, ch_url: str) -> None:
        self.ch_url = ch_url
        data = root / "data"
        data.mkdir()
        build_team(data, self.url)  # acme.com with alice as OWNER, the crew team app
        hadron = Hadron.open(data / "hadron.db", database_url=self.url)
        try:
            admin = hadron.admin()
            for slug in [f"t{i}" for i in range(TENANTS)] + ["ram"]:
                admin.create_memory(slug, "knowledge", org=ORG, name=slug)
        finally:
            hadron.close()
        env = {
            "TRIPTYCH_DATABASE_URL": self.url,
            "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": f"{ch_url}/capacity",
            "TRIPTYCH_AUTH_ENABLED": "true",
            "TRIPTYCH_JWT_SECRET": SECRET,
            "TRIPTYCH_HADRON_KEY": HADRON_KEY.encoded(),  # the test world has an encrypted memory
            "TRIPTYCH_LOG_LEVEL": "warning",
            "MG_MAX_ROWS": "5000",
        }
        self.data, self.env, self.workers = data, env, workers
        self.server = start_workers(ServerProcess(data, env), workers, timeout=600)
        self.agent_key = metergraph_key(data, "capacity", "debug", database_url=self.url)
        self.app_token = metergraph_key(data, "capacity", app=True, database_url=self.url)
        postmaster = int((self.cluster.root / "data" / "postmaster.pid").read_text().split()[0])
        self.meter = Meter(
            {
                "workers": lambda: [self.supervisor(), *self.worker_pids()],
                "postgresql": lambda: [postmaster, *children(postmaster)],
                "clickhouse": lambda: [self.clickhouse.pid],
                "clients": lambda: [os.getpid()],
            }
        )

    def supervisor(self) -> int:
        return self.server.process.pid if self.server.process else 0

    def worker_pids(self) -> list[int]:
        return children(self.supervisor())

    def restart(self, **env: str) -> None:
        """New worker processes (same data, ``env`` added): each RAM figure starts from workers that hold
        nothing yet. A few tries: the free port the harness picks can be taken by another program on a
        shared machine before the supervisor listens on it."""
        stop_all(self.server)
        for attempt in range(3):
            try:
                self.server = start_workers(
                    ServerProcess(self.data, {**self.env, **env}), self.workers, timeout=600
                )
                return
            except RuntimeError as exc:
                if attempt == 2 or "Address already in use" not in str(exc):
                    raise
                print("    the port was taken meanwhile: starting again", file=sys.stderr, flush=True)

    def rss(self) -> list[float]:
        return [rss_mb(pid) for pid in sorted(self.worker_pids())]

    def index_mb(self) -> list[float]:
        """Each worker's ``triptych_index_resident_bytes`` (every index kind summed), in MB, in the order of
        ``rss``: the memory budget's own account of what the in-process indexes hold. Every worker samples
        its gauges every ``SAMPLE_EVERY_S`` into the files a scrape sums, so a caller waits that long after
        the searches it wants counted (``settle_gauges``)."""
        return [round(sum(kinds.values()) / 2**20, 2) for kinds in self.index_bytes()]

    def index_bytes(self) -> list[dict[str, float]]:
        """Each worker's resident bytes by index kind ("vectors", "keywords", "attributes", "links")."""
        with httpx2.Client(timeout=60) as http:
            response = http.get(self.server.url + "/metrics")
        response.raise_for_status()
        found: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name == "triptych_index_resident_bytes":
                    pid = sample.labels.get("pid", str(self.supervisor()))
                    found.setdefault(pid, {})[sample.labels["index"]] = sample.value
        return [found.get(str(pid), {}) for pid in sorted(self.worker_pids())]

    def index_kinds_mb(self) -> dict[str, float]:
        """The workers' mean ``triptych_index_resident_bytes`` per index kind, in MB."""
        workers = self.index_bytes()
        names = sorted({kind for kinds in workers for kind in kinds})
        return {k: round(statistics.fmean(w.get(k, 0.0) for w in workers) / 2**20, 3) for k in names}

    def evictions(self) -> int:
        """Index partitions forgotten by every worker so far (``triptych_index_evictions_total``)."""
        with httpx2.Client(timeout=60) as http:
            text = http.get(self.server.url + "/metrics").text
        return round(
            sum(
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "triptych_index_evictions_total"
            )
        )

    def db_bytes(self) -> int:
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        stop_all(self.server)
        self.clickhouse.terminate()
        self.clickhouse.wait(timeout=60)
        self.cluster.stop()


# -- clients ---------------------------------------------------------------------------------------

Call = Callable[[Any, int], Awaitable[None]]


async def tool(client: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    body = result.content[0].text if result.content else "{}"
    if result.is_error:
        raise RuntimeError(f"{name} refused: {body[:400]}")
    if result.structured_content:
        return dict(result.structured_content)
    return dict(json.loads(body)) if body.startswith("{") else {}


def hit_count(payload: dict[str, Any]) -> int:
    """How many results a search answered (a check that the tenant was really searched)."""
    for key in ("results", "hits", "memories", "items"):
        if isinstance(payload.get(key), list):
            return len(payload[key])
    return -1


@asynccontextmanager
async def on_worker(site: Site, worker: int, headers: dict[str, str], path: str) -> AsyncIterator[Any]:
    """An MCP client whose connection was handed to ``worker`` (new connections until one is). Unlike the
    tests' ``pinned``, a later reconnect to another worker (after the server's keep-alive timeout, while
    a session idles between phases) is allowed: CPU is counted over every worker."""
    for _ in range(60):
        http = httpx2.AsyncClient(headers=headers, timeout=120.0)
        async with http:
            if (await http.get(site.server.url + "/health")).headers.get(WORKER) != str(worker):
                continue
            async with Client(streamable_http_client(site.server.url + path, http_client=http)) as client:
                yield client
            return
    raise RuntimeError(f"no connection reached worker {worker} in 60 tries")


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside nested exception groups (the MCP client's task groups nest them deeply)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


@asynccontextmanager
async def sessions(site: Site, path: str, headers: dict[str, str], n: int) -> AsyncIterator[list[Any]]:
    """``n`` official MCP clients, client ``i`` pinned to worker ``i % workers + 1``."""
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(on_worker(site, i % site.workers + 1, headers, path))
            for i in range(n)
        ]
        yield clients


@asynccontextmanager
async def http_clients(
    site: Site, n: int, headers: dict[str, str]
) -> AsyncIterator[list[httpx2.AsyncClient]]:
    """``n`` keep-alive HTTP clients, client ``i`` on worker ``i % workers + 1``."""
    async with AsyncExitStack() as stack:
        found: list[httpx2.AsyncClient] = []
        for i in range(n):
            want = str(i % site.workers + 1)
            for _ in range(60):
                http = httpx2.AsyncClient(headers=headers, timeout=120.0)
                response = await http.get(site.server.url + "/health")
                if response.headers.get(WORKER) == want:
                    stack.push_async_callback(http.aclose)
                    found.append(http)
                    break
                await http.aclose()
            else:
                raise RuntimeError(f"no connection reached worker {want}")
        yield found


async def idle_rate(site: Site, seconds: float = 10.0) -> dict[str, float]:
    """CPU ms per second of each process group while nobody calls."""
    before = site.meter.snap()
    await asyncio.sleep(seconds)
    return {k: round(1000 * v / seconds, 2) for k, v in site.meter.since(before).items()}


async def drive(site: Site, clients: Sequence[Any], call: Call, calls: int) -> dict[str, Any]:
    """``calls`` calls shared by ``clients`` (each client's in sequence); CPU per call and calls/s."""
    counter = itertools.count()
    latencies: list[float] = []

    errors: list[str] = []

    async def loop(client: Any) -> None:
        while (i := next(counter)) < calls:
            began = time.perf_counter()
            try:
                await call(client, i)
            except Exception as exc:  # noqa: BLE001 - counted and shown, the phase goes on
                if not errors:
                    print(f"    first error: {exc}", file=sys.stderr, flush=True)
                errors.append(str(exc)[:200])
                continue
            latencies.append((time.perf_counter() - began) * 1000)

    before = site.meter.snap()
    load = os.getloadavg()[0]
    began = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in clients))
    wall = time.perf_counter() - began
    cpu = site.meter.since(before)
    return {
        "calls": calls,
        "errors": len(errors),
        "wall_s": round(wall, 2),
        "calls_per_s": round(calls / wall, 1),
        "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
        "cpu_ms_per_call": {k: round(1000 * v / calls, 2) for k, v in cpu.items()},
        "load": [round(load, 1), round(os.getloadavg()[0], 1)],
    }


# -- the tool families -----------------------------------------------------------------------------


def ws(i: int) -> str:
    return f"tenant-{i % TENANTS}"


def mem(i: int) -> str:
    return f"hrn:mem:{ORG}:t{i % TENANTS}"


async def families(site: Site, calls: int, n_sessions: int, rng: np.random.Generator) -> dict[str, Any]:
    out: dict[str, Any] = {}
    admin = bearer(token("bench", "admin"))
    alice = bearer(token("alice"))
    agent = {"Authorization": f"Bearer {site.agent_key}"}
    ingest_headers = {"Authorization": f"Bearer {site.app_token}", "Content-Type": "application/json",
                      "Content-Encoding": "gzip"}  # fmt: skip
    batch_rows = 50
    tag = uuid.uuid4().hex[:6]  # this pass's documents and nodes are new ones
    rows = [r for b in generate(calls * batch_rows, seed=int(rng.integers(1 << 30))) for r in b]
    bodies = [
        gzip.compress(json.dumps({"schema_version": 1, "rows": rows[k : k + batch_rows]}).encode(), 1)
        for k in range(0, len(rows), batch_rows)
    ]
    texts = [text(rng, 120) for _ in range(calls)]
    queries = [text(rng, 4) for _ in range(2 * calls)]
    notes = [text(rng, 30) for _ in range(calls)]

    async def health(http: httpx2.AsyncClient, i: int) -> None:
        response = await http.get(site.server.url + "/health")
        assert response.status_code == 200

    async def ingest(http: httpx2.AsyncClient, i: int) -> None:
        response = await http.post(site.server.url + "/v1/ingest", content=bodies[i], headers=ingest_headers)
        assert response.status_code == 202, response.text

    async with (
        http_clients(site, n_sessions, {}) as plain,
        sessions(site, "/mcp", admin, n_sessions) as mx,
        sessions(site, "/hadron/mcp", alice, n_sessions) as hd,
        sessions(site, "/v1/agent/mcp", agent, n_sessions) as mg,
    ):
        for client in hd:
            await tool(client, "hadron_set_active_app", {"app": CREW})
        # The first post creates the chat: concurrent first posts to a new App's chat were refused with
        # URN_ALREADY_EXISTS in this benchmark's first runs (reported to the lead), so one goes first.
        await tool(hd[0], "hadron_team_chat_post", {"body": "hello"})
        for client in mx:  # warm every worker's code paths (and the model) before anything is timed
            await tool(client, "metronix_search_fast", {"query": "warm", "workspace_id": ws(0)})
        steps: list[tuple[str, Sequence[Any], Call, int]] = [
            ("health (baseline)", plain, health, 4 * calls),
            ("metronix_store", mx, lambda c, i: tool(c, "metronix_store", {
                "content": texts[i], "doc_label": f"doc-{tag}-{i}", "workspace_id": ws(i)}), calls),
            ("metronix_search_fast", mx, lambda c, i: tool(c, "metronix_search_fast", {
                "query": queries[i], "workspace_id": ws(i)}), 2 * calls),
            ("memory_store", mx, lambda c, i: tool(c, "memory_store", {
                "content": notes[i], "workspace_id": ws(i), "agent_id": "bench"}), calls),
            ("memory_search", mx, lambda c, i: tool(c, "memory_search", {
                "query": queries[-1 - i], "workspace_id": ws(i), "agent_id": "bench"}), 2 * calls),
            ("hadron_create_node", hd, lambda c, i: tool(c, "hadron_create_node", {
                "loc": f"{mem(i).replace('hrn:mem:', 'hrn:node:')}:n{tag}x{i}", "name": f"Note {i}",
                "content": notes[i]}), calls),
            ("hadron_find_nodes", hd, lambda c, i: tool(c, "hadron_find_nodes", {
                "query": queries[i], "memoryUrn": mem(i)}), 2 * calls),
            ("hadron_find_nodes (hybrid)", hd, lambda c, i: tool(c, "hadron_find_nodes", {
                "query": queries[-1 - i], "memoryUrn": mem(i), "mode": "hybrid"}), 2 * calls),
            ("hadron_team_chat_post", hd, lambda c, i: tool(c, "hadron_team_chat_post", {
                "body": notes[i]}), calls),
            (f"ingest ({batch_rows} rows per POST /v1/ingest)", plain, ingest, calls),
            ("metergraph_get_usage", mg, lambda c, i: tool(c, "metergraph_get_usage", {"days": 7}), 2 * calls),
            ("health (baseline, again)", plain, health, 4 * calls),
        ]  # fmt: skip
        # The workers' background work (detector sweeps, webhook and lease polls, ClickHouse merges):
        # CPU per second with no call at all, before and after; each family's "net" figure subtracts it
        # for the family's wall time.
        idle = [await idle_rate(site)]
        for name, clients, call, n in steps:
            out[name] = await drive(site, clients, call, n)
            print(f"  {name}: {json.dumps(out[name])}", file=sys.stderr, flush=True)
        idle.append(await idle_rate(site))
        out["idle_cpu_ms_per_s"] = idle
        for result in [r for r in out.values() if isinstance(r, dict) and "wall_s" in r]:
            result["cpu_ms_per_call_net"] = {
                group: round(max(0.0, used - statistics.fmean(i[group] for i in idle) * result["wall_s"]
                                 / result["calls"]), 2)
                for group, used in result["cpu_ms_per_call"].items()
            }  # fmt: skip
    base = statistics.fmean(
        out[k]["cpu_ms_per_call"]["workers"] for k in ("health (baseline)", "health (baseline, again)")
    )
    for result in [r for r in out.values() if isinstance(r, dict) and "cpu_ms_per_call" in r]:
        result["worker_cpu_vs_health"] = round(result["cpu_ms_per_call"]["workers"] / max(base, 1e-6), 1)
    with httpx2.Client(timeout=60) as http:
        parts = http.get(site.ch_url, params={"query": (
            "SELECT sum(bytes_on_disk), sum(rows) FROM system.parts"
            " WHERE active AND database = 'capacity' AND table = 'calls'")}).text.split()  # fmt: skip
    with psycopg.connect(site.url) as conn:  # the connections the workers hold open after all that
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    out["postgresql_connections"] = int(row[0]) if row else None
    out["clickhouse_bytes_per_row"] = round(int(parts[0]) / max(1, int(parts[1])), 1) if parts else None
    return out


# -- RAM and bytes per item ------------------------------------------------------------------------


async def touch(site: Site, path: str, headers: dict[str, str], name: str, args: dict[str, Any]) -> list[int]:
    """One search through every worker (each loads its mirror of the tenant), then a short settle; the
    number of results each worker answered."""
    hits = []
    for worker in range(1, site.workers + 1):
        async with on_worker(site, worker, headers, path) as client:
            hits.append(hit_count(await tool(client, name, args)))
    await asyncio.sleep(2.0)
    return hits


def mean_growth(before: list[float], after: list[float]) -> float:
    return statistics.fmean(a - b for a, b in zip(after, before, strict=True))


async def grow(
    site: Site,
    items: int,
    load: Callable[[int, int], Awaitable[None]],
    search: Callable[[], Awaitable[list[int]]],
    steps: int = 4,
) -> dict[str, Any]:
    """A new tenant written in ``steps`` parts, searched through every worker after each (the search
    loads, then follows, each worker's in-process indexes of it), the workers' RSS read after each. RAM
    per 1,000 items is the least-squares slope of the mean RSS over the items after the first part (RSS
    moves in steps as the allocator takes and returns memory: several points, not two); what the first
    part grew beyond that slope is the tenant's fixed cost of being resident."""
    await settle_gauges()
    points = [(0, site.rss())]
    gauges = [(0, site.index_mb())]
    kinds = [(0, site.index_kinds_mb())]
    db0 = site.db_bytes()
    hits: list[list[int]] = []
    began = time.perf_counter()
    for k in range(steps):
        lo, hi = items * k // steps, items * (k + 1) // steps
        await load(lo, hi)
        hits.append(await search())
        await settle_gauges()
        points.append((hi, site.rss()))
        gauges.append((hi, site.index_mb()))
        kinds.append((hi, site.index_kinds_mb()))
    db1 = site.db_bytes()
    slope, first = slope_of(points)
    index_slope, index_first = slope_of(gauges)
    return {
        "items": items,
        "rss_mb": {n: [round(x, 1) for x in r] for n, r in points},
        "index_resident_mb": {n: r for n, r in gauges},
        "index_resident_mb_by_kind": {n: r for n, r in kinds},
        "results_per_search": hits,
        "rss_mb_per_1000_per_worker": round(1000 * slope, 2),
        "rss_mb_first_part_beyond_slope": round(first, 2),
        "index_mb_per_1000_per_worker": round(1000 * index_slope, 3),
        "index_mb_first_part_beyond_slope": round(index_first, 3),
        "rss_per_index_byte": round(slope / index_slope, 2) if index_slope > 0 else None,
        "db_bytes_per_item": round((db1 - db0) / items),
        "seconds": round(time.perf_counter() - began, 1),
    }


async def settle_gauges() -> None:
    """Long enough for every worker to have sampled its gauges since the last search (GaugeSampler)."""
    await asyncio.sleep(SAMPLE_EVERY_S + 1.0)


def slope_of(points: list[tuple[int, list[float]]]) -> tuple[float, float]:
    """The least-squares slope of the workers' mean over the items after the first part, and what the first
    part grew beyond that slope (the tenant's fixed cost)."""
    xs = np.array([n for n, _ in points[1:]], dtype=np.float64)
    ys = np.array([statistics.fmean(r) for _, r in points[1:]], dtype=np.float64)
    slope = float(np.polyfit(xs, ys, 1)[0]) if len(xs) > 1 else 0.0
    first = statistics.fmean(points[1][1]) - statistics.fmean(points[0][1])
    return slope, first - slope * points[1][0]


async def fresh(site: Site, **env: str) -> None:
    """New workers (``env`` added), their search paths warmed on other (small) tenants: what grows next is
    the new tenant's, not the code's first allocations or what another phase freed."""
    admin, alice = bearer(token("bench", "admin")), bearer(token("alice"))
    site.restart(**env)
    await touch(site, "/mcp", admin, "metronix_search_fast", {"query": "warm", "workspace_id": ws(1)})
    await touch(
        site, "/mcp", admin, "memory_search", {"query": "warm", "workspace_id": ws(1), "agent_id": "x"}
    )
    for mode in ("keyword", "hybrid"):
        await touch(site, "/hadron/mcp", alice, "hadron_find_nodes",
                    {"query": "warm", "memoryUrn": mem(1), "mode": mode})  # fmt: skip


async def ram(site: Site, items: int, nodes: int, tenants: int, rng: np.random.Generator) -> dict[str, Any]:
    out: dict[str, Any] = {}
    admin = bearer(token("bench", "admin"))
    alice = bearer(token("alice"))
    kb = PostgresKnowledgeStore(PgDatabase(site.url, max_size=2), DIM)
    memories = PostgresMemoryStore(PgDatabase(site.url, max_size=2), DIM)
    hadron: Hadron | None = None

    def show(name: str) -> None:
        print(f"  {name}: {json.dumps(out[name])}", file=sys.stderr, flush=True)

    try:

        async def documents(lo: int, hi: int) -> None:
            for d in range(lo // 10, hi // 10):  # 10 chunks per document
                chunks = [text(rng, 120) for _ in range(10)]
                kb.put_document(NewDocument("ram-kb", f"doc-{d}", None, "\n\n".join(chunks), "text", None, None,
                                            {}, uuid.uuid4().hex, chunks, unit(rng, 10)))  # fmt: skip

        async def kb_search() -> list[int]:
            return await touch(
                site, "/mcp", admin, "metronix_search_fast", {"query": text(rng, 3), "workspace_id": "ram-kb"}
            )

        await fresh(site)
        out["kb chunks"] = await grow(site, items, documents, kb_search)
        show("kb chunks")

        async def records(lo: int, hi: int) -> None:
            vectors = unit(rng, hi - lo)
            for k in range(lo, hi):
                memories.insert(
                    record(f"{text(rng, 30)} {k}", "ram-mem"), vectors[k - lo], set(), enqueue=False
                )

        async def memory_search() -> list[int]:
            return await touch(site, "/mcp", admin, "memory_search",
                        {"query": text(rng, 3), "workspace_id": "ram-mem", "agent_id": "hermes"})  # fmt: skip

        await fresh(site)
        out["memories"] = await grow(site, items, records, memory_search)
        show("memories")

        hadron = Hadron.open(site.root / "loader-hadron.db", RandomVectors(rng), database_url=site.url)
        caller = HadronCaller("user", "alice", user=hadron.tenancy.user_by_handle("alice"))
        state = hadron.selections.session(caller, "capacity-loader", None)

        async def hadron_nodes(lo: int, hi: int) -> None:
            for i in range(lo, hi):
                fields = NodeFields(
                    {"name": f"Node {i}", "content": text(rng, 30)}, frozenset({"name", "content"})
                )
                hadron.nodes.create(caller, state, f"hrn:node:{ORG}:ram:n{i}", fields, None)

        async def node_search() -> list[
            int
        ]:  # keyword (the default) and hybrid: both of the memory's indexes
            hits: list[int] = []
            for mode in ("keyword", "hybrid"):
                hits += await touch(site, "/hadron/mcp", alice, "hadron_find_nodes",
                                    {"query": text(rng, 3), "memoryUrn": f"hrn:mem:{ORG}:ram", "mode": mode})  # fmt: skip
            return hits

        await fresh(site)
        out["hadron nodes"] = await grow(site, nodes, hadron_nodes, node_search)
        show("hadron nodes")

        loaded: list[int] = []  # tenants written and not searched yet

        async def small_tenants(lo: int, hi: int) -> None:
            for t in range(lo, hi):
                chunk = text(rng, 120)
                kb.put_document(NewDocument(f"resident-{t}", "doc", None, chunk, "text", None, None, {},
                                            uuid.uuid4().hex, [chunk], unit(rng, 1)))  # fmt: skip
                memories.insert(record(text(rng, 30), f"resident-{t}"), unit(rng, 1)[0], set(), enqueue=False)
                loaded.append(t)

        async def tenant_search() -> list[int]:
            hits: list[int] = []
            while loaded:
                name = f"resident-{loaded.pop()}"
                for tool_name, args in (
                    ("metronix_search_fast", {"query": text(rng, 3), "workspace_id": name}),
                    ("memory_search", {"query": text(rng, 3), "workspace_id": name, "agent_id": "hermes"}),
                ):
                    for worker in range(1, site.workers + 1):
                        async with on_worker(site, worker, admin, "/mcp") as client:
                            hits.append(hit_count(await tool(client, tool_name, args)))
            return hits

        name = "resident tenants (a workspace of 1 chunk and 1 memory, searched)"
        await fresh(site)
        out[name] = await grow(site, tenants, small_tenants, tenant_search)
        for what in ("rss", "index"):
            out[name][f"{what}_mb_per_tenant_per_worker"] = round(
                out[name].pop(f"{what}_mb_per_1000_per_worker") / 1000, 4
            )
        show(name)
    finally:
        kb.close()
        memories.db.pg.close()
        if hadron is not None:
            hadron.close()
    return out


# -- RAM under the index memory budget ---------------------------------------------------------------


async def budgeted(
    site: Site,
    budget_mb: float,
    tenants: int,
    items: int,
    rng: np.random.Generator,
    env: dict[str, str] | None = None,
    prefix: str = "budget",
) -> dict[str, Any]:
    """Workers restarted with ``TRIPTYCH_INDEX_MEMORY_MB=budget_mb``; ``tenants`` new tenants, each a
    workspace of ``items`` chunks and one of ``items`` agent memories (together several times the budget),
    written one after the other and searched through every worker (the knowledge base twice: a workspace
    asked for while the budget is full is answered by PostgreSQL and loaded only on its next request,
    decision 0190's admission; agent memory always loads). After each tenant: the workers' RSS, their
    ``triptych_index_resident_bytes`` and the evictions so far. What RSS does once the gauge sits at the
    budget is the figure: the sizing rule's "rest + budget" term. ``env`` is added to the workers'
    environment; ``prefix`` names the tenants (each run of an alternation writes its own)."""
    admin = bearer(token("bench", "admin"))
    kb = PostgresKnowledgeStore(PgDatabase(site.url, max_size=2), DIM)
    memories = PostgresMemoryStore(PgDatabase(site.url, max_size=2), DIM)
    points: list[dict[str, Any]] = []
    began = time.perf_counter()
    try:
        await fresh(site, **(env or {}), TRIPTYCH_INDEX_MEMORY_MB=str(budget_mb))
        await settle_gauges()
        points.append(
            {"tenants": 0, "rss_mb": site.rss(), "index_mb": site.index_mb(), "evictions": site.evictions()}
        )
        for t in range(tenants):
            name = f"{prefix}-{t}"
            for d in range(items // 10):
                chunks = [text(rng, 120) for _ in range(10)]
                kb.put_document(NewDocument(name, f"doc-{d}", None, "\n\n".join(chunks), "text", None, None,
                                            {}, uuid.uuid4().hex, chunks, unit(rng, 10)))  # fmt: skip
            vectors = unit(rng, items)
            for k in range(items):
                memories.insert(record(f"{text(rng, 30)} {k}", name), vectors[k], set(), enqueue=False)
            hits = []
            for _ in range(2):
                hits += await touch(site, "/mcp", admin, "metronix_search_fast",
                                    {"query": text(rng, 3), "workspace_id": name})  # fmt: skip
            hits += await touch(site, "/mcp", admin, "memory_search",
                                {"query": text(rng, 3), "workspace_id": name, "agent_id": "hermes"})  # fmt: skip
            await settle_gauges()
            point = {"tenants": t + 1, "rss_mb": [round(x, 1) for x in site.rss()], "index_mb": site.index_mb(),
                     "index_mb_by_kind": site.index_kinds_mb(), "evictions": site.evictions(),
                     "results_per_search": hits}  # fmt: skip
            points.append(point)
            print(f"    {json.dumps(point)}", file=sys.stderr, flush=True)
    finally:
        kb.close()
        memories.db.pg.close()
    rest = statistics.fmean(points[0]["rss_mb"])
    peak_index = max(max(p["index_mb"]) for p in points)
    # The tenants after the budget first filled (every worker's gauge within 10 % of it): RSS should stop
    # growing there if the budget bounds it.
    full = [p for p in points if p["index_mb"] and min(p["index_mb"]) >= 0.9 * budget_mb]
    end = statistics.fmean(points[-1]["rss_mb"])
    slope_full = None
    if len(full) > 1:
        xs = np.array([p["tenants"] for p in full], dtype=np.float64)
        ys = np.array([statistics.fmean(p["rss_mb"]) for p in full], dtype=np.float64)
        slope_full = round(float(np.polyfit(xs, ys, 1)[0]), 2)
    return {
        "budget_mb": budget_mb,
        "tenants": tenants,
        "items_per_tenant": items,
        "points": points,
        "rss_mb_at_rest": round(rest, 1),
        "rss_mb_growth_at_end": round(end - rest, 1),
        "rss_growth_per_budget_mb": round((end - rest) / budget_mb, 2),
        "index_mb_peak": peak_index,
        "tenants_after_budget_full": len(full),
        "rss_mb_per_tenant_after_full": slope_full,
        "evictions": points[-1]["evictions"],
        "seconds": round(time.perf_counter() - began, 1),
    }


# -- one tenant vs four ----------------------------------------------------------------------------


async def tenant_writes(site: Site, writes: int, rounds: int, rng: np.random.Generator) -> dict[str, Any]:
    admin = bearer(token("bench", "admin"))
    alice = bearer(token("alice"))
    found: dict[str, dict[int, list[dict[str, Any]]]] = {}
    order = [(1, 4, 4, 1)[r % 4] for r in range(rounds)]
    clients_n = 4 * site.workers
    async with (
        sessions(site, "/mcp", admin, clients_n) as mx,
        sessions(site, "/hadron/mcp", alice, clients_n) as hd,
    ):
        for spread in order:
            tag = uuid.uuid4().hex[:6]
            for name, clients, call in (
                ("memory_store", mx, lambda c, i, s=spread, g=tag: tool(c, "memory_store", {
                    "content": f"{text(rng, 30)} {i}", "workspace_id": f"w-{g}-{i % s}", "agent_id": "bench"})),
                ("hadron_create_node", hd, lambda c, i, s=spread, g=tag: tool(c, "hadron_create_node", {
                    "loc": f"hrn:node:{ORG}:t{i % s}:w{g}x{i}", "name": f"W {i}", "content": text(rng, 30)})),
            ):  # fmt: skip
                result = await drive(site, clients, call, writes)
                found.setdefault(name, {}).setdefault(spread, []).append(result)
                print(f"  {name}, {spread} tenant(s): {json.dumps(result)}", file=sys.stderr, flush=True)
    summary: dict[str, Any] = {}
    for name, by in found.items():
        summary[name] = {
            f"{s} tenant(s)": {
                "writes_per_s": statistics.median(r["calls_per_s"] for r in runs),
                "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                "cpu_ms_per_write": {
                    k: statistics.median(r["cpu_ms_per_call"][k] for r in runs)
                    for k in runs[0]["cpu_ms_per_call"]
                },  # fmt: skip
            }
            for s, runs in sorted(by.items())
        }
        one, four = summary[name]["1 tenant(s)"], summary[name]["4 tenant(s)"]
        summary[name]["4 / 1"] = round(four["writes_per_s"] / one["writes_per_s"], 2)
    return {"clients": clients_n, "writes_per_round": writes, "rounds": order, "summary": summary,
            "runs": found}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--calls", type=int, default=100, help="calls per write family (reads: twice, /health 4x)")
    p.add_argument("--passes", type=int, default=2, help="passes over the families (medians reported)")
    p.add_argument("--sessions", type=int, default=4, help="concurrent clients per family")
    p.add_argument("--items", type=int, default=3000, help="chunks, and memories, for RAM per item")
    p.add_argument("--nodes", type=int, default=1200, help="Hadron nodes for RAM per item")
    p.add_argument("--tenants", type=int, default=20, help="resident tenants for RAM per tenant")
    p.add_argument("--writes", type=int, default=96, help="writes per tenant-spread round")
    p.add_argument("--rounds", type=int, default=4, help="tenant-spread rounds (1 4 4 1 ...)")
    p.add_argument(
        "--budget-mb", type=float, default=24, help="TRIPTYCH_INDEX_MEMORY_MB for the budget phase"
    )
    p.add_argument("--budget-tenants", type=int, default=10, help="tenants written under the budget")
    p.add_argument("--budget-items", type=int, default=1000, help="chunks, and memories, per budget tenant")
    p.add_argument("--skip", default="", help="phases to skip: ram,budget,families,tenants (comma-separated)")
    p.add_argument(
        "--alternate-env",
        metavar="KEY=VALUE",
        help="run the budget and families phases --passes times on workers without, then with, KEY=VALUE "
        "in their environment (A B A B ...; fresh workers each time) and report B / A",
    )
    p.add_argument(
        "--json", type=Path, help="results file (default /tmp/triptych-bench/capacity-<time>.json)"
    )
    args = p.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    if args.alternate_env:
        key = args.alternate_env.partition("=")[0]
        if "=" not in args.alternate_env or key in os.environ:
            p.error("--alternate-env takes KEY=VALUE, with KEY absent from this process's environment")
    results: dict[str, Any] = {"machine": machine_facts(), "args": {k: str(v) for k, v in vars(args).items()}}
    rng = np.random.default_rng(5)
    random.seed(5)
    root = Path(tempfile.mkdtemp(prefix="triptych-bench-capacity-"))
    started = time.perf_counter()
    print(
        f"starting PostgreSQL, ClickHouse and serve --workers {args.workers} ...", file=sys.stderr, flush=True
    )
    site = Site(args.workers, root)
    out = args.json or Path("/tmp/triptych-bench") / f"capacity-{time.strftime('%Y%m%d-%H%M%S')}.json"
    try:
        run_phases(site, args, skip, results, rng)
    except BaseException as exc:
        for leaf in leaves(exc):
            print(f"failed: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        results["failed"] = repr(exc)[:2000]
        write_json(out, results)  # the phases that finished are worth keeping
        print(f"partial results: {out}", file=sys.stderr)
        raise
    finally:
        site.close()
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    results["seconds"] = round(time.perf_counter() - started)
    write_json(out, results)
    print(json.dumps({k: v for k, v in results.items() if k not in ("tenant_writes", "families")}, indent=2))
    if "tenant_writes" in results:
        print(json.dumps(results["tenant_writes"]["summary"], indent=2))
    print(f"results: {out}", file=sys.stderr)
    return 0


def medians(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """Per family: the median over passes of each process group's CPU ms per call, with the range."""
    found: dict[str, Any] = {}
    for name, first in passes[0].items():
        if isinstance(first, list):
            found[name] = [p[name] for p in passes]
            continue
        if not isinstance(first, dict):
            found[name] = statistics.median(p[name] for p in passes if p[name] is not None)
            continue
        if "cpu_ms_per_call" not in first:
            continue
        found[name] = {
            f"{group}{suffix}": {
                "median": round(statistics.median(p[name][field][group] for p in passes), 2),
                "range": [round(f(p[name][field][group] for p in passes), 2) for f in (min, max)],
            }
            for field, suffix in (("cpu_ms_per_call", ""), ("cpu_ms_per_call_net", " net"))
            for group in first[field]
        }
        found[name]["calls_per_s"] = statistics.median(p[name]["calls_per_s"] for p in passes)
        found[name]["worker_cpu_vs_health"] = statistics.median(
            p[name]["worker_cpu_vs_health"] for p in passes
        )
    return found


def b_over_a(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Per family, the workers' CPU per call with the variable over without: the ratio of the medians, each
    round's own ratio (B of pass n over A of pass n), and each arm's spread (its largest pass over its
    smallest), the run's noise to hold the ratios against."""
    found: dict[str, Any] = {}
    for name, first in a[0].items():
        if not (isinstance(first, dict) and "cpu_ms_per_call" in first):
            continue
        xs = [p[name]["cpu_ms_per_call"]["workers"] for p in a]
        ys = [p[name]["cpu_ms_per_call"]["workers"] for p in b]
        found[name] = {
            "workers_ms_a": xs,
            "workers_ms_b": ys,
            "b_over_a": round(statistics.median(ys) / max(statistics.median(xs), 1e-6), 3),
            "per_round": [round(y / max(x, 1e-6), 3) for x, y in zip(xs, ys, strict=True)],
            "a_spread": round(max(xs) / max(min(xs), 1e-6), 3),
            "b_spread": round(max(ys) / max(min(ys), 1e-6), 3),
        }
    return found


def run_phases(
    site: Site, args: argparse.Namespace, skip: set[str], results: dict[str, Any], rng: np.random.Generator
) -> None:
    results["rss_mb_idle"] = [round(x, 1) for x in site.rss()]
    # RAM first, on workers that have served nothing else yet: what the families phase allocates and
    # frees would otherwise be reused by the indexes without RSS growing.
    if "ram" not in skip:
        print("RAM and bytes per item:", file=sys.stderr, flush=True)
        results["per_item"] = asyncio.run(ram(site, args.items, args.nodes, args.tenants, rng))
    # Without --alternate-env one arm, the workers' environment as it is; with it, A (without) and B (with).
    arms: list[tuple[str, dict[str, str]]] = [("", {})]
    if args.alternate_env:
        key, _, value = args.alternate_env.partition("=")
        arms = [("A", {}), ("B", {key: value})]
    alternating = len(arms) > 1
    if "budget" not in skip:
        runs = []
        for n in range(args.passes if alternating else 1):
            for label, env in arms:
                print(f"RAM under a {args.budget_mb} MB index budget {label}:", file=sys.stderr, flush=True)
                run = asyncio.run(budgeted(site, args.budget_mb, args.budget_tenants, args.budget_items, rng,
                                           env, prefix=f"budget{n}{label}"))  # fmt: skip
                runs.append({"arm": label, **run})
        results["budget"] = runs if alternating else runs[0]
        site.restart()  # the later phases on the default budget, as before
    if "families" not in skip:
        passes: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in arms}
        for n in range(args.passes):
            for label, env in arms:
                print(f"CPU per call, per family (pass {n + 1} of {args.passes}) {label}:", file=sys.stderr,
                      flush=True)  # fmt: skip
                if alternating:
                    site.restart(**env)
                    # New workers warm every workspace's indexes in the background: over before counting.
                    time.sleep(WARM_UP_S)
                passes[label].append(asyncio.run(families(site, args.calls, args.sessions, rng)))
        if alternating:
            site.restart()  # the later phases without the variable
            results["families_median"] = {label: medians(p) for label, p in passes.items()}
            results["families_b_over_a"] = b_over_a(passes["A"], passes["B"])
            results["families"] = passes
        else:
            results["families"] = passes[""]
            results["families_median"] = medians(passes[""])
    if "tenants" not in skip:
        print("writes, one tenant vs four:", file=sys.stderr, flush=True)
        results["tenant_writes"] = asyncio.run(tenant_writes(site, args.writes, args.rounds, rng))
    results["rss_mb_end"] = [round(x, 1) for x in site.rss()]


if __name__ == "__main__":
    raise SystemExit(main())
