"""Recall@10 and p50 of PostgreSQL's dense search of a workspace above the exact-scan threshold (issue 30
item 2, decision 0330).

A workspace of ``--big`` chunks (30,000) among ``--others`` (6) workspaces of ``--other-chunks`` (15,000)
each, in one ``kb_chunks`` table with its one HNSW index (pgvector, built as server mode builds it).
Vectors are synthetic (no model, no text; rows loaded with COPY): ``--clusters`` topic centres in a
``--latent``-dimensional space projected to ``--dim`` (384) with noise, as sentence embeddings have an
intrinsic dimension far below their width; each workspace draws its chunks from its own Dirichlet mix of
the centres, so workspaces overlap and a query may fall where the big workspace has little. Queries are
drawn from the uniform mix. Ground truth: the big workspace's exact top k computed in numpy.

Every strategy answers the same queries on the same data in one run, interleaved (the order rotating per
query), its p50 measured around its one round trip, at each of ``--limits``: 10, and 100, what
``metronix_search_fast`` asks the dense side for (``max(100, 5 * top_k)`` candidates):

- ``no iterative scan``: the table-wide index with a workspace filter, pgvector before 0.8: the index
  yields ``ef_search`` candidates and the filter drops the other workspaces';
- ``strict (before)``: the store's statement before 0330, the iterative scan in ``strict_order``;
- ``0330 (after)``: the store's ``hnsw_search`` (a ``relaxed_order`` pool re-ranked exactly, the exact
  scan if the walk comes back short);
- ``0330, planned each run``: the same statement never prepared (the store lets psycopg prepare it from
  its fifth run on a connection, and PostgreSQL then keeps a generic plan);
- ``exact``: every vector of the workspace ordered by score (what 0270 does below the threshold);
- ``partial index`` (``--partial-index``, measured last): the alternative to 0330, an HNSW index of the
  big workspace alone (a partial index; its build time is logged), walked and re-ranked as 0330 does.

The plan of the store's statement is logged (which index the walk read), and the table gives recall@10,
its minimum over the queries, recall at the limit, answers short of the limit, p50 as a ratio to the
``strict (before)`` row at the same limit, and p95.

    flock /tmp/triptych-bench.lock nice -n 5 .venv/bin/python bench/pg_large_workspace.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import common  # noqa: E402
import numpy as np  # noqa: E402
from psycopg import sql as pgsql  # noqa: E402

from triptych.core.pg import PgDatabase  # noqa: E402
from triptych.metronix import pg_store  # noqa: E402
from triptych.metronix.pg_store import PostgresKnowledgeStore  # noqa: E402

sys.path.insert(0, str(common.REPO / "tests"))
from postgres import PostgresCluster  # noqa: E402  (the tests' throwaway PostgreSQL)

NOW = "2026-12-01T00:00:00+00:00"
PER_DOCUMENT = 1000
K = 10


def vectors(rng: np.random.Generator, space: Space, rows: int, mix: np.ndarray) -> Any:
    """``rows`` unit vectors: latent points around the centres ``mix`` picks, projected to ``dim``, noised."""
    picks = rng.choice(len(space.centres), size=rows, p=mix)
    latent = space.centres[picks] + rng.normal(scale=space.spread, size=(rows, space.centres.shape[1]))
    out = latent @ space.projection
    out += rng.normal(
        scale=space.noise * np.linalg.norm(out, axis=1, keepdims=True) / np.sqrt(out.shape[1]), size=out.shape
    )
    out = out.astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


@dataclass
class Space:
    """Topic centres in a latent space of few dimensions and its projection to the model's (sentence
    embeddings' intrinsic dimension is far below their 384: an HNSW graph over them reaches high recall)."""

    centres: np.ndarray
    projection: np.ndarray
    spread: float
    noise: float


def load(store: PostgresKnowledgeStore, workspace: str, matrix: np.ndarray) -> list[int]:
    """The workspace's rows (one document per PER_DOCUMENT chunks) by COPY; returns their ids in order."""
    with store.db.transaction() as conn:
        conn.execute(
            "INSERT INTO kb_workspaces (id, created_at, generation) VALUES (%s, %s, 1)", (workspace, NOW)
        )
        for start in range(0, len(matrix), PER_DOCUMENT):
            label = f"doc-{start}"
            document = conn.execute(
                "INSERT INTO kb_documents (workspace_id, doc_label, title, content, source_type, url, date,"
                " metadata, content_hash, body_hash, created_at, updated_at)"
                " VALUES (%s,%s,%s,'','doc',NULL,NULL,'{}',%s,%s,%s,%s) RETURNING id",
                (workspace, label, label, label, f"{workspace}-{label}", NOW, NOW),
            ).fetchone()
            assert document is not None
            copy_rows = "COPY kb_chunks (document_id, workspace_id, ordinal, text, embedding) FROM STDIN (FORMAT BINARY)"
            with conn.cursor().copy(copy_rows) as copy:
                copy.set_types(["int8", "text", "int4", "text", "vector"])
                for ordinal, vector in enumerate(matrix[start : start + PER_DOCUMENT]):
                    copy.write_row((document[0], workspace, ordinal, "c", vector))
        rows = conn.execute(
            "SELECT id FROM kb_chunks WHERE workspace_id = %s ORDER BY id", (workspace,)
        ).fetchall()
    return [int(r[0]) for r in rows]


