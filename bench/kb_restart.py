"""Time to first answer of ``metronix_search_fast`` after a restart, at 100,000 chunks in one workspace.

A restart is what a user notices: the server answers /health at once, and the question is how long the
first search then takes, and what kind of answer it is. Three starts of a real ``triptych serve`` on one
data directory, in one run:
  * **before**: the tree given by ``--base`` (``main``'s ``src/``), which loads the workspace's vectors and
    keyword index at start and waits for them in the first search;
  * **after, cold**: this tree with no saved vector index (the first start after an upgrade): it
    answers at once from what it has, builds the graph in the background and saves it;
  * **after, restart**: this tree again, now loading the saved graph and vectors, and the saved keyword
    index (the cold start saved it once built).
For each start: seconds from launch to the first 200 of /health, to the first search answer (and that
answer's ``retrieval``), to the first answer ranked by the in-process BM25 index (``keyword_bm25_s``),
and to the first answer from the full index (``dense`` "hnsw" with BM25); plus
the round trip of /health and of a search once settled. /health is the baseline: the first answer's
delay is given as a multiple of the first /health's.

The database is built directly through ``SqliteKnowledgeStore.put_document``: SciFact text, chunked as
the service chunks it, then replicas (the same sentences reshuffled) up to ``--chunks``; the vectors are
random unit vectors (seeded): a restart's cost does not depend on what the vectors mean, and embedding
100,000 texts would take hours on 2 cores.

Run from the repository root:
    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/kb_restart.py --base /path/to/main/src
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import log, progress, summary  # noqa: E402

WORKSPACE = "bench100k"
CHUNKS_PER_DOC = 10
QUERIES = ("effects of vitamin d on bone density", "gene expression in tumour cells", "cold start probe")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/kb_restart.py",
        description="Time to first metronix_search_fast answer after a restart at 100,000 chunks: main's "
        "tree (--base) against this one, cold and with its saved vector index, /health as the baseline.",
    )
    p.add_argument("--base", type=Path, help="src/ of the tree to compare with (default: no 'before' run)")
    p.add_argument("--chunks", type=int, default=100_000, help="chunks in the workspace (default 100000)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--scifact-dir", type=Path, default=common.SCIFACT_DIR, help="BEIR SciFact folder")
    p.add_argument("--data-dir", type=Path, help="data dir (default: a fresh temp dir, deleted after)")
    p.add_argument("--reuse", action="store_true", help="reuse a database already built in --data-dir")
    p.add_argument(
        "--keywords-only",
        action="store_true",
        help="wait for both sides but not for the HNSW graph, and build no graph between starts (minutes at "
        "100,000 chunks): what the keyword index's time to 'bm25' needs",
    )
    p.add_argument("--full-timeout", type=float, default=900.0, help="seconds to wait for the full index")
    p.add_argument(
        "--out", type=Path, help="JSON result (default /tmp/triptych-bench/kb-restart-<time>.json)"
    )
    return p.parse_args(argv)


def build_database(db_path: Path, docs: Sequence[dict[str, str]], target: int, seed: int) -> dict[str, Any]:
    from triptych.core.embed import LocalEmbedder
    from triptych.metronix.chunking import split_sentences
    from triptych.metronix.knowledge import content_hash
    from triptych.metronix.store import NewDocument, SqliteKnowledgeStore

    embedder = LocalEmbedder()  # its name and dimension only: the server must accept the index
    rows = common.chunk_corpus(docs, 200)
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    store = SqliteKnowledgeStore(db_path, embedder.dim)
    store.set_embedding_model(embedder.name, embedder.dim)
    started = time.perf_counter()
    total = replica = 0
    with progress(total=target, desc="building database", unit="chunk") as bar:
        while total < target:
            for start in range(0, len(rows), CHUNKS_PER_DOC):
                if total >= target:
                    break
                texts = [r.text for r in rows[start : start + CHUNKS_PER_DOC]][: target - total]
                if replica:
                    shuffled = []
                    for text in texts:
                        sentences = split_sentences(text) or [text]
                        rng.shuffle(sentences)
                        shuffled.append(" ".join(sentences))
                    texts = shuffled
                vectors = nrng.normal(size=(len(texts), embedder.dim)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                content = " ".join(texts)
                label = f"doc{start}~r{replica}"
                store.put_document(
                    NewDocument(
                        workspace_id=WORKSPACE, doc_label=label, title=rows[start].title or None,
                        content=content, source_type="scifact", url=None, date=None, metadata={},
                        content_hash=content_hash(rows[start].title or None, content, {}),
                        chunks=texts, embeddings=vectors,
                    )
                )  # fmt: skip
                total += len(texts)
                bar.update(len(texts))
            replica += 1
    chunks = store.count_chunks()
    store.close()
    return {"chunks": chunks, "build_seconds": round(time.perf_counter() - started, 1)}


async def _search(client: Any, query: str) -> tuple[dict[str, Any], float]:
    payload, rtt = await common.call_json(
        client, "metronix_search_fast", {"workspace_id": WORKSPACE, "query": query, "top_k": 10}
    )
    return payload, rtt


def _full(payload: dict[str, Any], graph: bool) -> bool:
    """An answer from both sides (``graph``: the dense side from the HNSW graph); a tree without
    ``retrieval`` waited for everything."""
    retrieval = payload.get("retrieval")
    if retrieval is None:
        return True
    dense_ok = retrieval.get("dense") == "hnsw" if graph else retrieval.get("dense") != "loading"
    return dense_ok and retrieval.get("keyword") == "bm25"


async def _measure(
    url: str, launched: float, healthy_s: float, full_timeout: float, graph: bool
) -> dict[str, Any]:
    from mcp import Client

    out: dict[str, Any] = {"healthy_s": round(healthy_s, 2)}
    async with Client(url + "/mcp", read_timeout_seconds=full_timeout) as client:
        first, rtt = await _search(client, QUERIES[0])
        out["first_answer_s"] = round(time.perf_counter() - launched, 2)
        out["first_answer_rtt_ms"] = round(rtt, 1)
        out["first_answer_retrieval"] = first.get("retrieval", "(not reported)")
        out["first_answer_count"] = first["count"]
        payload, deadline = first, launched + full_timeout
        # Seconds from launch to the first answer ranked by the in-process BM25 index (``keyword: bm25``):
        # what a saved keyword index shortens (docs/decisions/0260-saved-keyword-index.md).
        bm25_at = (
            out["first_answer_s"] if payload.get("retrieval", {}).get("keyword", "bm25") == "bm25" else None
        )
        while not _full(payload, graph) and time.perf_counter() < deadline:
            await asyncio.sleep(0.5)
            payload, _ = await _search(client, QUERIES[1])
            if bm25_at is None and payload.get("retrieval", {}).get("keyword") == "bm25":
                bm25_at = round(time.perf_counter() - launched, 2)
        out["keyword_bm25_s"] = bm25_at
        done = _full(payload, graph)
        out["hybrid_answer_s" if not graph else "full_index_s"] = (
            round(time.perf_counter() - launched, 2) if done else None
        )
        out["last_retrieval"] = payload.get("retrieval", "(not reported)")
        settled = [(await _search(client, q))[1] for q in QUERIES * 5]
        out["settled_search_rtt_ms"] = summary(settled)
    health = []
    with httpx.Client(timeout=10.0) as http:
        for _ in range(15):
            t0 = time.perf_counter()
            http.get(url + "/health")
            health.append((time.perf_counter() - t0) * 1000)
    out["health_rtt_ms"] = summary(health)
    out["first_answer_over_healthy"] = round(out["first_answer_s"] / max(healthy_s, 1e-3), 2)
    return out


def start(data_dir: Path, src: Path | None, full_timeout: float, graph: bool = True) -> dict[str, Any]:
    """One start of ``triptych serve``: launched, polled for /health, searched, stopped by its pid."""
    env = {**os.environ, "TRIPTYCH_LOG_LEVEL": "warning"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    port = common.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(common.TRIPTYCH_BIN), "serve", "--port", str(port), "--data-dir", str(data_dir)]
    log_path = Path(tempfile.gettempdir()) / f"triptych-bench-restart-{port}.log"
    with open(log_path, "wb") as sink:
        launched = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"triptych serve exited with {proc.returncode}; see {log_path}")
                try:
                    if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            healthy = time.perf_counter() - launched
            return asyncio.run(_measure(url, launched, healthy, full_timeout, graph))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=120)  # a clean stop saves the vector index
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def save_index(db_path: Path) -> float | None:
    """Load the workspace's vectors, build its graph and save it as a server does (seconds, or None if
    this tree saves none)."""
    from triptych.core.embed import LocalEmbedder
    from triptych.metronix.store import SqliteKnowledgeStore, vectors_dir

    started = time.perf_counter()
    store = SqliteKnowledgeStore(db_path, LocalEmbedder().dim)
    store.index.preload(WORKSPACE, store.generation(WORKSPACE))
    store.index.wait_ready(WORKSPACE, timeout=3600)
    store.close()
    return round(time.perf_counter() - started, 1) if any(vectors_dir(db_path).glob("*.vectors")) else None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    facts = common.machine_facts()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="triptych-restart-"))
    db_path = data_dir / "metronix.db"
    out_path = args.out or Path("/tmp/triptych-bench") / f"kb-restart-{time.strftime('%Y%m%d-%H%M%S')}.json"
    result: dict[str, Any] = {"benchmark": "kb_restart", "machine": facts, "chunks": args.chunks}
    try:
        if args.reuse and db_path.exists():
            result["database"] = {"reused": True}
        else:
            if db_path.exists():
                raise SystemExit(f"{db_path} exists: pass --reuse, or a fresh --data-dir")
            docs = common.load_scifact(args.scifact_dir).docs
            result["database"] = build_database(db_path, docs, args.chunks, args.seed)
        log(f"database: {result['database']}")
        for saved in data_dir.glob("*vectors*"):  # a reused directory starts without a saved index
            shutil.rmtree(saved) if saved.is_dir() else saved.unlink()
        if args.base is not None:
            log(f"before: {args.base}")
            result["before"] = start(data_dir, args.base, args.full_timeout, graph=not args.keywords_only)
            log(f"before: {result['before']}")
        # Cold: until both sides answer (the graph keeps building; on two busy cores that takes many
        # minutes, so the saved index is then made in process, timed, as the server would at its build).
        log("after_cold ...")
        result["after_cold"] = start(data_dir, None, args.full_timeout, graph=False)
        log(f"after_cold: {result['after_cold']}")
        if not args.keywords_only:
            result["graph_build_and_save_s"] = save_index(data_dir / "metronix.db")
            log(f"graph built and saved in {result['graph_build_and_save_s']} s")
        log("after_restart ...")
        result["after_restart"] = start(data_dir, None, args.full_timeout, graph=not args.keywords_only)
        log(f"after_restart: {result['after_restart']}")
    finally:
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    common.write_json(out_path, result)
    lines = ["", "=" * 78, f"time to first answer after a start, {args.chunks} chunks in one workspace"]
    for phase in ("before", "after_cold", "after_restart"):
        r = result.get(phase)
        if r is None:
            continue
        lines.append(
            f"{phase:<14} healthy {r['healthy_s']:>6} s  first answer {r['first_answer_s']:>7} s "
            f"({r['first_answer_over_healthy']}x healthy; {r['first_answer_retrieval']}, "
            f"{r['first_answer_count']} results)  keyword bm25 {r.get('keyword_bm25_s')} s  both sides {r.get('full_index_s', r.get('hybrid_answer_s'))} s  "
            f"/health p50 {r['health_rtt_ms']['p50']} ms  search p50 {r['settled_search_rtt_ms']['p50']} ms"
        )
    lines += ["=" * 78, f"JSON: {out_path}"]
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
