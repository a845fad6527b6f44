"""The embedded knowledge base's DDL (``metronix.db``, SQLite): one script per version, applied in order
by ``core.db.Database``. PostgreSQL's is ``knowledge_schema_pg``."""

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
