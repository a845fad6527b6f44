"""Knowledge-base persistence on PostgreSQL (server mode): ``KnowledgeStore`` for several workers.

Documents and chunks live in tables; each chunk's vector in a pgvector column with an HNSW index
(``pg_vectors``). The column is the source of truth; each worker searches a mirror of it in process
(``pg_vector_mirror``: the embedded engine's ``VectorIndex``, usearch HNSW) when the mirror is as new as
the workspace, and pgvector's index otherwise, while the mirror catches up in the background (measured:
docs/decisions.md, "the knowledge base's vectors on PostgreSQL"). Keyword ranking keeps the embedded
engine's in-process BM25 (``core.keyword_index``) so both engines rank alike: the workspace's generation,
bumped in every write's transaction, is read from the database on each search, so a write through any
worker reaches every other worker's copy on its next call (docs/decisions.md). Each write also logs the
chunk ids it added and removed under its generation (``pg_keyword_log``, same transaction), so another
worker's copy applies just those instead of reloading the workspace.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import sql as pgsql
from psycopg.rows import dict_row

from triptych.core.errors import StorageUnavailable
from triptych.core.keyword_files import KeywordFiles
from triptych.core.keyword_index import KeywordIndex
from triptych.core.partitions import STOP_WAIT, WriteGate, gated
from triptych.core.pg import PgDatabase, named_rows
from triptych.core.search import Vector
from triptych.metronix import pg_keyword_log, pg_keywords
from triptych.metronix.dialect import POSTGRES
from triptych.metronix.knowledge_model import (
    CHUNK_HIT_COLUMNS,
    MAX_DUPLICATE_LABELS,
    Candidates,
    ChunkHit,
    chunk_hit_from_row,
)
from triptych.metronix.knowledge_schema_pg import COMPONENT, MIGRATIONS
from triptych.metronix.knowledge_sql import KnowledgeQueries, KnowledgeSql, Written, bm25_candidates
from triptych.metronix.pg_keyword_log import KEYWORD_LOG_KEEP
from triptych.metronix.pg_saved import SavedExtents, saved_dir
from triptych.metronix.pg_vector_mirror import VectorMirror
from triptych.metronix.pg_vectors import (
    EF_SEARCH,
    EXACT_BELOW,
    MAX_SCAN_TUPLES,
    PGVECTOR_NEEDED,
    PgVectors,
)

log = logging.getLogger(__name__)

# Labels of identical documents read with a search's hits: a search lists MAX_DUPLICATE_LABELS (20)
# besides the hit, which the first 21 in label order always hold, whichever of them is the hit.
SAME_TEXT_READ = MAX_DUPLICATE_LABELS + 1


# The DDL's names, read from here by migrations and tests, and the tuning the tests and benchmarks read
# (``EXACT_BELOW`` is read from here when a store opens, so a benchmark may set it here).
__all__ = [
    "COMPONENT",
    "EF_SEARCH",
    "EXACT_BELOW",
    "KEYWORD_LOG_KEEP",
    "MAX_SCAN_TUPLES",
    "MIGRATIONS",
    "PGVECTOR_NEEDED",
    "SAME_TEXT_READ",
    "PostgresKnowledgeStore",
]


class PostgresKnowledgeStore(KnowledgeQueries):
    """Server mode: the shared SQL (``knowledge_sql``) on pooled psycopg connections, statements as
    written; the vectors in pgvector (and a mirror in process), writers of a workspace ordered by its
    row and followed through the keyword change log."""

    sql = KnowledgeSql(POSTGRES, prefix="kb_")

    def __init__(
        self,
        db: PgDatabase,
        dim: int,
        mirror: bool = True,
        exact_below: int | None = None,
        saved: Path | None = None,
    ) -> None:
        """``mirror=False`` searches vectors through pgvector's index only (tests of that path);
        ``exact_below`` moves the size from which PostgreSQL walks its HNSW index (tests and benchmarks;
        default ``EXACT_BELOW``, read when the store opens); ``saved``: the directory under which this
        worker saves the indexes the budget forgets, and reads them back while they match the database
        (``pg_saved``; the data directory's ``metronix-vectors``; None: nothing saved)."""
        self.db = db
        self.dim = dim
        self.exact_below = EXACT_BELOW if exact_below is None else exact_below
        self.vectors = PgVectors(db, dim, self.exact_below)
        try:
            self.vectors.check_extension()
        except StorageUnavailable:
            db.close()
            raise
        db.migrate(COMPONENT, MIGRATIONS)
        self.vectors.ensure_index()
        self.extents = SavedExtents(db)
        files = saved_dir(saved, db) if saved is not None and mirror else None
        self._files = files
        self.keywords = KeywordIndex(
            self._load_keyword_documents,
            idf="smooth",
            files=KeywordFiles(files) if files is not None else None,
            describe=self.extents.keywords if files is not None else None,
        )
        self.mirror = VectorMirror(db, self.vectors, files, self.extents.vectors)
        self.index = self.mirror.index
        self._use_mirror = mirror
        self._gate = WriteGate()
        self._ready: set[str] = set()  # workspaces whose BM25 postings are all stored (pg_keywords)
        # The fill of an upgraded database's postings (``warm``): ``stop`` ends it between workspaces.
        self._postings: threading.Thread | None = None
        self._stopping = threading.Event()
        # A ``warm`` racing ``stop`` either starts the fill before ``stop`` reads it, or starts none.
        self._postings_lock = threading.Lock()

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
        pg_keyword_log.record(conn, workspace_id, generation, added, removed)
        pg_keywords.write(conn, workspace_id, added)  # the BM25 postings PostgreSQL ranks by (0191)

    def _after_commit(self, write: Written) -> None:
        """This worker's caches brought up to its committed write. The write is stored whatever happens
        here: a failure (the database gone between the commit and the catch-up) leaves the caches behind,
        and the next search catches them up, so it is logged, not reported as a failed write."""
        workspace_id, before, removed = write.workspace_id, write.before, write.removed
        try:
            self._catch_up(workspace_id, before)
            self.keywords.apply(workspace_id, before, before + 1, added=write.texts, removed=removed)
            self.mirror.apply(workspace_id, before, write.vectors, removed)
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
        if self._use_mirror:
            self._gate.settle(lambda: self.index.generation(workspace_id) < generation)
            if not self.index.resident(workspace_id):  # forgotten: read back from its saved files (pg_saved)
                self.extents.seen(workspace_id, generation)
                self.index.adopt_saved(workspace_id)
            if self.index.serves(workspace_id, generation):
                hits, method = self.index.search_with_method(workspace_id, generation, query, limit)
                return Candidates(hits, method)
            cached = self.index.cached(workspace_id)
            # Not resident: loaded if the memory budget admits it (core/partitions.MemoryBudget.admit);
            # resident but behind: caught up.
            if (cached is None and self.mirror.admit(workspace_id)) or (
                cached is not None and cached[0] < generation
            ):
                self.mirror.refresh_in_background(workspace_id)
        return Candidates(self.vectors.search(workspace_id, query, limit), "pgvector")

    def keyword_candidates(self, workspace_id: str, query: str, limit: int, generation: int) -> Candidates:
        """BM25 candidates from the worker's keyword index when it is current; else ranked by PostgreSQL
        from the stored postings ("sql": the same ranking) while the index loads in the background, if
        the memory budget admits it."""
        self._gate.settle(lambda: self.keywords.generation(workspace_id) < generation)
        self._catch_up(workspace_id, generation)
        if not self.keywords.resident(workspace_id):  # forgotten: its saved file, while it matches
            self.extents.seen(workspace_id, generation)
            self.keywords.adopt_saved(workspace_id)
        if not self.keywords.current(workspace_id, generation) and self._postings_ready(workspace_id):
            if self.keywords.resident(workspace_id) or self.keywords.admit(workspace_id):
                self.keywords.load_in_background(workspace_id, generation)
            return Candidates(pg_keywords.rank(self.db, workspace_id, query, limit), "sql")
        return bm25_candidates(self.keywords, workspace_id, query, limit, generation, self._large)

    def generation(self, workspace_id: str) -> int:
        """The workspace's write count. For a workspace this worker does not hold (with saved files to
        check), read with its extent in the same statement (``SavedExtents.read``)."""
        if self._files is None or (
            self.index.resident(workspace_id) and self.keywords.resident(workspace_id)
        ):
            return self._generation(workspace_id)
        return self.extents.read(workspace_id)

    def _postings_ready(self, workspace_id: str) -> bool:
        """Whether the workspace's postings are all stored; once they are, every write keeps them, so a
        yes is remembered (a round trip saved per search)."""
        if workspace_id in self._ready:
            return True
        if pg_keywords.ready(self.db, workspace_id):
            self._ready.add(workspace_id)
            return True
        return False

    def _catch_up(self, workspace_id: str, generation: int) -> None:
        """The workspace's keyword index brought up to ``generation`` from the change log. A write calls
        it with the generation it started from: another worker's writes since this one's last look are
        applied first, so its own change lands on a current index instead of dropping it."""
        self.keywords.follow(
            workspace_id,
            generation,
            lambda seen: pg_keyword_log.changes(self.db, workspace_id, seen, generation),
        )

    def warm(self) -> None:
        """Load the workspaces' keyword indexes and vector mirrors one after the other, while the memory
        budget has room (best effort: PostgreSQL answers for the rest, and a search loads what it
        admits). One at a time, in the caller's thread: a start's loads then take one core, not one
        thread per workspace, beside the searches PostgreSQL answers meanwhile."""
        with self.db.connection() as conn:
            workspaces = conn.execute("SELECT id, generation FROM kb_workspaces ORDER BY id").fetchall()
        with self._postings_lock:
            if self._stopping.is_set():
                return
            self._postings = threading.Thread(  # an upgraded database's postings, once
                target=pg_keywords.fill_all, args=(self.db, self._stopping), name="kb-postings", daemon=True
            )
            self._postings.start()
        for workspace, generation in workspaces:
            key = str(workspace)
            if self._stopping.is_set() or not (self.index.room(key) and self.keywords.room(key)):
                return
            self.keywords.preload(key, int(generation))  # from its saved file when that matches
            if self._use_mirror and not self.index.adopt_saved(key):
                # Through the mirror's own thread, so a search's admission and the close see it.
                self.mirror.refresh_in_background(key)
                self.mirror.finish(key)

    def vector_search(
        self, workspace_id: str, query: Vector, limit: int, generation: int | None = None
    ) -> list[tuple[int, float]]:
        """The ``limit`` nearest chunks of the workspace by inner product.

        From the in-process mirror when it is as new as ``generation`` and its graph is built (0.9 ms
        at 100,000 chunks against 3-6 ms for pgvector's statement, docs/decisions.md); from pgvector's
        index otherwise, while the mirror loads or catches up in the background."""
        if limit <= 0:
            return []
        if self._use_mirror:
            if generation is None:
                generation = self._generation(workspace_id)
            self._gate.settle(lambda: self.index.generation(workspace_id) < generation)
            if self.index.serves(workspace_id, generation):
                return self.index.search(workspace_id, generation, query, limit)
            cached = self.index.cached(workspace_id)
            if cached is None or cached[0] < generation:  # not while its graph is only being built
                self.mirror.refresh_in_background(workspace_id)
        return self.vectors.search(workspace_id, query, limit)

    def hnsw_search(self, workspace_id: str, query: Vector, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` nearest chunks by PostgreSQL (``PgVectors.search``)."""
        return self.vectors.search(workspace_id, query, limit)

    def nearest_statement(
        self, workspace_id: str, query: Vector, limit: int
    ) -> tuple[pgsql.Composed, dict[str, Any]]:
        """``hnsw_search``'s statement and its parameters (tests read its plan)."""
        return self.vectors.nearest_statement(workspace_id, query, limit)

    # pgvector's settings for the statement's walk, local to the transaction (tests read its plan under them).
    walk_settings = staticmethod(PgVectors.walk_settings)

    def wait_ready(self, workspace_id: str, timeout: float = 600.0) -> bool:
        """Wait until the workspace's mirror is loaded and its graph built (benchmarks and tests)."""
        return self.mirror.wait_ready(workspace_id, timeout)

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
            pg_keyword_log.record_steps(conn, [(str(w), int(g)) for w, g in bumped])
            # Vectors changed under their ids: every worker's mirror reloads whole, not by difference.
            conn.execute(
                "INSERT INTO kb_meta VALUES ('vectors_epoch', '1') ON CONFLICT (key)"
                " DO UPDATE SET value = (kb_meta.value::bigint + 1)::text"
            )

    def stop(self) -> list[threading.Thread]:
        """End the store's background work, bounded (``STOP_WAIT``): the mirror's refreshes and graph
        builds, a keyword load, the postings' fill (at its next workspace). Each holds a pooled connection
        or a usearch graph; the threads still at work after the wait are returned (normally none)."""
        with self._postings_lock:
            self._stopping.set()
            postings = self._postings
        busy = self.mirror.close() + self.keywords.stop()
        if postings is not None:
            postings.join(STOP_WAIT)
            if postings.is_alive():
                busy.append(postings)
        return busy

    def close(self) -> None:
        self.stop()  # first: every piece of background work holds a pooled connection
        self.db.close()
        self.keywords.clear()
