"""Worker memory and search latency under ``TRIPTYCH_INDEX_MEMORY_MB`` (issue 30 item 2).

The knowledge base of ``--workspaces`` workspaces holding ``--chunks`` chunks in all (synthetic: texts of
random words from a Zipf-distributed vocabulary, random unit vectors inserted directly, no model), on the
embedded engine (SQLite) and on PostgreSQL (a throwaway cluster, rows loaded with COPY and one HNSW build).
Each (engine, budget) runs in a fresh subprocess over the same data, through ``KnowledgeService.search``
(``metronix_search_fast``'s service) with a hashed bag-of-words query embedder (the model is not timed):

1. a sweep searching every workspace once (on the embedded engine each load is in the search; on
   PostgreSQL the engine answers a workspace asked for once: pgvector for the dense side, BM25 in SQL for
   the keywords; its p50 is "first ask", a workspace this worker never loaded);
2. sessions: each workspace in turn searched ``SESSION`` times, its background loads awaited (on
   PostgreSQL the second ask admits a load, and the budget forgets the least recently used workspaces,
   saving their indexes on the way out, as on the embedded engine);
3. the worker's RSS (VmRSS after a garbage collection and ``malloc_trim``, and VmHWM, the peak);
4. resident p50: ``--queries`` searches of the workspace searched last (its indexes are in memory);
5. non-resident p50: a sweep in the same order over the workspaces not in memory (under a budget; those
   it holds are skipped and counted): read back from the saved files while they match the database;
   without a budget every workspace is resident, so each is forgotten by hand before its search instead
   (nothing saved: what a start leaves).

Query embedding: the bundled model by default (its time is in every figure, as in a server's
``metronix_search_fast``); ``--embedder hashed`` leaves it out to show the retrieval alone.

Ratios are against the embedded engine's resident p50 without a budget, measured in the same run
(goals: resident <= 1.5x, non-resident <= 3x).

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/index_budget.py
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as `triptych serve` does (cli.py)

import common  # noqa: E402
import numpy as np  # noqa: E402
import pg_rows  # noqa: E402

from triptych.core.auth import local_principal  # noqa: E402
from triptych.core.partitions import BUDGET  # noqa: E402
from triptych.core.pg import PgDatabase  # noqa: E402
from triptych.metronix import pg_store  # noqa: E402
from triptych.metronix.knowledge import KnowledgeService  # noqa: E402
from triptych.metronix.pg_store import PostgresKnowledgeStore  # noqa: E402
from triptych.metronix.store import KnowledgeStore, NewDocument, SqliteKnowledgeStore  # noqa: E402

sys.path.insert(0, str(common.REPO / "tests"))
import postgres  # noqa: E402  (the tests' throwaway PostgreSQL)
from harness import free_port  # noqa: E402
from postgres import PostgresCluster  # noqa: E402

LOCAL = local_principal()
CHUNKS_PER_DOCUMENT = 20
WORDS_PER_CHUNK = 40
MODEL = "hashed-words"
SESSION = 3  # searches of a workspace in a row in the sessions sweep


class HashedWords:
    """A query embedder without a model: a hashed bag of words, normalised."""

    name = MODEL

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, 0] = 1e-3
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.sha1(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        normalised: np.ndarray = out / np.linalg.norm(out, axis=1, keepdims=True)
        return normalised


def vocabulary(size: int = 5000) -> list[str]:
    rng = np.random.default_rng(1)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    return ["".join(rng.choice(letters, size=int(rng.integers(4, 10)))) for _ in range(size)]


def documents(workspaces: int, chunks: int, dim: int) -> Any:
    """(NewDocument) for every workspace, ``chunks`` in all, split evenly."""
    words = np.array(vocabulary())
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    rng = np.random.default_rng(7)
    per_workspace = chunks // workspaces
    for w in range(workspaces):
        workspace = f"ws-{w:03d}"
        for d in range(0, per_workspace, CHUNKS_PER_DOCUMENT):
            n = min(CHUNKS_PER_DOCUMENT, per_workspace - d)
            texts = [" ".join(rng.choice(words, size=WORDS_PER_CHUNK, p=weights)) for _ in range(n)]
            vectors = rng.normal(size=(n, dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            content = "\n".join(texts)
            yield NewDocument(
                workspace, f"doc-{d}", f"{workspace} {d}", content, "doc", None, None, {},
                hashlib.sha1(content.encode()).hexdigest(), texts, vectors,
            )  # fmt: skip


def build_sqlite(path: Path, args: argparse.Namespace) -> None:
    store = SqliteKnowledgeStore(path, args.dim)
    store.set_embedding_model(MODEL, args.dim)
    with common.progress(total=args.chunks, desc="sqlite rows", unit="chunk") as bar:
        for document in documents(args.workspaces, args.chunks, args.dim):
            store.put_document(document)
            bar.update(len(document.chunks))
    store.close()


def copy_documents(conn: Any, args: argparse.Namespace, desc: str) -> None:
    """Inside a transaction: the workspaces, rows and BM25 postings of ``documents``, by COPY (the
    postings table's indexes set aside by the caller)."""
    seen: set[str] = set()
    next_id = 1
    with common.progress(total=args.chunks, desc=desc, unit="chunk") as bar:
        for document in documents(args.workspaces, args.chunks, args.dim):
            if document.workspace_id not in seen:
                seen.add(document.workspace_id)
                pg_rows.add_workspace(conn, document.workspace_id)
            next_id = pg_rows.add_document_with_postings(conn, document, next_id)
            bar.update(len(document.chunks))
    pg_rows.finish_ids(conn)


def build_postgres(url: str, args: argparse.Namespace) -> None:
    """The rows and BM25 postings ``put_document`` writes, loaded with COPY (the postings table's
    indexes put back after it), then one HNSW build with the graph in memory (``maintenance_work_mem``)
    and a parallel worker: a chunk at a time with its HNSW insert would take hours at a million chunks
    on these cores."""
    from psycopg import sql

    store = PostgresKnowledgeStore(PgDatabase(url), args.dim)
    store.set_embedding_model(MODEL, args.dim)
    started = time.perf_counter()
    with store.db.transaction() as conn:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(f"kb_chunks_hnsw_{args.dim}")))
        restore = pg_rows.set_aside_term_indexes(conn)
        copy_documents(conn, args, "postgres rows")
    common.log(f"rows and postings copied in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    with store.db.connection() as conn:
        conn.execute(f"SET maintenance_work_mem = '{args.pg_build_memory}'")
        for statement in restore:
            conn.execute(statement)
    common.log(f"postings indexes built in {time.perf_counter() - started:.0f} s")
    common.log(f"building the PostgreSQL HNSW index (maintenance_work_mem {args.pg_build_memory}) ...")
    with store.db.connection() as conn:
        conn.execute(f"ALTER SYSTEM SET maintenance_work_mem = '{args.pg_build_memory}'")
        conn.execute("ALTER SYSTEM SET max_parallel_maintenance_workers = 1")  # two cores: leader + one
        conn.execute("SELECT pg_reload_conf()")
    started = time.perf_counter()
    done = threading.Event()
    threading.Thread(target=hnsw_progress, args=(url, done), daemon=True).start()
    store.vectors.ensure_index()
    done.set()
    common.log(f"HNSW index built in {time.perf_counter() - started:.0f} s")
    with store.db.connection() as conn:
        conn.execute("ALTER SYSTEM RESET maintenance_work_mem")  # searches run with the defaults
        conn.execute("ALTER SYSTEM RESET max_parallel_maintenance_workers")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("VACUUM ANALYZE kb_chunks")
        conn.execute("VACUUM ANALYZE kb_chunk_terms")
        size = conn.execute(
            "SELECT pg_total_relation_size('kb_chunks'), pg_total_relation_size('kb_chunk_terms'),"
            " pg_relation_size(%s)",
            (f"kb_chunks_hnsw_{args.dim}",),
        ).fetchone()
    assert size is not None
    common.log(
        f"kb_chunks {size[0] / 2**20:.0f} MB (HNSW {size[2] / 2**20:.0f} MB), kb_chunk_terms {size[1] / 2**20:.0f} MB"
    )
    store.close()


def hnsw_progress(url: str, done: threading.Event) -> None:
    """The index build's phase and tuples done, every minute (pgvector reports them)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while not done.wait(60):
            row = conn.execute(
                "SELECT phase, tuples_done, tuples_total, blocks_done, blocks_total"
                " FROM pg_stat_progress_create_index"
            ).fetchone()
            if row is not None:
                common.log(f"  HNSW build: {row[0]}, tuples {row[1]}/{row[2]}, blocks {row[3]}/{row[4]}")


@dataclass
class KeptCluster(PostgresCluster):
    """A cluster in a folder that outlives the run (``--pg-data``): built once, then started again for
    the timed phases (which take the lock; the build need not)."""

    def start(self) -> KeptCluster:
        data = self.root / "data"
        if not (data / "PG_VERSION").exists():
            self.root.mkdir(parents=True, exist_ok=True)
            super().start()
            return self
        self.user = postgres._service_user()
        self.bin = postgres._binaries(self.user)
        self.port = free_port()
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=200"
            f" -c shared_buffers={self.shared_buffers}"
        )
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")


def memory_kb() -> dict[str, int]:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed arenas back to the system, as a long run would
    except OSError:
        pass
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


def p50(values: Sequence[float]) -> float | None:
    """The median in ms, or None when nothing was timed (a budget holding every workspace leaves no
    non-resident one to search)."""
    return round(float(np.percentile(values, 50)), 2) if values else None


def measure(engine: str, target: str, budget_mb: float, args: argparse.Namespace) -> dict[str, Any]:
    """One worker's figures (runs in its own subprocess)."""
    BUDGET.configure(budget_mb)
    if args.pg_exact_below is not None:  # the "before" of 0270: pgvector's HNSW index for every workspace
        pg_store.EXACT_BELOW = args.pg_exact_below
    base = memory_kb()
    store: KnowledgeStore
    saved = Path(tempfile.mkdtemp(prefix="index-budget-saved-"))  # this worker's saved indexes (pg_saved)
    if engine == "postgresql":
        store = PostgresKnowledgeStore(PgDatabase(target, max_size=4), args.dim, saved=saved)
    else:
        store = SqliteKnowledgeStore(Path(target), args.dim)
    embedder: Any = HashedWords(args.dim)
    if args.embedder == "local":  # the bundled model embeds each query, as in a server (its time counts)
        from triptych.core.embed import LocalEmbedder

        embedder = LocalEmbedder()
        embedder.warm_up()
        assert embedder.dim == args.dim, "--embedder local needs --dim 384"
    store.set_embedding_model(embedder.name, args.dim)  # the stored vectors are synthetic either way
    service = KnowledgeService(store, embedder)
    words = vocabulary()[:300]  # common words: every query has keyword hits
    rng = np.random.default_rng(11)
    queries = [" ".join(rng.choice(words, size=3)) for _ in range(max(args.queries, 1))]
    order = [f"ws-{w:03d}" for w in range(args.workspaces)]

    def search(workspace: str, query: str) -> tuple[float, str]:
        started = time.perf_counter()
        found = service.search(LOCAL, workspace, query, top_k=10)
        elapsed = (time.perf_counter() - started) * 1000
        assert found["results"], (workspace, query)
        how = found["retrieval"]
        return elapsed, f"{how['dense']}/{how['keyword']}"

    first = [search(ws, queries[i % len(queries)]) for i, ws in enumerate(order)]

    def settled(workspace: str) -> None:
        if engine == "postgresql":  # the loads a search started in the background, finished
            store.wait_ready(workspace, timeout=120)  # type: ignore[attr-defined]
            store.keywords.await_load(workspace)  # type: ignore[attr-defined]

    # Sessions: each workspace in turn searched SESSION times, as an agent works in one for a while. On
    # PostgreSQL a workspace asked for again is admitted and loaded in the background (MemoryBudget.admit),
    # and the budget forgets the least recently used ones, saving them on their way out (pg_saved).
    sessions = 0
    for workspace in order:
        for i in range(SESSION):
            search(workspace, queries[(sessions + i) % len(queries)])
            settled(workspace)
        sessions += SESSION
    after_sweep = memory_kb()
    resident = [search(order[-1], q) for q in queries]
    cold: list[tuple[float, str]] = []
    resident_skipped = 0  # workspaces of the second sweep the budget held (not timed as non-resident)
    for workspace in order:
        if len(cold) >= args.queries:
            break
        if not budget_mb:  # no budget: nothing is ever forgotten, so forget it here
            store.index.forget(workspace)  # type: ignore[attr-defined]
            store.keywords.forget(workspace)  # type: ignore[attr-defined]
        elif store.index.resident(workspace) or store.keywords.resident(workspace):  # type: ignore[attr-defined]
            resident_skipped += 1
            continue
        cold.append(search(workspace, queries[len(cold) % len(queries)]))
    final = memory_kb()
    resident_now = BUDGET.resident()
    store.close()
    shutil.rmtree(saved, ignore_errors=True)
    return {
        "engine": engine if args.pg_exact_below is None else f"{engine}-hnsw",
        "budget_mb": budget_mb,
        "rss_mb_start": round(base["VmRSS"] / 1024, 1),
        "rss_mb_after_sweep": round(after_sweep["VmRSS"] / 1024, 1),
        "rss_mb_end": round(final["VmRSS"] / 1024, 1),
        "peak_rss_mb": round(final["VmHWM"] / 1024, 1),
        "index_mb_accounted_end": round(sum(b for b, _ in resident_now.values()) / 2**20, 1),
        "partitions_end": {kind: n for kind, (_, n) in resident_now.items()},
        "evictions": dict(BUDGET.evictions),
        "first_sweep_p50_ms": p50([t for t, _ in first]),
        "first_sweep_retrieval": dict(Counter(h for _, h in first)),
        "resident_p50_ms": p50([t for t, _ in resident]),
        "resident_retrieval": dict(Counter(h for _, h in resident)),
        "non_resident_p50_ms": p50([t for t, _ in cold]),
        "non_resident_retrieval": dict(Counter(h for _, h in cold)),
        "second_sweep_resident_skipped": resident_skipped,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workspaces", type=int, default=100)
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in all (split evenly)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--budget-mb", type=float, default=256.0)
    parser.add_argument("--queries", type=int, default=40, help="timed searches per phase")
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument(
        "--embedder", choices=("local", "hashed"), default="local",
        help="query embedding: the bundled model (timed, as a server's) or a hashed bag of words (not a model)",
    )  # fmt: skip
    parser.add_argument(
        "--compare-hnsw", action="store_true",
        help="also measure PostgreSQL at the budget with every workspace searched through pgvector's HNSW index"
        " (no exact scan of small workspaces: the figures before 0270), in the same run",
    )  # fmt: skip
    parser.add_argument("--pg-exact-below", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="10 workspaces, 5,000 chunks, 10 MB budget")
    parser.add_argument(
        "--data", type=Path, default=None,
        help="keep the SQLite data set in this directory and reuse it when it is there (a million chunks take"
        " ten minutes to write); its saved index files are reused too, as a restarted worker would",
    )  # fmt: skip
    parser.add_argument(
        "--pg-data", type=Path, default=None,
        help="keep the PostgreSQL cluster in this directory and reuse it when it is built (a million chunks"
        " take most of an hour: build with --build-only outside the lock, then measure)",
    )  # fmt: skip
    parser.add_argument(
        "--pg-build-memory", default="4GB",
        help="maintenance_work_mem for the index builds (the HNSW graph is built in memory if it fits)",
    )  # fmt: skip
    parser.add_argument("--pg-shared-buffers", default="1GB")
    parser.add_argument("--build-only", action="store_true", help="build the data sets and stop")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--measure", nargs=3, metavar=("ENGINE", "TARGET", "BUDGET_MB"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.workspaces, args.chunks, args.budget_mb, args.queries = 10, 5000, 10.0, 10
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure:
        engine, target, budget = args.measure
        print(json.dumps(measure(engine, target, float(budget), args)))
        return 0
    facts = common.machine_facts()
    engines = args.engines.split(",")
    results: list[dict[str, Any]] = []
    passthrough = ["--workspaces", str(args.workspaces), "--chunks", str(args.chunks), "--dim", str(args.dim),
                   "--queries", str(args.queries), "--embedder", args.embedder]  # fmt: skip

    def run(engine: str, target: str, budget: float, *extra: str) -> None:
        common.log(f"measuring {engine} {' '.join(extra)} at budget {budget or 'none'} MB ...")
        command = [sys.executable, __file__, *passthrough, *extra, "--measure", engine, target, str(budget)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{engine} at {budget} MB failed:\n{done.stderr[-4000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)

    with tempfile.TemporaryDirectory(prefix="index-budget-") as tmp:
        if "sqlite" in engines:
            path = (args.data or Path(tmp)) / "metronix.db"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                build_sqlite(path, args)
            for budget in () if args.build_only else (0.0, args.budget_mb):
                run("sqlite", str(path), budget)
        if "postgresql" in engines:
            if args.pg_data:
                cluster: PostgresCluster = KeptCluster(
                    root=args.pg_data.resolve(), shared_buffers=args.pg_shared_buffers
                )
            else:
                cluster = PostgresCluster(shared_buffers=args.pg_shared_buffers)
            cluster.start()
            try:
                marker = cluster.root / "built.json"
                shape = {"workspaces": args.workspaces, "chunks": args.chunks, "dim": args.dim}
                built = json.loads(marker.read_text()) if marker.exists() else {}
                if {key: built.get(key) for key in shape} != shape:
                    url = cluster.create_database("bench")
                    build_postgres(url, args)
                    marker.write_text(json.dumps({**shape, "database": url.rsplit("/", 1)[1]}))
                else:
                    url = cluster.url(built["database"])
                if not args.build_only:
                    for budget in (0.0, args.budget_mb):
                        run("postgresql", url, budget)
                    if args.compare_hnsw:
                        run("postgresql", url, args.budget_mb, "--pg-exact-below", "0")
            finally:
                cluster.stop()
        if args.build_only:
            return 0
    baseline = next(
        (r["resident_p50_ms"] for r in results if r["engine"] == "sqlite" and not r["budget_mb"]), None
    )
    print(
        "\nengine          budget  RSS end  peak   accounted  resident p50 (x)   non-resident p50 (x)"
        "   first ask p50 (x)   evictions"
    )
    for r in results:
        ratio = lambda v: f"{v / baseline:.2f}x" if baseline and v is not None else "-"  # noqa: E731
        print(
            f"{r['engine']:<15} {r['budget_mb'] or 'none':>6}  {r['rss_mb_end']:>6}  {r['peak_rss_mb']:>6}"
            f"  {r['index_mb_accounted_end']:>8}  {str(r['resident_p50_ms']):>7} ({ratio(r['resident_p50_ms'])})"
            f"  {str(r['non_resident_p50_ms']):>9} ({ratio(r['non_resident_p50_ms'])})"
            f"  {str(r['first_sweep_p50_ms']):>9} ({ratio(r['first_sweep_p50_ms'])})  {r['evictions']}"
        )
    out = args.out or Path(f"/tmp/triptych-bench/index_budget-{time.strftime('%Y%m%d-%H%M%S')}.json")
    common.write_json(
        out, {"machine": facts, "args": vars(args), "baseline_ms": baseline, "results": results}
    )
    common.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
