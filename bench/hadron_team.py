"""Hadron team latency: p50/p95 over MCP of hadron_team_chat_post and of reading the last 50 messages
(hadron_team_chat_read with sinceSeq) with N messages in the team chat, and of hadron_team_work_items
by ref with N items in the worklog, each next to hadron_get_node measured in the same run.

    .venv/bin/python bench/hadron_team.py [--messages 100000] [--items 100000] [--calls 200]

The messages and work items are seeded straight into hadron.db through the team store (one
transaction each; a message takes its seq exactly as a post does). Then every timed call goes
through the official MCP client over streamable HTTP against a real `triptych serve`, and the four
calls are interleaved, so each ratio to hadron_get_node is taken under the same load.
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

from hadron.world import World, connect  # noqa: E402
from hadron_graph import summary, timed  # noqa: E402
from harness import SECRET, ServerProcess, token  # noqa: E402

from triptych.hadron.domain.model import NodeRecord  # noqa: E402
from triptych.hadron.domain.team import WorkItem, WorkSession  # noqa: E402
from triptych.hadron.store import new_id, utcnow  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402

APP = "hrn:app:bench.example:crew"
REFS = 5_000  # distinct PRs in the worklog: a ref matches ~N/5,000 items


def seed(data_dir: Path, messages: int, items: int) -> str:
    """A team App with its Team Agent, N chat messages and N work items; returns a node loc to read."""
    hadron = Hadron.open(data_dir / "hadron.db")
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
    with team.store.atomic():
        for i in range(messages):
            team.store.post(
                channel.id, f"message {i}: status update on task {i % 977}", author, None, None, [], [], now
            )
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


async def run(url: str, node: str, messages: int, items: int, calls: int) -> list[str]:
    world = World(ServerProcess(Path("."), {}), "", "")
    world.server.port = int(url.rsplit(":", 1)[1])
    rng = random.Random(7)
    samples: dict[str, list[float]] = {"get": [], "post": [], "read": [], "items": []}
    async with connect(world, {"Authorization": f"Bearer {token(user='bench', ttl=3600)}"}) as session:
        await session.ok("hadron_set_active_app", app=APP)
        last = messages
        for i in range(calls + 20):
            get = await timed(session, "hadron_get_node", loc=node)
            post = await timed(session, "hadron_team_chat_post", body=f"bench post {i} @bench")
            last += 1
            read = await timed(session, "hadron_team_chat_read", sinceSeq=last - 50, limit=50)
            work = await timed(session, "hadron_team_work_items", ref=f"https://github.com/bench/api/pull/"
                                f"{rng.randrange(1, REFS + 1)}")  # fmt: skip
            if i >= 20:  # the first 20 rounds warm up
                for key, value in (("get", get), ("post", post), ("read", read), ("items", work)):
                    samples[key].append(value)
    base = statistics.median(samples["get"])

    def row(name: str, key: str) -> str:
        ratio = statistics.median(samples[key]) / base
        return summary(name, samples[key]) + f" {ratio:.2f}x |"

    return [
        summary("hadron_get_node (baseline)", samples["get"]) + " 1.00x |",
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hadron-team-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        node = seed(data_dir, args.messages, args.items)
        env = {
            "TRIPTYCH_AUTH_ENABLED": "true",
            "TRIPTYCH_JWT_SECRET": SECRET,
            "TRIPTYCH_LOG_LEVEL": "warning",
        }
        server = ServerProcess(data_dir, env).start()
        try:
            rows = asyncio.run(run(server.url, node, args.messages, args.items, args.calls))
        finally:
            server.stop()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Hadron team latency over MCP (streamable HTTP, official client 2.x); {args.messages:,} messages, "
          f"{args.items:,} work items; {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average {load:.1f}")  # fmt: skip
    print()
    print("| call | n | p50 ms | p95 ms | p50 / get_node |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