Search = Callable[[np.ndarray, int], list[int]]


def one_round_trip(
    store: PostgresKnowledgeStore,
    settings: dict[str, str],
    statement: pgsql.Composable,
    params: dict[str, Any],
) -> list[int]:
    """The statement after transaction-local settings, in one pipeline (as ``hnsw_search`` sends it)."""
    with store.db.connection() as conn:
        with conn.pipeline():
            for name, value in settings.items():
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            cursor = conn.execute(statement, params)
        return [int(r[0]) for r in sorted(cursor.fetchall(), key=lambda r: (-r[1], r[0]))]


def strategies(store: PostgresKnowledgeStore, dim: int, workspace: str) -> dict[str, Search]:
    v = pgsql.SQL("embedding::vector({})").format(pgsql.Literal(dim))
    where = pgsql.SQL("workspace_id = %(ws)s AND vector_dims(embedding) = {}").format(pgsql.Literal(dim))
    filtered = pgsql.SQL(
        "SELECT id, -({v} <#> %(q)s) FROM kb_chunks WHERE {w} ORDER BY {v} <#> %(q)s, id LIMIT %(k)s"
    ).format(w=where, v=v)
    exact = pgsql.SQL(
        "SELECT id, -({v} <#> %(q)s) AS score FROM kb_chunks WHERE {w} ORDER BY score DESC, id LIMIT %(k)s"
    ).format(w=where, v=v)
    # The store's statement before 0330, verbatim: its count gate, then the walk in strict_order.
    before = pgsql.SQL(
        "WITH small AS (SELECT count(*) < %(exact)s AS yes FROM (SELECT 1 FROM kb_chunks"
        "  WHERE workspace_id = %(ws)s LIMIT %(exact)s) AS s)"
        " (SELECT id, -({v} <#> %(q)s) AS score FROM kb_chunks WHERE (SELECT yes FROM small)"
        "  AND {w} ORDER BY score DESC, id LIMIT %(k)s)"
        " UNION ALL"
        " (SELECT id, -({v} <#> %(q)s) FROM kb_chunks WHERE NOT (SELECT yes FROM small)"
        "  AND {w} ORDER BY {v} <#> %(q)s, id LIMIT %(k)s)"
    ).format(v=v, w=where)

    def sql(order: str | None, statement: pgsql.Composable) -> Search:
        def search(q: np.ndarray, k: int) -> list[int]:
            ef = str(max(pg_store.EF_SEARCH, min(k, 1000)))
            settings = {} if order is None else {"hnsw.ef_search": ef, "hnsw.iterative_scan": order}
            return one_round_trip(
                store, settings, statement, {"ws": workspace, "q": q, "k": k, "exact": pg_store.EXACT_BELOW}
            )

        return search

    return {
        "no iterative scan": sql("off", filtered),
        "strict (before)": sql("strict_order", before),
        "0330 (after)": lambda q, k: [i for i, _ in store.hnsw_search(workspace, q, k)],
        "0330, planned each run": lambda q, k: planned_walk(store, workspace, q, k),
        "exact": sql(None, exact),
    }


def planned_walk(store: PostgresKnowledgeStore, workspace: str, query: np.ndarray, k: int) -> list[int]:
    """``hnsw_search`` with its statement planned on every run (never prepared), against psycopg's
    default, which prepares it from its fifth run on a connection (PostgreSQL may then keep a generic
    plan, made without the parameters' values)."""
    statement, params = store.nearest_statement(workspace, query, k)
    with store.db.connection() as conn:
        with conn.pipeline():
            store.walk_settings(conn, params)
            cursor = conn.execute(statement, params, prepare=False)
        return [int(r[0]) for r in sorted(cursor.fetchall(), key=lambda r: (-r[1], r[0]))]


