"""Hadron team latency: p50/p95 over MCP of hadron_team_chat_post and of reading the last 50 messages
(hadron_team_chat_read with sinceSeq) with N messages in the team chat, and of hadron_team_work_items
by ref with N items in the worklog, each next to hadron_get_node measured in the same run.

    .venv/bin/python bench/hadron_team.py [--messages 100000] [--items 100000] [--calls 200]
        [--engines sqlite,postgresql]

The messages and work items are seeded straight into the store through the team store (one
transaction each; a message takes its seq exactly as a post does). Then every timed call goes
through the official MCP client over streamable HTTP against a real `triptych serve`, and the four
calls are interleaved, so each ratio to hadron_get_node is taken under the same load. ``--engines``
seeds each engine alike (PostgreSQL: a throwaway PostgreSQL 18 on 127.0.0.1, tests/postgres.py), serves
each from its own server and times the engines in turn, call by call, so both run under the same load;
each row then also gives its ratio to the first engine's.
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
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hadron.world import World, connect  # noqa: E402
from hadron_graph import summary, timed  # noqa: E402
from harness import SECRET, ServerProcess, token  # noqa: E402

from triptych.hadron.domain.model import NodeRecord  # noqa: E402
from triptych.hadron.domain.team import WorkItem, WorkSession  # noqa: E402
from triptych.hadron.store import new_id, utcnow  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402

APP = "hrn:app:bench.example:crew"
REFS = 5_000  # distinct PRs in the worklog: a ref matches ~N/5,000 items


def seed(data_dir: Path, messages: int, items: int, database_url: str | None = None) -> str:
    """A team App with its Team Agent, N chat messages and N work items; returns a node loc to read."""
    hadron = Hadron.open(data_dir / "hadron.db", database_url=database_url)
    admin, team = hadron.admin(), hadron.team
    admin.create_org("bench.example")
    admin.create_user("bench")
    admin.add_org_member("bench.example", "bench", "OWNER")
    admin.create_app("crew", "Crew", "bench.example", None)
    team.agents.install(APP, "team", team=True)
    app = admin.app(APP)
    memory = team.agents.team_memory(app)
    channel = team.channels.team_chat(app, create=True, actor="hrn:user:bench")[1]
    assert channel is not None
    user = hadron.tenancy.user_by_handle("bench")
    assert user is not None
    now = utcnow()
    started = time.perf_counter()
    author = {"kind": "user", "handle": "bench", "userId": user.id}
    # Posts in batches: PostgreSQL walks the versions one transaction made of a row each time it updates it
    # again, so 100,000 posts (each bumps the channel's last_seq) in one transaction take quadratic time.
    for start in range(0, messages, 200):
        with team.store.atomic():
            for i in range(start, min(start + 200, messages)):
                team.store.post(
                    channel.id,
                    f"message {i}: status update on task {i % 977}",
                    author,
                    None,
                    None,
                    [],
                    [],
                    now,
                )
    with team.store.atomic():
        session = WorkSession(
            id=new_id(), app_id=app.id, user_id=user.id, worker_id=None, description="seed", type="DEVELOPER",
            repo=None, branch=None, pr_number=None, language=None, llm_model=None, parent_session_id=None,
            prev_session_id=None, started_at=now, last_active_at=now,
        )  # fmt: skip
        team.store.add_session(session)
        for i in range(items):
            team.store.add_item(
                WorkItem(
                    new_id(),
                    app.id,
                    session.id,
                    user.id,
                    None,
                    "github",
                    "pr",
                    f"bench/api#{i % REFS + 1}",
                    "opened",
                    None,
                    now,
                )  # fmt: skip
            )
        node = NodeRecord(
            id=new_id(), memory_id=memory.id, loc="notes:bench", name="bench", node_type="info", object_type=None,
            description="A node to read", content="Body. " * 8, seq=None, tags=[], properties={}, data=None,
            llm_model=None, ai_agent=None, revision=1, created_at=now, updated_at=now, created_by="hrn:user:bench",
            updated_by="hrn:user:bench",
        )  # fmt: skip
        hadron.graph.insert_node(node)
    hadron.close()
    print(f"seeded {messages:,} messages and {items:,} work items in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)  # fmt: skip
    return f"{memory.urn.replace('hrn:mem:', 'hrn:node:')}:notes:bench"


Samples = dict[str, list[float]]


async def run(urls: list[str], nodes: list[str], messages: int, calls: int) -> list[Samples]:
    """Each server's samples; every round times the four calls on each server in turn."""
    rng = random.Random(7)
    samples: list[Samples] = [{"get": [], "post": [], "read": [], "items": []} for _ in urls]
    async with AsyncExitStack() as stack:
        sessions = []
        for url in urls:
            world = World(ServerProcess(Path("."), {}), "", "")
            world.server.port = int(url.rsplit(":", 1)[1])
            headers = {"Authorization": f"Bearer {token(user='bench', ttl=3600)}"}
            session = await stack.enter_async_context(connect(world, headers))
            await session.ok("hadron_set_active_app", app=APP)
            sessions.append(session)
        last = messages
        for i in range(calls + 20):
            last += 1
            ref = f"https://github.com/bench/api/pull/{rng.randrange(1, REFS + 1)}"
            for session, node, into in zip(sessions, nodes, samples, strict=True):
                get = await timed(session, "hadron_get_node", loc=node)
                post = await timed(session, "hadron_team_chat_post", body=f"bench post {i} @bench")
                read = await timed(session, "hadron_team_chat_read", sinceSeq=last - 50, limit=50)
                work = await timed(session, "hadron_team_work_items", ref=ref)
                if i >= 20:  # the first 20 rounds warm up
                    for key, value in (("get", get), ("post", post), ("read", read), ("items", work)):
                        into[key].append(value)
    return samples


