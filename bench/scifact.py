"""SciFact knowledge-base benchmark: nDCG@10 / recall@10 of ``metronix_search_fast`` through a real server.

Phases (each timed, long ones with a progress bar on stderr):
  1. the embedder's own batch throughput on a sample of the corpus chunks (in this process);
  2. ``triptych serve`` in a subprocess; the corpus ingested through MCP ``metronix_store``;
  3. the test queries through MCP ``metronix_search_fast`` (top_k=10; chunks deduped to documents);
  4. baselines in this process: BM25 (a separate in-memory SQLite FTS5 table of title + text, porter
     unicode61, OR of the query terms minus stopwords) and dense-only over the same chunk vectors;
  5. ablations in this process on cached vectors: fusion variants (RRF k, weights, candidate pool,
     chunk- vs document-level fusion, top-k over-fetch) and chunk sizes.

The vectors the server computed are copied into an embedding cache outside the repository
(default /tmp/triptych-bench-cache), so ablations and later runs don't re-embed.

Run from the repository root:  .venv/bin/python bench/scifact.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import ChunkRow, SciFact, log, progress, summary  # noqa: E402

WORKSPACE = "scifact"
TOP_K = 10
DEFAULT_ABLATE_SIZES = "128,200,256,400"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/scifact.py",
        description="BEIR SciFact through a real `triptych serve`: nDCG@10 and recall@10 of "
        "metronix_search_fast (hybrid) against BM25 (SQLite FTS5) and dense-only baselines, MCP ingest "
        "throughput against the embedder's own, search latency, and fusion / chunk-size ablations.",
    )
    p.add_argument(
        "--quick", action="store_true", help="smoke run: 200 documents, 20 queries (about 1-2 min)"
    )
    p.add_argument("--docs", type=int, default=200, help="documents in --quick mode (default 200)")
    p.add_argument("--queries", type=int, default=20, help="queries in --quick mode (default 20)")
    p.add_argument("--scifact-dir", type=Path, default=common.SCIFACT_DIR, help="BEIR SciFact folder")
    p.add_argument("--data-dir", type=Path, help="server data dir (default: a fresh temp dir, deleted after)")
    p.add_argument("--keep-data", action="store_true", help="keep the server data dir")
    p.add_argument(
        "--skip-ingest",
        action="store_true",
        help="reuse an already ingested --data-dir (needs the same --chunk-tokens)",
    )
    p.add_argument("--port", type=int, help="server port (default: a free one)")
    p.add_argument(
        "--chunk-tokens",
        type=int,
        help="TRIPTYCH_CHUNK_TOKENS for the server (default: the server's own default)",
    )
    p.add_argument(
        "--ablate-chunk-tokens",
        default=DEFAULT_ABLATE_SIZES,
        help=f"chunk sizes for the in-process chunk-size ablation, comma separated, or 'none' "
        f"(default {DEFAULT_ABLATE_SIZES}); sizes not in the cache are embedded in-process, "
        "about 10 min each on 2 cores",
    )
    p.add_argument(
        "--no-ablations", action="store_true", help="skip the in-process fusion and chunk-size ablations"
    )
    p.add_argument(
        "--inprocess-only",
        action="store_true",
        help="no server: only the in-process baselines and ablations, from the embedding cache "
        "(chunks missing from it are embedded here)",
    )
    p.add_argument(
        "--embed-sample",
        type=int,
        default=300,
        help="chunks for the embedder throughput sample, timed before and after the ingest (default 300)",
    )
    p.add_argument(
        "--probe-chunks",
        type=int,
        default=60,
        help="chunks of the sample timed between ingest segments (default 60; 0 = no probes)",
    )
    p.add_argument(
        "--probe-every",
        type=int,
        default=500,
        help="documents per ingest segment between embedder probes (default 500)",
    )
    p.add_argument(
        "--cache-dir", type=Path, default=common.CACHE_DIR, help="embedding cache (outside the repo)"
    )
    p.add_argument(
        "--out", type=Path, help="JSON result file (default /tmp/triptych-bench/scifact-<time>.json)"
    )
    return p.parse_args(argv)


# -- MCP phases ----------------------------------------------------------------------------------------


async def mcp_ingest(
    url: str, docs: Sequence[dict[str, str]], embedder: Any, probe: Sequence[str], probe_every: int
) -> dict[str, Any]:
    """Ingest through MCP, one ``metronix_store`` call per document. Every ``probe_every`` documents the
    ingest pauses while this process times the embedder alone on ``probe`` chunks, so the ratio compares
    the two under the same (shared, noisy) machine load; probe time is excluded from the ingest time."""
    from mcp import Client

    chunks = 0
    failures: list[str] = []
    rtts: list[float] = []
    probes: list[float] = []  # embedder chunks/s, before the first segment and after each one
    segments: list[dict[str, float]] = []

    def run_probe() -> None:
        if probe:
            probes.append(common.embed_throughput(embedder, probe)["chunks_per_s"])

    async with Client(url + "/mcp") as client:
        run_probe()
        ingest_seconds = 0.0
        with progress(total=len(docs), desc="MCP ingest", unit="doc") as bar:
            for start in range(0, len(docs), probe_every):
                seg_chunks = 0
                seg_started = time.perf_counter()
                for d in docs[start : start + probe_every]:
                    args = {"workspace_id": WORKSPACE, "doc_label": d["_id"], "content": d["text"]}
                    if d["title"]:
                        args["title"] = d["title"]
                    try:
                        payload, rtt = await common.call_json(client, "metronix_store", args)
                        seg_chunks += int(payload["chunks_stored"])
                        rtts.append(rtt)
                    except Exception as exc:  # one failure is a result to report, not a reason to stop
                        failures.append(f"{d['_id']}: {exc}")
                    bar.update(1)
                    elapsed = ingest_seconds + time.perf_counter() - seg_started
                    bar.set_postfix(
                        chunks=chunks + seg_chunks,
                        cps=f"{(chunks + seg_chunks) / elapsed:.1f}",
                        refresh=False,
                    )
                seg_seconds = time.perf_counter() - seg_started
                ingest_seconds += seg_seconds
                chunks += seg_chunks
                run_probe()
                segments.append(
                    {
                        "chunks": seg_chunks,
                        "seconds": round(seg_seconds, 1),
                        "chunks_per_s": round(seg_chunks / seg_seconds, 2),
                    }
                )
                if len(probes) >= 2:
                    around = (probes[-2] + probes[-1]) / 2
                    segments[-1]["embedder_chunks_per_s"] = round(around, 2)
                    segments[-1]["ratio"] = round(seg_chunks / seg_seconds / around, 3)
    ratios = [seg["ratio"] for seg in segments if "ratio" in seg]
    return {
        "documents": len(docs) - len(failures),
        "chunks": chunks,
        "seconds": round(ingest_seconds, 1),
        "chunks_per_s": round(chunks / ingest_seconds, 2),
        "docs_per_s": round((len(docs) - len(failures)) / ingest_seconds, 2),
        "call_rtt_ms": summary(rtts),
        "interleaved_embedder_probes": {
            "chunks_per_probe": len(probe),
            "every_docs": probe_every,
            "chunks_per_s": probes,
            "mean": round(float(np.mean(probes)), 2) if probes else None,
        },
        "interleaved_ratio": round(chunks / ingest_seconds / float(np.mean(probes)), 3) if probes else None,
        "segment_ratio_median": round(float(np.median(ratios)), 3) if ratios else None,
        "segments": segments,
        "failures": failures[:20],
        "failure_count": len(failures),
    }


async def mcp_search(url: str, queries: dict[str, str]) -> dict[str, Any]:
    from mcp import Client

    run_chunks: dict[str, list[str]] = {}
    server_ms: list[float] = []
    rtt_ms: list[float] = []
    failures: list[str] = []
    async with Client(url + "/mcp") as client:
        # The first search loads the workspace's vectors from SQLite into memory: timed on its own.
        cold, cold_rtt = await common.call_json(
            client,
            "metronix_search_fast",
            {"workspace_id": WORKSPACE, "query": "cold start probe", "top_k": TOP_K},
        )
        for qid, text in progress(list(queries.items()), desc="MCP search", unit="q"):
            try:
                payload, rtt = await common.call_json(
                    client, "metronix_search_fast", {"workspace_id": WORKSPACE, "query": text, "top_k": TOP_K}
                )
            except Exception as exc:
                failures.append(f"{qid}: {exc}")
                continue
            run_chunks[qid] = [r["doc_label"] for r in payload["results"]]
            server_ms.append(float(payload["latency_ms"]))
            rtt_ms.append(rtt)
    return {
        "run_chunks": run_chunks,
        "cold_first_query": {"server_latency_ms": cold["latency_ms"], "rtt_ms": round(cold_rtt, 1)},
        "server_latency_ms": summary(server_ms),
        "client_rtt_ms": summary(rtt_ms),
        "failures": failures[:20],
        "failure_count": len(failures),
    }


async def mcp_status(url: str) -> dict[str, Any]:
    from mcp import Client

    async with Client(url + "/mcp") as client:
        payload, _ = await common.call_json(client, "metronix_status", {"workspace_id": WORKSPACE})
    return payload


# -- in-process retrieval over the same chunks -----------------------------------------------------------


class ChunkRetriever:
    """The service's two candidate lists over one chunking, in memory: FTS5 BM25 over (title, body) with the
    store's column weights, and exact dot-product search over the chunk vectors."""

    def __init__(self, rows: Sequence[ChunkRow], vectors: np.ndarray) -> None:
        self.rows = list(rows)
        self.doc_of = [r.doc_id for r in rows]
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute("CREATE VIRTUAL TABLE c USING fts5(title, body, tokenize='porter unicode61')")
        self.conn.executemany(
            "INSERT INTO c (rowid, title, body) VALUES (?,?,?)",
            ((i, r.title, r.text) for i, r in enumerate(rows)),
        )

    def keyword(self, query: str, n: int, title_weight: float = 2.0) -> list[tuple[int, float]]:
        match = common.fts_or_query(query)
        if match is None:
            return []
        sql = (
            f"SELECT rowid, -bm25(c, {title_weight}, 1.0) FROM c WHERE c MATCH ?"
            f" ORDER BY bm25(c, {title_weight}, 1.0) LIMIT ?"
        )
        return [(int(r[0]), float(r[1])) for r in self.conn.execute(sql, (match, n))]

    def dense(self, qvec: np.ndarray, n: int) -> list[tuple[int, float]]:
        scores = self.vectors @ qvec.astype(np.float32)
        n = min(n, len(scores))
        top = np.argpartition(-scores, n - 1)[:n] if n < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(int(i), float(scores[i])) for i in top]


