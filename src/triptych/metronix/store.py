"""Knowledge-base persistence: documents, chunks, the keyword index and the dense vectors.

``KnowledgeStore`` is the engine-neutral interface the service uses; ``SqliteKnowledgeStore`` is the
embedded default (one SQLite file; chunks and their vectors as float32 blobs, served from in-memory
indexes per workspace: BM25 from ``core.keyword_index`` and dense vectors from ``core.search``). Each
workspace's BM25 statistics are its own: one tenant's documents never move another's scores.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from triptych.core.db import Database
from triptych.core.keyword_files import KeywordFiles, KeywordFingerprint
from triptych.core.keyword_index import TERMS_VERSION, KeywordIndex
from triptych.core.partitions import WriteGate, gated
from triptych.core.search import Vector, VectorIndex
from triptych.core.vector_files import Fingerprint, VectorFiles
from triptych.metronix import knowledge_model
from triptych.metronix.dialect import SQLITE
from triptych.metronix.knowledge_model import (
    BODY_WEIGHT,
    CHUNK_HIT_COLUMNS,
    MAX_DUPLICATE_LABELS,
    TITLE_WEIGHT,
    Candidates,
    ChunkHit,
    DocumentRecord,
    NewDocument,
    body_hash,
    chunk_hit_from_row,
    keyword_columns,
    utcnow,
)
from triptych.metronix.knowledge_schema_sqlite import MIGRATIONS
from triptych.metronix.knowledge_sql import KnowledgeQueries, KnowledgeSql, Written, bm25_candidates

# Names other modules import from here (the records moved to ``knowledge_model``, the DDL to
# ``knowledge_schema_sqlite``).
__all__ = [
    "MAX_DUPLICATE_LABELS",
    "MIGRATIONS",
    "Candidates",
    "ChunkHit",
    "DocumentRecord",
    "KnowledgeStore",
    "NewDocument",
    "SqliteKnowledgeStore",
    "bm25_candidates",
    "body_hash",
    "keyword_columns",
    "utcnow",
    "vectors_dir",
]


def vectors_dir(db_path: Path) -> Path:
    """Where the embedded store saves its workspaces' vector and keyword indexes: beside its database, a
    cache of it (rebuilt from the database when missing or stale; backups leave it out)."""
    return db_path.with_name(db_path.stem + "-vectors")


# How a chunk's text becomes BM25 terms: the terms' version, the SQLite whose FTS5 stemmer made the
# stems, and the column weights. A saved keyword index made under any other is not used.
TOKENIZER = f"terms-{TERMS_VERSION};sqlite-{sqlite3.sqlite_version};weights-{TITLE_WEIGHT},{BODY_WEIGHT}"


class KnowledgeStore(Protocol):
    def embedding_model(self) -> tuple[str, int] | None: ...
    def set_embedding_model(self, name: str, dim: int) -> None: ...
    def count_chunks(self) -> int: ...
    def put_document(self, doc: NewDocument) -> int: ...
    def get_document(self, workspace_id: str, doc_label: str) -> DocumentRecord | None: ...
    def document_hash(self, workspace_id: str, doc_label: str) -> str | None: ...
    def delete_document(self, workspace_id: str, doc_label: str) -> bool: ...
    def count_documents(self, workspace_id: str) -> int: ...
    def last_sync(self, workspace_id: str) -> str | None: ...
    def set_last_sync(self, workspace_id: str, when: str) -> None: ...
    def labels_with_prefix(self, workspace_id: str, prefix: str) -> dict[str, str]: ...
    def generation(self, workspace_id: str) -> int: ...
    def keyword_search(
        self, workspace_id: str, query: str, limit: int, generation: int | None = None
    ) -> list[tuple[int, float]]: ...
    def vector_search(
        self, workspace_id: str, query: Vector, limit: int, generation: int | None = None
    ) -> list[tuple[int, float]]: ...
    def keyword_candidates(
        self, workspace_id: str, query: str, limit: int, generation: int
    ) -> Candidates: ...
    def dense_candidates(
        self, workspace_id: str, query: Vector, limit: int, generation: int, wait: bool = False
    ) -> Candidates: ...
    def chunk_hits(self, workspace_id: str, chunk_ids: Sequence[int]) -> dict[int, ChunkHit]: ...
    def labels_by_body(self, workspace_id: str, hashes: Sequence[str]) -> dict[str, list[str]]: ...
    def warm(self) -> None: ...
    def iter_chunks(self, batch: int = 256) -> Iterator[list[tuple[int, str | None, str]]]: ...
    def replace_embeddings(self, rows: Sequence[tuple[int, Vector]]) -> None: ...
    def stop(self) -> list[threading.Thread]: ...
    def close(self) -> None: ...


class SqliteKnowledgeStore(KnowledgeQueries):
    """The embedded engine: ``metronix.db``; the shared SQL (``knowledge_sql``) on its one connection."""

    sql = KnowledgeSql(SQLITE, prefix="")

    def __init__(self, path: Path, dim: int) -> None:
        # WAL checkpoints off the request path: a memory write that checkpointed took 80 ms, not 20.
        self.db = Database(path, MIGRATIONS, background_checkpoints=True)
        self.index = VectorIndex(dim, self._load_vectors, VectorFiles(vectors_dir(path)), self._fingerprint)
        self.keywords = KeywordIndex(
            self._load_keyword_documents,
            idf="smooth",
            files=KeywordFiles(vectors_dir(path)),
            describe=self._keyword_fingerprint,
        )
        self._gate = WriteGate()
        # The last extent read per workspace: a load reads it twice (vectors, keywords), and a count over
        # a workspace's chunks takes a millisecond per 10,000 (a write bumps the generation it is keyed by).
        self._extents: dict[str, tuple[int, int, int]] = {}
        self._hash_bodies()

    def _hash_bodies(self) -> None:
        """Fill ``body_hash`` for documents stored before it existed (once; then nothing is missing)."""
        rows = self.db.conn.execute("SELECT id, content FROM documents WHERE body_hash IS NULL").fetchall()
        if rows:
            with self.db.transaction() as conn:
                conn.executemany(
                    "UPDATE documents SET body_hash = ? WHERE id = ?", [(body_hash(c), i) for i, c in rows]
                )

    # -- the engine's part of the shared SQL ---------------------------------------

    def _one(self, query: str, params: Sequence[Any] = ()) -> Any:
        return self.db.conn.execute(query, params).fetchone()

    def _all(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        return self.db.conn.execute(query, params).fetchall()

    def _writing(self) -> AbstractContextManager[Any]:
        return self.db.transaction()

    def _vector_value(self, vec: Vector) -> Any:
        return vec.tobytes()

    def _after_commit(self, write: Written) -> None:
        workspace, before, removed = write.workspace_id, write.before, write.removed
        self.index.apply(workspace, before, before + 1, added=write.vectors, removed=removed)
        self.keywords.apply(workspace, before, before + 1, added=write.texts, removed=removed)

    # -- retrieval ------------------------------------------------------------

    def warm(self) -> None:
        """Load the workspaces' vector and keyword indexes while the memory budget has room (best effort:
        a search loads what is missing).

        Outside the caches' locks and vectors first (from the saved file, about a second at 100,000
        chunks): a search meanwhile answers with what is loaded instead of waiting, and says so."""
        try:
            for (workspace,) in self.db.conn.execute("SELECT id FROM workspaces").fetchall():
                if self.index.stopping.is_set():  # the store is closing: no more reads
                    return
                if not (self.index.room(workspace) and self.keywords.room(workspace)):
                    return  # the memory budget is full: a search loads the rest
                generation = self._generation(workspace)
                self.index.preload(workspace, generation)
                self.keywords.preload(workspace, generation)
        except (sqlite3.Error, ValueError):
            return

    def vector_search(
        self, workspace_id: str, query: Vector, limit: int, generation: int | None = None
    ) -> list[tuple[int, float]]:
        if generation is None:
            generation = self._generation(workspace_id)
        self._gate.settle(lambda: self.index.generation(workspace_id) < generation)
        return self.index.search(workspace_id, generation, query, limit)

    def dense_candidates(
        self, workspace_id: str, query: Vector, limit: int, generation: int, wait: bool = False
    ) -> Candidates:
        """Dense candidates: from the HNSW graph, or exactly while it builds (or below its threshold),
        or none ("loading") while a large workspace's vectors load in the background. ``wait``: load
        them in the search rather than answer with nothing (when the keyword side is loading too; the
        vectors load in seconds, the keyword index of the same workspace in a minute)."""
        self._gate.settle(lambda: self.index.generation(workspace_id) < generation)
        if wait:
            self.index.await_load(workspace_id)  # the start's warm-up may be reading them already
        elif not self.index.current(workspace_id, generation) and self._large(workspace_id):
            self.index.load_in_background(workspace_id, generation)
            return Candidates([], "loading")
        hits, method = self.index.search_with_method(workspace_id, generation, query, limit)
        return Candidates(hits, method)

    def _fingerprint(self, workspace_id: str) -> Fingerprint | None:
        """What a saved vector index of the workspace must match now (None: no model recorded yet)."""
        model = self.embedding_model()
        if model is None:
            return None
        return Fingerprint(model[0], model[1], *self._extent(workspace_id))

    def _keyword_fingerprint(self, workspace_id: str) -> KeywordFingerprint:
        """What a saved keyword index of the workspace must match now."""
        return KeywordFingerprint(TOKENIZER, *self._extent(workspace_id))

    def _extent(self, workspace_id: str) -> tuple[int, int, int]:
        """The workspace's generation, chunk count and highest chunk id, as the database has them now."""
        known = self._extents.get(workspace_id)
        if known is not None and known[0] == self._generation(workspace_id):
            return known
        # One statement: the three figures of one state of the workspace, whatever commits meanwhile.
        generation, count, max_id = self.db.conn.execute(
            "SELECT (SELECT generation FROM workspaces WHERE id = ?), count(*), coalesce(max(id), 0)"
            " FROM chunks WHERE workspace_id = ?",
            (workspace_id, workspace_id),
        ).fetchone()
        found = (int(generation or 0), int(count), int(max_id))
        self._extents[workspace_id] = found
        return found

    def _large(self, workspace_id: str) -> bool:
        """``KnowledgeQueries._large`` from the workspace's extent when one was read at its generation now
        (a workspace the memory budget forgot was loaded before): a search that reloads it then counts
        none of its chunks (half a millisecond per side at 10,000)."""
        known = self._extents.get(workspace_id)
        if known is None or known[0] != self._generation(workspace_id):
            return super()._large(workspace_id)
        return known[1] >= knowledge_model.BACKGROUND_LOAD_CHUNKS

    def _load_vectors(self, workspace_id: str) -> tuple[list[int], Vector]:
        rows = self.db.conn.execute(
            "SELECT id, embedding FROM chunks WHERE workspace_id = ? ORDER BY id", (workspace_id,)
        ).fetchall()
        ids = [int(r[0]) for r in rows]
        if not rows:
            return ids, np.zeros((0, self.index.dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
        return ids, matrix

    def chunk_hits(self, workspace_id: str, chunk_ids: Sequence[int]) -> dict[int, ChunkHit]:
        if not chunk_ids:
            return {}
        marks = ",".join("?" * len(chunk_ids))
        rows = self.db.conn.execute(
            f"SELECT {CHUNK_HIT_COLUMNS} FROM chunks c"
            f" JOIN documents d ON d.id = c.document_id WHERE c.workspace_id = ? AND c.id IN ({marks})",
            (workspace_id, *chunk_ids),
        ).fetchall()
        return {int(r["id"]): chunk_hit_from_row(r) for r in rows}

    def labels_by_body(self, workspace_id: str, hashes: Sequence[str]) -> dict[str, list[str]]:
        """body hash -> the labels of the workspace's documents with that text, in label order."""
        if not hashes:
            return {}
        marks = ",".join("?" * len(hashes))
        # Sorted here, not by ORDER BY: with it, SQLite walked the (workspace, label) index over the whole
        # workspace to skip a sort (754 ms p50 at 54,000 documents) instead of probing documents_by_body.
        rows = self.db.conn.execute(
            f"SELECT body_hash, doc_label FROM documents WHERE workspace_id = ? AND body_hash IN ({marks})",
            (workspace_id, *hashes),
        ).fetchall()
        found: dict[str, list[str]] = {}
        for digest, label in sorted(rows, key=lambda r: r[1]):
            found.setdefault(digest, []).append(label)
        return found

    # -- re-embedding ------------------------------------------------------------

    @gated
    def replace_embeddings(self, rows: Sequence[tuple[int, Vector]]) -> None:
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE chunks SET embedding = ? WHERE id = ?",
                [(np.ascontiguousarray(v, dtype=np.float32).tobytes(), i) for i, v in rows],
            )
            conn.execute("UPDATE workspaces SET generation = generation + 1")

    def stop(self) -> list[threading.Thread]:
        """End the background loads and graph builds (bounded); the threads still at work are returned
        (normally none). ``close`` calls it; an owner closing several stores calls it on each first."""
        return self.index.stop() + self.keywords.stop()

    def close(self) -> None:
        # The background loads and graph builds read the database: they end first (bounded), and one
        # still inside a query keeps its connection (decision 0390).
        busy = self.stop()
        self.index.save_all()  # the next start loads the graphs instead of building them
        self.keywords.save_all()  # and the keyword postings
        self.db.close(spare=busy)
        self.index.clear()  # out of the process's memory budget now, not when collected
        self.keywords.clear()
