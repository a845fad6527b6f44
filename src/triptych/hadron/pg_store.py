"""Hadron on PostgreSQL (server mode): the schema of tenancy, graph, search and selections, and the
search store's two SQL functions done in Python.

The stores of ``store.py`` and ``search_store.py`` are written in the SQL SQLite 3.35+ and PostgreSQL
share and run here on a ``core.pg.PortableDatabase`` (psycopg 3 pool, server-side parameters). This
schema is the embedded one as it stands after its migrations, with its own history from here:

- ``nodes.rowid`` is an identity column (SQLite's implicit rowid): the in-process indexes key nodes by it.
- Sorted and ranged text is ``COLLATE "C"``, SQLite's byte order: subtree ranges (``loc > 'a:' AND
  loc < 'a;'``) and every ``ORDER BY`` give the embedded engine's answers.
- The triggers that feed ``node_text_changes`` (the log the in-process BM25 follows) and
  ``vector_generations`` (the in-process vector index's coherence counter) are PL/pgSQL twins of the
  SQLite ones. Their sequence numbers must be taken in commit order for a worker that saw number N to
  have seen every change before it: every Hadron write holds one transaction-scoped advisory lock
  (``PortableDatabase(write_lock="hadron")``), one writer at a time as SQLite's.

The team tables (agents, workers, sessions, channels...), action runs, abstracts and git bookkeeping
migrate as components of their own, after this one (their foreign keys point here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from triptych.core.pg import PgDatabase, PortableDatabase
from triptych.core.regex import LinearPattern
from triptych.hadron.search_store import (
    REGEX_FIELDS,
    NodeFilter,
    SqliteSearchStore,
    _conditions,
    _where_function,
    regex_hit,
)

COMPONENT = "hadron"
# One Hadron writer at a time across workers (the advisory lock every Hadron store's writes take).
WRITE_LOCK = "hadron"

PG_MIGRATIONS = [
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


def open_database(pg: PgDatabase) -> PortableDatabase:
    """Hadron's handle on ``pg``, migrated: one per process, shared by every Hadron store so that the
    writes of one service call (graph, team, search) join one transaction."""
    db = PortableDatabase(pg, write_lock=WRITE_LOCK)
    db.migrate(COMPONENT, PG_MIGRATIONS)
    return db


class PgSearchStore(SqliteSearchStore):
    """The search store on PostgreSQL: the same SQL, except the two SQLite functions it registers
    (``hadron_where`` over properties/data, ``hadron_regex`` over the text columns), which run here in
    Python over the rows the other conditions select, in the same order, before the limit."""

    def _prepare(self, f: NodeFilter) -> Any:
        return self.conn

    def _select(
        self,
        f: NodeFilter,
        columns: str,
        tail: str = "",
        tail_params: Sequence[Any] = (),
        limit: int | None = None,
    ) -> list[Sequence[Any]]:
        if f.where is None:
            return super()._select(f, columns, tail, tail_params, limit)
        cond, params = _conditions(replace(f, where=None))
        rows = self.conn.execute(
            f"SELECT {columns}, n.properties, n.data FROM nodes n WHERE {cond}{tail}", (*params, *tail_params)
        ).fetchall()
        test = _where_function(f.where)  # the embedded engine's SQL function, called here
        kept: list[Sequence[Any]] = []
        for row in rows:
            if test(row[-2], row[-1]):
                kept.append(tuple(row)[:-2])
                if limit is not None and len(kept) >= limit:
                    break
        return kept

    def regex(self, f: NodeFilter, pattern: LinearPattern, limit: int) -> list[tuple[int, float]]:
        def score(row: Sequence[Any]) -> int:
            for i, text in enumerate(row[2:]):
                if text is not None and pattern.search(text):
                    return len(REGEX_FIELDS) - i
            return 0

        fields = ", ".join(f"n.{field}" for field in REGEX_FIELDS)
        rows = self._select(f, f"n.rowid, n.loc, {fields}")
        scored = [(int(r[0]), r[1], s) for r in rows if (s := score(r)) > 0]
        scored.sort(key=lambda x: (-x[2], x[1]))
        return [regex_hit(rowid, s) for rowid, _, s in scored[:limit]]
