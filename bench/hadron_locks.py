"""What the memory-lock check costs a Hadron write: `NodeService.update` (hadron_update_node's service path)
with the lock check (`AccessPolicy.locks` set, as served) against the same write without it
(`AccessPolicy.locks = None`), alternating rounds in one run so both see the same machine load.

    .venv/bin/python bench/hadron_locks.py [--writes 500] [--rounds 4] [--engines sqlite,postgresql]

Runs on the embedded SQLite (a temporary hadron.db) and on a throwaway PostgreSQL (the tests' cluster,
``tests/postgres.py``). Prints p50/p95 per write for each arm and engine, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from common import machine_facts  # noqa: E402
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)

from triptych.hadron.identity import HadronCaller  # noqa: E402
from triptych.hadron.services.nodes import NodeFields  # noqa: E402
from triptych.hadron.services.selection import SessionState  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402

URN = "hrn:node:bench.example:locks:target"


def setup(path: Path, database_url: str | None) -> Hadron:
    hadron = Hadron.open(path, database_url=database_url)
    admin = hadron.admin()
    admin.create_org("bench.example")
    admin.create_user("bench")
    admin.add_org_member("bench.example", "bench", "OWNER")
    admin.create_memory("locks", "knowledge", org="bench.example", embedding="none")
    return hadron


def timed_writes(hadron: Hadron, caller: HadronCaller, state: SessionState, writes: int) -> list[float]:
    out = []
    for i in range(writes):
        fields = NodeFields({"description": f"write {i}"}, frozenset({"description"}))
        started = time.perf_counter()
        hadron.nodes.update(caller, state, URN, fields, None, None)
        out.append((time.perf_counter() - started) * 1000)
    return out


def run(database_url: str | None, writes: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="hadron-locks-") as tmp:
        hadron = setup(Path(tmp) / "hadron.db", database_url)
        try:
            caller = HadronCaller("user", "bench", user=hadron.tenancy.user_by_handle("bench"))
            state = SessionState("bench", caller.key)
            create = NodeFields({"name": "Target"}, frozenset({"name"}))
            hadron.nodes.create(caller, state, URN, create, None)
            locks = hadron.access.locks
            arms: dict[str, list[float]] = {"with lock check": [], "without (baseline)": []}
            timed_writes(hadron, caller, state, 50)  # warm-up
            for _ in range(rounds):
                for arm in arms:
                    hadron.access.locks = locks if arm == "with lock check" else None
                    arms[arm] += timed_writes(hadron, caller, state, writes)
            hadron.access.locks = locks
        finally:
            hadron.close()
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--engines", default="sqlite,postgresql")
    args = parser.parse_args()
    facts = machine_facts()
    print(
        f"machine: {facts['nproc']} cores, load at start {facts['loadavg_at_start']}, commit {facts['git']}"
    )
    for engine in args.engines.split(","):
        cluster = PostgresCluster().start() if engine == "postgresql" else None
        try:
            url = cluster.create_database("locks") if cluster is not None else None
            arms = run(url, args.writes, args.rounds)
        finally:
            if cluster is not None:
                cluster.stop()
        print(f"engine: {engine}; {args.rounds} rounds x {args.writes} writes per arm, alternating")
        p50 = {}
        for arm, values in arms.items():
            p50[arm] = statistics.median(values)
            p95 = statistics.quantiles(values, n=20)[18]
            print(f"{arm:>22}: p50 {p50[arm]:.3f} ms, p95 {p95:.3f} ms")
        print(f"ratio (p50 with / without): {p50['with lock check'] / p50['without (baseline)']:.3f}")


if __name__ == "__main__":
    main()
