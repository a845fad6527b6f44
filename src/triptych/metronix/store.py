"""Knowledge-base persistence: documents, chunks, the keyword index and the dense vectors.

``KnowledgeStore`` is the engine-neutral interface the service uses; ``SqliteKnowledgeStore`` is the
embedded default (one SQLite file; chunks and their vectors as float32 blobs, served from in-memory
indexes per workspace: BM25 from ``core.keyword_index`` and dense vectors from ``core.search``). Each
workspace's BM25 statistics are its own: one tenant's documents never move another's scores.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from triptych.core.db import Database
from triptych.core.keyword_index import Document, KeywordIndex
from triptych.core.partitions import WriteGate, gated
from triptych.core.search import Vector, VectorIndex
from triptych.core.vector_files import Fingerprint, VectorFiles

# A workspace with this many chunks loads its indexes in the background after a start, and its searches
# answer without them meanwhile (saying so); a smaller one loads in the search, in well under a second.
BACKGROUND_LOAD_CHUNKS = 20_000

# BM25 column weights: the title counts twice as much as the body (as bm25(chunks_fts, 0, 2, 1) did).
TITLE_WEIGHT = 2.0
BODY_WEIGHT = 1.0

MIGRATIONS = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        generation INTEGER NOT NULL DEFAULT 0,
        last_sync TEXT
    );
    CREATE TABLE documents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        doc_label TEXT NOT NULL,
        title TEXT,
        content TEXT NOT NULL,
        source_type TEXT NOT NULL,
        url TEXT,
        date TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        content_hash TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (workspace_id, doc_label)
    );
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        workspace_id TEXT NOT NULL,
        ordinal INTEGER NOT NULL,
        text TEXT NOT NULL,
        embedding BLOB NOT NULL
    );
    CREATE INDEX chunks_by_workspace ON chunks (workspace_id, id);
    CREATE INDEX chunks_by_document ON chunks (document_id);
    -- part: the workspace as one token, so a MATCH stays inside its workspace.
    CREATE VIRTUAL TABLE chunks_fts USING fts5(part, title, body, tokenize = 'porter unicode61');
    """,
    # Document frequencies per term, to leave the commonest query terms out of the OR-query.
    """
    CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row');
    """,
    # Issue 21: a hash of the text alone (the content hash also covers the title and metadata), so
    # identical documents under different labels collapse into one search result; rows written before
    # are hashed when the store opens (``_hash_bodies``). BM25 moved to an in-process index with each
    # workspace's own statistics (the FTS5 table's were shared by all workspaces): the table goes.
    """
    ALTER TABLE documents ADD COLUMN body_hash TEXT;
    CREATE INDEX documents_by_body ON documents (workspace_id, body_hash);
    DROP TABLE chunks_vocab;
    DROP TABLE chunks_fts;
    """,
]


def body_hash(content: str) -> str:
    """What makes two documents identical for search: their text, whatever their label or title."""
    return hashlib.sha256(content.encode()).hexdigest()


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    workspace_id: str
    doc_label: str
    title: str | None
    content: str
    source_type: str
    url: str | None
    date: str | None
    metadata: dict[str, Any]
    content_hash: str
    created_at: str
    updated_at: str
    chunk_count: int = 0


@dataclass(frozen=True, slots=True)
class NewDocument:
    workspace_id: str
    doc_label: str
    title: str | None
    content: str
    source_type: str
    url: str | None
    date: str | None
    metadata: dict[str, Any]
    content_hash: str
    chunks: list[str] = field(default_factory=list)
    embeddings: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))


# Labels of identical documents listed with a search result (the count is what matters past that).
MAX_DUPLICATE_LABELS = 20


@dataclass(frozen=True, slots=True)
class ChunkHit:
    chunk_id: int
    doc_label: str
    title: str | None
    text: str
    source_type: str
    url: str | None
    date: str | None
    body_hash: str
    # The labels of the workspace's documents with this text, in label order, when the store read them
    # with the hit (PostgreSQL: one round trip fewer); None: ask ``labels_by_body``.
    same_text: tuple[str, ...] | None = None


