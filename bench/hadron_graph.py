"""Hadron graph latency: p50/p95 of hadron_get_node and hadron_create_node over MCP with 100,000 nodes
in one memory, and of moving a 1,000-node subtree (hadron_move_node), against a real `triptych serve`.

    .venv/bin/python bench/hadron_graph.py [--nodes 100000] [--calls 300] [--moves 7]

The nodes are seeded straight into hadron.db through the graph store (one transaction), then every
timed call goes through the official MCP client over streamable HTTP, as an agent's would.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hadron.world import Session, connect  # noqa: E402
from harness import SECRET, ServerProcess, token  # noqa: E402

from triptych.hadron.domain.model import NodeRecord  # noqa: E402
from triptych.hadron.store import new_id, utcnow  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402

MEMORY = "hrn:mem:bench.example:graph"


def seed(data_dir: Path, nodes: int, subtree: int) -> None:
    hadron = Hadron.open(data_dir / "hadron.db")
    admin = hadron.admin()
    admin.create_org("bench.example")
    admin.create_user("bench")
    admin.add_org_member("bench.example", "bench", "OWNER")
    memory = admin.create_memory("graph", "knowledge", org="bench.example")
    now, actor = utcnow(), "hrn:user:bench"
    started = time.perf_counter()
    with hadron.graph.atomic():
        locs = ["move-a"] + [f"move-a:n{i:04d}" for i in range(subtree - 1)]
        per_section = 1000
        i = 0
        while len(locs) < nodes:
            section = f"s{i // per_section:03d}"
            if i % per_section == 0:
                locs.append(section)
            else:
                locs.append(f"{section}:n{i % per_section:04d}")
            i += 1
        for loc in locs:
            node = NodeRecord(
                id=new_id(), memory_id=memory.id, loc=loc, name=loc.rpartition(":")[2], node_type="info",
                object_type=None, description=f"Node {loc}", content=f"Body of {loc}. " * 8, seq=None, tags=[],
                properties={}, data=None, llm_model=None, ai_agent=None, revision=1, created_at=now,
                updated_at=now, created_by=actor, updated_by=actor,
            )  # fmt: skip
            hadron.graph.insert_node(node)
    hadron.close()
    print(f"seeded {len(locs)} nodes in {time.perf_counter() - started:.1f} s", file=sys.stderr)


async def timed(session: Session, tool: str, **args: object) -> float:
    started = time.perf_counter()
    result = await session.call(tool, **args)
    elapsed = (time.perf_counter() - started) * 1000
    assert not result.is_error, result.text
    return elapsed


def summary(name: str, samples: list[float]) -> str:
    samples = sorted(samples)
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    return f"| {name} | {len(samples)} | {statistics.median(samples):.1f} | {p95:.1f} |"


async def run(url: str, nodes: int, calls: int, moves: int) -> list[str]:
    from hadron.world import World

    world = World(ServerProcess(Path("."), {}), "", "")
    world.server.port = int(url.rsplit(":", 1)[1])
    rng = random.Random(7)
    rows = []
    async with connect(world, {"Authorization": f"Bearer {token(user='bench', ttl=3600)}"}) as session:
        await session.ok("hadron_set_active_memory", memoryUrn=MEMORY)
        sections = (nodes - 1000) // 1000
        for _ in range(20):  # warm up
            await timed(session, "hadron_get_node", loc=f"s{rng.randrange(sections):03d}:n0001")
        gets = [
            await timed(
                session,
                "hadron_get_node",
                loc=f"s{rng.randrange(sections):03d}:n{rng.randrange(1, 1000):04d}",
            )
            for _ in range(calls)
        ]
        rows.append(summary("hadron_get_node (loc, 100k-node memory)", gets))
        creates = [
            await timed(
                session, "hadron_create_node", loc=f"new:{i:05d}", name=f"New {i}", content="Fresh node."
            )
            for i in range(calls)
        ]
        rows.append(summary("hadron_create_node (new loc)", creates))
        moves_ms = []
        for i in range(moves):
            src, dst = ("move-a", "move-b") if i % 2 == 0 else ("move-b", "move-a")
            moves_ms.append(await timed(session, "hadron_move_node", urn=src, targetUrn=dst))
        rows.append(summary("hadron_move_node (1,000-node subtree, same memory)", moves_ms))
    return rows


def in_process(data_dir: Path, nodes: int, calls: int, moves: int) -> list[str]:
    """The same calls on the service layer, without MCP and HTTP: what the graph itself costs."""
    from triptych.hadron.identity import HadronCaller
    from triptych.hadron.services.nodes import NodeFields

    hadron = Hadron.open(data_dir / "hadron.db")
    caller = HadronCaller("user", "bench", user=hadron.tenancy.user_by_handle("bench"))
    state = hadron.selections.session(caller, "bench", None)
    hadron.selections.set_active_memory(caller, state, MEMORY)
    rng = random.Random(11)
    sections = (nodes - 1000) // 1000

    def clock(fn: object) -> float:
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        return (time.perf_counter() - started) * 1000

    def get() -> None:
        loc = f"s{rng.randrange(sections):03d}:n{rng.randrange(1, 1000):04d}"
        memory, node = hadron.nodes.find(caller, state, loc)
        hadron.nodes.view(caller, memory, node)

    counter = iter(range(10**9))

    def create() -> None:
        fields = NodeFields({"name": "x", "content": "Fresh node."}, frozenset({"name", "content"}))
        hadron.nodes.create(caller, state, f"svc:{next(counter):05d}", fields, None)

    memory_id = hadron.admin().memory(MEMORY).id

    def move() -> None:
        at_a = hadron.graph.node_by_loc(memory_id, "move-a") is not None
        src, dst = ("move-a", "move-b") if at_a else ("move-b", "move-a")
        hadron.nodes.move(caller, state, src, dst, False, False)

    rows = [
        summary("service: find + view a node", [clock(get) for _ in range(calls)]),
        summary("service: create a node", [clock(create) for _ in range(calls)]),
        summary("service: move a 1,000-node subtree", [clock(move) for _ in range(moves)]),
    ]
    hadron.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--moves", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hadron-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        seed(data_dir, args.nodes, 1000)
        env = {
            "TRIPTYCH_AUTH_ENABLED": "true",
            "TRIPTYCH_JWT_SECRET": SECRET,
            "TRIPTYCH_LOG_LEVEL": "warning",
        }
        server = ServerProcess(data_dir, env).start()
        try:
            rows = asyncio.run(run(server.url, args.nodes, args.calls, args.moves))
        finally:
            server.stop()
        print("\n".join(rows), file=sys.stderr, flush=True)
        rows += in_process(data_dir, args.nodes, args.calls, args.moves)
    print(f"Hadron graph latency over MCP (streamable HTTP, official client 2.x), {args.nodes:,} nodes;")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print()
    print("| call | n | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