@dataclass(frozen=True)
class Variant:
    name: str
    k: int = 60
    w_kw: float = 1.0
    w_dense: float = 1.0
    n: int = 50  # candidates per list (the service: max(50, 3 * top_k))
    top_chunks: int | None = TOP_K  # chunks kept before deduping to documents; None = all candidates
    level: str = (
        "chunk"  # "chunk": fuse chunk ranks (the service); "doc": collapse each list to documents first
    )
    title_weight: float = 2.0
    fusion: str = "rrf"  # or "convex": alpha * minmax(dense) + (1 - alpha) * minmax(bm25)
    alpha: float = 0.5

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "level": self.level,
            "n": self.n,
            "top_chunks": self.top_chunks if self.top_chunks is not None else "all",
            "title_weight": self.title_weight,
            "fusion": self.fusion,
        }
        if self.fusion == "rrf":
            out.update(k=self.k, w_kw=self.w_kw, w_dense=self.w_dense)
        else:
            out.update(alpha=self.alpha)
        return out


SERVICE = Variant("service default (k=60, w=1/1, n=50, top_k=10 chunks)")
MAX_N = 200


class Candidates:
    """Per query, the BM25 and dense candidate lists (up to MAX_N) for one chunking, computed once."""

    def __init__(
        self,
        retriever: ChunkRetriever,
        queries: dict[str, str],
        qvecs: dict[str, np.ndarray],
        title_weights: Sequence[float] = (2.0, 1.0),
    ) -> None:
        self.retriever = retriever
        self.doc_of = retriever.doc_of
        self.kw = {
            tw: {q: retriever.keyword(t, MAX_N, tw) for q, t in queries.items()} for tw in title_weights
        }
        self.dn = {q: retriever.dense(qvecs[q], MAX_N) for q in queries}

    def rank(self, v: Variant, qid: str) -> list[str]:
        kw = self.kw[v.title_weight][qid][: v.n]
        dn = self.dn[qid][: v.n]
        doc_of = self.doc_of
        if v.level == "doc":
            kw_ids = common.dedupe([doc_of[i] for i, _ in kw])
            dn_ids = common.dedupe([doc_of[i] for i, _ in dn])
            kw_s = {}
            for i, s in kw:
                kw_s.setdefault(doc_of[i], s)
            dn_s = {}
            for i, s in dn:
                dn_s.setdefault(doc_of[i], s)
            fused = _fuse(v, kw_ids, dn_ids, kw_s, dn_s)
            return sorted(fused, key=lambda d: -fused[d])[:TOP_K]
        fused_c = _fuse(v, [i for i, _ in kw], [i for i, _ in dn], dict(kw), dict(dn))
        ranked = sorted(fused_c, key=lambda i: -fused_c[i])
        if v.top_chunks is not None:
            ranked = ranked[: v.top_chunks]
        return common.dedupe([doc_of[i] for i in ranked])[:TOP_K]

    def run(self, v: Variant, qids: Sequence[str]) -> dict[str, list[str]]:
        return {q: self.rank(v, q) for q in qids}

    def dense_only(self, qids: Sequence[str]) -> dict[str, list[str]]:
        return {q: common.dedupe([self.doc_of[i] for i, _ in self.dn[q]])[:TOP_K] for q in qids}

    def bm25_chunks_only(self, qids: Sequence[str], title_weight: float = 2.0) -> dict[str, list[str]]:
        return {q: common.dedupe([self.doc_of[i] for i, _ in self.kw[title_weight][q]])[:TOP_K] for q in qids}


