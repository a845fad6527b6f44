"""The knowledge base's vectors on the database side (server mode): each chunk's vector in a pgvector
column with an HNSW index (inner product on L2-normalised vectors, the embedded engine's cosine), the
version of pgvector that needs, the nearest-chunks statement (an exact scan for a small workspace, a
walk of the index for a large one), and the binary COPY that loads a workspace's vectors into a worker's
mirror (``pg_vector_mirror``). Split from ``pg_store.py`` (issue 29).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from psycopg import Connection
from psycopg import sql as pgsql
from psycopg.rows import TupleRow

from triptych.core.errors import StorageUnavailable
from triptych.core.pg import PgDatabase, one, redacted
from triptych.core.search import HNSW_THRESHOLD, Vector

Conn = Connection[TupleRow]

# pgvector's ``ef_search`` for the SQL path: usearch's ``expansion_search`` in the mirror (core/search.py),
# so both walk candidate lists of the same length (recall@100 at 100,000 chunks: 0.936 here, 0.957 for
# usearch with its denser graph; 0.914 at the former 40/limit).
EF_SEARCH = 128
# Workspaces below this many chunks are searched exactly by PostgreSQL (every vector of the workspace, read
# through its b-tree index, and sorted), as the in-process mirror does below the same size: pgvector's
# HNSW index covers the whole table, so a walk filtered to one workspace reads the others' rows too, the
# more the smaller the workspace's share (100 of a 1,000-chunk workspace among 20,000 chunks: 2,030 rows
# and 24,000 buffers, 107 ms, against 1.5 ms exactly; docs/decisions/0270-small-workspaces-exact-in-postgresql.md).
EXACT_BELOW = HNSW_THRESHOLD
# Tuples of the whole table the HNSW walk of a larger workspace visits at most before it gives up and the
# exact scan answers (decision 0330): pgvector's default, set here so that a server's configuration does
# not move it. About what the exact scan of a workspace at EXACT_BELOW reads, so a walk that cannot find
# its workspace's rows costs at most about one more such scan.
MAX_SCAN_TUPLES = 20_000
# pgvector's first version with iterative index scans: a walk filtered to a workspace keeps going until it
# has found that workspace's rows (decision 0330). Older versions refuse the settings that ask for it.
PGVECTOR_NEEDED = (0, 8)


class PgVectors:
    """The vectors of one model dimension in one database: ``exact_below`` is the workspace size from
    which the nearest-chunks statement walks the HNSW index instead of scanning exactly."""

    def __init__(self, db: PgDatabase, dim: int, exact_below: int) -> None:
        self.db = db
        self.dim = dim
        self.exact_below = exact_below

    def check_extension(self) -> None:
        """``StorageUnavailable`` in one line when the database's pgvector predates ``PGVECTOR_NEEDED``:
        every search of a workspace not in a worker's memory would fail on its settings otherwise."""
        with self.db.connection() as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        found = str(one(row)[0])
        if tuple(int(part) for part in re.findall(r"\d+", found)[:2]) >= PGVECTOR_NEEDED:
            return
        needed = ".".join(map(str, PGVECTOR_NEEDED))
        raise StorageUnavailable(
            f"The PostgreSQL database {redacted(self.db.url)} has pgvector {found}; Metronix needs"
            f" {needed} or newer (its iterative index scans)",
            hint=f"Install pgvector {needed} or newer on the database server (README: Server mode), run"
            " ALTER EXTENSION vector UPDATE in the database, then start triptych again",
            details={"reason": "extension_too_old", "extension": "vector", "found": found, "needed": needed},
        )

    def expression(self) -> pgsql.Composable:
        # The column cast to this model's dimension: the expression the HNSW index is built on.
        return pgsql.SQL("embedding::vector({})").format(pgsql.Literal(self.dim))

    def ensure_index(self) -> None:
        name = pgsql.Identifier(f"kb_chunks_hnsw_{self.dim}")
        # Partial: rows of another dimension (mid re-embed) would fail the cast while it is built.
        statement = pgsql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON kb_chunks USING hnsw (({}) vector_ip_ops)"
            " WHERE vector_dims(embedding) = {}"
        ).format(name, self.expression(), pgsql.Literal(self.dim))
        with self.db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('kb_chunks_hnsw'))")
            conn.execute(statement)

    def search(self, workspace_id: str, query: Vector, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` nearest chunks by PostgreSQL, in one round trip: exactly for a workspace below
        ``exact_below`` chunks, else through pgvector's HNSW index (``nearest_statement``)."""
        search, params = self.nearest_statement(workspace_id, query, limit)
        # One round trip, not five (BEGIN, settings, query, COMMIT): settings and query go in one
        # pipeline closed by a single Sync, which PostgreSQL runs as one implicit transaction, so the
        # transaction-local settings hold for the query and end with it. psycopg prepares the statement
        # from its fifth run on a connection; the generic plan PostgreSQL then keeps walks the same index
        # and returns the same rows, faster than planning each run (bench/pg_large_workspace.py).
        with self.db.connection() as conn:
            with conn.pipeline():
                self.walk_settings(conn, params)
                cursor = conn.execute(search, params)
            rows = cursor.fetchall()
        return sorted(((int(r[0]), float(r[1])) for r in rows), key=lambda hit: (-hit[1], hit[0]))

    @staticmethod
    def walk_settings(conn: Conn, params: dict[str, Any]) -> None:
        """pgvector's settings for ``nearest_statement``'s walk, local to the transaction (tests read its
        plan under them)."""
        conn.execute(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
            " set_config('hnsw.ef_search', %s, true), set_config('hnsw.max_scan_tuples', %s, true)",
            (str(params["pool"]), str(MAX_SCAN_TUPLES)),
        )

    def nearest_statement(
        self, workspace_id: str, query: Vector, limit: int
    ) -> tuple[pgsql.Composed, dict[str, Any]]:
        """``search``'s statement and its parameters (tests read its plan).

        A count of the workspace's chunks, stopped at ``exact_below`` (or ``limit`` if larger), chooses
        the branch; PostgreSQL runs only the branches whose one-time filters hold:

        - the walk (``exact_below`` chunks or more): pgvector's HNSW index, filtered to the workspace,
          in its iterative scan's ``relaxed_order``, reads a pool of ``ef_search`` candidates of this
          workspace (at least ``limit``), which are then ordered exactly by score (decision 0330): by
          ``distance + 0``, as pgvector's documentation does, since the planner takes the walk's rows
          for ordered by ``distance`` and would otherwise keep the first ``limit`` as they came;
          ``strict_order`` would hand over the first ``limit`` in the walk's order, which loses some a
          longer pool keeps; ``relaxed_order`` is pgvector's answer for recall, its re-sort ours;
        - the exact scan: every vector of the workspace ordered by score (an order the HNSW index cannot
          give, so the planner reads the workspace's b-tree range), for a workspace below ``exact_below``
          and for one whose walk came back with fewer than ``limit`` rows (it stops after
          ``MAX_SCAN_TUPLES`` tuples of the whole table, so a workspace holding a small share of it may
          not fill its pool): a search never answers short of what the workspace holds.

        Ties go by id in each branch; the two are merged in Python (one of them is empty)."""
        vector = self.expression()
        statement = pgsql.SQL(
            "WITH size AS (SELECT count(*) AS n FROM (SELECT 1 FROM kb_chunks"
            "  WHERE workspace_id = %(ws)s LIMIT %(count)s) AS s),"
            " walk AS MATERIALIZED (SELECT id, {v} <#> %(q)s AS distance FROM kb_chunks"
            "  WHERE (SELECT n FROM size) >= %(exact)s AND workspace_id = %(ws)s"
            "  AND vector_dims(embedding) = {dim} ORDER BY {v} <#> %(q)s LIMIT %(pool)s),"
            " short AS (SELECT (SELECT count(*) FROM walk) < least(%(k)s, (SELECT n FROM size)) AS yes)"
            " (SELECT id, -distance AS score FROM walk WHERE NOT (SELECT yes FROM short)"
            "  ORDER BY distance + 0, id LIMIT %(k)s)"
            " UNION ALL"
            " (SELECT id, -({v} <#> %(q)s) FROM kb_chunks WHERE (SELECT yes FROM short)"
            "  AND workspace_id = %(ws)s AND vector_dims(embedding) = {dim} ORDER BY 2 DESC, id LIMIT %(k)s)"
        ).format(v=vector, dim=pgsql.Literal(self.dim))
        return statement, {
            "q": np.asarray(query, dtype=np.float32),
            "ws": workspace_id,
            "k": limit,
            "pool": max(EF_SEARCH, min(limit, 1000)),
            "exact": self.exact_below,
            "count": max(self.exact_below, limit),
        }

    def copy(
        self, conn: Conn, workspace_id: str, after: int, with_vectors: bool = True
    ) -> tuple[list[int], Vector]:
        """The workspace's chunk ids above ``after`` with their vectors, in id order.

        Binary COPY: every row has the same size (an id, then a vector of this dimension), so the
        stream parses as one numpy record array, 100,000 vectors in well under a second."""
        fields: list[tuple[Any, ...]] = [("fields", ">i2"), ("id_len", ">i4"), ("id", ">i8")]
        if with_vectors:
            fields += [("vec_len", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("vec", ">f4", (self.dim,))]
        row = np.dtype(fields)
        copy = pgsql.SQL(
            "COPY (SELECT id{v} FROM kb_chunks WHERE workspace_id = {ws} AND id > {after}"
            " AND vector_dims(embedding) = {dim} ORDER BY id) TO STDOUT (FORMAT BINARY)"
        ).format(
            v=pgsql.SQL(", {}").format(self.expression()) if with_vectors else pgsql.SQL(""),
            ws=pgsql.Literal(workspace_id),
            after=pgsql.Literal(after),
            dim=pgsql.Literal(self.dim),
        )
        with conn.cursor().copy(copy) as stream:
            data = b"".join(bytes(block) for block in stream)
        header, trailer = 19, 2  # PGCOPY signature, flags and extension length; the -1 field count
        body = memoryview(data)[header : len(data) - trailer]
        if len(body) % row.itemsize:
            raise ValueError(
                f"unexpected COPY stream of {len(data)} bytes for vectors of dimension {self.dim}"
            )
        records = np.frombuffer(body, dtype=row)
        expected = 2 if with_vectors else 1
        if records.size and not (records["fields"] == expected).all():
            raise ValueError("unexpected row layout in the COPY stream of the workspace's vectors")
        if with_vectors and records.size and not (records["dim"] == self.dim).all():
            raise ValueError("unexpected vector dimension in the COPY stream of the workspace's vectors")
        ids = records["id"].astype(np.int64).tolist()
        vectors = records["vec"].astype(np.float32) if with_vectors else np.zeros((0, self.dim), np.float32)
        return ids, vectors
