"""Benchmark of metronix_sync throughput and of the answer endpoint's own latency.

    .venv/bin/python bench/sync_answers.py [--resources 1000] [--queries 50] [--out FILE]

1. Sync: an MCP server over stdio with N small resources (generated here); a full sync through the
   `metronix_sync` tool of a real `triptych serve`; resources/s, then a no-change resync (resources/s
   when everything is skipped by hash).
2. Answers: `POST /v1/chat/completions` against the same server, with an instant OpenAI-compatible
   upstream on loopback, so the measured time is Triptych's own (retrieval, prompt, relay); the
   upstream's own time is measured by the fake upstream and subtracted. Also the extractive mode.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client

ROOT = Path(__file__).resolve().parent.parent
TRIPTYCH = str(Path(sys.executable).parent / "triptych")

SOURCE = """
import json, sys
import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

DATA = json.load(open(sys.argv[1]))
URIS = sorted(DATA)

async def list_resources(ctx, params):
    start = int(params.cursor) if params and params.cursor else 0
    page = URIS[start:start + 500]
    nxt = str(start + 500) if start + 500 < len(URIS) else None
    return types.ListResourcesResult(resources=[types.Resource(uri=u, name=u) for u in page], next_cursor=nxt)

async def read_resource(ctx, params):
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=params.uri, text=DATA[str(params.uri)])])

server = Server("bench-source", on_list_resources=list_resources, on_read_resource=read_resource)

async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"""

TOPICS = [
    "invoices",
    "deployments",
    "holidays",
    "security reviews",
    "on-call",
    "expenses",
    "hiring",
    "backups",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Upstream(BaseHTTPRequestHandler):
    own_ms: list[float] = []

    def do_POST(self) -> None:  # noqa: N802
        started = time.perf_counter()
        self.rfile.read(int(self.headers["Content-Length"]))
        payload = json.dumps(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Answer [1]."}}]}
        )
        body = payload.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        Upstream.own_ms.append((time.perf_counter() - started) * 1000)

    def log_message(self, format: str, *args: object) -> None:
        pass


def start_server(data: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [TRIPTYCH, "serve", "--port", str(port), "--data-dir", str(data)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


async def run_sync(url: str) -> tuple[dict[str, Any], float]:
    async with Client(url + "/mcp", read_timeout_seconds=3600) as client:
        started = time.perf_counter()
        result = await client.call_tool("metronix_sync", {"workspace_id": "bench"})
        return json.loads(result.content[0].text), time.perf_counter() - started  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--resources", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="100 resources, 10 queries")
    parser.add_argument("--out", default="/tmp/triptych-bench-sync-answers.json")
    args = parser.parse_args()
    if args.quick:
        args.resources, args.queries = 100, 10

    work = Path(tempfile.mkdtemp(prefix="triptych-bench-"))
    resources = {
        f"bench://doc/{i:05d}": f"Note {i} about {TOPICS[i % len(TOPICS)]}: team {i % 17} reviewed item {i} on day {i % 28 + 1}."
        for i in range(args.resources)
    }
    (work / "resources.json").write_text(json.dumps(resources))
    (work / "source.py").write_text(SOURCE)
    data = work / "data"
    subprocess.run(
        [TRIPTYCH, "sources", "add", "bench", "--command", sys.executable, "--arg", str(work / "source.py"),
         "--arg", str(work / "resources.json"), "--data-dir", str(data)],
        check=True, capture_output=True,
    )  # fmt: skip

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    env = {
        "TRIPTYCH_LLM_URL": f"http://127.0.0.1:{upstream.server_address[1]}/v1",
        "TRIPTYCH_LLM_MODEL": "instant",
    }
    proc, url = start_server(data, env)
    try:
        print(f"syncing {args.resources} resources ...", file=sys.stderr, flush=True)
        first, first_s = anyio.run(run_sync, url)
        second, second_s = anyio.run(run_sync, url)
        questions = [
            f"What did team {i % 17} review about {TOPICS[i % len(TOPICS)]}?" for i in range(args.queries)
        ]
        rag_ms: list[float] = []
        extractive_ms: list[float] = []
        with httpx.Client(timeout=60) as http:
            for model, sink in (("triptych-rag", rag_ms), ("triptych-extractive", extractive_ms)):
                for q in questions:
                    body = {"model": model, "messages": [{"role": "user", "content": q}]}
                    started = time.perf_counter()
                    response = http.post(
                        url + "/v1/chat/completions", json=body, headers={"X-Workspace-Id": "bench"}
                    )
                    response.raise_for_status()
                    sink.append((time.perf_counter() - started) * 1000)
        # Round trip of a request that does no work, to separate HTTP cost from the pipeline's.
        with httpx.Client() as http:
            floor = [0.0] * 30
            for i in range(30):
                started = time.perf_counter()
                http.get(url + "/health")
                floor[i] = (time.perf_counter() - started) * 1000
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        upstream.shutdown()

    upstream_p50 = statistics.median(Upstream.own_ms) if Upstream.own_ms else 0.0
    results = {
        "machine": {"nproc": os.cpu_count()},
        "sync": {
            "resources": args.resources,
            "full_sync_s": round(first_s, 2),
            "full_sync_resources_per_s": round(args.resources / first_s, 1),
            "details": first["details"],
            "unchanged_resync_s": round(second_s, 2),
            "unchanged_resync_resources_per_s": round(args.resources / second_s, 1),
        },
        "answers": {
            "queries": args.queries,
            "rag_p50_ms": round(statistics.median(rag_ms), 1),
            "rag_p95_ms": round(pct(rag_ms, 0.95), 1),
            "upstream_own_p50_ms": round(upstream_p50, 2),
            "rag_excluding_upstream_p50_ms": round(statistics.median(rag_ms) - upstream_p50, 1),
            "extractive_p50_ms": round(statistics.median(extractive_ms), 1),
            "extractive_p95_ms": round(pct(extractive_ms, 0.95), 1),
            "http_floor_p50_ms": round(statistics.median(floor), 2),
        },
    }
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
