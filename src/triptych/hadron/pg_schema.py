"""PostgreSQL's DDL for Hadron (server mode): every migration component's scripts, in order (a script's
position is its version). SQLite's own are in ``sqlite_schema``; a change to a table is a new script in
both modules, each in its engine's SQL.

What keeps the answers identical to the embedded engine's:

- ``nodes.rowid`` is an identity column (SQLite's implicit rowid): the in-process indexes key nodes by it;
  the worklog's, sessions' and action runs' ``n`` likewise break ties of a timestamp in insertion order.
- Sorted and ranged text is ``COLLATE "C"``, SQLite's byte order (``binary_text``): subtree ranges
  (``loc > 'a:' AND loc < 'a;'``), channel address ranges and every ``ORDER BY`` give the same answers.
- Integers are BIGINT where SQLite's 64-bit values may go; JSON stays text, so stored documents come back
  byte for byte.
- The triggers that feed ``node_text_changes`` (the log the in-process BM25 follows) and
  ``vector_generations`` (the in-process vector index's coherence counter) are PL/pgSQL twins of the
  SQLite ones. A memory's sequence numbers must be taken in its commit order for a worker that saw its
  number N to have seen every change of it before N: every write to a memory's nodes holds that memory's
  key (``write_keys.memory``) or the store-wide write lock (``engines.WRITE_LOCK``).
"""

from __future__ import annotations

from triptych.core.pg import Migration


def binary_text(script: str) -> str:
    """DDL whose text columns compare and sort byte-wise, as SQLite's (BINARY) do: listings, channel address
    ranges and timestamp comparisons then answer as on the embedded engine."""
    return script.replace(" TEXT", ' TEXT COLLATE "C"')


