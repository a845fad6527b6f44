"""Metronix on both storage engines, same run: SciFact nDCG@10 and search latency of the knowledge base,
and ``memory_store`` / ``memory_search`` latency at ``--memories`` records.

The same documents go into an embedded SQLite store and a PostgreSQL one (a throwaway PostgreSQL 18 with
pgvector started here, as the tests do), through the same ``KnowledgeService``; the same queries run on
both, call by call in turn, so both engines' latencies are measured under the same load. Vectors come
from the on-disk embedding cache (bench/common.py; missing ones are embedded with the
real local model once and kept), so the two engines see identical vectors and the timing is the store's,
not the model's: each query's vector is embedded (cached) before the timed search.

Memory: the first ``--memories`` SciFact chunks (cached vectors) are stored one ``store_record`` at a time
through ``MemoryService``; the last ``--timed`` stores and ``--timed`` searches (SciFact queries) are timed.

Scale (``--kb-chunks N``): instead of SciFact through the service, both engines get the same N-chunk
corpus of ``bench/latency_100k.py`` (SciFact, then replicas: sentences reshuffled, one swapped, real chunk
vectors plus small noise) through ``put_document``; then the SciFact queries run on both in turn. Memory
beyond the corpus's 9,265 chunks cycles the chunks again: each repeat goes to another agent (record ``i``
is agent ``i % 4``), so no repeat dedups.

Run from the repository root:  .venv/bin/python bench/engines.py [--docs N] [--queries N] [--memories N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

# As `triptych serve` does (cli.py): OpenBLAS's default threads spin against each other on these shared
# cores, and a 384 x 2,400 GEMV then takes 13-60 ms instead of 0.5.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import common  # noqa: E402
import numpy as np  # noqa: E402
import pg_rows  # noqa: E402
from psycopg import sql

from triptych.core.auth import local_principal
from triptych.core.db import Database
from triptych.core.embed import LocalEmbedder
from triptych.core.pg import PgDatabase
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.memory import MemoryService
from triptych.metronix.memory_store import open_memory_store
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.store import KnowledgeStore, SqliteKnowledgeStore

sys.path.insert(0, str(common.REPO / "tests"))
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)

LOCAL = local_principal()


class CachedEmbedder:
    """The local model behind the benchmark's embedding cache: a text is embedded once across runs."""

    def __init__(self, inner: LocalEmbedder, cache: common.EmbeddingCache) -> None:
        self.inner, self.cache = inner, cache
        self.name, self.dim = inner.name, inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.cache.get(list(texts), self.inner)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--docs", type=int, default=0, help="documents (all queries' relevant ones + random); 0 = all"
    )
    p.add_argument("--queries", type=int, default=300, help="test queries (default all 300)")
    p.add_argument("--repeat", type=int, default=3, help="timed passes over the queries (default 3)")
    p.add_argument("--memories", type=int, default=0, help="memory records for the memory phase (0: skip it)")
    p.add_argument("--timed", type=int, default=200, help="memory stores and searches timed (default 200)")
    p.add_argument("--skip-kb", action="store_true", help="only the memory phase")
    p.add_argument(
        "--kb-chunks",
        type=int,
        default=0,
        help="time search over this many chunks (bench/latency_100k.py's corpus) instead of SciFact's nDCG",
    )
    p.add_argument(
        "--cached-only",
        action="store_true",
        help="only documents whose chunks are in the embedding cache, and the queries all of whose relevant"
        " documents are among them (a partial cache then costs no embedding)",
    )
    p.add_argument("--scifact-dir", type=Path, default=common.SCIFACT_DIR, help="BEIR SciFact folder")
    p.add_argument(
        "--cache-dir", type=Path, default=common.CACHE_DIR, help="embedding cache (outside the repo)"
    )
    p.add_argument(
        "--out", type=Path, help="JSON result file (default /tmp/triptych-bench/engines-<time>.json)"
    )
    return p.parse_args(argv)


ENGINES = ("sqlite", "postgresql")


