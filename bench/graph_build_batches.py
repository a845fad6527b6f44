"""The HNSW graph build in batches (decision 0390) against the single ``add`` call it replaced, same run.

Since decision 0390 ``VectorIndex._build_hnsw`` adds its vectors ``BUILD_BATCH`` at a time and checks
between two batches whether its store is closing. This measures what the batches cost: seconds to build
the graph of ``--vectors`` vectors both ways (the rounds alternate which goes first), and recall@10 of
each graph against the exact top 10 for ``--queries`` queries (the batches must not lose quality).

Vectors are synthetic: seeded random unit vectors around ``--clusters`` centres (384 dimensions, the
bundled model's), since a build's cost does not depend on what the vectors mean.

Run from the repository root:
    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/graph_build_batches.py
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import log, machine_facts, summary, write_json  # noqa: E402

from triptych.core import search  # noqa: E402
from triptych.core.search import VectorIndex  # noqa: E402

DIM = 384


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/graph_build_batches.py",
        description="HNSW build time and recall@10: batched (VectorIndex._build_hnsw) vs one add call.",
    )
    p.add_argument("--vectors", type=int, default=40_000)
    p.add_argument("--clusters", type=int, default=200)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    normalised: np.ndarray = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
    return normalised


def vectors(n: int, clusters: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((clusters, DIM)))
    return unit_rows(centres[rng.integers(0, clusters, n)] + 0.6 * rng.standard_normal((n, DIM)) / DIM**0.5)


def one_call(ids: list[int], matrix: np.ndarray) -> Any:
    """The build before decision 0390: every vector in one ``add``."""
    from usearch.index import Index

    index = Index(
        ndim=DIM, metric="ip", dtype="f16", connectivity=16, expansion_add=128, expansion_search=128
    )
    index.add(np.asarray(ids, dtype=np.uint64), matrix, threads=2)
    return index


def recall_at_10(graph: Any, matrix: np.ndarray, queries: np.ndarray) -> float:
    exact = np.argsort(-(queries @ matrix.T), axis=1)[:, :10]
    found = 0
    for query, truth in zip(queries, exact, strict=True):
        found += len(set(int(k) for k in graph.search(query, 10).keys) & set(int(t) for t in truth))
    return found / (10 * len(queries))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    facts = machine_facts()
    matrix = vectors(args.vectors, args.clusters, seed=11)
    queries = vectors(args.queries, args.clusters, seed=12)
    ids = list(range(args.vectors))
    index = VectorIndex(DIM, lambda key: ([], np.zeros((0, DIM), dtype=np.float32)))
    builds = {"one_call": lambda: one_call(ids, matrix), "batched": lambda: index._build_hnsw(ids, matrix)}
    seconds: dict[str, list[float]] = {name: [] for name in builds}
    recall: dict[str, list[float]] = {name: [] for name in builds}
    for round_ in range(args.rounds):
        order = list(builds) if round_ % 2 == 0 else list(reversed(builds))
        for name in order:
            start = time.perf_counter()
            graph = builds[name]()
            seconds[name].append(time.perf_counter() - start)
            recall[name].append(recall_at_10(graph, matrix, queries))
            log(f"round {round_ + 1}: {name} {seconds[name][-1]:.2f} s, recall@10 {recall[name][-1]:.3f}")
    result = {
        "machine": {**facts, "loadavg_at_end": os.getloadavg()},
        "vectors": args.vectors,
        "batch": search.BUILD_BATCH,
        "seconds": {name: summary(values) for name, values in seconds.items()},
        "recall_at_10": {name: float(np.mean(values)) for name, values in recall.items()},
        "batched_over_one_call": float(np.median(seconds["batched"]) / np.median(seconds["one_call"])),
    }
    out = (
        args.out or Path("/tmp/triptych-bench") / f"graph_build_batches-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    write_json(out, result)
    print(
        f"{args.vectors} vectors, batch {search.BUILD_BATCH}: build p50 one call "
        f"{result['seconds']['one_call']['p50']:.2f} s, batched {result['seconds']['batched']['p50']:.2f} s "
        f"(ratio {result['batched_over_one_call']:.2f}); recall@10 one call "
        f"{result['recall_at_10']['one_call']:.3f}, batched {result['recall_at_10']['batched']:.3f}; "
        f"load {facts['loadavg_at_start'][0]:.1f} -> {result['machine']['loadavg_at_end'][0]:.1f}; {out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