# Component "hadron": the embedded schema as it stood after its migrations, with its own history since.
HADRON: list[Migration] = [
    """
    CREATE TABLE orgs (
        id TEXT COLLATE "C" PRIMARY KEY, root TEXT COLLATE "C" NOT NULL UNIQUE, name TEXT COLLATE "C" NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL
    );
    CREATE TABLE users (
        id TEXT COLLATE "C" PRIMARY KEY, handle TEXT COLLATE "C" NOT NULL UNIQUE, name TEXT COLLATE "C" NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL
    );
    CREATE TABLE org_members (
        org_id TEXT COLLATE "C" NOT NULL REFERENCES orgs(id), user_id TEXT COLLATE "C" NOT NULL REFERENCES users(id),
        role TEXT NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'CONTRIBUTOR', 'READER')),
        PRIMARY KEY (org_id, user_id)
    );
    CREATE INDEX org_members_by_user ON org_members (user_id);
    CREATE TABLE apps (
        id TEXT COLLATE "C" PRIMARY KEY, slug TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL,
        org_id TEXT COLLATE "C" REFERENCES orgs(id), owner_user_id TEXT COLLATE "C" REFERENCES users(id),
        root TEXT COLLATE "C" NOT NULL, created_at TEXT COLLATE "C" NOT NULL,
        CHECK ((org_id IS NULL) != (owner_user_id IS NULL)),
        UNIQUE (root, slug)
    );
    CREATE TABLE app_members (
        app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(id), user_id TEXT COLLATE "C" NOT NULL REFERENCES users(id),
        role TEXT NOT NULL CHECK (role IN ('OWNER', 'ADMIN', 'CONTRIBUTOR', 'READER')),
        PRIMARY KEY (app_id, user_id)
    );
    CREATE INDEX app_members_by_user ON app_members (user_id);
    CREATE TABLE app_keys (
        id TEXT COLLATE "C" PRIMARY KEY, app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(id),
        key_hash TEXT NOT NULL UNIQUE, preview TEXT NOT NULL, label TEXT, created_at TEXT COLLATE "C" NOT NULL,
        revoked_at TEXT
    );
    CREATE TABLE memories (
        id TEXT COLLATE "C" PRIMARY KEY, root TEXT COLLATE "C" NOT NULL, slug TEXT COLLATE "C" NOT NULL,
        name TEXT COLLATE "C" NOT NULL, description TEXT NOT NULL DEFAULT '',
        class TEXT NOT NULL CHECK (class IN ('app', 'group', 'knowledge', 'personal', 'private', 'system')),
        org_id TEXT COLLATE "C" REFERENCES orgs(id), app_id TEXT COLLATE "C" REFERENCES apps(id),
        user_id TEXT COLLATE "C" REFERENCES users(id),
        encrypted INTEGER NOT NULL DEFAULT 0,
        schema_json TEXT,
        embedding_policy TEXT NOT NULL DEFAULT 'none',
        created_at TEXT COLLATE "C" NOT NULL, deleted_at TEXT,
        CHECK (num_nonnulls(org_id, app_id, user_id) = 1),
        UNIQUE (root, slug)
    );
    CREATE TABLE memory_access (
        memory_id TEXT COLLATE "C" NOT NULL REFERENCES memories(id),
        principal_type TEXT NOT NULL CHECK (principal_type IN ('user', 'app')),
        principal_id TEXT COLLATE "C" NOT NULL,
        access TEXT NOT NULL CHECK (access IN ('read-only', 'read-write')),
        PRIMARY KEY (memory_id, principal_type, principal_id)
    );
    CREATE INDEX memory_access_by_principal ON memory_access (principal_type, principal_id);
    CREATE TABLE app_memories (
        app_id TEXT COLLATE "C" NOT NULL REFERENCES apps(id), memory_id TEXT COLLATE "C" NOT NULL REFERENCES memories(id),
        position INTEGER NOT NULL, PRIMARY KEY (app_id, memory_id)
    );
    CREATE TABLE client_selections (
        user_id TEXT COLLATE "C" NOT NULL, client_id TEXT COLLATE "C" NOT NULL,
        app_id TEXT, memory_id TEXT, org_id TEXT, scope_id TEXT,
        session_id TEXT, updated_at TEXT NOT NULL,
        PRIMARY KEY (user_id, client_id)
    );
    CREATE TABLE nodes (
        rowid BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE,
        id TEXT COLLATE "C" PRIMARY KEY, memory_id TEXT COLLATE "C" NOT NULL REFERENCES memories(id),
        loc TEXT COLLATE "C" NOT NULL, parent_loc TEXT COLLATE "C" NOT NULL, name TEXT COLLATE "C" NOT NULL,
        node_type TEXT COLLATE "C" NOT NULL, object_type TEXT COLLATE "C", description TEXT, content TEXT,
        seq INTEGER, tags TEXT NOT NULL DEFAULT '[]', properties TEXT NOT NULL DEFAULT '{}', data TEXT,
        llm_model TEXT, ai_agent TEXT, revision INTEGER NOT NULL DEFAULT 1,
        created_at TEXT COLLATE "C" NOT NULL, updated_at TEXT COLLATE "C" NOT NULL, created_by TEXT NOT NULL,
        updated_by TEXT NOT NULL, deleted_at TEXT
    );
    CREATE UNIQUE INDEX nodes_live_loc ON nodes (memory_id, loc) WHERE deleted_at IS NULL;
    CREATE INDEX nodes_children ON nodes (memory_id, parent_loc, seq) WHERE deleted_at IS NULL;
    CREATE INDEX nodes_objects ON nodes (memory_id, object_type) WHERE deleted_at IS NULL;
    CREATE TABLE edges (
        id TEXT COLLATE "C" PRIMARY KEY,
        source_id TEXT COLLATE "C" NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        loc TEXT COLLATE "C" NOT NULL, name TEXT, description TEXT,
        target_id TEXT COLLATE "C", target_memory_id TEXT COLLATE "C", target_loc TEXT COLLATE "C",
        target_ref TEXT NOT NULL, is_runnable INTEGER NOT NULL DEFAULT 0, position INTEGER NOT NULL,
        UNIQUE (source_id, loc)
    );
    CREATE INDEX edges_by_target ON edges (target_id);
    CREATE TABLE node_revisions (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, node_id TEXT COLLATE "C" NOT NULL,
        revision INTEGER NOT NULL, operation TEXT NOT NULL, actor TEXT NOT NULL, at TEXT NOT NULL, reason TEXT,
        snapshot TEXT NOT NULL
    );
    CREATE INDEX node_revisions_by_node ON node_revisions (node_id, revision);
    CREATE TABLE node_embeddings (
        node_id TEXT COLLATE "C" PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
        model TEXT NOT NULL, dim INTEGER NOT NULL, vector BYTEA, status TEXT NOT NULL, error TEXT,
        updated_at TEXT NOT NULL, text_hash TEXT
    );
    CREATE TABLE vector_generations (memory_id TEXT COLLATE "C" PRIMARY KEY, generation BIGINT NOT NULL);
    CREATE TABLE scopes (
        id TEXT COLLATE "C" PRIMARY KEY, name TEXT COLLATE "C" NOT NULL, description TEXT,
        owner_type TEXT NOT NULL CHECK (owner_type IN ('organization', 'app', 'agent')),
        owner_id TEXT COLLATE "C" NOT NULL, memory_ids TEXT NOT NULL, created_by TEXT NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, deleted_at TEXT
    );
    CREATE UNIQUE INDEX scopes_live_name ON scopes (owner_type, owner_id, name) WHERE deleted_at IS NULL;
    CREATE TABLE node_text_changes (
        seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, memory_id TEXT COLLATE "C" NOT NULL,
        node_rowid BIGINT NOT NULL
    );
    CREATE INDEX node_text_changes_by_memory ON node_text_changes (memory_id, seq);

    -- The log keeps its last 50,000 entries (an index older than that reloads its memory).
    CREATE FUNCTION hadron_text_changes_prune() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM node_text_changes WHERE seq <= NEW.seq - 50000;
        RETURN NULL;
    END $$;
    CREATE TRIGGER node_text_changes_prune AFTER INSERT ON node_text_changes
        FOR EACH ROW EXECUTE FUNCTION hadron_text_changes_prune();

    -- A node whose searchable text, liveness or memory changed: its rowid in the log (both memories').
    CREATE FUNCTION hadron_node_text_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            IF NEW.deleted_at IS NULL THEN
                INSERT INTO node_text_changes (memory_id, node_rowid) VALUES (NEW.memory_id, NEW.rowid);
            END IF;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO node_text_changes (memory_id, node_rowid) VALUES (OLD.memory_id, OLD.rowid);
        ELSIF OLD.name IS DISTINCT FROM NEW.name OR OLD.description IS DISTINCT FROM NEW.description
            OR OLD.content IS DISTINCT FROM NEW.content OR OLD.tags IS DISTINCT FROM NEW.tags
            OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at OR OLD.memory_id IS DISTINCT FROM NEW.memory_id
        THEN
            INSERT INTO node_text_changes (memory_id, node_rowid) VALUES (OLD.memory_id, OLD.rowid);
            IF NEW.memory_id IS DISTINCT FROM OLD.memory_id THEN
                INSERT INTO node_text_changes (memory_id, node_rowid) VALUES (NEW.memory_id, NEW.rowid);
            END IF;
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER nodes_text_changes AFTER INSERT OR UPDATE OR DELETE ON nodes
        FOR EACH ROW EXECUTE FUNCTION hadron_node_text_change();

    CREATE FUNCTION hadron_bump_vectors(memory TEXT) RETURNS void LANGUAGE sql AS $$
        INSERT INTO vector_generations (memory_id, generation) VALUES (memory, 1)
        ON CONFLICT (memory_id) DO UPDATE SET generation = vector_generations.generation + 1;
    $$;
    -- Each change to a vector row bumps its memory's generation once.
    CREATE FUNCTION hadron_embedding_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        memory TEXT;
    BEGIN
        IF TG_OP = 'DELETE' THEN
            SELECT memory_id INTO memory FROM nodes WHERE id = OLD.node_id;
        ELSE
            SELECT memory_id INTO memory FROM nodes WHERE id = NEW.node_id;
        END IF;
        IF memory IS NOT NULL THEN
            PERFORM hadron_bump_vectors(memory);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER embeddings_generation AFTER INSERT OR UPDATE OR DELETE ON node_embeddings
        FOR EACH ROW EXECUTE FUNCTION hadron_embedding_change();
    -- A node with a vector moved to another memory, deleted or restored: both memories' vectors changed.
    CREATE FUNCTION hadron_node_vector_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF (OLD.memory_id IS DISTINCT FROM NEW.memory_id OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at)
            AND EXISTS (SELECT 1 FROM node_embeddings WHERE node_id = NEW.id)
        THEN
            PERFORM hadron_bump_vectors(OLD.memory_id);
            PERFORM hadron_bump_vectors(NEW.memory_id);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER nodes_vector_generation AFTER UPDATE OF memory_id, deleted_at ON nodes
        FOR EACH ROW EXECUTE FUNCTION hadron_node_vector_change();
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

# hadron-receipts: per Channel, the highest seq each worker has read (issue 32); no foreign keys.
RECEIPTS: list[Migration] = [
    """
    CREATE TABLE channel_receipts (
        channel_id TEXT NOT NULL, reader TEXT NOT NULL, seq BIGINT NOT NULL, at TEXT NOT NULL,
        PRIMARY KEY (channel_id, reader)
    );
    """
]

# hadron-team: agents, workers, sessions, channels, registers, worklog (they reference apps, users, memories).
TEAM: list[Migration] = [
    binary_text(
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
        n BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE, id TEXT PRIMARY KEY, app_id TEXT NOT NULL REFERENCES apps(id), user_id TEXT REFERENCES users(id),
        worker_id TEXT REFERENCES workers(id), description TEXT NOT NULL, type TEXT NOT NULL,
        repo TEXT, branch TEXT, pr_number BIGINT, language TEXT, llm_model TEXT,
        parent_session_id TEXT, prev_session_id TEXT, started_at TEXT NOT NULL, last_active_at TEXT NOT NULL,
        ended_at TEXT, end_reason TEXT, expires_at TEXT, summary TEXT, handoff TEXT,
        error_count BIGINT, turn_count BIGINT, input_tokens BIGINT, output_tokens BIGINT
    );
    CREATE INDEX work_sessions_by_worker ON work_sessions (worker_id, started_at, n);
    CREATE INDEX work_sessions_by_user ON work_sessions (user_id, started_at, n);
    CREATE INDEX work_sessions_by_app ON work_sessions (app_id, started_at, n);
    CREATE INDEX work_sessions_expiring ON work_sessions (expires_at) WHERE ended_at IS NULL;
    CREATE TABLE session_events (session_id TEXT NOT NULL, at TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT);
    CREATE INDEX session_events_by_session ON session_events (session_id, at);
    CREATE TABLE session_nodes (node_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, at TEXT NOT NULL);
    CREATE TABLE channels (
        id TEXT PRIMARY KEY, memory_id TEXT NOT NULL REFERENCES memories(id), loc TEXT NOT NULL,
        name TEXT NOT NULL, app_id TEXT REFERENCES apps(id), last_seq BIGINT NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL, created_by TEXT NOT NULL, UNIQUE (memory_id, loc)
    );
    CREATE INDEX channels_by_app ON channels (app_id);
    CREATE TABLE channel_messages (
        channel_id TEXT NOT NULL REFERENCES channels(id), seq BIGINT NOT NULL, body TEXT NOT NULL,
        author TEXT NOT NULL, session_id TEXT, reply_to_seq BIGINT, mentions TEXT NOT NULL,
        created_at TEXT NOT NULL, PRIMARY KEY (channel_id, seq)
    );
    CREATE TABLE message_mentions (
        channel_id TEXT NOT NULL, ref TEXT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (channel_id, ref, seq)
    );
    CREATE TABLE registers (
        id TEXT PRIMARY KEY, owner_app_id TEXT NOT NULL REFERENCES apps(id),
        channel_id TEXT NOT NULL REFERENCES channels(id), attendee TEXT, role TEXT,
        mention_only INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, created_by TEXT NOT NULL
    );
    CREATE INDEX registers_by_channel ON registers (channel_id);
    CREATE INDEX registers_by_owner ON registers (owner_app_id, created_at, id);
    CREATE TABLE work_items (
        n BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, id TEXT NOT NULL UNIQUE,
        app_id TEXT NOT NULL REFERENCES apps(id), session_id TEXT NOT NULL REFERENCES work_sessions(id),
        user_id TEXT, worker_id TEXT, tool TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT NOT NULL,
        action TEXT NOT NULL, detail TEXT, created_at TEXT NOT NULL
    );
    CREATE INDEX work_items_by_ref ON work_items (app_id, ref, n);
    CREATE INDEX work_items_by_session ON work_items (app_id, session_id, n);
    CREATE INDEX work_items_by_app ON work_items (app_id, n);
    """
    ),
]

