"""SQLite's DDL for Hadron (``hadron.db``): every migration component's scripts, in order (a script's
position is its version). PostgreSQL's own are in ``pg_schema``; a change to a table is a new script in
both modules, each in its engine's SQL."""

from __future__ import annotations

from triptych.core.db import Migration

# Component "main" (``core.db.Database``'s default): tenancy, graph, search, selections and the team.
HADRON: list[Migration] = [
    """
    CREATE TABLE orgs (
        id TEXT PRIMARY KEY, root TEXT NOT NULL UNIQUE, name TEXT NOT NULL, created_at TEXT NOT NULL
    );
    CREATE TABLE users (
        id TEXT PRIMARY KEY, handle TEXT NOT NULL UNIQUE, name TEXT NOT NULL, created_at TEXT NOT NULL
    );
    CREATE TABLE org_members (
        org_id TEXT NOT NULL REFERENCES orgs(id), user_id TEXT NOT NULL REFERENCES users(id),
        role TEXT NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'CONTRIBUTOR', 'READER')),
        PRIMARY KEY (org_id, user_id)
    );
    CREATE INDEX org_members_by_user ON org_members (user_id);
    CREATE TABLE apps (
        id TEXT PRIMARY KEY, slug TEXT NOT NULL, name TEXT NOT NULL,
        org_id TEXT REFERENCES orgs(id), owner_user_id TEXT REFERENCES users(id),
        root TEXT NOT NULL, created_at TEXT NOT NULL,
        CHECK ((org_id IS NULL) != (owner_user_id IS NULL)),
        UNIQUE (root, slug)
    );
    CREATE TABLE app_members (
        app_id TEXT NOT NULL REFERENCES apps(id), user_id TEXT NOT NULL REFERENCES users(id),
        role TEXT NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'CONTRIBUTOR', 'READER')),
        PRIMARY KEY (app_id, user_id)
    );
    CREATE INDEX app_members_by_user ON app_members (user_id);
    CREATE TABLE app_keys (
        id TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), key_hash TEXT NOT NULL UNIQUE,
        preview TEXT NOT NULL, label TEXT, created_at TEXT NOT NULL, revoked_at TEXT
    );
    CREATE TABLE memories (
        id TEXT PRIMARY KEY, root TEXT NOT NULL, slug TEXT NOT NULL, name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        class TEXT NOT NULL CHECK (class IN ('app', 'group', 'knowledge', 'personal', 'private', 'system')),
        org_id TEXT REFERENCES orgs(id), app_id TEXT REFERENCES apps(id), user_id TEXT REFERENCES users(id),
        encrypted INTEGER NOT NULL DEFAULT 0,
        schema_json TEXT,
        -- How nodes are embedded on write (issue 6 reads it); 'none' until then.
        embedding_policy TEXT NOT NULL DEFAULT 'none',
        created_at TEXT NOT NULL, deleted_at TEXT,
        CHECK ((org_id IS NOT NULL) + (app_id IS NOT NULL) + (user_id IS NOT NULL) = 1),
        UNIQUE (root, slug)
    );
    -- Explicit per-principal access: a user (share, group membership) or an app (its key).
    CREATE TABLE memory_access (
        memory_id TEXT NOT NULL REFERENCES memories(id),
        principal_type TEXT NOT NULL CHECK (principal_type IN ('user', 'app')),
        principal_id TEXT NOT NULL,
        access TEXT NOT NULL CHECK (access IN ('read-only', 'read-write')),
        PRIMARY KEY (memory_id, principal_type, principal_id)
    );
    CREATE INDEX memory_access_by_principal ON memory_access (principal_type, principal_id);
    -- Memories attached to an app, in order: the `app` rung of the search ladder (issue 6).
    CREATE TABLE app_memories (
        app_id TEXT NOT NULL REFERENCES apps(id), memory_id TEXT NOT NULL REFERENCES memories(id),
        position INTEGER NOT NULL, PRIMARY KEY (app_id, memory_id)
    );
    CREATE TABLE client_selections (
        user_id TEXT NOT NULL, client_id TEXT NOT NULL,
        app_id TEXT, memory_id TEXT, org_id TEXT, scope_id TEXT,
        session_id TEXT, updated_at TEXT NOT NULL,
        PRIMARY KEY (user_id, client_id)
    );
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY, memory_id TEXT NOT NULL REFERENCES memories(id),
        loc TEXT NOT NULL, parent_loc TEXT NOT NULL, name TEXT NOT NULL,
        node_type TEXT NOT NULL, object_type TEXT, description TEXT, content TEXT, seq INTEGER,
        tags TEXT NOT NULL DEFAULT '[]', properties TEXT NOT NULL DEFAULT '{}', data TEXT,
        llm_model TEXT, ai_agent TEXT, revision INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, created_by TEXT NOT NULL,
        updated_by TEXT NOT NULL, deleted_at TEXT
    );
    CREATE UNIQUE INDEX nodes_live_loc ON nodes (memory_id, loc) WHERE deleted_at IS NULL;
    CREATE INDEX nodes_children ON nodes (memory_id, parent_loc, seq) WHERE deleted_at IS NULL;
    CREATE INDEX nodes_objects ON nodes (memory_id, object_type) WHERE deleted_at IS NULL;
    CREATE TABLE edges (
        id TEXT PRIMARY KEY, source_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        loc TEXT NOT NULL, name TEXT, description TEXT,
        target_id TEXT, target_memory_id TEXT, target_loc TEXT, target_ref TEXT NOT NULL,
        is_runnable INTEGER NOT NULL DEFAULT 0, position INTEGER NOT NULL,
        UNIQUE (source_id, loc)
    );
    CREATE INDEX edges_by_target ON edges (target_id);
    CREATE TABLE node_revisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, node_id TEXT NOT NULL, revision INTEGER NOT NULL,
        operation TEXT NOT NULL, actor TEXT NOT NULL, at TEXT NOT NULL, reason TEXT, snapshot TEXT NOT NULL
    );
    CREATE INDEX node_revisions_by_node ON node_revisions (node_id, revision);
    -- Vectors per node, written by the embedding policy (issue 6); keyed by node id, so they travel
    -- with a moved node. status 'failed' rows are what hadron_validate reports.
    CREATE TABLE node_embeddings (
        node_id TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
        model TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB, status TEXT NOT NULL, error TEXT,
        updated_at TEXT NOT NULL
    );
    """,
    # Search (issue 6): stemmed full text kept in step with live nodes by triggers, a per-memory vector
    # generation bumped by triggers whenever the memory's live vectors change (several workers never
    # serve stale vectors), and search scopes.
    """
    ALTER TABLE node_embeddings ADD COLUMN text_hash TEXT;
    CREATE VIRTUAL TABLE nodes_fts USING fts5(name, description, content, tags, tokenize = 'porter unicode61');
    INSERT INTO nodes_fts (rowid, name, description, content, tags)
        SELECT rowid, name, coalesce(description, ''), coalesce(content, ''), tags FROM nodes
        WHERE deleted_at IS NULL;
    CREATE TRIGGER nodes_fts_insert AFTER INSERT ON nodes WHEN new.deleted_at IS NULL BEGIN
        INSERT INTO nodes_fts (rowid, name, description, content, tags)
        VALUES (new.rowid, new.name, coalesce(new.description, ''), coalesce(new.content, ''), new.tags);
    END;
    CREATE TRIGGER nodes_fts_delete AFTER DELETE ON nodes BEGIN
        DELETE FROM nodes_fts WHERE rowid = old.rowid;
    END;
    CREATE TRIGGER nodes_fts_update AFTER UPDATE OF name, description, content, tags, deleted_at ON nodes
    WHEN old.name IS NOT new.name OR old.description IS NOT new.description OR old.content IS NOT new.content
        OR old.tags IS NOT new.tags OR old.deleted_at IS NOT new.deleted_at
    BEGIN
        DELETE FROM nodes_fts WHERE rowid = old.rowid;
        INSERT INTO nodes_fts (rowid, name, description, content, tags)
        SELECT new.rowid, new.name, coalesce(new.description, ''), coalesce(new.content, ''), new.tags
        WHERE new.deleted_at IS NULL;
    END;
    CREATE TABLE vector_generations (memory_id TEXT PRIMARY KEY, generation INTEGER NOT NULL);
    CREATE TRIGGER embeddings_gen_insert AFTER INSERT ON node_embeddings BEGIN
        INSERT INTO vector_generations (memory_id, generation) SELECT memory_id, 1 FROM nodes
        WHERE id = new.node_id ON CONFLICT (memory_id) DO UPDATE SET generation = generation + 1;
    END;
    CREATE TRIGGER embeddings_gen_update AFTER UPDATE ON node_embeddings BEGIN
        INSERT INTO vector_generations (memory_id, generation) SELECT memory_id, 1 FROM nodes
        WHERE id = new.node_id ON CONFLICT (memory_id) DO UPDATE SET generation = generation + 1;
    END;
    CREATE TRIGGER embeddings_gen_delete AFTER DELETE ON node_embeddings BEGIN
        INSERT INTO vector_generations (memory_id, generation) SELECT memory_id, 1 FROM nodes
        WHERE id = old.node_id ON CONFLICT (memory_id) DO UPDATE SET generation = generation + 1;
    END;
    CREATE TRIGGER nodes_gen_update AFTER UPDATE OF memory_id, deleted_at ON nodes
    WHEN (old.memory_id IS NOT new.memory_id OR old.deleted_at IS NOT new.deleted_at)
        AND EXISTS (SELECT 1 FROM node_embeddings WHERE node_id = new.id)
    BEGIN
        INSERT INTO vector_generations (memory_id, generation) VALUES (old.memory_id, 1)
        ON CONFLICT (memory_id) DO UPDATE SET generation = generation + 1;
        INSERT INTO vector_generations (memory_id, generation) VALUES (new.memory_id, 1)
        ON CONFLICT (memory_id) DO UPDATE SET generation = generation + 1;
    END;
    CREATE TABLE scopes (
        id TEXT PRIMARY KEY, name TEXT NOT NULL, description TEXT,
        owner_type TEXT NOT NULL CHECK (owner_type IN ('organization', 'app', 'agent')),
        owner_id TEXT NOT NULL, memory_ids TEXT NOT NULL, created_by TEXT NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, deleted_at TEXT
    );
    CREATE UNIQUE INDEX scopes_live_name ON scopes (owner_type, owner_id, name) WHERE deleted_at IS NULL;
    """,
    # Team coordination (issue 14): agents, AI service configs, workers, worker sessions and what they
    # touched, channels with their messages (seq assigned in the posting transaction), registers, the
    # worklog. Messages are rows under their channel's chat-root node, not nodes: a channel of 100,000
    # messages must read its tail by an index range.
    """
    CREATE TABLE agents (
        id TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), slug TEXT NOT NULL, name TEXT NOT NULL,
        persona_role TEXT, system_prompt TEXT NOT NULL, is_team_agent INTEGER NOT NULL DEFAULT 0,
        memory_id TEXT REFERENCES memories(id), created_at TEXT NOT NULL, UNIQUE (app_id, slug)
    );
    CREATE TABLE ai_service_configs (
        id TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), name TEXT NOT NULL,
        provider TEXT NOT NULL, model TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE (app_id, name)
    );
    CREATE TABLE workers (
        id TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), agent_id TEXT NOT NULL REFERENCES agents(id),
        name TEXT NOT NULL, name_key TEXT NOT NULL, slug TEXT NOT NULL, role TEXT NOT NULL,
        prompt_override TEXT, held_by TEXT REFERENCES users(id), retired_at TEXT,
        created_at TEXT NOT NULL, created_by TEXT NOT NULL,
        UNIQUE (app_id, name_key)
    );
    CREATE UNIQUE INDEX workers_by_slug ON workers (app_id, slug);
    CREATE TABLE work_sessions (
        id TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), user_id TEXT REFERENCES users(id),
        worker_id TEXT REFERENCES workers(id), description TEXT NOT NULL, type TEXT NOT NULL,
        repo TEXT, branch TEXT, pr_number INTEGER, language TEXT, llm_model TEXT,
        parent_session_id TEXT, prev_session_id TEXT, started_at TEXT NOT NULL, last_active_at TEXT NOT NULL,
        ended_at TEXT, end_reason TEXT, expires_at TEXT, summary TEXT, handoff TEXT,
        error_count INTEGER, turn_count INTEGER, input_tokens INTEGER, output_tokens INTEGER
    );
    CREATE INDEX work_sessions_by_worker ON work_sessions (worker_id, started_at);
    CREATE INDEX work_sessions_by_user ON work_sessions (user_id, started_at);
    CREATE INDEX work_sessions_by_app ON work_sessions (app_id, started_at);
    -- What a session did on the platform (usage events): the fallback for an auto-expired session.
    CREATE TABLE session_events (session_id TEXT NOT NULL, at TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT);
    CREATE INDEX session_events_by_session ON session_events (session_id, at);
    CREATE TABLE session_nodes (node_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, at TEXT NOT NULL);
    CREATE TABLE channels (
        id TEXT PRIMARY KEY, memory_id TEXT NOT NULL REFERENCES memories(id), loc TEXT NOT NULL,
        name TEXT NOT NULL, app_id TEXT REFERENCES apps(id), last_seq INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL, created_by TEXT NOT NULL, UNIQUE (memory_id, loc)
    );
    CREATE INDEX channels_by_app ON channels (app_id);
    CREATE TABLE channel_messages (
        channel_id TEXT NOT NULL REFERENCES channels(id), seq INTEGER NOT NULL, body TEXT NOT NULL,
        author TEXT NOT NULL, session_id TEXT, reply_to_seq INTEGER, mentions TEXT NOT NULL,
        created_at TEXT NOT NULL, PRIMARY KEY (channel_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE message_mentions (
        channel_id TEXT NOT NULL, ref TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (channel_id, ref, seq)
    ) WITHOUT ROWID;
    CREATE TABLE registers (
        id TEXT PRIMARY KEY, owner_app_id TEXT NOT NULL REFERENCES apps(id),
        channel_id TEXT NOT NULL REFERENCES channels(id), attendee TEXT, role TEXT,
        mention_only INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, created_by TEXT NOT NULL
    );
    CREATE INDEX registers_by_channel ON registers (channel_id);
    CREATE TABLE work_items (
        n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, app_id TEXT NOT NULL REFERENCES apps(id),
        session_id TEXT NOT NULL REFERENCES work_sessions(id), user_id TEXT, worker_id TEXT,
        tool TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT NOT NULL, action TEXT NOT NULL, detail TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX work_items_by_ref ON work_items (app_id, ref);
    CREATE INDEX work_items_by_session ON work_items (app_id, session_id);
    CREATE INDEX work_items_by_app ON work_items (app_id);
    """,
    # Keyword search in process (issue 20): FTS5 kept one index, and one set of BM25 statistics, for every
    # organization (one org's documents shifted another's ranking) and its OR-query took 30 ms at 100,000
    # nodes. Each memory now has an in-process BM25 index (``search_store.NodeKeywords``) that follows a
    # log of changed nodes written by these triggers: every process applies exactly the rows that
    # changed since it last looked, its own writes and other workers' alike. The log keeps its last
    # 50,000 entries; an index older than that reloads its memory.
    """
    DROP TRIGGER nodes_fts_insert;
    DROP TRIGGER nodes_fts_delete;
    DROP TRIGGER nodes_fts_update;
    DROP TABLE nodes_fts;
    CREATE TABLE node_text_changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, memory_id TEXT NOT NULL, node_rowid INTEGER NOT NULL
    );
    CREATE INDEX node_text_changes_by_memory ON node_text_changes (memory_id, seq);
    CREATE TRIGGER node_text_changes_prune AFTER INSERT ON node_text_changes BEGIN
        DELETE FROM node_text_changes WHERE seq <= new.seq - 50000;
    END;
    CREATE TRIGGER nodes_text_insert AFTER INSERT ON nodes WHEN new.deleted_at IS NULL BEGIN
        INSERT INTO node_text_changes (memory_id, node_rowid) VALUES (new.memory_id, new.rowid);
    END;
    CREATE TRIGGER nodes_text_delete AFTER DELETE ON nodes BEGIN
        INSERT INTO node_text_changes (memory_id, node_rowid) VALUES (old.memory_id, old.rowid);
    END;
    CREATE TRIGGER nodes_text_update AFTER UPDATE OF name, description, content, tags, deleted_at, memory_id
    ON nodes
    WHEN old.name IS NOT new.name OR old.description IS NOT new.description OR old.content IS NOT new.content
        OR old.tags IS NOT new.tags OR old.deleted_at IS NOT new.deleted_at OR old.memory_id IS NOT new.memory_id
    BEGIN
        INSERT INTO node_text_changes (memory_id, node_rowid) VALUES (old.memory_id, old.rowid);
        INSERT INTO node_text_changes (memory_id, node_rowid)
            SELECT new.memory_id, new.rowid WHERE new.memory_id IS NOT old.memory_id;
    END;
    """,
]