def timed_ms(work: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = work()
    return (time.perf_counter() - t0) * 1000, result


def run_kb(
    stores: Sequence[KnowledgeStore], embedder: CachedEmbedder, data: common.SciFact, repeat: int
) -> list[dict[str, Any]]:
    """Ingest into each engine, then the queries on both engines in turn, call by call: the two engines'
    latencies are measured under the same machine load (it is shared and noisy)."""
    services = [KnowledgeService(store, embedder) for store in stores]  # type: ignore[arg-type]
    ingest: list[float] = []
    for name, service in zip(ENGINES, services, strict=True):
        started = time.perf_counter()
        with common.progress(total=len(data.docs), desc=f"{name}: store", unit="doc") as bar:
            for doc in data.docs:
                title = doc["title"] or None
                service.store_document(LOCAL, "scifact", doc["text"], title=title, doc_label=doc["_id"])
                bar.update(1)
        ingest.append(time.perf_counter() - started)
    runs: list[dict[str, list[str]]] = [{}, {}]
    latencies: list[list[float]] = [[], []]
    for _ in range(repeat):
        for qid, text in data.queries.items():
            for i, service in enumerate(services):
                ms, found = timed_ms(partial(service.search, LOCAL, "scifact", text, top_k=10))
                latencies[i].append(ms)
                runs[i][qid] = common.dedupe([hit["doc_label"] for hit in found["results"]])
    results = []
    for i, name in enumerate(ENGINES):
        quality = common.evaluate(runs[i], data.qrels)
        results.append({"engine": name, "ingest_s": round(ingest[i], 1), "ndcg@10": quality["ndcg@10"],
                        "recall@10": quality["recall@10"], "search_ms": common.summary(latencies[i]),
                        "run": runs[i]})  # fmt: skip
    return results


def bulk_load(store: PostgresKnowledgeStore, corpus: Any, bar: Any) -> None:
    """The rows ``put_document`` writes, loaded in bulk (COPY, then one HNSW build): a chunk at a time
    with its HNSW insert would take most of an hour at 100,000 chunks on these cores. The store's caches
    load from these rows on the first search, as after any other worker's write."""
    with store.db.transaction() as conn:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(f"kb_chunks_hnsw_{store.dim}")))
        workspace = None
        for document, count, _ in corpus:
            if document is None:
                break
            if workspace is None:
                workspace = document.workspace_id
                pg_rows.add_workspace(conn, workspace)
            pg_rows.add_document(conn, document)
            bar.update(count)
    common.log("building the PostgreSQL HNSW index ...")
    with store.db.connection() as conn:  # the graph in memory while it is built (this cluster only)
        conn.execute("ALTER SYSTEM SET maintenance_work_mem = '512MB'")
        conn.execute("SELECT pg_reload_conf()")
    store.vectors.ensure_index()
    # Statistics now, as autovacuum would after a while: without them the planner takes the workspace
    # for a few rows and sorts all 100,000 by distance instead of walking the HNSW index (1.2-2.4 s).
    with store.db.connection() as conn:
        conn.execute("ANALYZE kb_chunks")


