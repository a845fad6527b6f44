"""PostgreSQL's BM25 statement (``pg_keywords.RANK``) before and after decision 0440, in the same run over
the same rows.

``--workspaces`` workspaces of ``--chunks`` chunks in all (``index_budget``'s synthetic documents: 40 words
from a Zipf vocabulary, random 384-d vectors), written by COPY into a database at the knowledge schema of
version ``--before-version``; two copies of it (``CREATE DATABASE ... TEMPLATE``), one of them migrated to
the latest version (the migration timed); all three vacuumed and analyzed, as a bulk load should end. No
HNSW index: the statement does not read it. Three variants, each on its own database:

- before: main's statement (its CTEs inlined) on the old schema;
- once: the statement with its CTEs computed once (``MATERIALIZED``) on the old schema;
- after: that statement on the migrated schema (covering indexes).

On the same queries (three common words, as ``index_budget``'s), the variants' order rotating query by query:

1. cold: the cluster restarted (shared buffers empty; the OS page cache is not dropped), every workspace
   ranked once by each variant (``--restarts`` times, a new query each time);
2. warm: ``--queries`` rounds over every workspace;
3. written: in copies of "before" and "after", ``--write-chunks`` chunks written into one workspace through
   the write path, its warm figures before any vacuum (the visibility map not yet updated) and after one.

Per query: the server's execution time and buffers (``EXPLAIN (ANALYZE, BUFFERS, TIMING OFF)``: shared
buffers hit and read, heap fetches of the index-only scans), and, warm, the client's round trip of the
statement as ``pg_keywords.rank`` runs it. Medians (and the slowest); ratios against "before".

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/pg_keyword_rank.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common
import numpy as np
import pg_rows
from index_budget import KeptCluster, copy_documents, documents, vocabulary

from triptych.core.keyword_index import K1, B
from triptych.core.pg import PgDatabase
from triptych.metronix import pg_keywords
from triptych.metronix.knowledge_schema_pg import COMPONENT, MIGRATIONS
from triptych.metronix.store import NewDocument

sys.path.insert(0, str(common.REPO / "tests"))
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)


def build(url: str, args: argparse.Namespace) -> None:
    """The rows and postings a write stores, by COPY into the schema of ``--before-version``."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    db = PgDatabase(url, min_size=1, max_size=1)
    db.migrate(COMPONENT, MIGRATIONS[: args.before_version])
    started = time.perf_counter()
    with db.transaction() as conn:
        restore = pg_rows.set_aside_term_indexes(conn)
        copy_documents(conn, args, "rows")
    with db.connection() as conn:
        conn.execute("SET maintenance_work_mem = '1GB'")
        for statement in restore:
            conn.execute(statement)
    db.close()
    common.log(f"rows, postings and their indexes in {time.perf_counter() - started:.0f} s")


def vacuum(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE kb_chunks, kb_chunk_terms")


def sizes(url: str) -> dict[str, float]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relname LIKE 'kb_chunk%' ORDER BY 1"
        ).fetchall()
    return {str(name): round(int(size) / 2**20, 1) for name, size in rows}


def nodes(plan: dict[str, Any]) -> Any:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


# main's statement before decision 0440: the same, its CTEs inlined by the planner.
RANK_BEFORE = pg_keywords.RANK.replace(" MATERIALIZED", "")
# Each in its own database (cold figures read its pages first): main's schema and statement; main's
# schema with the CTEs computed once; both (the migrated copy).
VARIANTS = {"before": RANK_BEFORE, "once": pg_keywords.RANK, "after": pg_keywords.RANK}


def explain(conn: Any, statement: str, params: dict[str, Any]) -> dict[str, float]:
    """One execution of the statement under EXPLAIN: its time and buffers."""
    found = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + statement, params
    ).fetchone()[0][0]
    top = found["Plan"]
    return {
        "ms": float(found["Execution Time"]),
        "buffers": float(top["Shared Hit Blocks"] + top["Shared Read Blocks"]),
        "read": float(top["Shared Read Blocks"]),
        "heap_fetches": float(sum(n.get("Heap Fetches", 0) for n in nodes(top))),
    }


def parameters(workspace: str, query: str) -> dict[str, Any]:
    """``pg_keywords.rank``'s parameters."""
    terms = pg_keywords.query_stems(query)
    return {"ws": workspace, "terms": terms, "k": 10, "k1": K1, "k1p": K1 + 1.0, "b": B}


