"""The embedded engine's agent-memory schema: ``metronix.db``'s ``memory`` component, in version order.

Its own history, as ``memory_schema_pg`` has PostgreSQL's: each engine's DDL is written for that engine
only. The review queue, audit events and freshness queue live here too (``review_store``), in the same
database as the records, because a filing changes a record's status in the same transaction.
"""

from __future__ import annotations

MIGRATIONS = [
    """
    CREATE TABLE memory_records (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        workspace_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        session_id TEXT,
        kind TEXT NOT NULL DEFAULT 'fact',
        content TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        importance_score REAL NOT NULL DEFAULT 0.5,
        source_type TEXT NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{}',
        status TEXT NOT NULL DEFAULT 'active',
        verification_state TEXT,
        superseded_by TEXT,
        ttl_expires_at TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        embedding BLOB NOT NULL,
        dedup_key TEXT NOT NULL UNIQUE
    );
    CREATE INDEX memory_by_agent ON memory_records (workspace_id, agent_id, status);
    CREATE INDEX memory_by_scope ON memory_records (workspace_id, scope, status);
    CREATE TABLE memory_tags (
        seq INTEGER NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (seq, tag)
    );
    CREATE INDEX memory_tags_by_tag ON memory_tags (tag, seq);
    CREATE TABLE memory_entities (
        seq INTEGER NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        entity TEXT NOT NULL,
        PRIMARY KEY (seq, entity)
    );
    CREATE INDEX memory_entities_by_entity ON memory_entities (entity, seq);
    -- explicit relationships from updates and reviews: superseded_by, merged_into, contradicts ...
    CREATE TABLE memory_links (
        seq INTEGER NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        related_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        PRIMARY KEY (seq, related_id, kind)
    );
    CREATE VIRTUAL TABLE memory_fts USING fts5(part, content, tags, tokenize = 'porter unicode61');
    CREATE TABLE memory_generations (workspace_id TEXT PRIMARY KEY, generation INTEGER NOT NULL);
    CREATE TABLE review_entries (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        target_id TEXT NOT NULL,
        target_kind TEXT NOT NULL DEFAULT 'memory_record',
        reason TEXT NOT NULL,
        related_record_id TEXT NOT NULL DEFAULT '',
        content TEXT NOT NULL,
        confidence REAL NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (target_id, related_record_id, reason)
    );
    CREATE INDEX review_by_workspace ON review_entries (workspace_id, created_at);
    CREATE TABLE machine_events (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        actor TEXT NOT NULL,
        target_id TEXT,
        payload TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL
    );
    -- Writes enqueue their freshness check in the same transaction, so a crash loses none.
    CREATE TABLE freshness_queue (
        record_id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        enqueued_at TEXT NOT NULL
    );
    """,
    # Published for a few hours of 2026-11-30 as the first form of conversation adjacency (a column);
    # migration 3 moved it to its own table. Kept so that databases at version 2 stay consistent.
    """
    ALTER TABLE memory_records ADD COLUMN follows INTEGER;
    CREATE INDEX memory_follows ON memory_records (follows) WHERE follows IS NOT NULL;
    CREATE INDEX memory_by_agent_seq ON memory_records (workspace_id, agent_id, scope, session_id, seq);
    """,
    # Conversation adjacency: the record each one was written right after (same agent, scope and
    # session, within FOLLOW_WINDOW_SECONDS). Search lends a record part of its neighbours' relevance.
    # A narrow table, not the column of migration 2: that column sits behind the embedding blob, and
    # reading it cost 2 ms per 100 records instead of 0.2. The column is left unused (always NULL
    # from now on); SQLite drops a column only by rewriting the table.
    """
    DROP INDEX IF EXISTS memory_follows;
    CREATE TABLE memory_follows (
        seq INTEGER PRIMARY KEY REFERENCES memory_records(seq) ON DELETE CASCADE,
        follows INTEGER NOT NULL
    );
    INSERT INTO memory_follows SELECT seq, follows FROM memory_records WHERE follows IS NOT NULL;
    UPDATE memory_records SET follows = NULL WHERE follows IS NOT NULL;
    CREATE INDEX memory_follows_by_follows ON memory_follows (follows);
    """,
    # Every session-scoped write purges expired session records first; without this index that
    # scanned the whole table (14 ms at 10,000 records, growing with the database).
    """
    CREATE INDEX memory_session_expiry ON memory_records (ttl_expires_at) WHERE scope = 'session';
    """,
    # Keyword search moved to an in-process BM25 index (core/keyword_index.py) read from the records
    # themselves: the FTS5 query was the slowest step of memory_search at 10,000 records, and keeping
    # the FTS5 table in step cost every write. Content and tags stay in memory_records.
    """
    DROP TABLE memory_fts;
    """,
    # The model that embedded the records, so vectors of two models never mix (memory_search would
    # compare them silently). Records stored before this was kept are of an unknown model ('').
    """
    CREATE TABLE memory_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO memory_meta SELECT 'embedding_model', '' WHERE EXISTS (SELECT 1 FROM memory_records);
    INSERT INTO memory_meta SELECT 'embedding_dim', '0' WHERE EXISTS (SELECT 1 FROM memory_records);
    """,
    # The attribute cache (metronix/attributes.py) has its own generation: status changes and TTL slides
    # must reach it without making every process reload its vector and keyword indexes.
    """
    ALTER TABLE memory_generations ADD COLUMN attributes INTEGER NOT NULL DEFAULT 0;
    """,
]