def run_kb_scale(
    stores: Sequence[Any], embedder: CachedEmbedder, data: common.SciFact, chunks: int, repeat: int
) -> list[dict[str, Any]]:
    """Both engines get the same ``chunks``-chunk corpus; the queries then run on both in turn."""
    from latency_100k import WORKSPACE, replica_documents

    for store in stores:
        store.set_embedding_model(embedder.name, embedder.dim)
    builds = []
    for name, store in zip(ENGINES, stores, strict=True):
        started = time.perf_counter()
        corpus = replica_documents(data.docs, chunks, 200, 0.02, 42, embedder.inner, embedder.cache)
        with common.progress(total=chunks, desc=f"{name}: load", unit="chunk") as bar:
            if isinstance(store, PostgresKnowledgeStore):
                bulk_load(store, corpus, bar)
            else:
                for document, count, _ in corpus:
                    if document is not None:
                        store.put_document(document)
                        bar.update(count)
        builds.append(time.perf_counter() - started)
    # A third store on the PostgreSQL database: the same rows searched through pgvector's index only
    # (what a worker does while its in-process mirror catches up), timed beside the other two.
    names = [*ENGINES, "postgresql-pgvector-only"]
    stores = [*stores, PostgresKnowledgeStore(PgDatabase(stores[1].db.url), embedder.dim, mirror=False)]
    builds.append(0.0)
    services = [KnowledgeService(store, embedder) for store in stores]
    for service in services:  # the first search loads the caches (and starts the in-process HNSW builds)
        service.search(LOCAL, WORKSPACE, "cold start probe", top_k=10)
    common.log("waiting for the in-process HNSW graphs ...")
    stores[0].index.wait_ready(WORKSPACE)
    stores[1].wait_ready(WORKSPACE)
    latencies: list[list[float]] = [[] for _ in stores]
    counts = [store.count_chunks() for store in stores]
    load = []
    for _ in range(repeat):
        for q, text in enumerate(data.queries.values()):
            for i in [(q + k) % len(services) for k in range(len(services))]:  # the first place rotates
                search = partial(services[i].search, LOCAL, WORKSPACE, text, top_k=10)
                latencies[i].append(timed_ms(search)[0])
            if q % 50 == 0:
                load.append(round(os.getloadavg()[0], 1))
    stores[2].close()
    return [{"engine": name, "chunks": counts[i], "build_s": round(builds[i], 1), "load_average": load,
             "search_ms": common.summary(latencies[i])} for i, name in enumerate(names)]  # fmt: skip