def _fuse(
    v: Variant, kw: list[Any], dn: list[Any], kw_s: dict[Any, float], dn_s: dict[Any, float]
) -> dict[Any, float]:
    if v.fusion == "rrf":
        scores: dict[Any, float] = {}
        for ranking, w in ((kw, v.w_kw), (dn, v.w_dense)):
            for rank, item in enumerate(ranking):
                scores[item] = scores.get(item, 0.0) + w / (v.k + rank + 1)
        return scores
    out: dict[Any, float] = {}
    for source, weight in ((kw_s, 1.0 - v.alpha), (dn_s, v.alpha)):
        if not source:
            continue
        lo, hi = min(source.values()), max(source.values())
        span = (hi - lo) or 1.0
        for item, s in source.items():
            out[item] = out.get(item, 0.0) + weight * (s - lo) / span
    return out


def score(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    r = common.evaluate(run, qrels)
    return {"ndcg@10": r["ndcg@10"], "recall@10": r["recall@10"]}


def fusion_grid() -> list[Variant]:
    grid = []
    for level, top, k, (wk, wd), n, tw in itertools.product(
        ("chunk", "doc"),
        (TOP_K, None),
        (5, 10, 20, 30, 60, 100),
        ((1.0, 0.5), (1.0, 0.75), (1.0, 1.0), (0.75, 1.0), (0.5, 1.0)),
        (20, 50, 100, 200),
        (2.0, 1.0),
    ):
        if level == "doc" and top is not None:
            continue  # document-level fusion always yields whole documents
        grid.append(
            Variant("grid", k=k, w_kw=wk, w_dense=wd, n=n, top_chunks=top, level=level, title_weight=tw)
        )
    for level, alpha, n in itertools.product(("chunk", "doc"), (0.3, 0.4, 0.5, 0.6, 0.7), (50, 100, 200)):
        grid.append(
            Variant(
                "grid",
                fusion="convex",
                alpha=alpha,
                n=n,
                level=level,
                top_chunks=None if level == "chunk" else TOP_K,
            )
        )
    return grid


def one_factor_table() -> list[Variant]:
    over = dict(top_chunks=None)
    return [
        SERVICE,
        Variant("over-fetch: dedupe all fused chunks to 10 docs", **over),
        Variant("doc-level fusion (collapse each list to docs, then RRF)", level="doc"),
        *[Variant(f"RRF k={k}", k=k) for k in (5, 10, 20, 30, 100)],
        *[
            Variant(f"weights kw/dense={wk}/{wd}", w_kw=wk, w_dense=wd)
            for wk, wd in ((1.0, 0.5), (1.0, 0.75), (0.75, 1.0), (0.5, 1.0))
        ],
        *[Variant(f"candidates n={n}", n=n) for n in (20, 100, 200)],
        Variant("FTS title weight 1.0 (store uses 2.0)", title_weight=1.0),
        Variant("convex minmax alpha=0.5 (top_k=10 chunks)", fusion="convex", alpha=0.5),
        Variant("convex minmax alpha=0.5, over-fetch", fusion="convex", alpha=0.5, **over),
        Variant("convex minmax alpha=0.4, over-fetch", fusion="convex", alpha=0.4, **over),
        Variant("convex minmax alpha=0.6, over-fetch", fusion="convex", alpha=0.6, **over),
        Variant("convex minmax alpha=0.5, over-fetch, n=100", fusion="convex", alpha=0.5, n=100, **over),
        Variant("convex minmax alpha=0.5, doc-level", fusion="convex", alpha=0.5, level="doc"),
        Variant("over-fetch + k=20", k=20, **over),
        Variant("over-fetch + n=100", n=100, **over),
        Variant("over-fetch + k=20 + n=100", k=20, n=100, **over),
        Variant("doc-level + k=20", level="doc", k=20),
        Variant("doc-level + n=100", level="doc", n=100),
        Variant("doc-level + k=20 + n=100", level="doc", k=20, n=100),
    ]


def embed_queries(embedder: Any, queries: dict[str, str]) -> dict[str, np.ndarray]:
    # One query per call, exactly as the service embeds a search query.
    return {
        q: embedder.embed([t])[0] for q, t in progress(list(queries.items()), desc="query vectors", unit="q")
    }


def ablations(
    data: SciFact,
    base_ct: int,
    sizes: list[int],
    cache: common.EmbeddingCache,
    embedder: Any,
    qvecs: dict[str, np.ndarray],
    mcp_run: dict[str, list[str]] | None,
) -> dict[str, Any]:
    qids = list(data.queries)
    out: dict[str, Any] = {}
    # Fusion variants on the server's own chunking.
    rows = common.chunk_corpus(data.docs, base_ct)
    vecs = cache.get([r.embed_text for r in rows], embedder, desc=f"embedding chunks ({base_ct} tokens)")
    cands = Candidates(ChunkRetriever(rows, vecs), data.queries, qvecs)
    replica = cands.run(SERVICE, qids)
    if mcp_run is not None:
        deduped = {q: common.dedupe(v)[:TOP_K] for q, v in mcp_run.items()}
        same = sum(1 for q in qids if deduped.get(q) == replica[q])
        out["replica_check"] = {
            "identical_top10_docs": f"{same}/{len(qids)}",
            "in_process_service_default": score(replica, data.qrels),
            "mcp": score(deduped, data.qrels),
        }
    table = []
    for v in one_factor_table():
        table.append({"variant": v.name, **v.describe(), **score(cands.run(v, qids), data.qrels)})
    out["fusion_one_factor"] = table
    out["dense_only"] = score(cands.dense_only(qids), data.qrels)
    out["bm25_chunks_only"] = score(cands.bm25_chunks_only(qids), data.qrels)

    # Grid, with a 2-fold check against picking the best setting on the test queries themselves.
    grid = fusion_grid()
    results = []
    half_a = [q for q in qids if int(q) % 2 == 1]
    half_b = [q for q in qids if int(q) % 2 == 0]
    for v in progress(grid, desc="fusion grid", unit="variant"):
        run = cands.run(v, qids)
        results.append(
            (
                v,
                score(run, data.qrels),
                score({q: run[q] for q in half_a}, {q: data.qrels[q] for q in half_a}),
                score({q: run[q] for q in half_b}, {q: data.qrels[q] for q in half_b}),
            )
        )
    results.sort(key=lambda r: -r[1]["ndcg@10"])
    out["fusion_grid_top"] = [{**v.describe(), **s} for v, s, _, _ in results]  # all, best first
    out["fusion_grid_size"] = len(results)
    best_a = max(results, key=lambda r: r[2]["ndcg@10"])
    best_b = max(results, key=lambda r: r[3]["ndcg@10"])
    out["fusion_grid_2fold"] = {
        "picked_on_odd_qids": {**best_a[0].describe(), "odd": best_a[2], "even_heldout": best_a[3]},
        "picked_on_even_qids": {**best_b[0].describe(), "even": best_b[3], "odd_heldout": best_b[2]},
        "service_default": {
            "odd": score({q: replica[q] for q in half_a}, {q: data.qrels[q] for q in half_a}),
            "even": score({q: replica[q] for q in half_b}, {q: data.qrels[q] for q in half_b}),
        },
    }
    out["reaching_0.72"] = sum(1 for _, s, _, _ in results if s["ndcg@10"] >= 0.72)

    # Chunk sizes: the same few variants on each chunking.
    per_size = []
    pick = [
        SERVICE,
        Variant("over-fetch", top_chunks=None),
        Variant("over-fetch + k=20 + n=100", k=20, n=100, top_chunks=None),
        Variant("convex a=0.5 over-fetch", fusion="convex", alpha=0.5, top_chunks=None),
        Variant("convex a=0.5 doc-level", fusion="convex", alpha=0.5, level="doc"),
    ]
    for ct in sizes:
        rows_ct = common.chunk_corpus(data.docs, ct)
        texts = [r.embed_text for r in rows_ct]
        vec_ct = cache.get(texts, embedder, desc=f"embedding chunks ({ct} tokens)")
        c = (
            cands
            if ct == base_ct
            else Candidates(ChunkRetriever(rows_ct, vec_ct), data.queries, qvecs, (2.0,))
        )
        entry: dict[str, Any] = {
            "chunk_tokens": ct,
            "chunks": len(rows_ct),
            "docs_with_several_chunks": len({r.doc_id for r in rows_ct if r.ordinal > 0}),
            "truncated_at_256_model_tokens": _truncated_share(embedder, texts),
        }
        for v in pick:
            entry[v.name] = score(c.run(v, qids), data.qrels)
        entry["dense_only"] = score(c.dense_only(qids), data.qrels)
        entry["bm25_chunks_only"] = score(c.bm25_chunks_only(qids), data.qrels)
        per_size.append(entry)
        cache.save()
    out["chunk_sizes"] = per_size
    return out


def _truncated_share(embedder: Any, texts: Sequence[str], sample: int = 500) -> float:
    """Share of chunk texts (title + chunk) longer than the model's 256-token window (so truncated)."""
    rng = random.Random(7)
    picked = rng.sample(list(texts), min(sample, len(texts)))
    if not picked:
        return 0.0
    return round(sum(1 for t in picked if embedder.count_tokens(t) > 254) / len(picked), 3)


# -- main ------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from triptych.core.config import Settings
    from triptych.core.embed import LocalEmbedder

    facts = common.machine_facts()
    data = common.load_scifact(args.scifact_dir)
    if args.quick:
        data = common.quick_subset(data, args.docs, args.queries)
    server_default_ct = Settings().chunk_tokens
    ct = args.chunk_tokens or server_default_ct
    sizes = (
        []
        if args.ablate_chunk_tokens.strip().lower() == "none"
        else [int(s) for s in args.ablate_chunk_tokens.split(",") if s.strip()]
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kind = "inprocess-" if args.inprocess_only else ""
    out_path = args.out or Path("/tmp/triptych-bench") / (
        f"scifact-{'quick-' if args.quick else ''}{kind}ct{ct}-{stamp}.json"
    )
    log(
        f"SciFact: {len(data.docs)} documents, {len(data.queries)} test queries; chunk_tokens={ct}; "
        f"{facts['nproc']} cores ({facts['cpu_model']}), load {facts['loadavg_at_start']}"
    )

    embedder = LocalEmbedder()
    cache = common.EmbeddingCache(embedder.name, embedder.dim, args.cache_dir)
    rows = common.chunk_corpus(data.docs, ct)
    result: dict[str, Any] = {
        "benchmark": "scifact",
        "quick": args.quick,
        "inprocess_only": args.inprocess_only,
        "machine": facts,
        "config": {
            "chunk_tokens": ct,
            "server_default_chunk_tokens": server_default_ct,
            "top_k": TOP_K,
            "workspace": WORKSPACE,
            "documents": len(data.docs),
            "queries": len(data.queries),
            "chunks_expected": len(rows),
        },
    }
    run_chunks: dict[str, list[str]] | None = None
    metrics: dict[str, Any] = {}
    per_query: dict[str, Any] = {}
    if not args.inprocess_only:
        run_chunks = server_phases(args, data, rows, ct, embedder, cache, result)
        hybrid_run = {q: common.dedupe(v)[:TOP_K] for q, v in run_chunks.items()}
        result["search"]["unique_docs_per_query"] = summary([len(v) for v in hybrid_run.values()])
        hybrid = common.evaluate(hybrid_run, data.qrels)
        metrics["hybrid_mcp"] = hybrid
        per_query["hybrid_mcp"] = hybrid["per_query_ndcg"]

    log("BM25 baseline (in-memory FTS5, document level) ...")
    bm25 = common.DocBM25(data.docs)
    bm25_run = {q: [d for d, _ in bm25.search(t, TOP_K)] for q, t in data.queries.items()}
    metrics["bm25_fts5_doc"] = common.evaluate(bm25_run, data.qrels)

    qvecs = embed_queries(embedder, data.queries)
    vectors = cache.get([r.embed_text for r in rows], embedder, desc=f"embedding chunks ({ct} tokens)")
    cands = Candidates(ChunkRetriever(rows, vectors), data.queries, qvecs)
    metrics["dense_only"] = common.evaluate(cands.dense_only(list(data.queries)), data.qrels)
    if args.inprocess_only:
        metrics["hybrid_inprocess"] = common.evaluate(cands.run(SERVICE, list(data.queries)), data.qrels)
    for key, value in metrics.items():
        per_query[key] = value.pop("per_query_ndcg")
    result["metrics"] = metrics
    result["per_query_ndcg"] = per_query
    if not args.no_ablations:
        result["ablations"] = ablations(data, ct, sizes, cache, embedder, qvecs, run_chunks)
    cache.save()
    result["machine"]["loadavg_at_end"] = os.getloadavg()

    common.write_json(out_path, result)
    print_results(result, out_path)
    return 0


def server_phases(
    args: argparse.Namespace,
    data: SciFact,
    rows: list[ChunkRow],
    ct: int,
    embedder: Any,
    cache: common.EmbeddingCache,
    result: dict[str, Any],
) -> dict[str, list[str]]:
    """Embedder throughput, the server, MCP ingest and search, then the in-process latency breakdown of the
    server's own store. Returns the MCP run (chunk doc_labels per query, in rank order)."""
    sample = random.Random(1).sample([r.embed_text for r in rows], min(args.embed_sample, len(rows)))
    log("embedder throughput (before ingest) ...")
    emb_before = common.embed_throughput(embedder, sample)

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="triptych-scifact-"))
    env = {"TRIPTYCH_CHUNK_TOKENS": str(ct)} if args.chunk_tokens else {}
    server = common.Server(data_dir, args.port, env)
    try:
        server.start()
        log(f"server healthy after {server.startup_s:.1f} s at {server.url}")
        if args.skip_ingest:
            ingest: dict[str, Any] = {"skipped": True, "status": asyncio.run(mcp_status(server.url))}
        else:
            probe = sample[: args.probe_chunks]
            ingest = asyncio.run(mcp_ingest(server.url, data.docs, embedder, probe, args.probe_every))
        search = asyncio.run(mcp_search(server.url, data.queries))
    finally:
        server.stop()
    result["server"] = {
        "startup_s": round(server.startup_s, 1),
        "data_dir": str(data_dir),
        "env": env or "(server defaults)",
    }

    log("embedder throughput (after ingest) ...")
    emb_after = common.embed_throughput(embedder, sample)
    emb_cps = (emb_before["chunks_per_s"] + emb_after["chunks_per_s"]) / 2
    result["embedder"] = {
        "before_ingest": emb_before,
        "after_ingest": emb_after,
        "mean_chunks_per_s": round(emb_cps, 2),
    }
    if not args.skip_ingest:
        ingest["ratio_to_embedder"] = round(ingest["chunks_per_s"] / emb_cps, 3)
    result["ingest"] = ingest
    run_chunks: dict[str, list[str]] = search.pop("run_chunks")
    result["search"] = search

    added = common.harvest_vectors(data_dir / "metronix.db", cache)
    log(
        f"embedding cache: {added} vectors added from the server's database "
        f"({len(cache)} in {args.cache_dir})"
    )

    # In-process breakdown over the server's own store (same steps as KnowledgeService.hybrid).
    from triptych.metronix.store import SqliteKnowledgeStore

    store = SqliteKnowledgeStore(data_dir / "metronix.db", embedder.dim)
    try:
        store.vector_search(WORKSPACE, embedder.embed(["warm"])[0], 1)  # load the index once
        breakdown = common.latency_breakdown(store, embedder, WORKSPACE, list(data.queries.values()))
        breakdown["vector_search_backend"] = "exact numpy (< 20,000 vectors)"
        result["in_process_breakdown_ms"] = breakdown
    finally:
        store.close()
    if not args.keep_data and not args.data_dir:
        shutil.rmtree(data_dir, ignore_errors=True)
    return run_chunks


