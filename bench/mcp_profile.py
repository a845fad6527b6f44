"""Where a trivial MCP call's time goes, in process: the whole app (middleware, routing, endpoint, SDK,
tool layer) driven through ``httpx.ASGITransport``, without sockets, uvicorn or the client's own work.

    nice -n 5 .venv/bin/python bench/mcp_profile.py metergraph [--calls 300] [--profile cumulative]

``SURFACE`` is ``health`` (the baseline), ``metronix`` (``metronix_status``), ``hadron``
(``hadron_server_info``) or ``metergraph`` (``metergraph_get_capabilities``). Each call is sent as the
official 2.x client sends it: on ``/mcp`` at revision 2026-07-28 (no session: the SDK answers it in the
request's task), on the other two after an ``initialize`` at 2025-11-25 (the revisions their contracts
accept). Prints the p50 of a call and the event loop thread's CPU per call (``time.thread_time``: a busy
machine stretches the p50, not this), then with ``--profile`` a cProfile of ``--calls`` more calls
sorted by that key. The tool itself runs in a worker thread and is not in the CPU figure.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

CALLS = {
    "metronix": ("/mcp", "metronix_status"),
    "hadron": ("/hadron/mcp", "hadron_server_info"),
    "metergraph": ("/v1/agent/mcp", "metergraph_get_capabilities"),
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
# The stateless revision the official 2.x client speaks where the server accepts it (Metronix's /mcp):
# no initialize, each request carries its envelope.
MODERN = "2026-07-28"
RATE = 1_000_000
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


async def caller(client: httpx.AsyncClient, surface: str, key: str) -> Callable[[], Awaitable[None]]:
    if surface == "health":

        async def health() -> None:
            assert (await client.get("/health")).status_code == 200

        return health
    path, tool = CALLS[surface]
    headers: dict[str, str] = {
        **ACCEPT,
        **({"Authorization": f"Bearer {key}"} if surface == "metergraph" else {}),
    }
    if surface == "metronix":
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": tool})
        params = {"name": tool, "arguments": {}, "_meta": ENVELOPE}
        modern = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}

        async def stateless() -> None:
            response = await client.post(path, headers=headers, json=modern)
            assert response.status_code == 200 and "error" not in response.text[:200], response.text

        return stateless
    init = await client.post(path, headers=headers, json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                                          "params": INIT})  # fmt: skip
    session = init.headers.get("mcp-session-id")
    headers["MCP-Protocol-Version"] = "2025-11-25"
    if session:
        headers["Mcp-Session-Id"] = session
        await client.post(
            path, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}}

    async def call() -> None:
        response = await client.post(path, headers=headers, json=message)
        assert response.status_code == 200 and "error" not in response.text[:200], response.text

    return call


async def run(surface: str, calls: int, sort: str | None) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="mcp-profile-"))
    os.environ["TRIPTYCH_DATA_DIR"] = str(data_dir)
    # Above the per-minute read limit of an agent key (600) the calls would be refused; the check still runs.
    os.environ.setdefault("MG_AGENT_RATE_PER_MINUTE", str(RATE))
    from triptych.app import create_app
    from triptych.core.config import load_settings
    from triptych.metergraph.service import Metergraph
    from triptych.metergraph.settings import load_metergraph_settings

    mg = Metergraph.open(data_dir, load_metergraph_settings())
    key = str(mg.keys.create_agent_key("bench", "debug", None)[1])
    mg.close()
    app = create_app(load_settings(data_dir=data_dir))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
            once = await caller(client, surface, key)
            for _ in range(50):
                await once()
            times = []
            cpu = time.thread_time()
            for _ in range(calls):
                started = time.perf_counter()
                await once()
                times.append((time.perf_counter() - started) * 1000)
            cpu_ms = (time.thread_time() - cpu) / calls * 1000
            print(
                f"{surface}: p50 {statistics.median(times):.3f} ms, loop-thread CPU {cpu_ms:.3f} ms per call"
            )
            if sort:
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(calls):
                    await once()
                profile.disable()
                stats: Any = pstats.Stats(profile)
                print(
                    f"{stats.total_calls / calls:.0f} Python calls per request (coroutine resumptions count)"
                )
                stats.sort_stats(sort).print_stats(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("surface", choices=["health", *CALLS])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--profile", metavar="SORT", help="print a cProfile sorted by SORT (e.g. cumulative)")
    args = parser.parse_args()
    asyncio.run(run(args.surface, args.calls, args.profile))


if __name__ == "__main__":
    main()