# A document row as both engines write it (``document_values``) and read it back (``document_from_row``).
DOCUMENT_COLUMNS = (
    "workspace_id, doc_label, title, content, source_type, url, date, metadata, content_hash, body_hash,"
    " created_at, updated_at"
)
DOCUMENT_FIELDS = (
    "workspace_id", "doc_label", "title", "content", "source_type", "url", "date", "content_hash", "created_at",
    "updated_at",
)  # fmt: skip
# The columns ``chunk_hit_from_row`` reads, with chunks as ``c`` and documents as ``d``.
CHUNK_HIT_COLUMNS = "c.id, c.text, d.doc_label, d.title, d.source_type, d.url, d.date, d.body_hash"


def document_values(doc: NewDocument, created: str, now: str) -> tuple[Any, ...]:
    """``DOCUMENT_COLUMNS`` of ``doc``, first stored at ``created`` and written at ``now``."""
    return (doc.workspace_id, doc.doc_label, doc.title, doc.content, doc.source_type, doc.url, doc.date,
            json.dumps(doc.metadata), doc.content_hash, body_hash(doc.content), created, now)  # fmt: skip


def document_from_row(row: Any) -> DocumentRecord:
    """A ``DocumentRecord`` of a row read by column name (with its ``chunk_count``), on either engine."""
    return DocumentRecord(
        **{name: row[name] for name in DOCUMENT_FIELDS},
        metadata=json.loads(row["metadata"]),
        chunk_count=int(row["chunk_count"]),
    )


def chunk_hit_from_row(row: Any, same_text: Sequence[str] | None = None) -> ChunkHit:
    """A ``ChunkHit`` of a row of ``CHUNK_HIT_COLUMNS``, read by name, on either engine."""
    return ChunkHit(
        chunk_id=int(row["id"]),
        doc_label=row["doc_label"],
        title=row["title"],
        text=row["text"],
        source_type=row["source_type"],
        url=row["url"],
        date=row["date"],
        body_hash=row["body_hash"],
        same_text=None if same_text is None else tuple(same_text),
    )


def vectors_dir(db_path: Path) -> Path:
    """Where the embedded store saves its workspaces' vector indexes: beside its database, a cache of it
    (rebuilt from the database when missing or stale; backups leave it out)."""
    return db_path.with_name(db_path.stem + "-vectors")


@dataclass(frozen=True, slots=True)
class Candidates:
    """One retriever's candidates (chunk id, score; best first) and how it answered: what a search
    reports in ``retrieval`` (docs/decisions/0131-search-says-how-it-answered.md)."""

    hits: list[tuple[int, float]]
    method: str


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
    def close(self) -> None: ...