def print_results(r: dict[str, Any], out_path: Path) -> None:
    m, c = r["metrics"], r["config"]
    lines = [
        "",
        "=" * 78,
        f"SciFact {'(QUICK, not comparable) ' if r['quick'] else ''}- {c['documents']} docs, "
        f"{c['queries']} queries, "
        f"chunk_tokens={c['chunk_tokens']}, top_k={c['top_k']}",
        f"machine: {r['machine']['nproc']} cores, {r['machine']['cpu_model']}, git {r['machine']['git']}",
        "-" * 78,
        f"{'ranking':<34}{'nDCG@10':>10}{'recall@10':>11}{'vs BM25':>10}",
    ]
    base = m["bm25_fts5_doc"]["ndcg@10"] or 1.0
    for name, key in (
        ("hybrid (MCP metronix_search_fast)", "hybrid_mcp"),
        ("hybrid (in-process replica)", "hybrid_inprocess"),
        ("BM25 (FTS5, doc level)", "bm25_fts5_doc"),
        ("dense only (same chunk vectors)", "dense_only"),
    ):
        if key not in m:
            continue
        lines.append(
            f"{name:<34}{m[key]['ndcg@10']:>10.4f}{m[key]['recall@10']:>11.4f}"
            f"{m[key]['ndcg@10'] / base:>10.3f}"
        )
    lines.append("-" * 78)
    if "ingest" in r and not r["ingest"].get("skipped"):
        ing, emb = r["ingest"], r["embedder"]
        lines.append(
            f"MCP ingest: {ing['documents']} docs, {ing['chunks']} chunks in {ing['seconds']} s = "
            f"{ing['chunks_per_s']} chunks/s ({ing['failure_count']} failures)"
        )
        lines.append(
            f"embedder alone: {emb['before_ingest']['chunks_per_s']} (before) / "
            f"{emb['after_ingest']['chunks_per_s']} (after) chunks/s "
            f"on {emb['before_ingest']['chunks']} chunks;"
            f" ingest/embedder = {ing['ratio_to_embedder']}"
        )
    s = r.get("search")
    if s:
        lines.extend(_latency_lines(r))
    a = r.get("ablations")
    if a:
        lines.extend(_ablation_lines(a, c))
    lines.append("=" * 78)
    lines.append(f"JSON: {out_path}")
    print("\n".join(lines), flush=True)