def partial_statement(dim: int) -> pgsql.Composed:
    """0330's walk (a relaxed pool re-ranked exactly) with the big workspace as a literal."""
    v = pgsql.SQL("embedding::vector({})").format(pgsql.Literal(dim))
    return pgsql.SQL(
        "WITH walk AS MATERIALIZED (SELECT id, {v} <#> %(q)s AS distance FROM kb_chunks"
        " WHERE workspace_id = 'big' AND vector_dims(embedding) = {d} ORDER BY {v} <#> %(q)s LIMIT %(pool)s)"
        " SELECT id, -distance FROM walk ORDER BY distance + 0, id LIMIT %(k)s"
    ).format(v=v, d=pgsql.Literal(dim))


def partial_walk(store: PostgresKnowledgeStore, dim: int) -> Search:
    statement = partial_statement(dim)

    def search(q: np.ndarray, k: int) -> list[int]:
        _, params = store.nearest_statement("big", q, k)
        with store.db.connection() as conn:
            with conn.pipeline():
                store.walk_settings(conn, params)
                cursor = conn.execute(statement, params)
            return [int(r[0]) for r in cursor.fetchall()]

    return search


def plan_of(store: PostgresKnowledgeStore, query: np.ndarray, partial: bool = False) -> list[str]:
    """The scans of ``kb_chunks`` the store's statement (or the partial index's) ran for the big
    workspace, by which index."""
    statement, params = store.nearest_statement("big", query, K)
    if partial:
        statement = partial_statement(store.dim)
    with store.db.transaction() as conn:
        store.walk_settings(conn, params)
        row = conn.execute(pgsql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement, params).fetchone()
    assert row is not None
    found: list[str] = []
    pending = [row[0][0]["Plan"]]
    while pending:
        node = pending.pop()
        pending.extend(node.get("Plans", []))
        if node.get("Actual Loops", 0) and "Index Name" in node:
            found.append(f"{node['Node Type']} {node['Index Name']}: {node.get('Actual Rows')} rows")
    return found