class SqliteKnowledgeStore:
    def __init__(self, path: Path, dim: int) -> None:
        # WAL checkpoints off the request path: a memory write that checkpointed took 80 ms, not 20.
        self.db = Database(path, MIGRATIONS, background_checkpoints=True)
        self.index = VectorIndex(dim, self._load_vectors, VectorFiles(vectors_dir(path)), self._fingerprint)
        self.keywords = KeywordIndex(self._load_keyword_documents, idf="smooth")
        self._gate = WriteGate()
        self._hash_bodies()

    def _hash_bodies(self) -> None:
        """Fill ``body_hash`` for documents stored before it existed (once; then nothing is missing)."""
        rows = self.db.conn.execute("SELECT id, content FROM documents WHERE body_hash IS NULL").fetchall()
        if rows:
            with self.db.transaction() as conn:
                conn.executemany(
                    "UPDATE documents SET body_hash = ? WHERE id = ?", [(body_hash(c), i) for i, c in rows]
                )

    # -- embedding model ---------------------------------------------------

    def embedding_model(self) -> tuple[str, int] | None:
        rows = dict(
            self.db.conn.execute("SELECT key, value FROM meta WHERE key LIKE 'embedding_%'").fetchall()
        )
        if "embedding_model" not in rows:
            return None
        return rows["embedding_model"], int(rows["embedding_dim"])

    def set_embedding_model(self, name: str, dim: int) -> None:
        with self.db.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('embedding_model', ?)", (name,))
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('embedding_dim', ?)", (str(dim),))

    def count_chunks(self) -> int:
        return int(self.db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])

    # -- documents -----------------------------------------------------------

    def generation(self, workspace_id: str) -> int:
        """The workspace's write count: what a search's caches must have caught up with."""
        return self._generation(workspace_id)

    def _generation(self, workspace_id: str) -> int:
        row = self.db.conn.execute(
            "SELECT generation FROM workspaces WHERE id = ?", (workspace_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    @gated
    def put_document(self, doc: NewDocument) -> int:
        """Insert or replace a document and all its chunks in one transaction; returns the chunk count."""
        expected = (len(doc.chunks), self.index.dim)
        if doc.embeddings.ndim != 2 or doc.embeddings.shape != expected:
            raise ValueError(f"embeddings have shape {doc.embeddings.shape}, expected {expected}")
        now = utcnow()
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO workspaces (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING",
                (doc.workspace_id, now),
            )
            before = int(
                conn.execute(
                    "SELECT generation FROM workspaces WHERE id = ?", (doc.workspace_id,)
                ).fetchone()[0]
            )
            old = conn.execute(
                "SELECT id, created_at FROM documents WHERE workspace_id = ? AND doc_label = ?",
                (doc.workspace_id, doc.doc_label),
            ).fetchone()
            removed: list[int] = []
            if old is not None:
                removed = [
                    r[0] for r in conn.execute("SELECT id FROM chunks WHERE document_id = ?", (old[0],))
                ]
                conn.execute("DELETE FROM chunks WHERE document_id = ?", (old[0],))
                conn.execute("DELETE FROM documents WHERE id = ?", (old[0],))
            created = old[1] if old is not None else now
            cursor = conn.execute(
                f"INSERT INTO documents ({DOCUMENT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                document_values(doc, created, now),
            )
            document_id = cursor.lastrowid
            added: list[tuple[int, Vector]] = []
            texts: list[Document] = []
            for ordinal, (text, vector) in enumerate(zip(doc.chunks, doc.embeddings, strict=True)):
                vec = np.ascontiguousarray(vector, dtype=np.float32)
                chunk_id = conn.execute(
                    "INSERT INTO chunks (document_id, workspace_id, ordinal, text, embedding)"
                    " VALUES (?,?,?,?,?)",
                    (document_id, doc.workspace_id, ordinal, text, vec.tobytes()),
                ).lastrowid
                assert chunk_id is not None
                added.append((chunk_id, vec))
                texts.append((chunk_id, keyword_columns(doc.title, text)))
            conn.execute(
                "UPDATE workspaces SET generation = generation + 1 WHERE id = ?", (doc.workspace_id,)
            )
        self.index.apply(doc.workspace_id, before, before + 1, added=added, removed=removed)
        self.keywords.apply(doc.workspace_id, before, before + 1, added=texts, removed=removed)
        return len(added)

    @gated
    def delete_document(self, workspace_id: str, doc_label: str) -> bool:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT id FROM documents WHERE workspace_id = ? AND doc_label = ?", (workspace_id, doc_label)
            ).fetchone()
            if row is None:
                return False
            before = self._generation(workspace_id)
            removed = [r[0] for r in conn.execute("SELECT id FROM chunks WHERE document_id = ?", (row[0],))]
            conn.execute("DELETE FROM chunks WHERE document_id = ?", (row[0],))
            conn.execute("DELETE FROM documents WHERE id = ?", (row[0],))
            conn.execute("UPDATE workspaces SET generation = generation + 1 WHERE id = ?", (workspace_id,))
        self.index.apply(workspace_id, before, before + 1, removed=removed)
        self.keywords.apply(workspace_id, before, before + 1, removed=removed)
        return True

    def get_document(self, workspace_id: str, doc_label: str) -> DocumentRecord | None:
        row = self.db.conn.execute(
            "SELECT d.*, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunk_count"
            " FROM documents d WHERE workspace_id = ? AND doc_label = ?",
            (workspace_id, doc_label),
        ).fetchone()
        return None if row is None else document_from_row(row)

    def document_hash(self, workspace_id: str, doc_label: str) -> str | None:
        row = self.db.conn.execute(
            "SELECT content_hash FROM documents WHERE workspace_id = ? AND doc_label = ?",
            (workspace_id, doc_label),
        ).fetchone()
        return None if row is None else str(row[0])

    def count_documents(self, workspace_id: str) -> int:
        row = self.db.conn.execute("SELECT count(*) FROM documents WHERE workspace_id = ?", (workspace_id,))
        return int(row.fetchone()[0])

    def last_sync(self, workspace_id: str) -> str | None:
        row = self.db.conn.execute(
            "SELECT last_sync FROM workspaces WHERE id = ?", (workspace_id,)
        ).fetchone()
        return None if row is None else row[0]

    def set_last_sync(self, workspace_id: str, when: str) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO workspaces (id, created_at, last_sync) VALUES (?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET last_sync = excluded.last_sync",
                (workspace_id, when, when),
            )

    def labels_with_prefix(self, workspace_id: str, prefix: str) -> dict[str, str]:
        """label -> content hash of the workspace's documents whose label starts with ``prefix``."""
        # LIKE would be case-insensitive and treat _ and % as wildcards: compare the prefix exactly.
        rows = self.db.conn.execute(
            "SELECT doc_label, content_hash FROM documents WHERE workspace_id = ? AND substr(doc_label, 1, ?) = ?",
            (workspace_id, len(prefix), prefix),
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    # -- retrieval ------------------------------------------------------------

    def keyword_search(
        self, workspace_id: str, query: str, limit: int, generation: int | None = None
    ) -> list[tuple[int, float]]:
        """BM25 over the workspace's chunks (title and body), with the workspace's own statistics."""
        if generation is None:
            generation = self._generation(workspace_id)
        self._gate.settle(lambda: self.keywords.generation(workspace_id) < generation)
        return self.keywords.search(workspace_id, generation, query, limit)

    def _load_keyword_documents(self, workspace_id: str) -> list[Document]:
        rows = self.db.conn.execute(
            "SELECT c.id, d.title, c.text FROM chunks c JOIN documents d ON d.id = c.document_id"
            " WHERE c.workspace_id = ? ORDER BY c.id",
            (workspace_id,),
        ).fetchall()
        return [(int(r[0]), keyword_columns(r[1], r[2])) for r in rows]

    def warm(self) -> None:
        """Load every workspace's vector and keyword indexes (best effort: a search loads what is missing).

        Outside the caches' locks and vectors first (from the saved file, about a second at 100,000
        chunks): a search meanwhile answers with what is loaded instead of waiting, and says so."""
        try:
            for (workspace,) in self.db.conn.execute("SELECT id FROM workspaces").fetchall():
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

    def keyword_candidates(self, workspace_id: str, query: str, limit: int, generation: int) -> Candidates:
        self._gate.settle(lambda: self.keywords.generation(workspace_id) < generation)
        return bm25_candidates(self.keywords, workspace_id, query, limit, generation, self._large)

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

    def _large(self, workspace_id: str) -> bool:
        """Whether loading the workspace's indexes is too slow for a search to wait for (from the
        ``chunks_by_workspace`` index: a few milliseconds at 100,000 chunks, asked only when not loaded)."""
        row = self.db.conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM chunks WHERE workspace_id = ? LIMIT ?)",
            (workspace_id, BACKGROUND_LOAD_CHUNKS),
        ).fetchone()
        return int(row[0]) >= BACKGROUND_LOAD_CHUNKS

    def _fingerprint(self, workspace_id: str) -> Fingerprint | None:
        """What a saved vector index of the workspace must match now (None: no model recorded yet)."""
        model = self.embedding_model()
        if model is None:
            return None
        count, max_id = self.db.conn.execute(
            "SELECT count(*), coalesce(max(id), 0) FROM chunks WHERE workspace_id = ?", (workspace_id,)
        ).fetchone()
        return Fingerprint(model[0], model[1], self._generation(workspace_id), int(count), int(max_id))

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

    def iter_chunks(self, batch: int = 256) -> Iterator[list[tuple[int, str | None, str]]]:
        last = 0
        while True:
            rows = self.db.conn.execute(
                "SELECT c.id, d.title, c.text FROM chunks c JOIN documents d ON d.id = c.document_id"
                " WHERE c.id > ? ORDER BY c.id LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            yield [(int(r[0]), r[1], r[2]) for r in rows]

    @gated
    def replace_embeddings(self, rows: Sequence[tuple[int, Vector]]) -> None:
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE chunks SET embedding = ? WHERE id = ?",
                [(np.ascontiguousarray(v, dtype=np.float32).tobytes(), i) for i, v in rows],
            )
            conn.execute("UPDATE workspaces SET generation = generation + 1")

    def close(self) -> None:
        self.index.save_all()  # the next start loads the graphs instead of building them
        self.db.close()
        self.index.clear()  # out of the process's memory budget now, not when collected
        self.keywords.clear()


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


def keyword_columns(title: str | None, text: str) -> list[tuple[str, float]]:
    return [(title or "", TITLE_WEIGHT), (text, BODY_WEIGHT)]
