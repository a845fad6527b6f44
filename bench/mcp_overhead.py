"""The cost of the MCP layer itself (issue 29): a trivial tool's round trip through the official MCP
client on each surface, next to a plain ``GET /health`` in the same run.

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/mcp_overhead.py [--calls 400]

One ``triptych serve`` on an empty data directory (auth off; a Metergraph agent key minted before it
starts). One official 2.x client per endpoint, each connected (``initialize`` done) before timing:
``metronix_status`` on ``/mcp``, ``hadron_server_info`` on ``/hadron/mcp`` and
``metergraph_get_capabilities`` on ``/v1/agent/mcp``; the baseline is ``GET /health`` on the same
HTTP client library (httpx2, keep-alive). The four are timed round-robin, one call each per round, so
a noisy neighbour slows all four alike. Reported per endpoint: p50 and p95 of the client round trip,
the p50 of the server's own time for the call (``_meta["triptych/server_ms"]``), and the ratio of
the p50 to ``/health``'s p50. ``--base-src OTHER/src`` starts a second server on another tree (its
``PYTHONPATH``) and times both in the same rounds, each with its own ``/health``: a before/after that
a load changing between two runs cannot tilt. Where the server's part goes: ``bench/mcp_profile.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Server, log  # noqa: E402

TOOLS = {
    "metronix": ("/mcp", "metronix_status"),
    "hadron": ("/hadron/mcp", "hadron_server_info"),
    "metergraph": ("/v1/agent/mcp", "metergraph_get_capabilities"),
}


def agent_key(data_dir: Path) -> str:
    from triptych.metergraph.service import Metergraph
    from triptych.metergraph.settings import load_metergraph_settings

    mg = Metergraph.open(data_dir, load_metergraph_settings())
    try:
        return str(mg.keys.create_agent_key("bench", "debug", None)[1])
    finally:
        mg.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


Step = Callable[[], Awaitable[None]]


async def connect(
    stack: AsyncExitStack, url: str, key: str, server_ms: dict[str, list[float]]
) -> dict[str, Step]:
    """``GET /health`` and the three trivial tools on the server at ``url``, each client connected."""
    http = await stack.enter_async_context(httpx2.AsyncClient(timeout=30.0))
    clients: dict[str, Client] = {}
    for name, (path, _) in TOOLS.items():
        headers = {"Authorization": f"Bearer {key}"} if name == "metergraph" else {}
        session_http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=30.0))
        clients[name] = await stack.enter_async_context(
            Client(streamable_http_client(url + path, http_client=session_http))
        )

    async def health() -> None:
        response = await http.get(url + "/health")
        assert response.status_code == 200

    def tool(name: str) -> Step:
        async def call() -> None:
            result = await clients[name].call_tool(TOOLS[name][1], {})
            assert not result.is_error, result
            if result.meta and "triptych/server_ms" in result.meta:
                server_ms[name].append(float(result.meta["triptych/server_ms"]))

        return call

    return {"health": health, **{n: tool(n) for n in TOOLS}}


async def measure(servers: dict[str, tuple[str, str]], calls: int, warmup: int) -> dict[str, dict[str, Any]]:
    """Each server's report (``servers``: label -> (url, agent key)). One round calls every endpoint of
    every server once, so the servers and their baselines share the machine's load alike."""
    timings = {label: {name: [] for name in ("health", *TOOLS)} for label in servers}
    server_ms: dict[str, dict[str, list[float]]] = {label: {name: [] for name in TOOLS} for label in servers}
    async with AsyncExitStack() as stack:
        steps = [
            (label, name, step)
            for label, (url, key) in servers.items()
            for name, step in (await connect(stack, url, key, server_ms[label])).items()
        ]
        for _ in range(warmup):
            for _, _, step in steps:
                await step()
        for per_server in server_ms.values():
            for values in per_server.values():
                values.clear()
        for _ in range(calls):
            for label, name, step in steps:
                started = time.perf_counter()
                await step()
                timings[label][name].append((time.perf_counter() - started) * 1000)
    return {label: report(timings[label], server_ms[label]) for label in servers}


def report(timings: dict[str, list[float]], server_ms: dict[str, list[float]]) -> dict[str, Any]:
    base = statistics.median(timings["health"])
    rows: dict[str, Any] = {}
    for name, values in timings.items():
        p50 = statistics.median(values)
        row = {
            "p50_ms": round(p50, 2),
            "p95_ms": round(percentile(values, 0.95), 2),
            "x_health": round(p50 / base, 2),
        }
        if server_ms.get(name):
            row["server_p50_ms"] = round(statistics.median(server_ms[name]), 2)
        rows[TOOLS[name][1] if name in TOOLS else "GET /health"] = row
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="timed rounds (one call per endpoint each)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--base-src",
        type=Path,
        help="also serve another tree's src/ (a second server, its PYTHONPATH) and time both, interleaved",
    )
    args = parser.parse_args()

    trees: dict[str, dict[str, str]] = {"this tree": {}}
    if args.base_src:
        trees = {"base": {"PYTHONPATH": str(args.base_src.resolve())}, **trees}
    with tempfile.TemporaryDirectory(prefix="mcp-overhead-") as tmp, contextlib.ExitStack() as servers:
        running: dict[str, tuple[str, str]] = {}
        for n, (label, extra) in enumerate(trees.items()):
            data_dir = Path(tmp) / f"data-{n}"
            data_dir.mkdir()
            key = agent_key(data_dir)
            # A key's read limit (600 a minute) would refuse a long run; the check itself still runs.
            env = {
                "TRIPTYCH_AUTH_ENABLED": "false",
                "TRIPTYCH_DATA_DIR": str(data_dir),
                "MG_AGENT_RATE_PER_MINUTE": "1000000",
                **extra,
            }
            running[label] = (servers.enter_context(Server(data_dir, env=env)).url, key)
        reports = asyncio.run(measure(running, args.calls, args.warmup))
    result = {"calls": args.calls, "warmup": args.warmup, "cpus": os.cpu_count(), "servers": reports}
    print(json.dumps(result, indent=2))
    for label, rows in reports.items():
        log(f"{label:<28}  p50 ms   p95 ms   server p50   x /health")
        for name, row in rows.items():
            server = f"{row['server_p50_ms']:>9.2f}" if "server_p50_ms" in row else " " * 9
            log(
                f"{name:<28} {row['p50_ms']:>7.2f}  {row['p95_ms']:>7.2f}   {server}   {row['x_health']:>6.2f}"
            )


if __name__ == "__main__":
    main()