def measure(
    run: dict[str, Search], queries: np.ndarray, truth: list[np.ndarray], limit: int
) -> dict[str, Any]:
    """Every strategy on every query, interleaved (a query's strategies one after the other, their order
    rotating), so that the shared machine's load falls on all of them alike."""
    names = list(run)
    times: dict[str, list[float]] = {n: [] for n in names}
    at10: dict[str, list[float]] = {n: [] for n in names}
    at_limit: dict[str, list[float]] = {n: [] for n in names}
    short = dict.fromkeys(names, 0)
    for number, (q, exact) in enumerate(zip(queries, truth, strict=True)):
        for name in names[number % len(names) :] + names[: number % len(names)]:
            began = time.perf_counter()
            found = run[name](q, limit)
            times[name].append((time.perf_counter() - began) * 1000)
            at10[name].append(len(set(exact[:K]).intersection(found[:K])) / K)
            at_limit[name].append(len(set(exact[:limit]).intersection(found)) / limit)
            short[name] += len(found) < limit
    return {
        name: {
            "limit": limit,
            "recall_at_10": round(float(np.mean(at10[name])), 4),
            "min_recall_at_10": round(float(np.min(at10[name])), 2),
            f"recall_at_{limit}": round(float(np.mean(at_limit[name])), 4),
            "short_answers": short[name],
            "p50_ms": round(float(np.percentile(times[name], 50)), 2),
            "p95_ms": round(float(np.percentile(times[name], 95)), 2),
        }
        for name in names
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--big", type=int, default=30_000, help="chunks of the workspace searched")
    parser.add_argument("--others", type=int, default=6, help="other workspaces in the table")
    parser.add_argument("--other-chunks", type=int, default=15_000, help="chunks of each other workspace")
    parser.add_argument("--dim", type=int, default=384, help="the bundled model's dimension")
    parser.add_argument("--clusters", type=int, default=200, help="topic centres shared by the workspaces")
    parser.add_argument("--latent", type=int, default=24, help="dimensions of the latent space")
    parser.add_argument(
        "--spread", type=float, default=0.5, help="latent spread around a centre (centres: N(0,1))"
    )
    parser.add_argument(
        "--noise", type=float, default=0.3, help="isotropic noise after projection (relative)"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--limits",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[10, 100],
        help="rows asked for (10: a top 10; 100: the candidates metronix_search_fast asks for)",
    )
    parser.add_argument(
        "--partial-index",
        action="store_true",
        help="then also with an HNSW index of the big workspace alone (the alternative to 0330)",
    )
    parser.add_argument("--quick", action="store_true", help="--big 25000 --others 3 --other-chunks 10000")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.big, args.others, args.other_chunks, args.queries = 25_000, 3, 10_000, 100
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rng = np.random.default_rng(5)
    space = Space(
        rng.normal(size=(args.clusters, args.latent)),
        rng.normal(size=(args.latent, args.dim)),
        args.spread,
        args.noise,
    )
    cluster = PostgresCluster(shared_buffers="1GB").start()
    try:
        url = cluster.create_database("bench")
        store = PostgresKnowledgeStore(PgDatabase(url, max_size=2), args.dim, mirror=False)
        with store.db.connection() as conn:
            conn.execute(pgsql.SQL("DROP INDEX {}").format(pgsql.Identifier(f"kb_chunks_hnsw_{args.dim}")))
        started = time.perf_counter()
        big = vectors(rng, space, args.big, rng.dirichlet(np.full(args.clusters, 0.3)))
        big_ids = np.array(load(store, "big", big))
        for w in range(args.others):
            mix = rng.dirichlet(np.full(args.clusters, 0.3))
            load(store, f"other-{w:02d}", vectors(rng, space, args.other_chunks, mix))
        total = args.big + args.others * args.other_chunks
        common.log(
            f"{total} rows loaded in {time.perf_counter() - started:.0f} s; building the HNSW index ..."
        )
        with store.db.connection() as conn:
            conn.execute("ALTER SYSTEM SET maintenance_work_mem = '1GB'")
            conn.execute("SELECT pg_reload_conf()")
        started = time.perf_counter()
        store.vectors.ensure_index()
        with store.db.connection() as conn:
            conn.execute("VACUUM ANALYZE kb_chunks")
        build_s = time.perf_counter() - started
        common.log(f"HNSW index of {total} rows built in {build_s:.0f} s")

        queries = vectors(rng, space, args.queries, np.full(args.clusters, 1 / args.clusters))
        deepest = max(args.limits)
        truth = [big_ids[np.argsort(-(big @ q), kind="stable")[:deepest]] for q in queries]
        run = strategies(store, args.dim, "big")
        for q in queries[:5]:  # the caches warmed for every strategy alike
            for search in run.values():
                search(q, K)
        common.log(f"the store's statement reads: {plan_of(store, queries[0])}")
        results: list[dict[str, Any]] = []
        for limit in args.limits:
            for name, figures in measure(run, queries, truth, limit).items():
                results.append({"strategy": name, **figures})
                print(json.dumps(results[-1]), flush=True)
        if args.partial_index:  # the alternative: a graph of the workspace alone
            with store.db.connection() as conn:
                began = time.perf_counter()
                conn.execute(
                    pgsql.SQL(
                        "CREATE INDEX kb_chunks_hnsw_big ON kb_chunks USING hnsw ((embedding::vector({d})) vector_ip_ops)"
                        " WHERE workspace_id = 'big' AND vector_dims(embedding) = {d}"
                    ).format(d=pgsql.Literal(args.dim))
                )
                common.log(f"partial index of the big workspace built in {time.perf_counter() - began:.0f} s")
                conn.execute("ANALYZE kb_chunks")
            # The workspace as a literal: a prepared statement's generic plan could not prove the
            # partial index's predicate for a parameter.
            partial = {"partial index": partial_walk(store, args.dim)}
            common.log(f"the walk over the partial index reads: {plan_of(store, queries[0], partial=True)}")
            for limit in args.limits:
                for name, figures in measure(partial, queries, truth, limit).items():
                    results.append({"strategy": name, **figures})
                    print(json.dumps(results[-1]), flush=True)
        store.close()
    finally:
        cluster.stop()
    print(
        f"\n{args.big} chunks among {args.others} x {args.other_chunks} ({args.big / total:.0%} of the table),"
        f" dim {args.dim}, {args.queries} queries; ratios against the strict_order walk (before) at the same limit"
    )
    print("strategy               limit  recall@10   min  recall@limit  short   p50 ms (x before)   p95 ms")
    for r in results:
        base = next(
            b["p50_ms"] for b in results if b["strategy"] == "strict (before)" and b["limit"] == r["limit"]
        )
        deep = r[f"recall_at_{r['limit']}"]
        print(
            f"{r['strategy']:<22} {r['limit']:>5}  {r['recall_at_10']:>9.3f}  {r['min_recall_at_10']:>4}"
            f"  {deep:>12.3f}  {r['short_answers']:>5}"
            f"  {r['p50_ms']:>8} ({r['p50_ms'] / base:.2f}x)  {r['p95_ms']:>9}"
        )
    out = args.out or Path(f"/tmp/triptych-bench/pg_large_workspace-{time.strftime('%Y%m%d-%H%M%S')}.json")
    common.write_json(
        out,
        {"machine": common.machine_facts(), "args": vars(args), "index_build_s": build_s, "results": results},
    )
    common.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