def _latency_lines(r: dict[str, Any]) -> list[str]:
    s = r["search"]
    lines = []
    lines.append(
        f"search latency, server-side latency_ms: p50 {s['server_latency_ms']['p50']} p95 "
        f"{s['server_latency_ms']['p95']} ms; client round trip: p50 {s['client_rtt_ms']['p50']} p95 "
        f"{s['client_rtt_ms']['p95']} ms; cold first query {s['cold_first_query']}"
    )
    b = r["in_process_breakdown_ms"]
    lines.append(
        "in-process breakdown p50 (p95) ms: "
        + ", ".join(
            f"{k[:-3]} {b[k]['p50']} ({b[k]['p95']})"
            for k in ("embed_ms", "keyword_ms", "vector_ms", "fusion_hydrate_ms", "total_ms")
        )
    )
    lines.append(f"unique docs among the top-10 chunks: mean {s['unique_docs_per_query']['mean']}")
    return lines


def _ablation_lines(a: dict[str, Any], c: dict[str, Any]) -> list[str]:
    lines = []
    lines.append("-" * 78)
    if "replica_check" in a:
        rc = a["replica_check"]
        lines.append(
            f"in-process replica of the service vs MCP: identical top-10 docs {rc['identical_top10_docs']},"
            f" nDCG {rc['in_process_service_default']['ndcg@10']} vs {rc['mcp']['ndcg@10']}"
        )
    lines.append(f"fusion ablation (in-process, chunk_tokens={c['chunk_tokens']}):")
    lines.append(f"  {'variant':<58}{'nDCG@10':>9}{'R@10':>8}")
    for row in a["fusion_one_factor"]:
        lines.append(f"  {row['variant']:<58}{row['ndcg@10']:>9.4f}{row['recall@10']:>8.4f}")
    lines.append(f"  dense only {a['dense_only']}, chunk BM25 only {a['bm25_chunks_only']}")
    lines.append(
        f"fusion grid: {a['fusion_grid_size']} variants, {a['reaching_0.72']} reach nDCG@10 >= 0.72; best 5:"
    )
    for row in a["fusion_grid_top"][:5]:
        lines.append(f"  {row}")
    f2 = a["fusion_grid_2fold"]
    lines.append(f"2-fold check: picked on odd {f2['picked_on_odd_qids']}")
    lines.append(f"              picked on even {f2['picked_on_even_qids']}")
    lines.append(f"              service default {f2['service_default']}")
    if a["chunk_sizes"]:
        names = [k for k in a["chunk_sizes"][0] if isinstance(a["chunk_sizes"][0][k], dict)]
        lines.append("chunk sizes (nDCG@10):")
        lines.append(f"  {'tokens':>6}{'chunks':>7}{'trunc':>7}" + "".join(f"{n[:22]:>24}" for n in names))
        for e in a["chunk_sizes"]:
            lines.append(
                f"  {e['chunk_tokens']:>6}{e['chunks']:>7}{e['truncated_at_256_model_tokens']:>7}"
                + "".join(f"{e[n]['ndcg@10']:>24.4f}" for n in names)
            )
    return lines


if __name__ == "__main__":
    sys.exit(main())
