"""How long `metronix_sync` holds a caller on a source that is not MCP, against the timeout (decision 0410).

    flock /tmp/triptych-bench.lock .venv/bin/python bench/sync_timeout.py --base ../base/src [--timeout 3]

Two real `triptych serve` processes, one on this tree's `src` and one on `--base` (e.g. a `git archive` of
`main`), each with `TRIPTYCH_SYNC_TIMEOUT` and three stdio sources: a healthy MCP server with one resource
(the same-run baseline), one that prints garbage instead of JSON-RPC (and exits when its stdin closes),
and one that never answers and ignores its closed stdin (only a kill stops it). Each round syncs each
source alone through the MCP tool and times the call; rounds alternate which tree goes first. Prints the
seconds per source and tree (median of the rounds), their ratio to the timeout, and the error each gave.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from common import REPO, Server, log, machine_facts, write_json
from mcp import Client

HEALTHY = """
import anyio, mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

async def list_resources(ctx, params):
    return types.ListResourcesResult(resources=[types.Resource(uri="docs://a", name="Alpha")])

async def read_resource(ctx, params):
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=params.uri, text="Alpha text.")])

server = Server("healthy", on_list_resources=list_resources, on_read_resource=read_resource)

async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"""
GARBAGE = """
import sys
while True:
    print("this is not JSON-RPC", flush=True)
    if not sys.stdin.readline():
        break
"""
SILENT = "import time\ntime.sleep(600)\n"
SOURCES = {"healthy": HEALTHY, "garbage": GARBAGE, "silent": SILENT}


async def sync_each(url: str) -> dict[str, tuple[float, str | None]]:
    timed: dict[str, tuple[float, str | None]] = {}
    async with Client(url + "/mcp", read_timeout_seconds=600) as client:
        for name in SOURCES:
            started = time.perf_counter()
            result = await client.call_tool("metronix_sync", {"source": name, "workspace_id": "bench"})
            seconds = time.perf_counter() - started
            payload = json.loads(result.content[0].text)  # type: ignore[union-attr]
            timed[name] = (seconds, payload["details"][0]["error"])
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--base", type=Path, required=True, help="the `src` folder of the tree to compare with"
    )
    parser.add_argument("--timeout", type=float, default=3.0, help="TRIPTYCH_SYNC_TIMEOUT of both servers")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    trees = {"this": REPO / "src", "base": args.base.resolve()}
    facts = machine_facts()
    work = Path(tempfile.mkdtemp(prefix="triptych-sync-timeout-"))
    registry = {"mcpServers": {}}
    for name, code in SOURCES.items():
        script = work / f"{name}.py"
        script.write_text(code)
        registry["mcpServers"][name] = {"command": sys.executable, "args": [str(script)]}
    servers: dict[str, Server] = {}
    for tree, src in trees.items():
        data = work / tree
        (data / ".metronix").mkdir(parents=True)
        (data / ".metronix" / "mcp_servers.json").write_text(json.dumps(registry))
        env = {"PYTHONPATH": str(src), "TRIPTYCH_SYNC_TIMEOUT": f"{args.timeout:g}"}
        servers[tree] = Server(data, env=env)
    runs: dict[str, dict[str, list[float]]] = {t: {s: [] for s in SOURCES} for t in trees}
    errors: dict[str, dict[str, str | None]] = {t: {} for t in trees}
    try:
        for server in servers.values():
            server.start()
        for round_no in range(args.rounds):
            order = list(trees) if round_no % 2 == 0 else list(reversed(trees))
            for tree in order:
                for name, (seconds, error) in anyio.run(sync_each, servers[tree].url).items():
                    runs[tree][name].append(seconds)
                    errors[tree][name] = error
                log(
                    f"round {round_no + 1} {tree}: "
                    + ", ".join(f"{s} {runs[tree][s][-1]:.2f} s" for s in SOURCES)
                )
    finally:
        for server in servers.values():
            server.stop()
    results: dict[str, Any] = {}
    print(f"TRIPTYCH_SYNC_TIMEOUT={args.timeout:g}, {args.rounds} rounds, load {os.getloadavg()[0]:.2f}")
    print(f"{'source':8} {'tree':5} {'median s':>9} {'x timeout':>10}  error")
    for name in SOURCES:
        for tree in trees:
            median = statistics.median(runs[tree][name])
            results.setdefault(name, {})[tree] = {"seconds": runs[tree][name], "median_s": median}
            print(f"{name:8} {tree:5} {median:9.2f} {median / args.timeout:10.2f}  {errors[tree][name]}")
        before, after = results[name]["base"]["median_s"], results[name]["this"]["median_s"]
        results[name]["this_over_base"] = after / before
        print(f"{name:8} this/base {after / before:.2f}")
    payload = {"timeout_s": args.timeout, "rounds": args.rounds, "results": results, "errors": errors}
    payload["machine"] = {**facts, "load_end": os.getloadavg()}
    out = args.out or Path("/tmp/triptych-bench") / f"sync_timeout-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(out, payload)
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
