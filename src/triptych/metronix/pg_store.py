"""Knowledge-base persistence on PostgreSQL (server mode): ``KnowledgeStore`` for several workers.

Documents and chunks live in tables; each chunk's vector in a pgvector column searched through an HNSW
index (inner product on L2-normalised vectors, the embedded engine's cosine). Keyword ranking keeps the
embedded engine's in-process BM25 (``core.keyword_index``) so both engines rank alike: the workspace's
generation, bumped in every write's transaction, is read from the database on each search, so a write
through any worker reaches every other worker's copy on its next call (docs/decisions.md). Each write
also logs the chunk ids it added and removed under its generation (``kb_keyword_changes``, same
transaction), so another worker's copy applies just those instead of reloading the workspace.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from psycopg import Connection, sql
from psycopg.rows import TupleRow, dict_row

from triptych.core.keyword_index import Changes, Document, KeywordIndex
from triptych.core.partitions import WriteGate, gated
from triptych.core.pg import PgDatabase, one
from triptych.core.search import Vector
from triptych.metronix.store import (
    CHUNK_HIT_COLUMNS,
    DOCUMENT_COLUMNS,
    ChunkHit,
    DocumentRecord,
    NewDocument,
    chunk_hit_from_row,
    document_from_row,
    document_values,
    keyword_columns,
    utcnow,
)

COMPONENT = "metronix_kb"
MIGRATIONS = [
    # Timestamps and metadata stay text, as in the embedded engine: answers are the same byte for byte
    # (jsonb would reorder a document's metadata keys). ``embedding`` has no fixed dimension so a model
    # change can re-embed in place; the HNSW index is per dimension (``_ensure_vector_index``).
    """
    CREATE TABLE kb_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE kb_workspaces (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        generation BIGINT NOT NULL DEFAULT 0,
        last_sync TEXT
    );
    CREATE TABLE kb_documents (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES kb_workspaces(id),
        doc_label TEXT NOT NULL,
        title TEXT,
        content TEXT NOT NULL,
        source_type TEXT NOT NULL,
        url TEXT,
        date TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        content_hash TEXT NOT NULL,
        body_hash TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (workspace_id, doc_label)
    );
    CREATE INDEX kb_documents_by_body ON kb_documents (workspace_id, body_hash);
    CREATE TABLE kb_chunks (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        document_id BIGINT NOT NULL REFERENCES kb_documents(id) ON DELETE CASCADE,
        workspace_id TEXT NOT NULL,
        ordinal INTEGER NOT NULL,
        text TEXT NOT NULL,
        embedding vector NOT NULL
    );
    CREATE INDEX kb_chunks_by_workspace ON kb_chunks (workspace_id, id);
    CREATE INDEX kb_chunks_by_document ON kb_chunks (document_id);
    """,
    # One row per write of a workspace (its generation after the write): the chunk ids it added and
    # removed, for the other workers' keyword indexes. Workspaces written before this log existed have
    # no rows: a worker behind them finds a gap and reloads, as before.
    """
    CREATE TABLE kb_keyword_changes (
        workspace_id TEXT NOT NULL,
        generation BIGINT NOT NULL,
        added BIGINT[] NOT NULL,
        removed BIGINT[] NOT NULL,
        PRIMARY KEY (workspace_id, generation)
    );
    """,
]
# Writes of one workspace the log keeps: a worker further behind reloads the workspace.
KEYWORD_LOG_KEEP = 1000

Conn = Connection[TupleRow]


class PgKnowledgeStore:
    def __init__(self, db: PgDatabase, dim: int) -> None:
        self.db = db
        self.dim = dim
        db.migrate(COMPONENT, MIGRATIONS)
        self._ensure_vector_index()
        self.keywords = KeywordIndex(self._load_keyword_documents, idf="smooth")
        self._gate = WriteGate()

    def _vector(self) -> sql.Composable:
        # The column cast to this model's dimension: the expression the HNSW index is built on.
        return sql.SQL("embedding::vector({})").format(sql.Literal(self.dim))

    def _ensure_vector_index(self) -> None:
        name = sql.Identifier(f"kb_chunks_hnsw_{self.dim}")
        # Partial: rows of another dimension (mid re-embed) would fail the cast while it is built.
        statement = sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON kb_chunks USING hnsw (({}) vector_ip_ops)"
            " WHERE vector_dims(embedding) = {}"
        ).format(name, self._vector(), sql.Literal(self.dim))
        with self.db.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('kb_chunks_hnsw'))")
            conn.execute(statement)

    # -- embedding model ---------------------------------------------------

    def embedding_model(self) -> tuple[str, int] | None:
        with self.db.connection() as conn:
            rows = dict(
                conn.execute("SELECT key, value FROM kb_meta WHERE key LIKE 'embedding_%'").fetchall()
            )
        if "embedding_model" not in rows:
            return None
        return str(rows["embedding_model"]), int(str(rows["embedding_dim"]))

    def set_embedding_model(self, name: str, dim: int) -> None:
        upsert = "INSERT INTO kb_meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        with self.db.transaction() as conn:
            conn.execute(upsert, ("embedding_model", name))
            conn.execute(upsert, ("embedding_dim", str(dim)))

    def count_chunks(self) -> int:
        return self._scalar("SELECT count(*) FROM kb_chunks", ())

    def _scalar(self, query: str, params: Sequence[object]) -> int:
        with self.db.connection() as conn:
            row = conn.execute(query.encode(), params).fetchone()
        return int(row[0]) if row else 0

    # -- documents -----------------------------------------------------------

    def _generation(self, workspace_id: str) -> int:
        return self._scalar("SELECT generation FROM kb_workspaces WHERE id = %s", (workspace_id,))

    @staticmethod
    def _lock_workspace(conn: Conn, workspace_id: str) -> int:
        """Create the workspace if needed and hold its row until commit: writes to one workspace go one
        at a time across workers, so each one's generation step is exactly +1."""
        conn.execute(
            "INSERT INTO kb_workspaces (id, created_at) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING",
            (workspace_id, utcnow()),
        )
        found = conn.execute("SELECT generation FROM kb_workspaces WHERE id = %s FOR UPDATE", (workspace_id,))
        return int(one(found.fetchone())[0])

    @staticmethod
    def _log_write(
        conn: Conn, workspace_id: str, generation: int, added: list[int], removed: list[int]
    ) -> None:
        """Inside a write holding the workspace's row (``_lock_workspace``): its new generation and its
        entry in the keyword change log, pruned now and then to the last ``KEYWORD_LOG_KEEP`` writes."""
        conn.execute("UPDATE kb_workspaces SET generation = %s WHERE id = %s", (generation, workspace_id))
        conn.execute(
            "INSERT INTO kb_keyword_changes VALUES (%s, %s, %s, %s)",
            (workspace_id, generation, added, removed),
        )
        if generation % 100 == 0:
            conn.execute(
                "DELETE FROM kb_keyword_changes WHERE workspace_id = %s AND generation <= %s",
                (workspace_id, generation - KEYWORD_LOG_KEEP),
            )

    @gated
    def put_document(self, doc: NewDocument) -> int:
        """Insert or replace a document and all its chunks in one transaction; returns the chunk count."""
        expected = (len(doc.chunks), self.dim)
        if doc.embeddings.ndim != 2 or doc.embeddings.shape != expected:
            raise ValueError(f"embeddings have shape {doc.embeddings.shape}, expected {expected}")
        now = utcnow()
        with self.db.transaction() as conn:
            before = self._lock_workspace(conn, doc.workspace_id)
            old = conn.execute(
                "SELECT id, created_at FROM kb_documents WHERE workspace_id = %s AND doc_label = %s",
                (doc.workspace_id, doc.doc_label),
            ).fetchone()
            removed: list[int] = []
            if old is not None:
                found = conn.execute("DELETE FROM kb_chunks WHERE document_id = %s RETURNING id", (old[0],))
                removed = [int(r[0]) for r in found.fetchall()]
                conn.execute("DELETE FROM kb_documents WHERE id = %s", (old[0],))
            row = conn.execute(
                f"INSERT INTO kb_documents ({DOCUMENT_COLUMNS})"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) RETURNING id".encode(),
                document_values(doc, old[1] if old is not None else now, now),
            ).fetchone()
            document_id = one(row)[0]
            texts: list[Document] = []
            with conn.cursor() as cursor:
                for ordinal, (text, vector) in enumerate(zip(doc.chunks, doc.embeddings, strict=True)):
                    cursor.execute(
                        "INSERT INTO kb_chunks (document_id, workspace_id, ordinal, text, embedding)"
                        " VALUES (%s,%s,%s,%s,%s) RETURNING id",
                        (document_id, doc.workspace_id, ordinal, text, np.asarray(vector, dtype=np.float32)),
                    )
                    chunk_id = int(one(cursor.fetchone())[0])
                    texts.append((chunk_id, keyword_columns(doc.title, text)))
            self._log_write(conn, doc.workspace_id, before + 1, [i for i, _ in texts], removed)
        self._catch_up(doc.workspace_id, before)
        self.keywords.apply(doc.workspace_id, before, before + 1, added=texts, removed=removed)
        return len(texts)

    @gated
    def delete_document(self, workspace_id: str, doc_label: str) -> bool:
        with self.db.transaction() as conn:
            exists = conn.execute(
                "SELECT 1 FROM kb_documents WHERE workspace_id = %s AND doc_label = %s",
                (workspace_id, doc_label),
            ).fetchone()
            if exists is None:
                return False
            before = self._lock_workspace(conn, workspace_id)
            row = conn.execute(
                "SELECT id FROM kb_documents WHERE workspace_id = %s AND doc_label = %s",
                (workspace_id, doc_label),
            ).fetchone()
            if row is None:  # another worker deleted it while this one waited for the lock
                return False
            # The chunks first: deleting the document would cascade to them and leave no ids to log.
            found = conn.execute("DELETE FROM kb_chunks WHERE document_id = %s RETURNING id", (row[0],))
            removed = [int(r[0]) for r in found.fetchall()]
            conn.execute("DELETE FROM kb_documents WHERE id = %s", (row[0],))
            self._log_write(conn, workspace_id, before + 1, [], removed)
        self._catch_up(workspace_id, before)
        self.keywords.apply(workspace_id, before, before + 1, removed=removed)
        return True

    def get_document(self, workspace_id: str, doc_label: str) -> DocumentRecord | None:
        with self.db.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            row = cursor.execute(
                "SELECT d.*, (SELECT count(*) FROM kb_chunks c WHERE c.document_id = d.id) AS chunk_count"
                " FROM kb_documents d WHERE workspace_id = %s AND doc_label = %s",
                (workspace_id, doc_label),
            ).fetchone()
        return None if row is None else document_from_row(row)

    def document_hash(self, workspace_id: str, doc_label: str) -> str | None:
        with self.db.connection() as conn:
            row = conn.execute(
                "SELECT content_hash FROM kb_documents WHERE workspace_id = %s AND doc_label = %s",
                (workspace_id, doc_label),
            ).fetchone()
        return None if row is None else str(row[0])

    def count_documents(self, workspace_id: str) -> int:
        return self._scalar("SELECT count(*) FROM kb_documents WHERE workspace_id = %s", (workspace_id,))

    def last_sync(self, workspace_id: str) -> str | None:
        with self.db.connection() as conn:
            row = conn.execute(
                "SELECT last_sync FROM kb_workspaces WHERE id = %s", (workspace_id,)
            ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def set_last_sync(self, workspace_id: str, when: str) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO kb_workspaces (id, created_at, last_sync) VALUES (%s, %s, %s)"
                " ON CONFLICT (id) DO UPDATE SET last_sync = excluded.last_sync",
                (workspace_id, when, when),
            )

    def labels_with_prefix(self, workspace_id: str, prefix: str) -> dict[str, str]:
        """label -> content hash of the workspace's documents whose label starts with ``prefix``."""
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT doc_label, content_hash FROM kb_documents"
                " WHERE workspace_id = %s AND left(doc_label, %s) = %s",
                (workspace_id, len(prefix), prefix),
            ).fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    # -- retrieval ------------------------------------------------------------

    def keyword_search(self, workspace_id: str, query: str, limit: int) -> list[tuple[int, float]]:
        """BM25 over the workspace's chunks (title and body), with the workspace's own statistics."""
        generation = self._generation(workspace_id)
        self._gate.settle(lambda: self.keywords.generation(workspace_id) < generation)
        self._catch_up(workspace_id, generation)
        return self.keywords.search(workspace_id, generation, query, limit)

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

    def _load_keyword_documents(self, workspace_id: str) -> list[Document]:
        with self.db.connection() as conn:
            rows = conn.execute(
                "SELECT c.id, d.title, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                " WHERE c.workspace_id = %s ORDER BY c.id",
                (workspace_id,),
            ).fetchall()
        return [(int(r[0]), keyword_columns(r[1], str(r[2]))) for r in rows]

    def warm(self) -> None:
        """Load every workspace's keyword index (best effort: a search loads what is missing)."""
        with self.db.connection() as conn:
            workspaces = conn.execute("SELECT id, generation FROM kb_workspaces").fetchall()
        for workspace, generation in workspaces:
            self.keywords.sync(str(workspace), int(generation))

    def vector_search(self, workspace_id: str, query: Vector, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` nearest chunks of the workspace by inner product, through the HNSW index.

        The iterative scan keeps walking the graph until ``limit`` rows of this workspace are found, so
        the workspace filter never makes ``top_k`` short."""
        if limit <= 0:
            return []
        vector = self._vector()
        search = sql.SQL(
            "SELECT id, -({v} <#> %(q)s) FROM kb_chunks WHERE workspace_id = %(ws)s"
            " AND vector_dims(embedding) = {dim} ORDER BY {v} <#> %(q)s, id LIMIT %(k)s"
        ).format(v=vector, dim=sql.Literal(self.dim))
        params = {"q": np.asarray(query, dtype=np.float32), "ws": workspace_id, "k": limit}
        # One round trip, not five (BEGIN, two settings, query, COMMIT): settings and query go in one
        # pipeline closed by a single Sync, which PostgreSQL runs as one implicit transaction, so the
        # transaction-local settings hold for the query and end with it.
        with self.db.connection() as conn:
            with conn.pipeline():
                conn.execute(
                    "SELECT set_config('hnsw.iterative_scan', 'strict_order', true),"
                    " set_config('hnsw.ef_search', %s, true)",
                    (str(max(40, min(limit, 1000))),),
                )
                cursor = conn.execute(search, params)
            rows = cursor.fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def chunk_hits(self, workspace_id: str, chunk_ids: Sequence[int]) -> dict[int, ChunkHit]:
        if not chunk_ids:
            return {}
        with self.db.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(
                f"SELECT {CHUNK_HIT_COLUMNS} FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                " WHERE c.workspace_id = %s AND c.id = ANY(%s)".encode(),
                (workspace_id, list(chunk_ids)),
            ).fetchall()
        return {int(r["id"]): chunk_hit_from_row(r) for r in rows}

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

    def iter_chunks(self, batch: int = 256) -> Iterator[list[tuple[int, str | None, str]]]:
        last = 0
        while True:
            with self.db.connection() as conn:
                rows = conn.execute(
                    "SELECT c.id, d.title, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
                    " WHERE c.id > %s ORDER BY c.id LIMIT %s",
                    (last, batch),
                ).fetchall()
            if not rows:
                return
            last = int(rows[-1][0])
            yield [(int(r[0]), r[1], str(r[2])) for r in rows]

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

    def close(self) -> None:
        self.db.close()