def median(rows: Sequence[dict[str, float]], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 2)


def summary(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {key: median(rows, key) for key in rows[0]} | {"max_ms": round(max(r["ms"] for r in rows), 2)}


def rotated(names: list[str], i: int) -> list[str]:
    return names[i % len(names) :] + names[: i % len(names)]


def measure(urls: dict[str, str], cluster: KeptCluster, args: argparse.Namespace) -> dict[str, Any]:
    """Cold, then warm, figures of every variant, the variants' order rotating query by query."""
    import psycopg

    rng = np.random.default_rng(11)
    words = vocabulary()[:300]  # common words: every query has hits
    order = [f"ws-{w:03d}" for w in range(args.workspaces)]
    names = list(VARIANTS)
    cold: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for restart in range(args.restarts):
        cluster.stop()
        cluster.start()
        connections = {n: psycopg.connect(cluster.url(urls[n]), autocommit=True) for n in names}
        try:
            for i, workspace in enumerate(order):
                params = parameters(workspace, " ".join(rng.choice(words, size=3)))
                for name in rotated(names, i + restart):
                    cold[name].append(explain(connections[name], VARIANTS[name], params))
        finally:
            for conn in connections.values():
                conn.close()
    warm: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    connections = {n: psycopg.connect(cluster.url(urls[n]), autocommit=True) for n in names}
    timed = {n: psycopg.connect(cluster.url(urls[n]), autocommit=True) for n in names}
    try:
        queries = [" ".join(rng.choice(words, size=3)) for _ in range(args.queries)]
        for name in names:  # the pages of every workspace and query, into shared buffers
            for workspace in order:
                for query in queries:
                    explain(connections[name], VARIANTS[name], parameters(workspace, query))
        for q, query in enumerate(queries):
            for i, workspace in enumerate(order):
                params = parameters(workspace, query)
                for name in rotated(names, i + q):
                    started = time.perf_counter()
                    timed[name].execute(VARIANTS[name], params).fetchall()  # as pg_keywords.rank runs it
                    client = (time.perf_counter() - started) * 1000
                    warm[name].append(
                        {**explain(connections[name], VARIANTS[name], params), "client_ms": client}
                    )
    finally:
        for conn in [*connections.values(), *timed.values()]:
            conn.close()
    return {"cold": {n: summary(r) for n, r in cold.items()}, "warm": {n: summary(r) for n, r in warm.items()},
            "samples": {"cold": len(cold["before"]), "warm": len(warm["before"])}}  # fmt: skip


def written(cluster: KeptCluster, built: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Phase 3, in copies of "before" and "after": ``--write-chunks`` new chunks in the first workspace
    through the write path (rows without a length, then ``pg_keywords.write``: the length by UPDATE, the
    postings by COPY), then its warm figures (RANK on "after", main's on "before") before any vacuum (what
    the visibility map says until autovacuum comes) and after a VACUUM."""
    import psycopg

    rng = np.random.default_rng(13)
    words = vocabulary()[:300]
    queries = [" ".join(rng.choice(words, size=3)) for _ in range(args.queries)]
    copies = {"before": f"{built['before']}_w", "after": f"{built['after']}_w"}
    statements = {"before": RANK_BEFORE, "after": pg_keywords.RANK}
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        for name, copy in copies.items():
            conn.execute(f'DROP DATABASE IF EXISTS "{copy}"'.encode())
            conn.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{built[name]}" STRATEGY file_copy'.encode())
    figures: dict[str, Any] = {}
    try:
        # pgvector's type registered on their connections
        databases = {
            name: PgDatabase(cluster.url(copy), min_size=1, max_size=1) for name, copy in copies.items()
        }
        write_ms: dict[str, list[float]] = {name: [] for name in copies}
        try:
            for i, document in enumerate(documents(1, args.write_chunks, args.dim)):  # ws-000
                document = dataclasses.replace(document, doc_label=f"new-{document.doc_label}")
                for name in rotated(list(copies), i):
                    started = time.perf_counter()
                    write(databases[name], document)
                    write_ms[name].append((time.perf_counter() - started) * 1000)
        finally:
            for db in databases.values():
                db.close()
        figures["write_ms"] = {name: round(statistics.median(ms), 2) for name, ms in write_ms.items()}
        for state in ("written", "vacuumed"):
            if state == "vacuumed":
                for copy in copies.values():
                    vacuum(cluster.url(copy))
            rows: dict[str, list[dict[str, float]]] = {name: [] for name in copies}
            for name, copy in copies.items():
                with psycopg.connect(cluster.url(copy), autocommit=True) as conn:
                    for query in queries:  # warm-up
                        explain(conn, statements[name], parameters("ws-000", query))
                    rows[name] = [explain(conn, statements[name], parameters("ws-000", q)) for q in queries]
            figures[state] = {name: summary(r) for name, r in rows.items()}
    finally:
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            for copy in copies.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{copy}"'.encode())
    return figures


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workspaces", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in all (split evenly)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=20, help="warm rounds over every workspace")
    parser.add_argument("--restarts", type=int, default=5, help="cold rounds, each after a restart")
    parser.add_argument(
        "--write-chunks", type=int, default=1000,
        help="chunks written into one workspace (copies of the databases) for the figures before a vacuum",
    )  # fmt: skip
    parser.add_argument(
        "--before-version", type=int, default=3,
        help="the knowledge schema's version of the 'before' database (3: the one before decision 0440)",
    )  # fmt: skip
    parser.add_argument("--pg-shared-buffers", default="1GB")
    parser.add_argument(
        "--pg-data", type=Path, default=None,
        help="keep the PostgreSQL cluster in this directory and reuse its two databases when they are built",
    )  # fmt: skip
    parser.add_argument(
        "--quick", action="store_true", help="4 workspaces, 8,000 chunks, 5 rounds, 2 restarts"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.workspaces, args.chunks, args.queries, args.restarts = 4, 8000, 5, 2
    return args


def search_meanwhile(
    url: str, workspaces: int, prepare: bool, done: threading.Event, waits: list[tuple[float, float]]
) -> None:
    """BM25 searches one after another (main's statement, which both schemas answer) until ``done``: the
    longest tells how long the migration kept readers out. Prepared, a statement locks the postings
    before the chunks; parsed afresh, the other way round."""
    import psycopg

    rng = np.random.default_rng(17)
    words = vocabulary()[:300]
    with psycopg.connect(url, autocommit=True) as conn:
        while not done.is_set():
            workspace = f"ws-{int(rng.integers(0, workspaces)):03d}"
            params = parameters(workspace, " ".join(rng.choice(words, size=3)))
            started = time.perf_counter()
            conn.execute(RANK_BEFORE, params, prepare=prepare).fetchall()
            waits.append((started, (time.perf_counter() - started) * 1000))


def write_meanwhile(
    url: str, args: argparse.Namespace, done: threading.Event, waits: list[tuple[float, float]]
) -> None:
    """Documents of 20 chunks written one after another through the write path until ``done``, into a
    workspace of their own (the figures' workspaces keep the rows the other variants have)."""
    db = PgDatabase(url, min_size=1, max_size=1)
    with db.transaction() as conn:
        pg_rows.add_workspace(conn, "meanwhile")
    try:
        for document in documents(args.workspaces, args.chunks, args.dim):
            if done.is_set():
                return
            started = time.perf_counter()
            label = f"{document.workspace_id}-{document.doc_label}"
            write(db, dataclasses.replace(document, workspace_id="meanwhile", doc_label=label))
            waits.append((started, (time.perf_counter() - started) * 1000))
    finally:
        db.close()


def write(db: PgDatabase, document: NewDocument) -> None:
    """One document as a write stores it: its rows without a length, then ``pg_keywords.write`` (the
    lengths by UPDATE, the postings by COPY), in one transaction."""
    with db.transaction() as conn:
        pg_rows.add_document(conn, document)
        ids = conn.execute(
            "SELECT id FROM kb_chunks WHERE document_id = (SELECT max(id) FROM kb_documents) ORDER BY id"
        ).fetchall()
        pg_keywords.write(conn, document.workspace_id, [int(r[0]) for r in ids])


def prepare(cluster: KeptCluster, args: argparse.Namespace) -> dict[str, Any]:
    """The three databases (built once per shape with ``--pg-data``): "before" written at the old schema,
    "once" a copy of it, "after" a copy migrated (timed); all vacuumed and analyzed."""
    import psycopg

    marker = cluster.root / "built.json"
    shape = {
        "workspaces": args.workspaces,
        "chunks": args.chunks,
        "dim": args.dim,
        "before": args.before_version,
    }
    built: dict[str, Any] = json.loads(marker.read_text()) if marker.exists() else {}
    if built.get("shape") == shape:
        return built
    before = cluster.create_database("before").rsplit("/", 1)[1]
    build(cluster.url(before), args)
    built = {"shape": shape, "before": before}
    for name in ("once", "after"):
        built[name] = before.replace("before", name, 1)
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{built[name]}" TEMPLATE "{before}" STRATEGY file_copy'.encode())
    db = PgDatabase(cluster.url(built["after"]), min_size=1, max_size=1)
    done = threading.Event()
    waits: dict[str, list[tuple[float, float]]] = {
        "prepared searches": [],
        "parsed searches": [],
        "writes": [],
    }
    url = cluster.url(built["after"])
    threads = [
        threading.Thread(
            target=search_meanwhile, args=(url, args.workspaces, True, done, waits["prepared searches"])
        ),
        threading.Thread(
            target=search_meanwhile, args=(url, args.workspaces, False, done, waits["parsed searches"])
        ),
        threading.Thread(target=write_meanwhile, args=(url, args, done, waits["writes"])),
    ]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # all three under way
    started = time.perf_counter()
    try:
        applied = db.migrate(COMPONENT, MIGRATIONS)
    finally:
        built["migration_s"] = round(time.perf_counter() - started, 2)
        done.set()
        for thread in threads:
            thread.join()
        db.close()
    # the longest of those started in the second before the migration (the load alone), and of those
    # that ended during it (started before or in it)
    built["meanwhile"] = {
        kind: {
            "before_max_ms": round(max((ms for t, ms in seen if t + ms / 1000 < started), default=0.0), 1),
            "during": sum(t + ms / 1000 >= started for t, ms in seen),
            "during_max_ms": round(max((ms for t, ms in seen if t + ms / 1000 >= started), default=0.0), 1),
        }
        for kind, seen in waits.items()
    }
    common.log(
        f"{applied} migration(s) on the copy in {built['migration_s']} s; meanwhile {built['meanwhile']}"
    )
    for name in VARIANTS:
        vacuum(cluster.url(built[name]))
    marker.write_text(json.dumps(built))
    return built


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    facts = common.machine_facts()
    root = args.pg_data.resolve() if args.pg_data else None
    cluster = KeptCluster(shared_buffers=args.pg_shared_buffers, **({"root": root} if root else {}))
    cluster.start()
    try:
        built = prepare(cluster, args)
        relations = {name: sizes(cluster.url(built[name])) for name in ("before", "after")}
        results = measure({name: built[name] for name in VARIANTS}, cluster, args)
        results["written"] = written(cluster, built, args)
    finally:
        if root:
            cluster.stop()
        else:
            PostgresCluster.stop(cluster)
    results.update(
        {"relations_mb": relations, "migration_s": built["migration_s"], "meanwhile": built["meanwhile"]}
    )
    print(f"\n{args.chunks:,} chunks in {args.workspaces} workspaces; migration {built['migration_s']} s")
    for kind, seen in built["meanwhile"].items():
        print(
            f"  {kind}: {seen['during']} ended during it, the longest {seen['during_max_ms']} ms"
            f" (the second before it: {seen['before_max_ms']} ms)"
        )
    for phase in ("cold", "warm"):
        figures = results[phase]
        print(f"{phase} ({results['samples'][phase]} queries per variant; medians, max_ms the slowest)")
        for key in figures["before"]:
            cells = [f"{name} {figures[name][key]:>9}" for name in VARIANTS]
            ratios = [f"{figures[name][key] / figures['before'][key]:.2f}x" if figures["before"][key] else "-"
                      for name in list(VARIANTS)[1:]]  # fmt: skip
            print(f"  {key:<13} {'  '.join(cells)}  ({', '.join(ratios)})")
    written_ms = results["write_ms"] = results["written"].pop("write_ms")
    print(
        f"a document of 20 chunks written: before {written_ms['before']} ms, after {written_ms['after']} ms (median)"
    )
    for state, figures in results["written"].items():
        print(f"{args.write_chunks} chunks written into ws-000, {state} (warm, {args.queries} queries)")
        for key in figures["before"]:
            before, after = figures["before"][key], figures["after"][key]
            print(
                f"  {key:<13} before {before:>9}  after {after:>9}  ({f'{after / before:.2f}x' if before else '-'})"
            )
    print(json.dumps(relations))
    out = args.out or Path(f"/tmp/triptych-bench/pg_keyword_rank-{time.strftime('%Y%m%d-%H%M%S')}.json")
    common.write_json(out, {"machine": facts, "args": vars(args), **results})
    common.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