def rows(samples: Samples, first: Samples, messages: int, items: int) -> list[str]:
    base = statistics.median(samples["get"])

    def row(name: str, key: str) -> str:
        ratio = statistics.median(samples[key]) / base
        engines = statistics.median(samples[key]) / statistics.median(first[key])
        return summary(name, samples[key]) + f" {ratio:.2f}x | {engines:.2f}x |"

    return [
        row("hadron_get_node (baseline)", "get"),
        row(f"hadron_team_chat_post ({messages:,} messages in the chat)", "post"),
        row("hadron_team_chat_read, the last 50 (sinceSeq)", "read"),
        row(
            f"hadron_team_work_items by ref (URL spelling; {items:,} items, ~{items // REFS} per ref)",
            "items",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--engines", default="sqlite", help="comma-separated: sqlite, postgresql")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if unknown := set(engines) - {"sqlite", "postgresql"}:
        raise SystemExit(f"unknown engine(s) {sorted(unknown)}: sqlite or postgresql")
    with tempfile.TemporaryDirectory(prefix="hadron-team-bench-") as tmp, ExitStack() as stack:
        urls: list[str] = []
        nodes: list[str] = []
        for engine in engines:
            data_dir = Path(tmp) / engine / "data"
            data_dir.mkdir(parents=True)
            env = {
                "TRIPTYCH_AUTH_ENABLED": "true",
                "TRIPTYCH_JWT_SECRET": SECRET,
                "TRIPTYCH_LOG_LEVEL": "warning",
            }
            database_url = None
            if engine == "postgresql":
                from postgres import PostgresCluster

                cluster = PostgresCluster().start()
                stack.callback(cluster.stop)
                database_url = cluster.create_database("bench")
                env["TRIPTYCH_DATABASE_URL"] = database_url
            print(f"{engine}: seeding", file=sys.stderr)
            nodes.append(seed(data_dir, args.messages, args.items, database_url))
            server = ServerProcess(data_dir, env).start()
            stack.callback(server.stop)
            urls.append(server.url)
        samples = asyncio.run(run(urls, nodes, args.messages, args.calls))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Hadron team latency over MCP (streamable HTTP, official client 2.x); {args.messages:,} messages, "
          f"{args.items:,} work items; {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average {load:.1f}")  # fmt: skip
    print()
    print(f"| call | n | p50 ms | p95 ms | p50 / get_node | p50 / {engines[0]}'s |")
    print("|---|---|---|---|---|---|")
    for engine, measured in zip(engines, samples, strict=True):
        if len(engines) > 1:
            print(f"| **{engine}** | | | | | |")
        for row in rows(measured, samples[0], args.messages, args.items):
            print(row)


if __name__ == "__main__":
    main()