# hadron-abstracts
ABSTRACTS: list[Migration] = [
    binary_text(
        """
    CREATE TABLE node_abstracts (
        node_id TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
        abstract TEXT NOT NULL, content_hash TEXT NOT NULL, method TEXT NOT NULL, updated_at TEXT NOT NULL
    );
    """
    ),
]

# hadron-actions
ACTIONS: list[Migration] = [
    binary_text(
        """
    CREATE TABLE action_runs (
        n BIGINT GENERATED BY DEFAULT AS IDENTITY UNIQUE,
        id TEXT PRIMARY KEY, node_id TEXT NOT NULL, memory_id TEXT NOT NULL, node_revision BIGINT NOT NULL,
        kind TEXT NOT NULL, actor TEXT NOT NULL, work_session_id TEXT, parent_run_id TEXT,
        started_at TEXT NOT NULL, duration_ms DOUBLE PRECISION NOT NULL, args TEXT NOT NULL,
        outcome TEXT NOT NULL, error TEXT, output_chars BIGINT, output_sha256 TEXT
    );
    CREATE INDEX action_runs_by_node ON action_runs (node_id, started_at, n);
    """
    ),
]

# hadron-git
GIT: list[Migration] = [
    binary_text(
        """
    CREATE TABLE git_sources (
        memory_id TEXT PRIMARY KEY REFERENCES memories(id), url TEXT NOT NULL, branch TEXT,
        commit_sha TEXT, synced_at TEXT, attached_at TEXT NOT NULL, last_error TEXT
    );
    CREATE TABLE git_files (
        memory_id TEXT NOT NULL, path TEXT NOT NULL, node_id TEXT NOT NULL, blob TEXT NOT NULL,
        revision BIGINT NOT NULL, PRIMARY KEY (memory_id, path)
    );
    CREATE INDEX git_files_by_node ON git_files (node_id);
    """
    ),
]

# hadron-locks
LOCKS: list[Migration] = [
    binary_text("""
    CREATE TABLE memory_locks (
        memory_id TEXT PRIMARY KEY REFERENCES memories(id), holder TEXT NOT NULL, locked_by TEXT NOT NULL,
        reason TEXT, locked_at TEXT NOT NULL, expires_at TEXT NOT NULL
    );
""")
]
