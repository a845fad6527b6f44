"""The knowledge base's SQL both engines run, written once: ``KnowledgeSql`` (the statements, spelled for
one engine by its ``Dialect`` and table names) and ``KnowledgeQueries`` (the reads and the document
writes built on them). ``SqliteKnowledgeStore`` (``store.py``) and ``PostgresKnowledgeStore``
(``pg_store.py``) each subclass ``KnowledgeQueries`` and add only what is their engine's: how a statement
reaches the database, the vector column (a float32 blob; pgvector), how a workspace's writers are
ordered and followed (SQLite's single writer; PostgreSQL's row lock and keyword change log), and the
searches. Each engine's DDL is its own module (``knowledge_schema_sqlite``, ``knowledge_schema_pg``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import numpy as np

from triptych.core.keyword_index import Document, KeywordIndex
from triptych.core.partitions import WriteGate, gated
from triptych.core.search import Vector, VectorIndex
from triptych.metronix import knowledge_model
from triptych.metronix.dialect import Dialect
from triptych.metronix.knowledge_model import (
    DOCUMENT_COLUMNS,
    Candidates,
    DocumentRecord,
    NewDocument,
    document_from_row,
    document_values,
    keyword_columns,
    utcnow,
)


class KnowledgeSql:
    """Every statement the two engines share, spelled for one: its placeholder and its table names
    (SQLite's ``documents``, PostgreSQL's ``kb_documents``: the embedded file predates the shared
    database)."""

    def __init__(self, d: Dialect, prefix: str) -> None:
        p, meta, workspaces = d.p, prefix + "meta", prefix + "workspaces"
        documents, chunks = prefix + "documents", prefix + "chunks"
        self.embedding_model = (
            f"SELECT key, value FROM {meta} WHERE key IN ('embedding_model', 'embedding_dim')"
        )
        self.set_meta = (
            f"INSERT INTO {meta} VALUES ({p}, {p}) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        self.count_chunks = f"SELECT count(*) FROM {chunks}"
        self.generation = f"SELECT generation FROM {workspaces} WHERE id = {p}"
        # Inside a write: the row held until commit where writers of one workspace can run at once.
        self.lock_generation = self.generation + d.lock_rows
        self.set_generation = f"UPDATE {workspaces} SET generation = {p} WHERE id = {p}"
        self.add_workspace = (
            f"INSERT INTO {workspaces} (id, created_at) VALUES ({p}, {p}) ON CONFLICT (id) DO NOTHING"
        )
        self.last_sync = f"SELECT last_sync FROM {workspaces} WHERE id = {p}"
        self.set_last_sync = (
            f"INSERT INTO {workspaces} (id, created_at, last_sync) VALUES ({p}, {p}, {p})"
            " ON CONFLICT (id) DO UPDATE SET last_sync = excluded.last_sync"
        )
        by_label = f"workspace_id = {p} AND doc_label = {p}"
        self.find_document = f"SELECT id, created_at FROM {documents} WHERE {by_label}"
        self.get_document = (
            f"SELECT d.*, (SELECT count(*) FROM {chunks} c WHERE c.document_id = d.id) AS chunk_count"
            f" FROM {documents} d WHERE {by_label}"
        )
        self.document_hash = f"SELECT content_hash FROM {documents} WHERE {by_label}"
        self.count_documents = f"SELECT count(*) FROM {documents} WHERE workspace_id = {p}"
        # LIKE would be case-insensitive and treat _ and % as wildcards: compare the prefix exactly.
        self.labels_with_prefix = (
            f"SELECT doc_label, content_hash FROM {documents}"
            f" WHERE workspace_id = {p} AND substr(doc_label, 1, {p}) = {p}"
        )
        self.insert_document = (
            f"INSERT INTO {documents} ({DOCUMENT_COLUMNS}) VALUES ({d.marks(12)}) RETURNING id"
        )
        self.insert_chunk = (
            f"INSERT INTO {chunks} (document_id, workspace_id, ordinal, text, embedding) VALUES ({d.marks(5)})"
            " RETURNING id"
        )
        self.delete_chunks = f"DELETE FROM {chunks} WHERE document_id = {p} RETURNING id"
        self.delete_document = f"DELETE FROM {documents} WHERE id = {p}"
        chunk_texts = (
            f"SELECT c.id, d.title, c.text FROM {chunks} c JOIN {documents} d ON d.id = c.document_id"
        )
        self.keyword_documents = f"{chunk_texts} WHERE c.workspace_id = {p} ORDER BY c.id"
        self.chunks_after = f"{chunk_texts} WHERE c.id > {p} ORDER BY c.id LIMIT {p}"
        self.chunks_at_least = (
            f"SELECT count(*) FROM (SELECT 1 FROM {chunks} WHERE workspace_id = {p} LIMIT {p}) AS c"
        )


class Written(NamedTuple):
    """A committed document write, for the caches of the process that made it."""

    workspace_id: str
    before: int  # the workspace's generation before it (after: one more)
    texts: list[Document]  # the chunks added, as the keyword index takes them
    vectors: list[tuple[int, Vector]]  # the chunks added, as the vector index takes them
    removed: list[int]  # the chunk ids removed


class KnowledgeQueries:
    """What both engines' knowledge stores do alike, over their ``sql``. An engine supplies ``_one``
    and ``_all`` (one statement outside a transaction, rows read by position and name), ``_writing``
    (a write transaction whose connection ``execute``s and ``fetch``es), ``_vector_value``, ``_after_commit``
    and, when it follows writes otherwise than by the generation alone, ``_log_write``."""

    sql: KnowledgeSql
    index: VectorIndex
    keywords: KeywordIndex
    _gate: WriteGate

    def _one(self, query: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def _all(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _writing(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _vector_value(self, vec: Vector) -> Any:
        raise NotImplementedError

    def _after_commit(self, write: Written) -> None:
        raise NotImplementedError

    def _catch_up(self, workspace_id: str, generation: int) -> None:
        """Bring the keyword index up to ``generation`` from writes other processes made, if the engine
        has any (SQLite's one writer process has none: its writes reach its caches at commit)."""

    def _scalar(self, query: str, params: Sequence[Any] = ()) -> int:
        row = self._one(query, params)
        return int(row[0]) if row is not None and row[0] is not None else 0

    # -- embedding model -------------------------------------------------------

    def embedding_model(self) -> tuple[str, int] | None:
        rows = {str(r[0]): str(r[1]) for r in self._all(self.sql.embedding_model)}
        if "embedding_model" not in rows:
            return None
        return rows["embedding_model"], int(rows["embedding_dim"])

    def set_embedding_model(self, name: str, dim: int) -> None:
        with self._writing() as conn:
            conn.execute(self.sql.set_meta, ("embedding_model", name))
            conn.execute(self.sql.set_meta, ("embedding_dim", str(dim)))

    def count_chunks(self) -> int:
        return self._scalar(self.sql.count_chunks)

    # -- documents -----------------------------------------------------------

    def generation(self, workspace_id: str) -> int:
        """The workspace's write count: what a search's caches must have caught up with."""
        return self._generation(workspace_id)

    def _generation(self, workspace_id: str) -> int:
        return self._scalar(self.sql.generation, (workspace_id,))

    def _lock_workspace(self, conn: Any, workspace_id: str) -> int:
        """Inside a write: create the workspace if needed and hold its row until commit (writes to one
        workspace go one at a time across workers, so each one's generation step is exactly +1); its
        generation before the write."""
        conn.execute(self.sql.add_workspace, (workspace_id, utcnow()))
        return int(conn.execute(self.sql.lock_generation, (workspace_id,)).fetchone()[0])

    def _log_write(
        self, conn: Any, workspace_id: str, generation: int, added: list[int], removed: list[int]
    ) -> None:
        """Inside a write holding the workspace's row: its new generation."""
        conn.execute(self.sql.set_generation, (generation, workspace_id))

    @gated
    def put_document(self, doc: NewDocument) -> int:
        """Insert or replace a document and all its chunks in one transaction; returns the chunk count."""
        expected = (len(doc.chunks), self.index.dim)
        if doc.embeddings.ndim != 2 or doc.embeddings.shape != expected:
            raise ValueError(f"embeddings have shape {doc.embeddings.shape}, expected {expected}")
        now, sql = utcnow(), self.sql
        with self._writing() as conn:
            before = self._lock_workspace(conn, doc.workspace_id)
            old = conn.execute(sql.find_document, (doc.workspace_id, doc.doc_label)).fetchone()
            removed: list[int] = []
            if old is not None:
                removed = [int(r[0]) for r in conn.execute(sql.delete_chunks, (old[0],)).fetchall()]
                conn.execute(sql.delete_document, (old[0],))
            values = document_values(doc, old[1] if old is not None else now, now)
            document_id = conn.execute(sql.insert_document, values).fetchone()[0]
            added: list[tuple[int, Vector]] = []
            texts: list[Document] = []
            for ordinal, (text, vector) in enumerate(zip(doc.chunks, doc.embeddings, strict=True)):
                vec = np.ascontiguousarray(vector, dtype=np.float32)
                chunk = (document_id, doc.workspace_id, ordinal, text, self._vector_value(vec))
                chunk_id = int(conn.execute(sql.insert_chunk, chunk).fetchone()[0])
                added.append((chunk_id, vec))
                texts.append((chunk_id, keyword_columns(doc.title, text)))
            self._log_write(conn, doc.workspace_id, before + 1, [i for i, _ in added], removed)
        self._after_commit(Written(doc.workspace_id, before, texts, added, removed))
        return len(added)

    @gated
    def delete_document(self, workspace_id: str, doc_label: str) -> bool:
        sql = self.sql
        with self._writing() as conn:
            if conn.execute(sql.find_document, (workspace_id, doc_label)).fetchone() is None:
                return False
            before = self._lock_workspace(conn, workspace_id)
            row = conn.execute(sql.find_document, (workspace_id, doc_label)).fetchone()
            if row is None:  # another worker deleted it while this one waited for the lock
                return False
            # The chunks first: deleting the document would cascade to them and leave no ids to log.
            removed = [int(r[0]) for r in conn.execute(sql.delete_chunks, (row[0],)).fetchall()]
            conn.execute(sql.delete_document, (row[0],))
            self._log_write(conn, workspace_id, before + 1, [], removed)
        self._after_commit(Written(workspace_id, before, [], [], removed))
        return True

    def get_document(self, workspace_id: str, doc_label: str) -> DocumentRecord | None:
        row = self._one(self.sql.get_document, (workspace_id, doc_label))
        return None if row is None else document_from_row(row)

    def document_hash(self, workspace_id: str, doc_label: str) -> str | None:
        row = self._one(self.sql.document_hash, (workspace_id, doc_label))
        return None if row is None else str(row[0])

    def count_documents(self, workspace_id: str) -> int:
        return self._scalar(self.sql.count_documents, (workspace_id,))

    def last_sync(self, workspace_id: str) -> str | None:
        row = self._one(self.sql.last_sync, (workspace_id,))
        return None if row is None or row[0] is None else str(row[0])

    def set_last_sync(self, workspace_id: str, when: str) -> None:
        with self._writing() as conn:
            conn.execute(self.sql.set_last_sync, (workspace_id, when, when))

    def labels_with_prefix(self, workspace_id: str, prefix: str) -> dict[str, str]:
        """label -> content hash of the workspace's documents whose label starts with ``prefix``."""
        rows = self._all(self.sql.labels_with_prefix, (workspace_id, len(prefix), prefix))
        return {str(r[0]): str(r[1]) for r in rows}

    # -- keyword search, keyword documents and re-embedding --------------------------------

    def keyword_search(
        self, workspace_id: str, query: str, limit: int, generation: int | None = None
    ) -> list[tuple[int, float]]:
        """BM25 over the workspace's chunks (title and body), with the workspace's own statistics."""
        if generation is None:
            generation = self._generation(workspace_id)
        self._gate.settle(lambda: self.keywords.generation(workspace_id) < generation)
        self._catch_up(workspace_id, generation)
        return self.keywords.search(workspace_id, generation, query, limit)

    def keyword_candidates(self, workspace_id: str, query: str, limit: int, generation: int) -> Candidates:
        self._gate.settle(lambda: self.keywords.generation(workspace_id) < generation)
        self._catch_up(workspace_id, generation)
        return bm25_candidates(self.keywords, workspace_id, query, limit, generation, self._large)

    def _load_keyword_documents(self, workspace_id: str) -> list[Document]:
        rows = self._all(self.sql.keyword_documents, (workspace_id,))
        return [(int(r[0]), keyword_columns(r[1], str(r[2]))) for r in rows]

    def _large(self, workspace_id: str) -> bool:
        """Whether loading the workspace's indexes is too slow for a search to wait for (from the
        chunks-by-workspace index: a few milliseconds at 100,000 chunks, asked only when not loaded)."""
        at_least = knowledge_model.BACKGROUND_LOAD_CHUNKS  # read at each call: tests lower it
        return self._scalar(self.sql.chunks_at_least, (workspace_id, at_least)) >= at_least

    def iter_chunks(self, batch: int = 256) -> Iterator[list[tuple[int, str | None, str]]]:
        last = 0
        while True:
            rows = self._all(self.sql.chunks_after, (last, batch))
            if not rows:
                return
            last = int(rows[-1][0])
            yield [(int(r[0]), r[1], str(r[2])) for r in rows]


def bm25_candidates(
    keywords: KeywordIndex,
    workspace_id: str,
    query: str,
    limit: int,
    generation: int,
    large: Callable[[str], bool],
) -> Candidates:
    """BM25 candidates, or none ("loading") while a large workspace's keyword index loads in the
    background: building it from 100,000 chunks took 61 s, which no search should wait for."""
    if not keywords.current(workspace_id, generation) and large(workspace_id):
        keywords.load_in_background(workspace_id, generation)
        return Candidates([], "loading")
    return Candidates(keywords.search(workspace_id, generation, query, limit), "bm25")
