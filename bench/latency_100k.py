"""Search latency of ``metronix_search_fast`` over 100,000 chunks in one workspace.

Embedding 100k real passages would take hours on 2 cores (about 16 passages/s), so the database is built
directly through ``SqliteKnowledgeStore.put_document``:
  * text: the SciFact corpus, chunked as the service chunks it (original documents first), then replicas
    under new labels whose chunks are the same sentences reshuffled with one sentence swapped for a random
    corpus sentence, so the keyword index has realistic vocabulary and posting lists ~20x SciFact's;
  * vectors: the real embedding of the source chunk (all-MiniLM-L6-v2 int8, from the embedding cache or
    embedded here) plus Gaussian noise (default sigma 0.02 per dimension), re-normalised. The noise keeps
    replicas distinct but close to their source (cosine ~0.93), which is what an HNSW graph sees in a
    corpus with many near-duplicates.
Then a real ``triptych serve`` on that data dir answers the SciFact test queries over MCP (server-side
``latency_ms`` and client round trip), and the same steps are timed in-process: query embedding, BM25
keyword query, vector search (usearch HNSW at >= 20,000 vectors, exact numpy for comparison) and
fusion + hydration.

Run from the repository root:  .venv/bin/python bench/latency_100k.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import log, progress, summary  # noqa: E402

WORKSPACE = "bench100k"
TOP_K = 10


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/latency_100k.py",
        description="Search latency of metronix_search_fast over 100,000 chunks (SciFact text recombined, "
        "real chunk embeddings plus small Gaussian noise), through a real `triptych serve`, with an "
        "in-process breakdown: query embedding, BM25 keyword query, vector search, fusion + hydration.",
    )
    p.add_argument(
        "--quick", action="store_true", help="smoke run: 200 source documents, 21,000 chunks, 20 queries"
    )
    p.add_argument("--chunks", type=int, help="chunks in the workspace (default 100000; 21000 with --quick)")
    p.add_argument(
        "--queries", type=int, help="SciFact test queries to run (default all 300; 20 with --quick)"
    )
    p.add_argument("--noise", type=float, default=0.02, help="Gaussian sigma per dimension (default 0.02)")
    p.add_argument(
        "--chunk-tokens", type=int, default=200, help="chunking of the source corpus (default 200)"
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--scifact-dir", type=Path, default=common.SCIFACT_DIR, help="BEIR SciFact folder")
    p.add_argument("--data-dir", type=Path, help="server data dir (default: a fresh temp dir, deleted after)")
    p.add_argument("--reuse", action="store_true", help="reuse a database already built in --data-dir")
    p.add_argument("--keep-data", action="store_true", help="keep the generated data dir")
    p.add_argument("--port", type=int, help="server port (default: a free one)")
    p.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds to wait after the first MCP search, so the server's HNSW graph is built (default 0)",
    )
    p.add_argument(
        "--skip-mcp",
        action="store_true",
        help="in-process figures only (a fresh server serves exact search until its HNSW graph is built)",
    )
    p.add_argument(
        "--cache-dir", type=Path, default=common.CACHE_DIR, help="embedding cache (outside the repo)"
    )
    p.add_argument(
        "--out", type=Path, help="JSON result file (default /tmp/triptych-bench/latency100k-<time>.json)"
    )
    return p.parse_args(argv)


# -- building the database ------------------------------------------------------------------------------


def replica_documents(
    docs: Sequence[dict[str, str]],
    target: int,
    chunk_tokens: int,
    noise: float,
    seed: int,
    embedder: Any,
    cache: common.EmbeddingCache,
    workspace: str = WORKSPACE,
) -> Any:
    """``NewDocument``s totalling ``target`` chunks: SciFact as the service chunks it, then replicas (the
    module docstring says how they are made). Yields (document, chunk count); the last item's count is 0
    and its document None, with the replica count as third element."""
    from triptych.metronix.chunking import split_sentences
    from triptych.metronix.knowledge import content_hash
    from triptych.metronix.store import NewDocument

    rows = common.chunk_corpus(docs, chunk_tokens)
    base = cache.get(
        [r.embed_text for r in rows], embedder, desc=f"source embeddings ({chunk_tokens} tokens)"
    )
    cache.save()
    by_doc: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_doc.setdefault(r.doc_id, []).append(i)
    pool = [s for d in docs for s in split_sentences(d["text"])]
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    total = replica = 0
    while total < target:
        for d in docs:
            if total >= target:
                break
            idx = by_doc.get(d["_id"], [])[: target - total]
            if not idx:
                continue
            if replica == 0:
                texts = [rows[i].text for i in idx]
                vecs = base[idx]
                label = d["_id"]
            else:
                texts = []
                for i in idx:
                    sentences = split_sentences(rows[i].text) or [rows[i].text]
                    rng.shuffle(sentences)
                    sentences[rng.randrange(len(sentences))] = rng.choice(pool)
                    texts.append(" ".join(sentences))
                vecs = base[idx] + nrng.normal(0.0, noise, size=(len(idx), base.shape[1])).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                label = f"{d['_id']}~r{replica}"
            content = " ".join(texts)
            document = NewDocument(
                workspace_id=workspace,
                doc_label=label,
                title=d["title"] or None,
                content=content,
                source_type="scifact",
                url=None,
                date=None,
                metadata={},
                content_hash=content_hash(d["title"] or None, content, {}),
                chunks=texts,
                embeddings=vecs.astype(np.float32),
            )
            total += len(idx)
            yield document, len(idx), replica
        replica += 1
    yield None, 0, replica


CORPUS_NOTES = {
    "vectors": "real SciFact chunk embeddings (source chunks) + N(0, sigma^2) per dimension, "
    "re-normalised (replicas); NOT real embeddings of the replica text",
    "text": "replica 0 = SciFact chunks as the service makes them; replicas = the same sentences "
    "shuffled with one sentence replaced by a random corpus sentence",
}


def build_database(
    db_path: Path, args: argparse.Namespace, docs: Any, target: int, embedder: Any, cache: Any
) -> dict[str, Any]:
    from triptych.metronix.store import SqliteKnowledgeStore

    chunk_tokens, noise = args.chunk_tokens, args.noise
    store = SqliteKnowledgeStore(db_path, embedder.dim)
    store.set_embedding_model(embedder.name, embedder.dim)
    documents = replicas = 0
    started = time.perf_counter()
    corpus = replica_documents(docs, target, chunk_tokens, noise, args.seed, embedder, cache)
    with progress(total=target, desc="building database", unit="chunk") as bar:
        for document, count, replica in corpus:
            replicas = replica
            if document is None:
                break
            store.put_document(document)
            documents += 1
            bar.update(count)
    seconds = time.perf_counter() - started
    chunks = store.count_chunks()
    store.close()
    return {
        "chunks": chunks,
        "documents": documents,
        "replicas_of_corpus": replicas,
        "source_chunks": len(common.chunk_corpus(docs, chunk_tokens)),
        "build_seconds": round(seconds, 1),
        "db_bytes": db_path.stat().st_size
        + sum(p.stat().st_size for p in db_path.parent.glob(db_path.name + "-*") if p.exists()),
        "vectors": CORPUS_NOTES["vectors"].replace("sigma", str(noise)),
        "text": CORPUS_NOTES["text"],
    }


def noise_cosine(noise: float, dim: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(1000, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    w = v + rng.normal(0.0, noise, size=v.shape).astype(np.float32)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    return round(float((v * w).sum(axis=1).mean()), 3)


# -- measuring ------------------------------------------------------------------------------------------


async def mcp_queries(url: str, queries: Sequence[str], settle: float = 0.0) -> dict[str, Any]:
    from mcp import Client

    server_ms: list[float] = []
    rtt_ms: list[float] = []
    counts: list[int] = []
    async with Client(url + "/mcp", read_timeout_seconds=600) as client:
        # The first search loads 100k vectors from SQLite and builds the HNSW graph: timed on its own.
        cold, cold_rtt = await common.call_json(
            client,
            "metronix_search_fast",
            {"workspace_id": WORKSPACE, "query": "cold start probe", "top_k": TOP_K},
        )
        if settle > 0:  # the server builds its HNSW graph in the background after the first search
            log(f"waiting {settle:.0f} s for the server's HNSW graph ...")
            await asyncio.sleep(settle)
        for q in progress(queries, desc="MCP search", unit="q"):
            payload, rtt = await common.call_json(
                client, "metronix_search_fast", {"workspace_id": WORKSPACE, "query": q, "top_k": TOP_K}
            )
            server_ms.append(float(payload["latency_ms"]))
            rtt_ms.append(rtt)
            counts.append(int(payload["count"]))
    return {
        "cold_first_query": {"server_latency_ms": cold["latency_ms"], "rtt_ms": round(cold_rtt, 1)},
        "server_latency_ms": summary(server_ms),
        "client_rtt_ms": summary(rtt_ms),
        "results_per_query": summary(counts),
    }


def in_process(db_path: Path, queries: Sequence[str], embedder: Any) -> dict[str, Any]:
    from triptych.metronix.store import SqliteKnowledgeStore

    store = SqliteKnowledgeStore(db_path, embedder.dim)
    out: dict[str, Any] = {}
    try:
        generation = store._generation(WORKSPACE)
        started = time.perf_counter()
        part = store.index.sync(WORKSPACE, generation)
        store.index.wait_ready(WORKSPACE)  # the graph is built in the background: time the searches on it
        part = store.index.sync(WORKSPACE, generation)
        out["index_load_and_build_s"] = round(time.perf_counter() - started, 1)
        # The service's own hybrid (whatever it overlaps), end to end in process.
        from triptych.metronix.knowledge import KnowledgeService

        service = KnowledgeService(store, embedder)
        service_ms = []
        for q in progress(queries, desc="service hybrid", unit="q"):
            t0 = time.perf_counter()
            service.hybrid(WORKSPACE, q, TOP_K)
            service_ms.append((time.perf_counter() - t0) * 1000)
        out["service_hybrid_ms"] = summary(service_ms)
        out["vector_backend"] = (
            "usearch HNSW (f16, M=16, ef_add=128, ef_search=64)" if part.hnsw else "exact numpy"
        )
        out["breakdown_ms"] = common.latency_breakdown(store, embedder, WORKSPACE, queries)

        # Vector search alternatives on the same vectors, and HNSW's recall against exact search, at the
        # store's expansion_search (64) and higher ones.
        qvecs = [embedder.embed([q])[0] for q in progress(queries, desc="query vectors", unit="q")]
        exact: list[tuple[list[int], float]] = []
        exact_ms = []
        for v in qvecs:
            t0 = time.perf_counter()
            scores = v @ part.columns
            top = np.argpartition(-scores, 49)[:50]
            top = top[np.argsort(-scores[top])]
            exact_ms.append((time.perf_counter() - t0) * 1000)
            exact.append(([part.ids[i] for i in top], float(scores[top[-1]])))
        out["vector_search_50_ms"] = {"exact_numpy": summary(exact_ms)}
        sweep = []
        default_ef = part.hnsw.expansion_search if part.hnsw is not None else None
        for ef in (default_ef, 128, 256) if part.hnsw is not None else ():
            part.hnsw.expansion_search = ef
            ms, r50, r10, near = [], [], [], []
            for v, (ids, floor) in zip(qvecs, exact, strict=True):
                t0 = time.perf_counter()
                hits = store.index.search(WORKSPACE, generation, v, 50)
                ms.append((time.perf_counter() - t0) * 1000)
                got = [i for i, _ in hits]
                r50.append(len(set(ids) & set(got)) / 50)
                r10.append(len(set(ids[:10]) & set(got[:10])) / 10)
                # Near-duplicates make exact ranks unstable: also count hits scoring at least the exact 50th.
                near.append(sum(1 for _, sc in hits if sc >= floor - 1e-3) / 50)
            sweep.append(
                {
                    "expansion_search": ef,
                    "ms": summary(ms),
                    "recall@50": round(float(np.mean(r50)), 4),
                    "recall@10": round(float(np.mean(r10)), 4),
                    "share_of_top50_scoring_within_1e-3_of_exact_50th": round(float(np.mean(near)), 4),
                }
            )
        if part.hnsw is not None:
            part.hnsw.expansion_search = default_ef
            out["vector_search_50_ms"]["hnsw_via_store"] = sweep[0]["ms"]
            out["hnsw_recall_at_50_vs_exact"] = sweep[0]["recall@50"]
        out["hnsw_expansion_sweep"] = sweep

        # The keyword index's own load (the first search of a workspace after a start builds it).
        started = time.perf_counter()
        store.keywords.sync(WORKSPACE, generation)
        out["keyword_index_load_s"] = round(time.perf_counter() - started, 1)
    finally:
        store.close()
    return out


# -- main -----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from triptych.core.embed import LocalEmbedder

    facts = common.machine_facts()
    data = common.load_scifact(args.scifact_dir)
    if args.quick:
        data = common.quick_subset(data, 200, 20)
    target = args.chunks or (21_000 if args.quick else 100_000)
    queries = list(data.queries.values())[: args.queries or len(data.queries)]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = (
        args.out or Path("/tmp/triptych-bench") / f"latency100k-{'quick-' if args.quick else ''}{stamp}.json"
    )
    log(
        f"{target} chunks from {len(data.docs)} SciFact documents, {len(queries)} queries; "
        f"{facts['nproc']} cores ({facts['cpu_model']}), load {facts['loadavg_at_start']}"
    )

    embedder = LocalEmbedder()
    cache = common.EmbeddingCache(embedder.name, embedder.dim, args.cache_dir)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="triptych-100k-"))
    db_path = data_dir / "metronix.db"
    result: dict[str, Any] = {
        "benchmark": "latency_100k",
        "quick": args.quick,
        "machine": facts,
        "config": {
            "target_chunks": target,
            "queries": len(queries),
            "top_k": TOP_K,
            "noise_sigma": args.noise,
            "noise_mean_cosine_to_source": noise_cosine(args.noise, embedder.dim, args.seed),
            "chunk_tokens": args.chunk_tokens,
            "workspace": WORKSPACE,
            "data_dir": str(data_dir),
        },
    }
    try:
        if args.reuse and db_path.exists():
            result["database"] = {"reused": True, "chunks": _count(db_path)}
        else:
            if db_path.exists():
                raise SystemExit(f"{db_path} exists: pass --reuse, or a fresh --data-dir")
            result["database"] = build_database(db_path, args, data.docs, target, embedder, cache)
        log(f"database: {result['database']}")

        if not args.skip_mcp:
            server = common.Server(data_dir, args.port)
            try:
                server.start()
                log(f"server healthy after {server.startup_s:.1f} s at {server.url}")
                result["mcp"] = asyncio.run(mcp_queries(server.url, queries, args.settle))
            finally:
                server.stop()
            result["server_startup_s"] = round(server.startup_s, 1)

        log("in-process breakdown ...")
        result["in_process"] = in_process(db_path, queries, embedder)
    finally:
        if not args.keep_data and not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    common.write_json(out_path, result)
    print_results(result, out_path)
    return 0


def _count(db_path: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return int(
            conn.execute("SELECT count(*) FROM chunks WHERE workspace_id = ?", (WORKSPACE,)).fetchone()[0]
        )
    finally:
        conn.close()


def print_results(r: dict[str, Any], out_path: Path) -> None:
    c, db, m, ip = r["config"], r["database"], r.get("mcp"), r["in_process"]
    b = ip["breakdown_ms"]
    lines = [
        "",
        "=" * 78,
        f"latency at {db['chunks']} chunks in one workspace {'(QUICK) ' if r['quick'] else ''}- "
        f"{c['queries']} SciFact queries, top_k={c['top_k']}",
        f"machine: {r['machine']['nproc']} cores, {r['machine']['cpu_model']}, git {r['machine']['git']}, "
        f"load {r['machine']['loadavg_at_start']} -> {r['machine']['loadavg_at_end']}",
        f"data: SciFact text recombined; vectors = real SciFact chunk embeddings "
        f"+ N(0, {c['noise_sigma']}^2) noise, re-normalised "
        f"(mean cosine to source {c['noise_mean_cosine_to_source']}), not real embeddings",
    ]
    if not db.get("reused"):
        lines.append(
            f"built {db['chunks']} chunks / {db['documents']} docs in {db['build_seconds']} s "
            f"({db['db_bytes'] / 1e6:.0f} MB)"
        )
    lines.append("-" * 78)
    if m is not None:
        lines += [
            f"server-side latency_ms: p50 {m['server_latency_ms']['p50']}  p95 {m['server_latency_ms']['p95']}  "
            f"(target p50 <= 20)",
            f"client round trip ms:   p50 {m['client_rtt_ms']['p50']}  p95 {m['client_rtt_ms']['p95']}",
            f"cold first query after start (index load + HNSW build): {m['cold_first_query']}",
        ]
    lines += [
        f"in-process load + HNSW build {ip['index_load_and_build_s']} s",
        f"KnowledgeService.hybrid in process: p50 {ip['service_hybrid_ms']['p50']}  "
        f"p95 {ip['service_hybrid_ms']['p95']} ms (target p50 <= 20)",
        "-" * 78,
        f"in-process breakdown ({ip['vector_backend']}):   p50 / p95 ms",
    ]
    for key, name in (
        ("embed_ms", "query embedding"),
        ("keyword_ms", "BM25 keyword query (n=50)"),
        ("vector_ms", "vector search (n=50)"),
        ("fusion_hydrate_ms", "fusion + hydration"),
        ("total_ms", "total"),
    ):
        lines.append(f"  {name:<34}{b[key]['p50']:>8} / {b[key]['p95']}")
    dominant = max(("embed_ms", "keyword_ms", "vector_ms", "fusion_hydrate_ms"), key=lambda k: b[k]["p50"])
    lines.append(
        f"  dominant step at p50: {dominant[:-3]} ({b[dominant]['p50'] / b['total_ms']['p50']:.0%} of total)"
    )
    v = ip["vector_search_50_ms"]
    lines.append(f"vector search top-50: exact numpy p50 {v['exact_numpy']['p50']} ms; HNSW vs exact:")
    for row in ip["hnsw_expansion_sweep"]:
        lines.append(
            f"  expansion_search {row['expansion_search']:>4}: p50 {row['ms']['p50']} ms, recall@50 "
            f"{row['recall@50']}, recall@10 {row['recall@10']}, within-score@50 "
            f"{row['share_of_top50_scoring_within_1e-3_of_exact_50th']}"
        )
    lines.append(f"keyword index load (first search of the workspace): {ip['keyword_index_load_s']} s")
    lines.append("=" * 78)
    lines.append(f"JSON: {out_path}")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
