"""What Hadron's statements cost the server on PostgreSQL, written natively (docs/decisions/0290) against
the same code before, when ``core.pg.PortableDatabase`` rewrote each statement (``?`` to ``%s``, ``%`` to
``%%``) as it ran. Two arms in one run, rounds alternated: ``native`` (this tree) and ``main`` (the tree at
``--main-src``, the branch's base). Each round is one fresh process per arm on its own PostgreSQL database
(same schema, same data: each arm's database grows alike round by round) that calls Hadron's services
in process, as a worker does: ``--calls`` ``NodeService.create`` (hadron_create_node's service path, a
memory without embeddings), then as many ``SearchService.entities`` (hadron_search) and
``SearchService.find_nodes`` (hadron_find_nodes, keyword) over the memory. Timed: the process's CPU
(``time.process_time``: every thread of the worker) and the wall clock per call.

The ``main`` arm then measures the rewrite on its own: it records the statements one call of each kind
sends (``PortableConnection._sql`` wrapped), and times the rewrite over them; what it prints is the CPU
per call the rewrite cost, which the native arm no longer spends.

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/hadron_native_sql.py \\
        --main-src /path/to/main/src [--calls 300] [--rounds 3]

A throwaway PostgreSQL from ``tests/postgres.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OPS = ("create", "search", "find")


def _setup(url: str, data: Path) -> None:
    """The tenant every round writes to: an organization, its owner and a memory without embeddings."""
    from triptych.hadron.surface import Hadron

    hadron = Hadron.open(data / "setup" / "hadron.db", database_url=url)
    admin = hadron.admin()
    admin.create_org("bench.example")
    admin.create_user("owner")
    admin.add_org_member("bench.example", "owner", "OWNER")
    admin.create_memory("plans", "knowledge", org="bench.example", embedding="none")
    hadron.close()


def _calls(hadron: Any, tag: str) -> dict[str, Callable[[int], None]]:
    from triptych.hadron.identity import HadronCaller
    from triptych.hadron.services.nodes import NodeFields
    from triptych.hadron.services.search import FindQuery

    caller = HadronCaller("user", "owner", user=hadron.tenancy.user_by_handle("owner"))
    state = hadron.selections.session(caller, f"bench-{tag}", None)

    def create(i: int) -> None:
        fields = NodeFields(
            {"name": f"note {tag} {i}", "content": f"Plan {i}: ship the {i % 7} widget by Friday."},
            frozenset({"name", "content"}),
        )
        hadron.nodes.create(caller, state, f"hrn:node:bench.example:plans:{tag}:n{i}", fields, None)

    def search(i: int) -> None:
        hadron.search.entities(caller, state, f"note {tag} {i}", None, None, None, 10)

    def find(i: int) -> None:
        q = FindQuery(query=f"widget {i % 7}", memory_urn="hrn:mem:bench.example:plans", limit=10)
        hadron.search.find_nodes(caller, state, q)

    return {"create": create, "search": search, "find": find}


def _rewrite_cost(hadron: Any, calls: dict[str, Callable[[int], None]]) -> dict[str, Any]:
    """Main's tree only: the statements one call of each kind sends, and the rewrite's CPU over them."""
    from triptych.core import pg

    rewrite = pg.PortableConnection._sql  # type: ignore[attr-defined]
    seen: list[tuple[str, bool]] = []

    def recording(query: str, named: bool = False) -> bytes:
        seen.append((query, named))
        return rewrite(query, named)  # type: ignore[no-any-return]

    pg.PortableConnection._sql = staticmethod(recording)  # type: ignore[attr-defined]
    out: dict[str, Any] = {}
    try:
        for op, call in calls.items():
            seen.clear()
            call(10_000_000)  # past the timed ones: a create writes a new node
            statements = list(seen)
            repeat = 2000
            began = time.process_time()
            for _ in range(repeat):
                for query, named in statements:
                    rewrite(query, named)
            per_call_us = (time.process_time() - began) / repeat * 1e6
            out[op] = {"statements": len(statements), "rewrite_us_per_call": per_call_us}
    finally:
        pg.PortableConnection._sql = staticmethod(rewrite)  # type: ignore[attr-defined]
    return out


def worker(url: str, data: Path, calls: int, tag: str) -> None:
    """One round of one arm: print its figures as one JSON line."""
    import triptych
    from triptych.hadron.surface import Hadron

    hadron = Hadron.open(data / f"w-{tag}" / "hadron.db", database_url=url)
    ops = _calls(hadron, tag)
    for i in range(5):  # warm: the pool's connections, prepared statements, the BM25 index
        for call in ops.values():
            call(-1 - i)
    out: dict[str, Any] = {"triptych": triptych.__file__}
    for op in OPS:
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(calls):
            ops[op](i)
        out[op] = {
            "cpu_ms": (time.process_time() - cpu) / calls * 1000,
            "wall_ms": (time.perf_counter() - wall) / calls * 1000,
        }
    from triptych.core import pg

    if hasattr(pg, "PortableConnection"):
        out["rewrite"] = _rewrite_cost(hadron, ops)
    print(json.dumps(out), flush=True)
    hadron.close()


def round_of(arm: str, src: Path, url: str, data: Path, calls: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src), "OPENBLAS_NUM_THREADS": "1"}
    tag = f"{arm}{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, __file__, "--worker", url, str(data), str(calls), tag],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{arm} worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, data, calls, tag = sys.argv[2:6]
        worker(url, Path(data), int(calls), tag)
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--main-src", required=True, help="the src directory of the base tree (main)")
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per arm, alternated")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(REPO / "tests"))
    from common import machine_facts
    from postgres import PostgresCluster

    print(machine_facts())
    arms = {"native": REPO / "src", "main": Path(args.main_src).resolve()}
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    cluster = PostgresCluster().start()
    try:
        with tempfile.TemporaryDirectory(prefix="hadron-native-sql-") as tmp:
            urls: dict[str, str] = {}
            for arm, src in arms.items():
                urls[arm] = cluster.create_database(f"hn_{arm}")
                done = subprocess.run(
                    [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); "
                     f"from hadron_native_sql import _setup; from pathlib import Path; "
                     f"_setup({urls[arm]!r}, Path({tmp!r}) / {arm!r})"],
                    env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True, text=True, check=False,
                )  # fmt: skip
                if done.returncode != 0:
                    raise SystemExit(f"{arm} setup failed:\n{done.stderr[-3000:]}")
            for r in range(args.rounds):
                order = list(arms) if r % 2 == 0 else list(reversed(arms))
                for arm in order:
                    results[arm].append(round_of(arm, arms[arm], urls[arm], Path(tmp) / arm, args.calls))
    finally:
        cluster.stop()
    print(f"{args.calls} calls of each kind per round, {args.rounds} rounds per arm (alternated), PostgreSQL")
    for arm, rounds in results.items():
        print(f"  {arm:>6}: triptych from {rounds[0]['triptych']}")
    print(f"  {'':>6}  {'op':>6}  {'CPU ms/call':>12}  {'wall ms/call':>12}   (median of rounds)")
    medians: dict[tuple[str, str], tuple[float, float]] = {}
    for arm, rounds in results.items():
        for op in OPS:
            cpu = statistics.median(r[op]["cpu_ms"] for r in rounds)
            wall = statistics.median(r[op]["wall_ms"] for r in rounds)
            medians[arm, op] = cpu, wall
            print(f"  {arm:>6}  {op:>6}  {cpu:12.3f}  {wall:12.3f}")
    for op in OPS:
        (cn, wn), (cm, wm) = medians["native", op], medians["main", op]
        print(f"  {op}: native/main CPU {cn / cm:.3f}, wall {wn / wm:.3f}")
    rewrite = [r["rewrite"] for r in results["main"] if "rewrite" in r]
    if rewrite:
        for op in OPS:
            n = rewrite[0][op]["statements"]
            us = statistics.median(r[op]["rewrite_us_per_call"] for r in rewrite)
            cpu = medians["main", op][0] * 1000
            print(
                f"  the rewrite on main, {op}: {n} statements per call, {us:.1f} µs CPU per call"
                f" ({us / cpu * 100:.2f}% of main's {cpu / 1000:.3f} ms)"
            )


if __name__ == "__main__":
    main()