def run_memory(
    dbs: Sequence[Any], embedder: CachedEmbedder, texts: Sequence[str], queries: Sequence[str], timed: int
) -> list[dict[str, Any]]:
    """Fill each engine with all but the last ``timed`` records, then time the last stores and the
    searches on both engines in turn, call by call (same load for both)."""
    services = [MemoryService(open_memory_store(db, embedder.dim), embedder) for db in dbs]
    fill, last = texts[: len(texts) - timed], texts[len(texts) - timed :]

    def store(service: MemoryService, i: int, text: str) -> Any:
        return service.store_record(LOCAL, workspace_id="bench", content=text, agent_id=f"agent-{i % 4}")

    for name, service in zip(ENGINES, services, strict=True):
        with common.progress(total=len(fill), desc=f"{name}: memory_store", unit="record") as bar:
            for i, text in enumerate(fill):
                store(service, i, text)
                bar.update(1)
    stores: list[list[float]] = [[], []]
    searches: list[list[float]] = [[], []]
    for i, text in enumerate(last, start=len(fill)):
        for n, service in enumerate(services):
            stores[n].append(timed_ms(partial(store, service, i, text))[0])
    for query in list(queries)[:timed]:
        for n, service in enumerate(services):
            search = partial(
                service.search, LOCAL, workspace_id="bench", query=query, agent_id="agent-0", top_k=5
            )
            searches[n].append(timed_ms(search)[0])
    for service in services:
        service.close()
    return [{"engine": name, "records": len(texts), "store_ms": common.summary(stores[n]),
             "search_ms": common.summary(searches[n])} for n, name in enumerate(ENGINES)]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data = common.load_scifact(args.scifact_dir)
    if args.docs:
        data = common.quick_subset(data, args.docs, args.queries)
    elif args.queries < len(data.queries):
        data = common.quick_subset(data, len(data.docs), args.queries)
    local = LocalEmbedder()
    local.warm_up()
    embedder = CachedEmbedder(local, common.EmbeddingCache(local.name, local.dim, args.cache_dir))
    if args.cached_only:
        chunks: dict[str, list[str]] = {}
        for row in common.chunk_corpus(data.docs, 200):
            chunks.setdefault(row.doc_id, []).append(row.embed_text)
        kept = {d for d, texts in chunks.items() if all(embedder.cache.has(t) for t in texts)}
        qids = [q for q in data.queries if set(data.qrels[q]) <= kept][: args.queries]
        data = common.SciFact(
            [d for d in data.docs if d["_id"] in kept],
            {q: data.queries[q] for q in qids},
            {q: data.qrels[q] for q in qids},
            data.path,
        )
    common.log(f"{len(data.docs)} documents, {len(data.queries)} queries; warming the embedding cache")
    # Exactly what the service embeds: chunk texts with the title prefix, and the queries.
    service_texts = (
        []
        if args.skip_kb or args.kb_chunks
        else [row.embed_text for row in common.chunk_corpus(data.docs, 200)]
    )
    embedder.embed(service_texts + list(data.queries.values()))
    results: list[dict[str, Any]] = []
    scale: list[dict[str, Any]] = []
    memory: list[dict[str, Any]] = []
    memory_texts = [
        row.embed_text for row in common.chunk_corpus(common.load_scifact(args.scifact_dir).docs, 200)
    ]
    while memory_texts and len(memory_texts) < args.memories:  # cycled: record i goes to agent i % 4
        memory_texts = memory_texts + memory_texts
    memory_texts = memory_texts[: args.memories]
    if memory_texts:
        embedder.embed(memory_texts)
    # Room for the 100,000-chunk table and its HNSW index (about 640 MB), as README advises for a server.
    cluster = PostgresCluster(shared_buffers="1GB" if args.kb_chunks else "128MB").start()
    with tempfile.TemporaryDirectory(prefix="triptych-engines-") as tmp:
        try:
            if args.kb_chunks:
                scale_stores: list[Any] = [
                    SqliteKnowledgeStore(Path(tmp) / "metronix.db", local.dim),
                    PostgresKnowledgeStore(PgDatabase(cluster.create_database("bench")), local.dim),
                ]
                scale = run_kb_scale(scale_stores, embedder, data, args.kb_chunks, args.repeat)
                for kb_store in scale_stores:
                    kb_store.close()
            elif not args.skip_kb:
                kb: list[KnowledgeStore] = [
                    SqliteKnowledgeStore(Path(tmp) / "metronix.db", local.dim),
                    PostgresKnowledgeStore(PgDatabase(cluster.create_database("bench")), local.dim),
                ]
                results = run_kb(kb, embedder, data, args.repeat)
                for kb_store in kb:
                    kb_store.close()
            if memory_texts:
                queries = list(data.queries.values())
                sqlite_db = Database(Path(tmp) / "memory.db", [])
                pg = PgDatabase(cluster.create_database("memory"))
                memory = run_memory([sqlite_db, pg], embedder, memory_texts, queries, args.timed)
                sqlite_db.close()
                pg.close()
        finally:
            cluster.stop()
    report: dict[str, Any] = {
        "machine": common.machine_facts(),
        "docs": len(data.docs),
        "queries": len(data.queries),
    }
    if results:
        report["engines"] = [{k: v for k, v in r.items() if k != "run"} for r in results]
        report["identical_top10_queries"] = sum(
            results[0]["run"][q] == results[1]["run"][q] for q in data.queries
        )
        report["ndcg_delta"] = round(results[1]["ndcg@10"] - results[0]["ndcg@10"], 4)
        report["search_p50_ratio_pg_over_sqlite"] = round(
            results[1]["search_ms"]["p50"] / max(results[0]["search_ms"]["p50"], 1e-9), 2
        )
    if scale:
        report["kb_scale"] = scale
        report["kb_scale_search_p50_ratio_pg_over_sqlite"] = round(
            scale[1]["search_ms"]["p50"] / max(scale[0]["search_ms"]["p50"], 1e-9), 2
        )
        report["kb_scale_search_p50_ratio_pgvector_only_over_sqlite"] = round(
            scale[2]["search_ms"]["p50"] / max(scale[0]["search_ms"]["p50"], 1e-9), 2
        )
    if memory:
        report["memory"] = memory
        for what in ("store_ms", "search_ms"):
            ratio = memory[1][what]["p50"] / max(memory[0][what]["p50"], 1e-9)
            report[f"memory_{what[:-3]}_p50_ratio_pg_over_sqlite"] = round(ratio, 2)
    out = args.out or Path("/tmp/triptych-bench") / f"engines-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=2))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
