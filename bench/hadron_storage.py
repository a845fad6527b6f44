"""Hadron storage features of issue 18: Git-backed memory sync time and the cost of encryption at rest.

    .venv/bin/python bench/hadron_storage.py [--files 10000] [--changed 0.01] [--calls 300]

Git sync (in process, through ``GitSyncService.sync_memory``, what ``hadron_sync_graph`` runs): a real
repository of ``--files`` Markdown files (100 per directory, front matter and a ~600-byte body) in a
bare origin, first sync, a resync after ``--changed`` of the files changed (edited in one commit), and
a resync with nothing changed. Baseline in the same run: the same files created one by one through
``NodeService.create`` (the ordinary write path, one transaction each) in another memory.

Encryption: ``hadron_create_node`` and ``hadron_get_node`` p50/p95 over MCP (official client, real
``triptych serve`` with a server key) in an encrypted and an unencrypted memory, calls interleaved so
both see the same machine load; then the same operations in process (``NodeService``), where the cipher
is a larger share of the time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hadron.gitrepos import Repo, git  # noqa: E402
from hadron.world import Session, connect  # noqa: E402
from harness import SECRET, ServerProcess, token  # noqa: E402

from triptych.hadron.identity import HadronCaller  # noqa: E402
from triptych.hadron.sealing import ServerKey, check_key  # noqa: E402
from triptych.hadron.services.nodes import NodeFields  # noqa: E402
from triptych.hadron.surface import Hadron  # noqa: E402

KEY = ServerKey(bytes(range(32)))
BODY = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def world(path: Path, key: ServerKey | None) -> Hadron:
    h = Hadron.open(path, key=key)
    admin = h.admin()
    admin.create_org("bench.example")
    admin.create_user("bench")
    admin.add_org_member("bench.example", "bench", "OWNER")
    for slug, encrypted in (("docs", False), ("baseline", False), ("plain", False), ("sealed", True)):
        admin.create_memory(slug, "knowledge", org="bench.example", encrypted=encrypted, embedding="none")
    check_key(h.db, key)
    return h


def file_text(i: int, version: int) -> str:
    return f"---\ntitle: Page {i}\nowner: team-{i % 7}\nversion: {version}\n---\n{BODY}\n"


def bench_sync(root: Path, files: int, changed: float) -> dict[str, Any]:
    repo = Repo(root / "repo")
    paths = [f"d{i // 100:03d}/p{i % 100:03d}.md" for i in range(files)]
    for i, path in enumerate(paths):
        repo.write(path, file_text(i, 1))
    log(f"committing {files} files ...")
    repo.commit("seed")
    h = world(root / "data" / "hadron.db", KEY)
    try:
        memory = h.admin().memory("hrn:mem:bench.example:docs")
        h.gitsync.store.attach(memory.id, repo.url, "main")
        log("first sync ...")
        t = time.perf_counter()
        first = h.gitsync.sync_memory(memory, "bench")
        first_s = time.perf_counter() - t
        assert len(first.created) == files
        picked = random.Random(7).sample(range(files), max(1, int(files * changed)))
        for i in picked:
            repo.write(paths[i], file_text(i, 2))
        repo.commit("one percent")
        log(f"resync after {len(picked)} changed files ...")
        t = time.perf_counter()
        second = h.gitsync.sync_memory(memory, "bench")
        resync_s = time.perf_counter() - t
        assert len(second.updated) == len(picked)
        t = time.perf_counter()
        h.gitsync.sync_memory(memory, "bench")
        noop_s = time.perf_counter() - t
        log("baseline: the same nodes through NodeService.create, one by one ...")
        caller = HadronCaller("user", "bench", user=h.tenancy.user_by_handle("bench"))
        state = h.selections.session(caller, "bench", None)
        t = time.perf_counter()
        for i, path in enumerate(paths):
            loc = "hrn:node:bench.example:baseline:" + path[:-3].replace("/", ":")
            values = {
                "name": f"Page {i}",
                "content": BODY + "\n",
                "data": {"owner": f"team-{i % 7}", "version": 1},
            }
            h.nodes.create(caller, state, loc, NodeFields(values, frozenset(values)), None)
        baseline_s = time.perf_counter() - t
    finally:
        h.close()
    return {
        "files": files,
        "changed_files": len(picked),
        "first_sync_s": round(first_s, 2),
        "resync_changed_s": round(resync_s, 2),
        "resync_unchanged_s": round(noop_s, 2),
        "baseline_create_one_by_one_s": round(baseline_s, 2),
        "first_sync_vs_baseline": round(first_s / baseline_s, 3),
        "resync_vs_first_sync": round(resync_s / first_s, 3),
        "commit": git(repo.work, "rev-parse", "HEAD"),
    }


async def mcp_calls(url: str, calls: int) -> dict[str, dict[str, float]]:
    headers = {"Authorization": f"Bearer {token(user='bench')}"}
    timings: dict[str, list[float]] = {
        f"{op}_{m}": [] for op in ("create", "get") for m in ("plain", "sealed")
    }

    class W:
        pass

    w: Any = W()
    w.url = url
    async with connect(w, headers) as session:
        s: Session = session
        for i in range(calls):
            for memory in ("plain", "sealed") if i % 2 == 0 else ("sealed", "plain"):
                loc = f"hrn:node:bench.example:{memory}:n{i:05d}"
                t = time.perf_counter()
                await s.ok(
                    "hadron_create_node", loc=loc, name=f"n{i}", content=BODY, data={"k": i, "v": BODY[:80]}
                )
                timings[f"create_{memory}"].append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                await s.ok("hadron_get_node", loc=loc)
                timings[f"get_{memory}"].append((time.perf_counter() - t) * 1000)
    return {
        k: {"p50_ms": round(statistics.median(v), 3), "p95_ms": round(pct(v, 0.95), 3)}
        for k, v in timings.items()
    }


def inprocess_calls(h: Hadron, calls: int) -> dict[str, dict[str, float]]:
    caller = HadronCaller("user", "bench", user=h.tenancy.user_by_handle("bench"))
    state = h.selections.session(caller, "inproc", None)
    timings: dict[str, list[float]] = {
        f"{op}_{m}": [] for op in ("create", "get") for m in ("plain", "sealed")
    }
    for i in range(calls):
        for memory in ("plain", "sealed") if i % 2 == 0 else ("sealed", "plain"):
            loc = f"hrn:node:bench.example:{memory}:p{i:05d}"
            values = {"name": f"p{i}", "content": BODY, "data": {"k": i, "v": BODY[:80]}}
            t = time.perf_counter()
            h.nodes.create(caller, state, loc, NodeFields(values, frozenset(values)), None)
            timings[f"create_{memory}"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            mem, node = h.nodes.find(caller, state, loc)
            h.nodes.view(caller, mem, node)
            timings[f"get_{memory}"].append((time.perf_counter() - t) * 1000)
    return {
        k: {"p50_ms": round(statistics.median(v), 3), "p95_ms": round(pct(v, 0.95), 3)}
        for k, v in timings.items()
    }


def ratios(t: dict[str, dict[str, float]]) -> dict[str, float]:
    return {
        op: round(t[f"{op}_sealed"]["p50_ms"] / t[f"{op}_plain"]["p50_ms"], 3) for op in ("create", "get")
    }


def bench_encryption(root: Path, calls: int) -> dict[str, Any]:
    data = root / "enc"
    world(data / "hadron.db", KEY).close()
    server = ServerProcess(
        data,
        {
            "TRIPTYCH_AUTH_ENABLED": "true",
            "TRIPTYCH_JWT_SECRET": SECRET,
            "TRIPTYCH_HADRON_KEY": KEY.encoded(),
        },
    ).start()
    try:
        log(f"encryption over MCP: {calls} creates and gets per memory ...")
        mcp = asyncio.run(mcp_calls(server.url + "/hadron/mcp", calls))
    finally:
        server.stop()
    log(f"encryption in process: {calls * 5} creates and gets per memory ...")
    h = Hadron.open(data / "hadron.db", key=KEY)
    try:
        inproc = inprocess_calls(h, calls * 5)
    finally:
        h.close()
    return {"mcp": mcp, "mcp_sealed_over_plain_p50": ratios(mcp), "inprocess": inproc,
            "inprocess_sealed_over_plain_p50": ratios(inproc)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--skip-sync", action="store_true")
    parser.add_argument("--skip-encryption", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="hadron-storage-") as tmp:
        root = Path(tmp)
        result: dict[str, Any] = {"nproc": os.cpu_count(), "load_start": [round(x, 2) for x in load]}
        if not args.skip_sync:
            result["git_sync"] = bench_sync(root, args.files, args.changed)
        if not args.skip_encryption:
            result["encryption"] = bench_encryption(root, args.calls)
        result["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
