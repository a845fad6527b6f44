"""Knowledge-base persistence on PostgreSQL (server mode): ``KnowledgeStore`` for several workers.

Documents and chunks live in tables; each chunk's vector in a pgvector column with an HNSW index (inner
product on L2-normalised vectors, the embedded engine's cosine). The column is the source of truth; each
worker searches a mirror of it in process (the embedded engine's ``VectorIndex``: usearch HNSW) when the
mirror is as new as the workspace, and pgvector's index otherwise, while the mirror catches up in the
background (measured: docs/decisions.md, "the knowledge base's vectors on PostgreSQL"). Keyword ranking keeps the
embedded engine's in-process BM25 (``core.keyword_index``) so both engines rank alike: the workspace's
generation, bumped in every write's transaction, is read from the database on each search, so a write
through any worker reaches every other worker's copy on its next call (docs/decisions.md). Each write
also logs the chunk ids it added and removed under its generation (``kb_keyword_changes``, same
transaction), so another worker's copy applies just those instead of reloading the workspace.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from psycopg import Connection
from psycopg import sql as pgsql
from psycopg.rows import TupleRow, dict_row

from triptych.core.errors import StorageUnavailable
from triptych.core.keyword_index import Changes, KeywordIndex
from triptych.core.partitions import WriteGate, gated
from triptych.core.pg import PgDatabase, named_rows, one, redacted
from triptych.core.search import HNSW_THRESHOLD, PATCH_LIMIT, Vector, VectorIndex
from triptych.metronix import pg_keywords
from triptych.metronix.dialect import POSTGRES
from triptych.metronix.knowledge_model import (
    CHUNK_HIT_COLUMNS,
    MAX_DUPLICATE_LABELS,
    Candidates,
    ChunkHit,
    chunk_hit_from_row,
    keyword_columns,
)
from triptych.metronix.knowledge_schema_pg import COMPONENT, MIGRATIONS
from triptych.metronix.knowledge_sql import KnowledgeQueries, KnowledgeSql, Written, bm25_candidates

log = logging.getLogger(__name__)

# Writes of one workspace the log keeps: a worker further behind reloads the workspace.
KEYWORD_LOG_KEEP = 1000

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
# Labels of identical documents read with a search's hits: a search lists MAX_DUPLICATE_LABELS (20)
# besides the hit, which the first 21 in label order always hold, whichever of them is the hit.
SAME_TEXT_READ = MAX_DUPLICATE_LABELS + 1


# The DDL's names, read from here by migrations and tests.
__all__ = ["COMPONENT", "MIGRATIONS", "PostgresKnowledgeStore"]


class PostgresKnowledgeStore(KnowledgeQueries):
    """Server mode: the shared SQL (``knowledge_sql``) on pooled psycopg connections, statements as
    written; the vectors in pgvector (and a mirror in process), writers of a workspace ordered by its
    row and followed through the keyword change log."""

    sql = KnowledgeSql(POSTGRES, prefix="kb_")

    def __init__(self, db: PgDatabase, dim: int, mirror: bool = True, exact_below: int | None = None) -> None:
        """``mirror=False`` searches vectors through pgvector's index only (tests of that path);
        ``exact_below`` moves the size from which PostgreSQL walks its HNSW index (tests and benchmarks;
        default ``EXACT_BELOW``, read when the store opens)."""
        self.db = db
        self.dim = dim
        self.exact_below = EXACT_BELOW if exact_below is None else exact_below
        try:
            self._check_pgvector()
        except StorageUnavailable:
            db.close()
            raise
        db.migrate(COMPONENT, MIGRATIONS)
        self._ensure_vector_index()
        self.keywords = KeywordIndex(self._load_keyword_documents, idf="smooth")
        self.index = VectorIndex(dim, self._load_vectors)
        self._mirror = mirror
        self._refreshing: dict[str, threading.Thread] = {}
        self._epochs: dict[str, str] = {}  # per mirrored workspace: the re-embedding it was loaded after
        self._refresh_lock = threading.Lock()
        self._gate = WriteGate()
        self._ready: set[str] = set()  # workspaces whose BM25 postings are all stored (pg_keywords)

    def _check_pgvector(self) -> None:
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

    def _vector(self) -> pgsql.Composable:
        # The column cast to this model's dimension: the expression the HNSW index is built on.
        return pgsql.SQL("embedding::vector({})").format(pgsql.Literal(self.dim))

    def _ensure_vector_index(self) -> None:
        name = pgsql.Identifier(f"kb_chunks_hnsw_{self.dim}")
        # Partial: rows of another dimension (mid re-embed) would fail the cast while it is built.
        statement = pgsql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON kb_chunks USING hnsw (({}) vector_ip_ops)"
            " WHERE vector_dims(embedding) = {}"
        ).format(name, self._vector(), pgsql.Literal(self.dim))
        with self.db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('kb_chunks_hnsw'))")
            conn.execute(statement)

    # -- embedding model ---------------------------------------------------

    # -- documents -----------------------------------------------------------

    @staticmethod
    def _prune_log(conn: Conn, written: Sequence[tuple[str, int]]) -> None:
        """After writes that gave these workspaces these generations: every hundredth generation drops
        the entries older than the last ``KEYWORD_LOG_KEEP``. Every write steps a generation by exactly
        one (documents here, re-embeddings in ``replace_embeddings``), so no hundredth is skipped."""
        due = [(w, g - KEYWORD_LOG_KEEP) for w, g in written if g % 100 == 0]
        if due:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "DELETE FROM kb_keyword_changes WHERE workspace_id = %s AND generation <= %s", due
                )

    # -- the engine's part of the shared SQL ---------------------------------------

    def _one(self, query: str, params: Sequence[Any] = ()) -> Any:
        with self.db.connection() as conn, conn.cursor(row_factory=named_rows) as cursor:
            return cursor.execute(query.encode(), params).fetchone()

    def _all(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        with self.db.connection() as conn, conn.cursor(row_factory=named_rows) as cursor:
            return cursor.execute(query.encode(), params).fetchall()

    def _writing(self) -> AbstractContextManager[Any]:
        return self.db.transaction()

    def _vector_value(self, vec: Vector) -> Any:
        return vec  # pgvector's adapter (registered on every pooled connection)

    def _log_write(
        self, conn: Any, workspace_id: str, generation: int, added: list[int], removed: list[int]
    ) -> None:
        """Also its entry in the keyword change log, pruned now and then to the last
        ``KEYWORD_LOG_KEEP`` writes, and the added chunks' BM25 postings."""
        super()._log_write(conn, workspace_id, generation, added, removed)
        conn.execute(
            "INSERT INTO kb_keyword_changes VALUES (%s, %s, %s, %s)",
            (workspace_id, generation, added, removed),
        )
        self._prune_log(conn, [(workspace_id, generation)])
        pg_keywords.write(conn, workspace_id, added)  # the BM25 postings PostgreSQL ranks by (0191)

    def _after_commit(self, write: Written) -> None:
        """This worker's caches brought up to its committed write. The write is stored whatever happens
        here: a failure (the database gone between the commit and the catch-up) leaves the caches behind,
        and the next search catches them up, so it is logged, not reported as a failed write."""
        workspace_id, before, removed = write.workspace_id, write.before, write.removed
        try:
            self._catch_up(workspace_id, before)
            self.keywords.apply(workspace_id, before, before + 1, added=write.texts, removed=removed)
            self._mirror_apply(workspace_id, before, write.vectors, removed)
        except Exception:
            log.warning(
                "updating the caches of workspace %s after a write failed", workspace_id, exc_info=True
            )

    # -- retrieval ------------------------------------------------------------

    def dense_candidates(
        self, workspace_id: str, query: Vector, limit: int, generation: int, wait: bool = False
    ) -> Candidates:
        """Dense candidates from the in-process mirror ("hnsw", or "exact" below the graph's threshold)
        when it is current, else from pgvector's HNSW index ("pgvector"), which PostgreSQL keeps on
        disk: a restarted worker answers from it while its mirror loads (so ``wait`` changes nothing)."""
        if limit <= 0:
            return Candidates([], "pgvector")
        if self._mirror:
            self._gate.settle(lambda: self.index.generation(workspace_id) < generation)
            if self.index.serves(workspace_id, generation):
                hits, method = self.index.search_with_method(workspace_id, generation, query, limit)
                return Candidates(hits, method)
            cached = self.index.cached(workspace_id)
            # Not resident: loaded if the memory budget admits it (core/partitions.MemoryBudget.admit);
            # resident but behind: caught up.
            if (cached is None and self.index.admit(workspace_id)) or (
                cached is not None and cached[0] < generation
            ):
                self._refresh_in_background(workspace_id)
        return Candidates(self.hnsw_search(workspace_id, query, limit), "pgvector")

    def keyword_candidates(self, workspace_id: str, query: str, limit: int, generation: int) -> Candidates:
        """BM25 candidates from the worker's keyword index when it is current; else ranked by PostgreSQL
        from the stored postings ("sql": the same ranking) while the index loads in the background, if
        the memory budget admits it."""
        self._gate.settle(lambda: self.keywords.generation(workspace_id) < generation)
        self._catch_up(workspace_id, generation)
        if not self.keywords.current(workspace_id, generation) and self._postings_ready(workspace_id):
            if self.keywords.resident(workspace_id) or self.keywords.admit(workspace_id):
                self.keywords.load_in_background(workspace_id, generation)
            return Candidates(pg_keywords.rank(self.db, workspace_id, query, limit), "sql")
        return bm25_candidates(self.keywords, workspace_id, query, limit, generation, self._large)

    def _postings_ready(self, workspace_id: str) -> bool:
        """Whether the workspace's postings are all stored; once they are, every write keeps them, so a
        yes is remembered (a round trip saved per search)."""
        if workspace_id in self._ready:
            return True
        if pg_keywords.ready(self.db, workspace_id):
            self._ready.add(workspace_id)
            return True
        return False

    def _mirror_apply(
        self, workspace_id: str, before: int, added: list[tuple[int, Vector]], removed: list[int]
    ) -> None:
        """Hand this worker's committed write to its vector mirror. A mirror behind ``before`` (another
        worker wrote meanwhile) is left as it is: its next catch-up by difference brings this write
        along with theirs, where applying would drop it and cost a whole reload and graph build."""
        if self.index.generation(workspace_id) < before:
            return
        self.index.apply(workspace_id, before, before + 1, added=added, removed=removed)

    def _catch_up(self, workspace_id: str, generation: int) -> None:
        """The workspace's keyword index brought up to ``generation`` from the change log. A write calls
        it with the generation it started from: another worker's writes since this one's last look are
        applied first, so its own change lands on a current index instead of dropping it."""
        self.keywords.follow(
            workspace_id, generation, lambda seen: self._keyword_changes(workspace_id, seen, generation)
        )

    def _keyword_changes(self, workspace_id: str, seen: int, generation: int) -> Changes | None:
        """What the writes after ``seen`` up to ``generation`` did to the workspace's chunks (None if the
        log misses one of them). Writes to a workspace hold its row, so generations commit in order and
        every entry up to ``generation`` is visible once ``generation`` is. Added chunks are read as
        they are now: one a later write removed is simply absent (that write's entry removes it again)."""
        with self.db.connection() as conn:
            entries = conn.execute(
                "SELECT added, removed FROM kb_keyword_changes"
                " WHERE workspace_id = %s AND generation > %s AND generation <= %s",
                (workspace_id, seen, generation),
            ).fetchall()
            if len(entries) != generation - seen:
                return None
            added = sorted({int(i) for a, _ in entries for i in a})
            rows = conn.execute(
                "SELECT c.id, d.title, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                " WHERE c.workspace_id = %s AND c.id = ANY(%s) ORDER BY c.id",
                (workspace_id, added),
            ).fetchall()
        removed = {int(i) for _, r in entries for i in r}
        return [(int(r[0]), keyword_columns(r[1], str(r[2]))) for r in rows], removed

    def warm(self) -> None:
        """Load every workspace's keyword index, and its vector mirror in the background (best effort: a
        search loads what is missing)."""
        with self.db.connection() as conn:
            workspaces = conn.execute("SELECT id, generation FROM kb_workspaces").fetchall()
        threading.Thread(  # an upgraded database's postings, once
            target=pg_keywords.fill_all, args=(self.db,), name="kb-postings", daemon=True
        ).start()
        for workspace, generation in workspaces:
            if self._mirror:
                self._refresh_in_background(str(workspace))
            self.keywords.preload(str(workspace), int(generation))

    def vector_search(
        self, workspace_id: str, query: Vector, limit: int, generation: int | None = None
    ) -> list[tuple[int, float]]:
        """The ``limit`` nearest chunks of the workspace by inner product.

        From the in-process mirror when it is as new as ``generation`` and its graph is built (0.9 ms
        at 100,000 chunks against 3-6 ms for pgvector's statement, docs/decisions.md); from pgvector's
        index otherwise, while the mirror loads or catches up in the background."""
        if limit <= 0:
            return []
        if self._mirror:
            if generation is None:
                generation = self._generation(workspace_id)
            self._gate.settle(lambda: self.index.generation(workspace_id) < generation)
            if self.index.serves(workspace_id, generation):
                return self.index.search(workspace_id, generation, query, limit)
            cached = self.index.cached(workspace_id)
            if cached is None or cached[0] < generation:  # not while its graph is only being built
                self._refresh_in_background(workspace_id)
        return self.hnsw_search(workspace_id, query, limit)

    def hnsw_search(self, workspace_id: str, query: Vector, limit: int) -> list[tuple[int, float]]:
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
        """``hnsw_search``'s statement and its parameters (tests read its plan).

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
        vector = self._vector()
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

    def _refresh_in_background(self, workspace_id: str) -> None:
        """Load the workspace's mirror off the request path, once at a time per workspace."""
        with self._refresh_lock:
            running = self._refreshing.get(workspace_id)
            if running is not None and running.is_alive():
                return
            thread = threading.Thread(
                target=self._refresh, args=(workspace_id,), name=f"kb-mirror-{workspace_id}", daemon=True
            )
            self._refreshing[workspace_id] = thread
            thread.start()  # inside the lock: a caller in between would see it not alive and start another

    def _refresh(self, workspace_id: str) -> None:
        """Bring the mirror up to the database: by difference when one is cached and no re-embedding
        happened since (another worker's writes then cost a read of the workspace's ids and of the new
        vectors, and the graph is patched, not rebuilt), else by loading the workspace whole."""
        cached = self.index.cached(workspace_id)
        try:
            with self.db.connection() as conn, conn.transaction():
                # One snapshot: a write committing meanwhile would be in the rows but not in the
                # generation, and be applied twice.
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                state = conn.execute(
                    "SELECT (SELECT generation FROM kb_workspaces WHERE id = %s),"
                    " (SELECT value FROM kb_meta WHERE key = 'vectors_epoch')",
                    (workspace_id,),
                ).fetchone()
                generation, epoch = int(one(state)[0] or 0), str(one(state)[1] or "")
                whole = cached is None or not cached[1] or self._epochs.get(workspace_id) != epoch
                if cached is not None and not whole:
                    # Within a workspace chunk ids grow in commit order (its writes hold the workspace
                    # row while they take ids), so what is new since the cached generation is above
                    # its last id; anything else (an id below it the mirror lacks) means load whole.
                    known, top = set(cached[1]), max(cached[1])
                    present, _ = self._copy_vectors(conn, workspace_id, after=0, with_vectors=False)
                    whole = any(i <= top and i not in known for i in present)
                    newer = sum(1 for i in present if i > top)
                    # A large difference patched into the graph would hold the index's lock, which every
                    # search takes, for seconds: load whole instead (pgvector serves while it builds).
                    whole = whole or newer + len(known) - (len(present) - newer) > PATCH_LIMIT
                if whole or cached is None:
                    ids, matrix = self._copy_vectors(conn, workspace_id, after=0)
                    self.index.install(workspace_id, generation, ids, matrix)
                    self._epochs[workspace_id] = epoch
                    return
                new_ids, matrix = self._copy_vectors(conn, workspace_id, after=top)
        except Exception:  # pgvector's index keeps serving; the next search retries
            log.warning("loading the vectors of workspace %s failed", workspace_id, exc_info=True)
            return
        removed = known.difference(present)
        added = list(zip(new_ids, matrix, strict=True))
        self.index.apply(workspace_id, cached[0], generation, added=added, removed=removed)

    def wait_ready(self, workspace_id: str, timeout: float = 600.0) -> bool:
        """Wait until the workspace's mirror is loaded and its graph built (benchmarks and tests)."""
        deadline = time.monotonic() + timeout
        with self._refresh_lock:
            running = self._refreshing.get(workspace_id)
        if running is not None:
            running.join(timeout)
        return self.index.wait_ready(workspace_id, max(0.0, deadline - time.monotonic()))

    def _load_vectors(self, workspace_id: str) -> tuple[list[int], Vector]:
        # ``sync``'s loader: used only if a search finds the mirror dropped between its check and its read.
        with self.db.connection() as conn:
            return self._copy_vectors(conn, workspace_id, after=0)

    def _copy_vectors(
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
            v=pgsql.SQL(", {}").format(self._vector()) if with_vectors else pgsql.SQL(""),
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

    def chunk_hits(self, workspace_id: str, chunk_ids: Sequence[int]) -> dict[int, ChunkHit]:
        if not chunk_ids:
            return {}
        with self.db.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            # Each hit brings the labels of the documents with its text (what ``labels_by_body`` reads
            # after it: one round trip fewer per search), up to SAME_TEXT_READ: a longer list is left
            # to ``labels_by_body``, as a search lists at most MAX_DUPLICATE_LABELS besides the hit.
            rows = cursor.execute(
                f"SELECT {CHUNK_HIT_COLUMNS}, ARRAY(SELECT o.doc_label FROM kb_documents o"
                "  WHERE o.workspace_id = d.workspace_id AND o.body_hash = d.body_hash"
                '  ORDER BY o.doc_label COLLATE "C" LIMIT %s) AS same_text'
                " FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                " WHERE c.workspace_id = %s AND c.id = ANY(%s)".encode(),
                (SAME_TEXT_READ + 1, workspace_id, list(chunk_ids)),
            ).fetchall()
        return {
            int(r["id"]): chunk_hit_from_row(
                r, r["same_text"] if len(r["same_text"]) <= SAME_TEXT_READ else None
            )
            for r in rows
        }

    def labels_by_body(self, workspace_id: str, hashes: Sequence[str]) -> dict[str, list[str]]:
        """body hash -> the labels of the workspace's documents with that text, in label order."""
        if not hashes:
            return {}
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT body_hash, doc_label FROM kb_documents WHERE workspace_id = %s AND body_hash = ANY(%s)"
                ' ORDER BY doc_label COLLATE "C"',
                (workspace_id, list(hashes)),
            ).fetchall()
        found: dict[str, list[str]] = {}
        for digest, label in rows:
            found.setdefault(str(digest), []).append(str(label))
        return found

    # -- re-embedding ------------------------------------------------------------

    @gated
    def replace_embeddings(self, rows: Sequence[tuple[int, Vector]]) -> None:
        with self.db.transaction() as conn:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "UPDATE kb_chunks SET embedding = %s WHERE id = %s",
                    [(np.asarray(v, dtype=np.float32), i) for i, v in rows],
                )
            # No text changed: an empty log entry each, so keyword indexes step over the new generation.
            # The UPDATE waits for writes holding a workspace's row and reads the generation they left.
            bumped = conn.execute(
                "UPDATE kb_workspaces SET generation = generation + 1 RETURNING id, generation"
            ).fetchall()
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO kb_keyword_changes VALUES (%s, %s, '{}', '{}')", [(w, g) for w, g in bumped]
                )
            self._prune_log(conn, [(str(w), int(g)) for w, g in bumped])
            # Vectors changed under their ids: every worker's mirror reloads whole, not by difference.
            conn.execute(
                "INSERT INTO kb_meta VALUES ('vectors_epoch', '1') ON CONFLICT (key)"
                " DO UPDATE SET value = (kb_meta.value::bigint + 1)::text"
            )

    def close(self) -> None:
        with self._refresh_lock:
            running = list(self._refreshing.values())
        for thread in running:  # a load in flight holds a pooled connection
            thread.join(30)
        self.db.close()
        self.index.clear()  # out of the process's memory budget now, not when collected
        self.keywords.clear()
