"""``memory_search`` of two source trees, same run: p50 latency and the store calls each search makes.

Issue 29 split the memory wing (``MemoryService`` into recall, writes and review; one store class per
engine, one first-stage store call per search). This compares the service and stores of ``--src`` (this
tree by default) with those of ``--baseline-src`` (e.g. a worktree of ``main``) on the same data, on both
engines: each (tree, engine) pair runs in its own subprocess (``PYTHONPATH`` picks the tree), and the
rounds alternate which tree goes first, so both see the same load.

Each worker builds a fresh database of ``--records`` records (4 agents, one conversation each: a record
every minute, so adjacency links them) through the store's ``insert``, with seeded synthetic text over a
2,000-word vocabulary and random unit vectors; each query is 3 words of a record and that record's vector
plus noise. Query vectors come from a lookup (as bench/engines.py's embedding cache): the timing is the
store's and the ranking's, not the model's. A first pass counts the store calls of each search through a
counting proxy; the timed pass (``--queries`` searches, after 20 untimed) uses the store itself. The
figure is ``latency_ms`` as ``MemoryService.search`` reports it.

Run from the repository root (under the shared benchmark lock):
  flock /tmp/triptych-bench.lock .venv/bin/python bench/memory_search.py --baseline-src /path/to/main/src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `triptych serve` runs

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DIM = 384
WORKSPACE = "bench"
# Methods of the store that are not reads of records: the snapshot bracket, the TTL slide (a write) and
# the model check of a service's first call.
NOT_READS = {"snapshot", "pinned", "touch", "reviews", "embedding_model", "set_embedding_model"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", type=Path, default=REPO / "src", help="the tree measured (default: this one)")
    p.add_argument("--baseline-src", type=Path, required=False, help="the baseline tree's src folder")
    p.add_argument("--records", type=int, default=3000, help="records per database (default 3,000)")
    p.add_argument("--queries", type=int, default=300, help="timed searches per worker (default 300)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, alternating the tree that goes first")
    p.add_argument("--engines", default="sqlite,postgresql")
    p.add_argument(
        "--out", type=Path, help="JSON result file (default /tmp/triptych-bench/memory-search-*.json)"
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--engine", default="sqlite", help=argparse.SUPPRESS)
    p.add_argument("--database-url", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- worker: one tree, one engine -------------------------------------------------------------------


class LookupEmbedder:
    """Each query's vector, made beforehand (the model is not what is measured)."""

    name, dim = "bench-lookup", DIM

    def __init__(self) -> None:
        self.vectors: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


