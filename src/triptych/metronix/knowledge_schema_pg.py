"""The knowledge base's DDL on PostgreSQL (server mode): its component and one script per version, applied
in order by ``core.pg.PgDatabase.migrate``. The embedded engine's is ``knowledge_schema_sqlite``."""

COMPONENT = "metronix_kb"
MIGRATIONS = [
    # Timestamps and metadata stay text, as in the embedded engine: answers are the same byte for byte
    # (jsonb would reorder a document's metadata keys). ``embedding`` has no fixed dimension so a model
    # change can re-embed in place; the HNSW index is per dimension (``pg_vectors.PgVectors.ensure_index``).
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
    # BM25 postings, so PostgreSQL ranks a workspace not in a worker's memory as the worker would
    # (metronix/pg_keywords.py, docs/decisions/0191). A chunk without ``term_length`` has no postings
    # yet (stored before this, or copied in by ``triptych migrate``): its workspace is filled once.
    """
    CREATE TABLE kb_chunk_terms (
        workspace_id TEXT NOT NULL,
        term TEXT COLLATE "C" NOT NULL,
        chunk_id BIGINT NOT NULL REFERENCES kb_chunks(id) ON DELETE CASCADE,
        weight REAL NOT NULL,
        length REAL NOT NULL,
        PRIMARY KEY (workspace_id, term, chunk_id)
    );
    CREATE INDEX kb_chunk_terms_by_chunk ON kb_chunk_terms (chunk_id);
    ALTER TABLE kb_chunks ADD COLUMN term_length REAL;
    CREATE INDEX kb_chunks_without_terms ON kb_chunks (workspace_id) WHERE term_length IS NULL;
    """,
    # The BM25 statement reads indexes only (docs/decisions/0440): here the workspace's chunk count and
    # total length, from its range of ``kb_chunks_by_workspace`` carrying ``term_length`` (not from its
    # wide heap rows). The new index is built first, under a lock that lets searches read on (writes
    # wait), and the old one dropped last, under the exclusive lock a drop takes, held only to the commit.
    # One table per script: a search locks the two tables in either order (a prepared statement takes
    # the postings first), so a script swapping both could deadlock with it.
    """
    CREATE INDEX kb_chunks_by_workspace_covering ON kb_chunks (workspace_id, id) INCLUDE (term_length);
    DROP INDEX kb_chunks_by_workspace;
    ALTER INDEX kb_chunks_by_workspace_covering RENAME TO kb_chunks_by_workspace;
    """,
    # The postings' weight and length from their primary key (0440), swapped in as the one above.
    """
    CREATE UNIQUE INDEX kb_chunk_terms_covering ON kb_chunk_terms (workspace_id, term, chunk_id)
        INCLUDE (weight, length);
    ALTER TABLE kb_chunk_terms DROP CONSTRAINT kb_chunk_terms_pkey,
        ADD CONSTRAINT kb_chunk_terms_pkey PRIMARY KEY USING INDEX kb_chunk_terms_covering;
    """,
]
