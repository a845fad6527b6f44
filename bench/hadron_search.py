"""Hadron search latency: p50/p95 of hadron_find_nodes in keyword, vector and hybrid mode over 100,000 nodes
in one memory, with and without a ``where`` filter, in-process (the service layer) and over MCP (a real
`triptych serve` and the official MCP client), with hadron_get_node as a same-run baseline.

    .venv/bin/python bench/hadron_search.py [--nodes 100000] [--calls 100] [--skip-mcp]
        [--engines sqlite,postgresql]

``--engines`` runs the same seed and the same queries on each storage engine in turn, in one run: the
embedded SQLite file, and a throwaway PostgreSQL 18 with pgvector on 127.0.0.1 (tests/postgres.py,
the cluster the tests start) selected by ``TRIPTYCH_DATABASE_URL`` as in server mode.

Seeding: node text is drawn from a 2,000-word vocabulary (31 words a node: a query word matches ~1.5% of the nodes);
``properties.tier`` is one of a/b/c/d (the ``where`` filter keeps a quarter). Embedding 100,000 nodes
with the local model would take ~20 minutes here, so 1,000 distinct texts are embedded for real and each
node gets one of them plus small noise (re-normalised): realistic vectors for timing, not for quality.
Every timed query is distinct, so each vector/hybrid call pays for embedding its query (~10 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hadron.world import World, connect  # noqa: E402
from hadron_graph import summary, timed  # noqa: E402
from harness import SECRET, ServerProcess, token  # noqa: E402

from triptych.core.embed import LocalEmbedder  # noqa: E402
from triptych.hadron.domain.model import NodeRecord  # noqa: E402
from triptych.hadron.store import _NODE_COLUMNS, _node_values, new_id, utcnow  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402

MEMORY = "hrn:mem:bench.example:search"
WHERE = {"path": "tier", "eq": "a"}
BASES = 1000  # distinct embedded texts the node vectors derive from
SECTIONS = [100]  # sections of 1,000 nodes, set from --nodes
SYLLABLES = (
    "ka lo mi nu pe ra si to vu ze bar cor dan fel gor hal jin kes lum mor nav pol quin rus tev".split()
)


def vocabulary(rng: random.Random, size: int = 2000) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))))
    return sorted(words)


def sentence(rng: random.Random, words: list[str], n: int) -> str:
    return " ".join(rng.choice(words) for _ in range(n))


def seed(data_dir: Path, nodes: int, embedder: LocalEmbedder, url: str | None = None) -> list[str]:
    rng = random.Random(11)
    words = vocabulary(rng)
    hadron = Hadron.open(data_dir / "hadron.db", database_url=url)
    admin = hadron.admin()
    admin.create_org("bench.example")
    admin.create_user("bench")
    admin.add_org_member("bench.example", "bench", "OWNER")
    memory = admin.create_memory("search", "knowledge", org="bench.example")
    now, actor = utcnow(), "hrn:user:bench"
    started = time.perf_counter()
    bases = [sentence(rng, words, 10) for _ in range(BASES)]
    base_vectors = embedder.embed(bases)
    print(f"embedded {BASES:,} base texts in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    started = time.perf_counter()
    rows, embeddings = [], []
    for i in range(nodes):
        section = f"s{i // 1000:03d}"
        loc = section if i % 1000 == 0 else f"{section}:n{i % 1000:04d}"
        base = i % len(bases)
        node = NodeRecord(
            id=new_id(), memory_id=memory.id, loc=loc, name=sentence(rng, words, 3), node_type="info",
            object_type=None, description=sentence(rng, words, 6), content=bases[base] + " " + sentence(rng, words, 12),
            seq=None, tags=[], properties={"tier": rng.choice("abcd"), "price": rng.randrange(1000)}, data=None,
            llm_model=None, ai_agent=None, revision=1, created_at=now, updated_at=now, created_by=actor,
            updated_by=actor,
        )  # fmt: skip
        rows.append((*_node_values(node), loc.rpartition(":")[0]))
        vec = base_vectors[base] + np.random.default_rng(i).normal(0, 0.02, embedder.dim).astype(np.float32)
        vec /= np.linalg.norm(vec)
        embeddings.append((node.id, embedder.name, embedder.dim, vec.astype(np.float32).tobytes(), "ok", now))
    with hadron.db.transaction() as tx:
        tx.executemany(
            f"INSERT INTO nodes ({_NODE_COLUMNS}, parent_loc) VALUES ({', '.join('?' * 21)})", rows
        )
        tx.executemany(
            "INSERT INTO node_embeddings (node_id, model, dim, vector, status, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
            embeddings,
        )
    hadron.db.conn.execute("ANALYZE")
    hadron.close()
    print(
        f"seeded {nodes} nodes (with FTS and vectors) in {time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    return words


def queries(words: list[str], count: int, seed_: int) -> list[str]:
    rng = random.Random(seed_)
    return [f"{rng.choice(words)} {rng.choice(words)}" for _ in range(count)]


CASES = [
    ("keyword", None),
    ("keyword", WHERE),
    ("vector", None),
    ("vector", WHERE),
    ("hybrid", None),
    ("hybrid", WHERE),
]


def in_process(
    data_dir: Path, words: list[str], calls: int, embedder: LocalEmbedder, url: str | None = None
) -> list[str]:
    from triptych.hadron.identity import HadronCaller
    from triptych.hadron.services.search import FindQuery

    hadron = Hadron.open(data_dir / "hadron.db", embedder, database_url=url)
    caller = HadronCaller("user", "bench", user=hadron.tenancy.user_by_handle("bench"))
    state = hadron.selections.session(caller, "bench", None)
    rows = []

    def time_it(fn: Callable[[], Any]) -> float:
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1000

    for mode in ("vector", "keyword"):  # warm up: load the vector partition and build the HNSW index
        hadron.search.find_nodes(caller, state, FindQuery("warm up", mode=mode, memory_urn=MEMORY))
    index = hadron.search.store.index
    wait_ready = getattr(index, "wait_ready", None)  # the exact index of older code has no graph to wait for
    if wait_ready is not None:
        started = time.perf_counter()
        wait_ready(hadron.admin().memory(MEMORY).id)
        print(f"HNSW graph ready after {time.perf_counter() - started:.1f} s", file=sys.stderr)
    rng = random.Random(3)
    texts = iter(queries(words, calls, 99))
    embeds = [time_it(lambda: embedder.embed([next(texts)])) for _ in range(calls)]
    rows.append(summary("one query embedding alone (same-run reference)", embeds))
    gets = [
        time_it(
            lambda: hadron.nodes.find(
                caller, state, f"s{rng.randrange(SECTIONS[0]):03d}:n{rng.randrange(1, 1000):04d}", MEMORY
            )
        )
        for _ in range(calls)
    ]
    rows.append(summary("service: find a node by loc (hadron_get_node's lookup; baseline)", gets))
    for index, (mode, where) in enumerate(CASES):
        samples = []
        for text in queries(words, calls, 100 + index):
            q = FindQuery(text, mode=mode, memory_urn=MEMORY, where=where, limit=20)
            samples.append(time_it(lambda q=q: hadron.search.find_nodes(caller, state, q)))  # type: ignore[misc]
        label = f"service: find_nodes {mode}" + (" + where tier=a" if where else "")
        rows.append(summary(label, samples))
    hadron.close()
    return rows


async def over_mcp(url: str, words: list[str], calls: int) -> list[str]:
    world = World(ServerProcess(Path("."), {}), "", "")
    world.server.port = int(url.rsplit(":", 1)[1])
    rows = []

    async with connect(world, {"Authorization": f"Bearer {token(user='bench', ttl=7200)}"}) as session:
        for mode in ("vector", "keyword", "hybrid"):
            await timed(session, "hadron_find_nodes", query="warm up", mode=mode, memoryUrn=MEMORY)
        rng = random.Random(5)
        gets = [
            await timed(
                session,
                "hadron_get_node",
                loc=f"{MEMORY.replace('hrn:mem:', 'hrn:node:')}:s{rng.randrange(SECTIONS[0]):03d}:n{rng.randrange(1, 1000):04d}",
            )
            for _ in range(calls)
        ]
        rows.append(summary("hadron_get_node over MCP (baseline)", gets))
        for index, (mode, where) in enumerate(CASES):
            samples = []
            for text in queries(words, calls, 200 + index):
                args: dict[str, Any] = {
                    "query": text,
                    "mode": mode,
                    "memoryUrn": MEMORY,
                    "limit": 20,
                    "brief": True,
                }
                if where:
                    args["where"] = where
                samples.append(await timed(session, "hadron_find_nodes", **args))
            rows.append(
                summary(
                    f"hadron_find_nodes {mode}" + (" + where tier=a" if where else "") + " over MCP", samples
                )
            )
    return rows


def run_engine(args: argparse.Namespace, embedder: LocalEmbedder, url: str | None) -> list[str]:
    """Seed, then time in process and (unless skipped) over MCP, on the engine ``url`` selects."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        words = seed(data_dir, args.nodes, embedder, url)
        rows = in_process(data_dir, words, args.calls, embedder, url)
        if not args.skip_mcp:
            env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET}
            if url:
                env["TRIPTYCH_DATABASE_URL"] = url
            server = ServerProcess(data_dir, env).start(timeout=120)
            try:
                rows += asyncio.run(over_mcp(server.url, words, args.calls))
            finally:
                server.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--skip-mcp", action="store_true")
    parser.add_argument("--engines", default="sqlite", help="comma-separated: sqlite, postgresql")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    embedder = LocalEmbedder()
    SECTIONS[0] = max(1, args.nodes // 1000)
    rows: list[str] = []
    cluster = None
    try:
        for engine in engines:
            url = None
            if engine == "postgresql":
                from postgres import PostgresCluster

                cluster = cluster or PostgresCluster().start()
                url = cluster.create_database("bench")
            elif engine != "sqlite":
                raise SystemExit(f"unknown engine {engine!r}: sqlite or postgresql")
            rows += [f"| **{engine}** | | | |"]
            rows += run_engine(args, embedder, url)
    finally:
        if cluster is not None:
            cluster.stop()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    print(f"\n{args.nodes} nodes, {args.calls} calls per row, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f}\n")  # fmt: skip
    print("| call | n | p50 ms | p95 ms |\n|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