class CountingStore:
    """The store, counting each method called through it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


def unit(rng: np.random.Generator, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def open_store(engine: str, url: str, folder: Path) -> tuple[Any, Any]:
    """(store, database) of this tree: ``open_memory_store`` where it exists, else the one class then."""
    from triptych.core.db import Database
    from triptych.core.pg import PgDatabase

    db: Any = PgDatabase(url, max_size=4) if engine == "postgresql" else Database(folder / "m.db", [])
    try:
        from triptych.metronix.memory_store import open_memory_store  # type: ignore[attr-defined]

        return open_memory_store(db, DIM), db
    except ImportError:  # the tree before issue 29
        from triptych.core.pg import PortableDatabase
        from triptych.metronix.memory_store import SqliteMemoryStore

        inner = PortableDatabase(db, write_lock="metronix-memory") if engine == "postgresql" else db
        return SqliteMemoryStore(inner, DIM), db


def build(store: Any, n: int, rng: np.random.Generator, words: list[str]) -> list[tuple[str, np.ndarray]]:
    from triptych.metronix.memory_model import MemoryRecord

    start = datetime(2026, 1, 1, tzinfo=UTC)
    texts: list[tuple[str, np.ndarray]] = []
    pyrng = random.Random(7)
    for i in range(n):
        text = " ".join(pyrng.choices(words, k=14)) + f" n{i}"
        vec = unit(rng)
        at = (start + timedelta(minutes=i // 4)).isoformat(timespec="seconds")
        record = MemoryRecord(
            id=f"r{i}", workspace_id=WORKSPACE, agent_id=f"agent-{i % 4}", scope="per_agent", session_id=None,
            kind="fact", content=text, content_hash=f"h{i}", tags=[f"t{i % 7}"], importance_score=0.5,
            source_type="", metadata={}, status="archived" if i % 13 == 0 else "active", created_at=at,
            updated_at=at,
        )  # fmt: skip
        store.insert(record, vec, {words[i % len(words)]}, False)
        texts.append((text, vec))
    return texts


def worker(args: argparse.Namespace) -> dict[str, Any]:
    from triptych.core.auth import local_principal
    from triptych.metronix.memory import MemoryService

    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(2000)]
    with tempfile.TemporaryDirectory() as tmp:
        store, db = open_store(args.engine, args.database_url, Path(tmp))
        began = time.perf_counter()
        texts = build(store, args.records, rng, words)
        build_s = time.perf_counter() - began
        embedder = LookupEmbedder()
        pyrng = random.Random(5)
        queries = []
        for q in range(args.queries + 40):
            text, vec = texts[pyrng.randrange(len(texts))]
            query = " ".join(pyrng.sample(text.split()[:14], 3)) + f" q{q}"
            noisy = vec + 0.3 * unit(rng)
            embedder.vectors[query] = noisy / np.linalg.norm(noisy)
            queries.append((query, f"agent-{q % 4}"))
        principal = local_principal()

        def search(service: Any, query: str, agent: str) -> dict[str, Any]:
            result: dict[str, Any] = service.search(
                principal, workspace_id=WORKSPACE, query=query, agent_id=agent, top_k=10
            )
            return result

        counting = CountingStore(store)
        counted = MemoryService(counting, embedder)  # type: ignore[arg-type]
        for query, agent in queries[:20]:
            search(counted, query, agent)
        calls_per_search = {name: n / 20 for name, n in sorted(counting.calls.items())}
        counted.close()
        service = MemoryService(store, embedder)
        for query, agent in queries[20:40]:  # warm-up: caches loaded, code paths hot
            search(service, query, agent)
        latencies = [search(service, query, agent)["latency_ms"] for query, agent in queries[40:]]
        service.close()
        db.close()
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "engine": args.engine,
        "records": args.records,
        "build_s": round(build_s, 1),
        "searches": len(latencies),
        "p50_ms": round(statistics.median(latencies), 3),
        "p90_ms": round(quantiles[89], 3),
        "store_calls_per_search": calls_per_search,
        "store_reads_per_search": sum(n for name, n in calls_per_search.items() if name not in NOT_READS),
    }


# -- parent: both trees, both engines, alternating ----------------------------------------------------


def run_worker(src: Path, engine: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    command = [sys.executable, __file__, "--worker", "--engine", engine, "--database-url", url]
    command += ["--records", str(args.records), "--queries", str(args.queries)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {src} {engine} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.baseline_src is None:
        raise SystemExit("--baseline-src is required (the src folder of the tree to compare with)")
    trees = [("baseline", args.baseline_src), ("change", args.src)]
    engines = args.engines.split(",")
    cluster = None
    if "postgresql" in engines:
        sys.path.insert(0, str(REPO / "tests"))
        from postgres import PostgresCluster  # the tests' throwaway PostgreSQL

        cluster = PostgresCluster().start()
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for engine in engines:
                for label, src in order:
                    url = cluster.create_database("bench") if cluster and engine == "postgresql" else ""
                    result = {"tree": label, "round": r, **run_worker(src, engine, url, args)}
                    print(json.dumps(result), file=sys.stderr)
                    runs.append(result)
    finally:
        if cluster is not None:
            cluster.stop()
    summary = {}
    for engine in engines:
        mine = {
            label: [x for x in runs if x["engine"] == engine and x["tree"] == label] for label, _ in trees
        }
        p50 = {label: statistics.median(x["p50_ms"] for x in found) for label, found in mine.items()}
        summary[engine] = {
            "p50_ms": p50,
            "ratio_change_to_baseline": round(p50["change"] / p50["baseline"], 3),
            "store_reads_per_search": {
                label: found[0]["store_reads_per_search"] for label, found in mine.items()
            },
            "store_calls_per_search": {
                label: found[0]["store_calls_per_search"] for label, found in mine.items()
            },
        }
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs, "summary": summary}
    out = args.out or Path("/tmp/triptych-bench") / f"memory-search-{int(time.time())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(summary, indent=2))
    print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