# hadron-edges: the live server's edge fields (priority, condition, data), added after the graph's schema.
EDGES: list[Migration] = [
    """
    ALTER TABLE edges ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE edges ADD COLUMN condition_json TEXT;
    ALTER TABLE edges ADD COLUMN data_json TEXT;
    CREATE INDEX edges_by_loc ON edges (loc);
    """
]

# hadron-receipts: per Channel, the highest seq each worker has read (issue 32).
RECEIPTS: list[Migration] = [
    """
    CREATE TABLE channel_receipts (
        channel_id TEXT NOT NULL, reader TEXT NOT NULL, seq BIGINT NOT NULL, at TEXT NOT NULL,
        PRIMARY KEY (channel_id, reader)
    );
    """
]

# hadron-abstracts
ABSTRACTS: list[Migration] = [
    """
    CREATE TABLE node_abstracts (
        node_id TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
        abstract TEXT NOT NULL, content_hash TEXT NOT NULL, method TEXT NOT NULL, updated_at TEXT NOT NULL
    );
    """
]

# hadron-actions
ACTIONS: list[Migration] = [
    """
    CREATE TABLE action_runs (
        id TEXT PRIMARY KEY, node_id TEXT NOT NULL, memory_id TEXT NOT NULL, node_revision INTEGER NOT NULL,
        kind TEXT NOT NULL, actor TEXT NOT NULL, work_session_id TEXT, parent_run_id TEXT,
        started_at TEXT NOT NULL, duration_ms REAL NOT NULL, args TEXT NOT NULL,
        outcome TEXT NOT NULL, error TEXT, output_chars INTEGER, output_sha256 TEXT
    );
    CREATE INDEX action_runs_by_node ON action_runs (node_id, started_at);
    """
]

# hadron-git
GIT: list[Migration] = [
    """
    CREATE TABLE git_sources (
        memory_id TEXT PRIMARY KEY REFERENCES memories(id), url TEXT NOT NULL, branch TEXT,
        commit_sha TEXT, synced_at TEXT, attached_at TEXT NOT NULL, last_error TEXT
    );
    CREATE TABLE git_files (
        memory_id TEXT NOT NULL, path TEXT NOT NULL, node_id TEXT NOT NULL, blob TEXT NOT NULL,
        revision INTEGER NOT NULL, PRIMARY KEY (memory_id, path)
    );
    CREATE INDEX git_files_by_node ON git_files (node_id);
    """
]

# hadron-locks
LOCKS: list[Migration] = [
    """
    CREATE TABLE memory_locks (
        memory_id TEXT PRIMARY KEY REFERENCES memories(id), holder TEXT NOT NULL, locked_by TEXT NOT NULL,
        reason TEXT, locked_at TEXT NOT NULL, expires_at TEXT NOT NULL
    );
"""
]
