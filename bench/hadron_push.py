"""Hadron chat push latency (issue 32): p50/p95 from a post to the subscriber's
``notifications/resources/updated``, on the embedded engine, on PostgreSQL with one worker, and on
PostgreSQL with two workers (the subscriber's session on worker 1, the poster's on worker 2, so every
notification crosses workers through LISTEN/NOTIFY).

    .venv/bin/python bench/hadron_push.py [--posts 200] [--setups sqlite,pg1,pg2]

Each setup is the tests' team world (tests/hadron/team_world.py) behind a real ``triptych serve``. Two
official MCP clients: bob subscribes to the crew team chat, alice posts ``--posts`` messages one at a
time, each after the previous one's notification arrived (so none is folded). For each post: the time
from just before alice's ``hadron_team_chat_post`` to bob's notification of its seq, and, the same-run
baseline, the post call's own round trip (alice's response); the ratio of the two p50s says what push
adds beyond the post itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from contract.test_server_workers import pinned, start_workers, stop_all  # noqa: E402
from hadron.push_client import Inbox, Subscriber, listening, stream_opened  # noqa: E402
from hadron.team_world import CREW, build_team  # noqa: E402
from hadron.world import HADRON_KEY, Session, user_headers  # noqa: E402
from harness import SECRET, ServerProcess  # noqa: E402
from postgres import PostgresCluster  # noqa: E402

CHAT = "hrn:node:acme.com:crew-team:chats:team"
WAIT = 30.0


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def stats(values: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 2), "p95_ms": round(quantile(values, 0.95), 2)}


def serve(root: Path, database_url: str | None, workers: int) -> ServerProcess:
    data_dir = root / "data"
    data_dir.mkdir(parents=True)
    build_team(data_dir, database_url)
    env = {
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": SECRET,
        "TRIPTYCH_LOG_LEVEL": "warning",
        "TRIPTYCH_HADRON_KEY": HADRON_KEY.encoded(),  # the world's encrypted memory needs it to start
    }
    if database_url is not None:
        env["TRIPTYCH_DATABASE_URL"] = database_url
    server = ServerProcess(data_dir, env)
    if workers > 1:
        return start_workers(server, workers)
    return server.start(timeout=300)


@asynccontextmanager
async def client(
    server: ServerProcess, user: str, worker: int | None, inbox: Inbox | None
) -> AsyncIterator[Client]:
    """A client of ``user``; pinned to ``worker`` when given; with ``inbox``, its GET stream open."""
    url = server.url + "/hadron/mcp"
    handler = inbox.handle if inbox else None
    async with AsyncExitStack() as stack:
        if worker is not None:
            opened = await stack.enter_async_context(stream_opened()) if inbox else None
            c = await stack.enter_async_context(
                pinned(server, worker, user_headers(user), "/hadron/mcp", handler)
            )
            if opened is not None:
                await asyncio.wait_for(opened.wait(), WAIT)
        else:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=user_headers(user), timeout=60.0)
            )
            c = Client(streamable_http_client(url, http_client=http), message_handler=handler)
            await stack.enter_async_context(listening(c) if inbox else c)
        yield c


async def measure(server: ServerProcess, posts: int, pinned_workers: bool) -> dict[str, Any]:
    inbox = Inbox()
    async with (
        client(server, "bob", 1 if pinned_workers else None, inbox) as bob,
        client(server, "alice", 2 if pinned_workers else None, None) as alice,
    ):
        await Subscriber(Session(bob), inbox).subscribe(CHAT)
        notify: list[float] = []
        post: list[float] = []
        for i in range(posts + 5):  # the first 5 warm up (connections, caches) and are not counted
            started = time.perf_counter()
            result = await alice.call_tool("hadron_team_chat_post", {"app": CREW, "body": f"status {i}"})
            answered = time.perf_counter()
            seq = int((result.structured_content or {})["seq"])
            while (await inbox.next(WAIT)).seq < seq:
                pass
            arrived = time.perf_counter()
            if i >= 5:
                notify.append((arrived - started) * 1000)
                post.append((answered - started) * 1000)
    out = {"notification": stats(notify), "post_round_trip": stats(post), "posts": posts}
    out["ratio_p50"] = round(out["notification"]["p50_ms"] / out["post_round_trip"]["p50_ms"], 2)
    return out


def run(setup: str, posts: int, cluster: PostgresCluster | None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"triptych-bench-push-{setup}-"))
    url = cluster.create_database(f"push_{setup}") if cluster else None
    workers = 2 if setup == "pg2" else 1
    server = serve(root, url, workers)
    try:
        return asyncio.run(measure(server, posts, workers > 1))
    finally:
        stop_all(server) if workers > 1 else server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--posts", type=int, default=200)
    parser.add_argument("--setups", default="sqlite,pg1,pg2")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load_start": os.getloadavg()[0]}}
    cluster = PostgresCluster().start() if any(s.startswith("pg") for s in setups) else None
    try:
        for setup in setups:
            results[setup] = run(setup, args.posts, cluster if setup.startswith("pg") else None)
            r = results[setup]
            print(
                f"{setup}: notification p50 {r['notification']['p50_ms']} ms p95 {r['notification']['p95_ms']} ms;"
                f" post round trip p50 {r['post_round_trip']['p50_ms']} ms p95 {r['post_round_trip']['p95_ms']} ms;"
                f" ratio of p50s {r['ratio_p50']}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if cluster is not None:
            cluster.stop()
    results["machine"]["load_end"] = os.getloadavg()[0]
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
