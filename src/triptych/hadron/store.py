"""Hadron persistence: tenancy (orgs, users, apps, keys, memories, grants), client selections, and
the graph (nodes, edges, revisions) in one SQLite file, ``hadron.db``, or in PostgreSQL (server mode).

``TenancyStore`` and ``GraphStore`` are the engine-neutral interfaces the services use (protocols
below). ``SqliteTenancyStore`` and ``SqliteGraphStore`` are written in the SQL SQLite 3.35+ and
PostgreSQL share: on the embedded default they run on a ``core.db.Database``, in server mode on a
``core.pg.PortableDatabase`` over the schema of ``pg_store.PG_MIGRATIONS`` (``pg_store.py``). Every
multi-row write runs inside one transaction; the services open it through ``atomic()``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import PortableConnection, PortableDatabase
from triptych.hadron.domain.model import App, EdgeRecord, Memory, NodeRecord, Org, Revision, User

MIGRATIONS = [
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


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id() -> str:
    return uuid.uuid4().hex


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


# ─── Interfaces ──────────────────────────────────────────────────────────────


class TenancyStore(Protocol):
    def atomic(self) -> Any: ...
    def add_org(self, root: str, name: str) -> Org: ...
    def org(self, org_id: str) -> Org | None: ...
    def org_by_root(self, root: str) -> Org | None: ...
    def add_user(self, handle: str, name: str) -> User: ...
    def user(self, user_id: str) -> User | None: ...
    def user_by_handle(self, handle: str) -> User | None: ...
    def set_org_member(self, org_id: str, user_id: str, role: str) -> None: ...
    def org_memberships(self, user_id: str) -> list[tuple[Org, str]]: ...
    def org_role(self, org_id: str, user_id: str) -> str | None: ...
    def users_in_orgs(self, org_ids: Sequence[str]) -> list[User]: ...
    def add_app(self, slug: str, name: str, org: Org | None, owner: User | None) -> App: ...
    def app(self, app_id: str) -> App | None: ...
    def app_by_urn(self, root: str, slug: str) -> App | None: ...
    def apps(self) -> list[App]: ...
    def set_app_member(self, app_id: str, user_id: str, role: str) -> None: ...
    def app_role(self, app_id: str, user_id: str) -> str | None: ...
    def app_member_ids(self, app_id: str) -> list[str]: ...
    def add_app_key(self, app_id: str, raw: str, label: str | None) -> str: ...
    def app_for_key(self, raw: str) -> App | None: ...
    def add_memory(self, memory: Memory) -> Memory: ...
    def memory(self, memory_id: str) -> Memory | None: ...
    def memory_by_key(self, root: str, slug: str) -> Memory | None: ...
    def memories(self) -> list[Memory]: ...
    def set_memory_schema(self, memory_id: str, schema: dict[str, Any] | None) -> None: ...
    def set_embedding_policy(self, memory_id: str, policy: str) -> None: ...
    def grant(self, memory_id: str, principal_type: str, principal_id: str, access: str) -> None: ...
    def grants(self, memory_id: str) -> dict[tuple[str, str], str]: ...
    def grants_of(self, memory_ids: Sequence[str]) -> dict[str, dict[tuple[str, str], str]]: ...
    def attach_memory(self, app_id: str, memory_id: str) -> None: ...
    def attached_memories(self, app_id: str) -> list[str]: ...
    def load_selection(self, user_id: str, client_id: str) -> dict[str, Any] | None: ...
    def save_selection(self, user_id: str, client_id: str, values: dict[str, Any]) -> None: ...


class GraphStore(Protocol):
    def atomic(self) -> Any: ...
    def node_by_loc(self, memory_id: str, loc: str) -> NodeRecord | None: ...
    def node_by_id(self, node_id: str) -> NodeRecord | None: ...
    def insert_node(self, node: NodeRecord) -> None: ...
    def update_node(self, node: NodeRecord) -> None: ...
    def replace_edges(self, source_id: str, edges: Sequence[EdgeRecord]) -> None: ...
    def upsert_edge(self, edge: EdgeRecord) -> EdgeRecord: ...
    def edges_from(self, source_ids: Sequence[str]) -> dict[str, list[EdgeRecord]]: ...
    def edge_by_id(self, edge_id: str) -> EdgeRecord | None: ...
    def nodes_at(self, memory_ids: Sequence[str], loc: str) -> list[NodeRecord]: ...
    def edges_at(self, memory_id: str, loc: str) -> list[EdgeRecord]: ...
    def update_edge(self, edge: EdgeRecord) -> None: ...
    def add_revision(self, node: NodeRecord, operation: str, actor: str, reason: str | None) -> None: ...
    def add_revisions(
        self, items: Sequence[tuple[NodeRecord, str | None]], operation: str, actor: str, *, full: bool = True
    ) -> None: ...
    def revisions(self, node_id: str, limit: int = 20) -> list[Revision]: ...
    def children(self, memory_id: str, parent: str, limit: int = 1000) -> list[NodeRecord]: ...
    def branch_locs(self, memory_id: str, parent: str) -> list[str]: ...
    def subtree(self, memory_id: str, loc: str) -> list[NodeRecord]: ...
    def live_locs(self, memory_id: str, locs: Sequence[str]) -> dict[str, str]: ...
    def count_descendants(self, memory_id: str, loc: str) -> int: ...
    def relocate(self, moves: Sequence[tuple[str, str, str, str]], actor: str, at: str) -> None: ...
    def retarget_dangling(self, source_ids: Sequence[str], src: str, old: str, dst: str, new: str) -> int: ...
    def soft_delete(self, node_ids: Sequence[str], at: str) -> None: ...
    def hard_delete(self, node_ids: Sequence[str]) -> None: ...
    def incoming_edges(self, node_ids: Sequence[str]) -> list[tuple[EdgeRecord, str]]: ...
    def delete_edges(self, edge_ids: Sequence[str]) -> None: ...
    def objects(self, memory_id: str, object_type: str) -> list[NodeRecord]: ...
    def memory_nodes(self, memory_id: str) -> Iterator[NodeRecord]: ...
    def failed_embeddings(self, memory_id: str) -> list[tuple[str, str, str | None]]: ...


class NodeCodec(Protocol):
    """What the store applies to a node on its way in (``seal``) and out (``open``)."""

    def seal(self, node: NodeRecord) -> NodeRecord: ...
    def open(self, node: NodeRecord) -> NodeRecord: ...


# ─── SQLite ──────────────────────────────────────────────────────────────────


class _SqliteBase:
    def __init__(self, db: Database | PortableDatabase) -> None:
        self.db = db

    @property
    def conn(self) -> sqlite3.Connection | PortableConnection:
        """A ``sqlite3.Connection``, or on PostgreSQL its stand-in (``core.pg.PortableConnection``)."""
        return self.db.conn

    @contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection | PortableConnection]:
        """One transaction; nested calls join the outer one."""
        conn = self.conn
        if conn.in_transaction:
            yield conn
            return
        with self.db.transaction() as tx:
            yield tx


def open_database(path: Path) -> Database:
    return Database(path, MIGRATIONS)


class SqliteTenancyStore(_SqliteBase):
    def __init__(self, db: Database | PortableDatabase, clock: Callable[[], str] = utcnow) -> None:
        super().__init__(db)
        self.clock = clock

    # orgs and users
    def add_org(self, root: str, name: str) -> Org:
        org = Org(new_id(), root, name)
        with self.atomic() as tx:
            tx.execute("INSERT INTO orgs VALUES (?, ?, ?, ?)", (org.id, root, name, self.clock()))
        return org

    def org(self, org_id: str) -> Org | None:
        row = self.conn.execute("SELECT id, root, name FROM orgs WHERE id = ?", (org_id,)).fetchone()
        return Org(*row) if row else None

    def org_by_root(self, root: str) -> Org | None:
        row = self.conn.execute("SELECT id, root, name FROM orgs WHERE root = ?", (root,)).fetchone()
        return Org(*row) if row else None

    def add_user(self, handle: str, name: str) -> User:
        user = User(new_id(), handle, name)
        with self.atomic() as tx:
            tx.execute("INSERT INTO users VALUES (?, ?, ?, ?)", (user.id, handle, name, self.clock()))
        return user

    def user(self, user_id: str) -> User | None:
        row = self.conn.execute("SELECT id, handle, name FROM users WHERE id = ?", (user_id,)).fetchone()
        return User(*row) if row else None

    def user_by_handle(self, handle: str) -> User | None:
        row = self.conn.execute("SELECT id, handle, name FROM users WHERE handle = ?", (handle,)).fetchone()
        return User(*row) if row else None

    def set_org_member(self, org_id: str, user_id: str, role: str) -> None:
        with self.atomic() as tx:
            tx.execute(
                "INSERT INTO org_members VALUES (?, ?, ?) "
                "ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
                (org_id, user_id, role),
            )

    def org_memberships(self, user_id: str) -> list[tuple[Org, str]]:
        rows = self.conn.execute(
            "SELECT o.id, o.root, o.name, m.role FROM org_members m JOIN orgs o ON o.id = m.org_id "
            "WHERE m.user_id = ? ORDER BY o.root",
            (user_id,),
        ).fetchall()
        return [(Org(r[0], r[1], r[2]), r[3]) for r in rows]

    def users_in_orgs(self, org_ids: Sequence[str]) -> list[User]:
        if not org_ids:
            return []
        rows = self.conn.execute(
            "SELECT DISTINCT u.id, u.handle, u.name FROM users u JOIN org_members m ON m.user_id = u.id "
            f"WHERE m.org_id IN ({', '.join('?' * len(org_ids))}) ORDER BY u.handle",
            tuple(org_ids),
        ).fetchall()
        return [User(r[0], r[1], r[2]) for r in rows]

    def org_role(self, org_id: str, user_id: str) -> str | None:
        row = self.conn.execute(
            "SELECT role FROM org_members WHERE org_id = ? AND user_id = ?", (org_id, user_id)
        ).fetchone()
        return str(row[0]) if row else None

    # apps
    _APP = "SELECT id, slug, name, org_id, owner_user_id, root FROM apps"

    def add_app(self, slug: str, name: str, org: Org | None, owner: User | None) -> App:
        root = org.root if org else owner.handle if owner else ""
        app = App(new_id(), slug, name, org.id if org else None, owner.id if owner else None, root)
        with self.atomic() as tx:
            tx.execute(
                "INSERT INTO apps VALUES (?, ?, ?, ?, ?, ?, ?)",
                (app.id, slug, name, app.org_id, app.owner_user_id, root, self.clock()),
            )
        return app

    def app(self, app_id: str) -> App | None:
        row = self.conn.execute(self._APP + " WHERE id = ?", (app_id,)).fetchone()
        return App(*row) if row else None

    def app_by_urn(self, root: str, slug: str) -> App | None:
        row = self.conn.execute(self._APP + " WHERE root = ? AND slug = ?", (root, slug)).fetchone()
        return App(*row) if row else None

    def apps(self) -> list[App]:
        return [App(*r) for r in self.conn.execute(self._APP + " ORDER BY root, slug").fetchall()]

    def set_app_member(self, app_id: str, user_id: str, role: str) -> None:
        with self.atomic() as tx:
            tx.execute(
                "INSERT INTO app_members VALUES (?, ?, ?) "
                "ON CONFLICT (app_id, user_id) DO UPDATE SET role = excluded.role",
                (app_id, user_id, role),
            )

    def app_role(self, app_id: str, user_id: str) -> str | None:
        row = self.conn.execute(
            "SELECT role FROM app_members WHERE app_id = ? AND user_id = ?", (app_id, user_id)
        ).fetchone()
        return str(row[0]) if row else None

    def app_member_ids(self, app_id: str) -> list[str]:
        rows = self.conn.execute("SELECT user_id FROM app_members WHERE app_id = ?", (app_id,)).fetchall()
        return [r[0] for r in rows]

    def add_app_key(self, app_id: str, raw: str, label: str | None) -> str:
        key_id = new_id()
        with self.atomic() as tx:
            tx.execute(
                "INSERT INTO app_keys VALUES (?, ?, ?, ?, ?, ?, NULL)",
                (key_id, app_id, hash_key(raw), "…" + raw[-4:], label, self.clock()),
            )
        return key_id

    def app_for_key(self, raw: str) -> App | None:
        row = self.conn.execute(
            "SELECT app_id FROM app_keys WHERE key_hash = ? AND revoked_at IS NULL", (hash_key(raw),)
        ).fetchone()
        return self.app(row[0]) if row else None

    # memories and access
    _MEMORY = (
        "SELECT id, root, slug, name, description, class, org_id, app_id, user_id, encrypted, schema_json, "
        "embedding_policy FROM memories"
    )

    @staticmethod
    def _memory(row: Sequence[Any]) -> Memory:
        schema = json.loads(row[10]) if row[10] else None
        return Memory(
            id=row[0], root=row[1], slug=row[2], name=row[3], description=row[4], memory_class=row[5],
            org_id=row[6], app_id=row[7], user_id=row[8], encrypted=bool(row[9]), schema=schema,
            embedding_policy=row[11],
        )  # fmt: skip

    def add_memory(self, memory: Memory) -> Memory:
        with self.atomic() as tx:
            tx.execute(
                "INSERT INTO memories (id, root, slug, name, description, class, org_id, app_id, user_id, "
                "encrypted, schema_json, embedding_policy, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    memory.id, memory.root, memory.slug, memory.name, memory.description,
                    memory.memory_class, memory.org_id, memory.app_id, memory.user_id, int(memory.encrypted),
                    _json(memory.schema) if memory.schema else None, memory.embedding_policy, self.clock(),
                ),
            )  # fmt: skip
        return memory

    def memory(self, memory_id: str) -> Memory | None:
        sql = self._MEMORY + " WHERE id = ? AND deleted_at IS NULL"
        row = self.conn.execute(sql, (memory_id,)).fetchone()
        return self._memory(row) if row else None

    def memory_by_key(self, root: str, slug: str) -> Memory | None:
        row = self.conn.execute(
            self._MEMORY + " WHERE root = ? AND slug = ? AND deleted_at IS NULL", (root, slug)
        ).fetchone()
        return self._memory(row) if row else None

    def memories(self) -> list[Memory]:
        rows = self.conn.execute(self._MEMORY + " WHERE deleted_at IS NULL ORDER BY root, slug").fetchall()
        return [self._memory(r) for r in rows]

    def set_memory_schema(self, memory_id: str, schema: dict[str, Any] | None) -> None:
        with self.atomic() as tx:
            tx.execute(
                "UPDATE memories SET schema_json = ? WHERE id = ?",
                (_json(schema) if schema is not None else None, memory_id),
            )

    def set_embedding_policy(self, memory_id: str, policy: str) -> None:
        with self.atomic() as tx:
            tx.execute("UPDATE memories SET embedding_policy = ? WHERE id = ?", (policy, memory_id))

    def grant(self, memory_id: str, principal_type: str, principal_id: str, access: str) -> None:
        with self.atomic() as tx:
            tx.execute(
                "INSERT INTO memory_access VALUES (?, ?, ?, ?) ON CONFLICT (memory_id, principal_type, "
                "principal_id) DO UPDATE SET access = excluded.access",
                (memory_id, principal_type, principal_id, access),
            )

    def grants(self, memory_id: str) -> dict[tuple[str, str], str]:
        rows = self.conn.execute(
            "SELECT principal_type, principal_id, access FROM memory_access WHERE memory_id = ?", (memory_id,)
        ).fetchall()
        return {(r[0], r[1]): r[2] for r in rows}

    def grants_of(self, memory_ids: Sequence[str]) -> dict[str, dict[tuple[str, str], str]]:
        """``grants`` of several memories in one read per 500."""
        out: dict[str, dict[tuple[str, str], str]] = {}
        for chunk in _chunks(list(memory_ids)):
            rows = self.conn.execute(
                "SELECT memory_id, principal_type, principal_id, access FROM memory_access "
                f"WHERE memory_id IN ({', '.join('?' * len(chunk))})",
                tuple(chunk),
            ).fetchall()
            for r in rows:
                out.setdefault(r[0], {})[(r[1], r[2])] = r[3]
        return out

    def attach_memory(self, app_id: str, memory_id: str) -> None:
        with self.atomic() as tx:
            position = tx.execute(
                "SELECT COALESCE(MAX(position), -1) + 1 FROM app_memories WHERE app_id = ?", (app_id,)
            ).fetchone()[0]
            tx.execute(
                "INSERT INTO app_memories VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (app_id, memory_id, position),
            )

    def attached_memories(self, app_id: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT memory_id FROM app_memories WHERE app_id = ? ORDER BY position", (app_id,)
        ).fetchall()
        return [r[0] for r in rows]

    # selections persisted per (user, X-Hadron-Client-Id)
    def load_selection(self, user_id: str, client_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT app_id, memory_id, org_id, scope_id, session_id FROM client_selections "
            "WHERE user_id = ? AND client_id = ?",
            (user_id, client_id),
        ).fetchone()
        return dict(row) if row else None

    def save_selection(self, user_id: str, client_id: str, values: dict[str, Any]) -> None:
        with self.atomic() as tx:
            tx.execute(
                "INSERT INTO client_selections (user_id, client_id, app_id, memory_id, org_id, scope_id, "
                "session_id, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (user_id, client_id) "
                "DO UPDATE SET app_id = excluded.app_id, memory_id = excluded.memory_id, "
                "org_id = excluded.org_id, scope_id = excluded.scope_id, session_id = excluded.session_id, "
                "updated_at = excluded.updated_at",
                (
                    user_id, client_id, values.get("app_id"), values.get("memory_id"), values.get("org_id"),
                    values.get("scope_id"), values.get("session_id"), self.clock(),
                ),
            )  # fmt: skip


_NODE_COLUMNS = (
    "id, memory_id, loc, name, node_type, object_type, description, content, seq, tags, properties, data, "
    "llm_model, ai_agent, revision, created_at, updated_at, created_by, updated_by, deleted_at"
)
_EDGE_COLUMNS = (
    "id, source_id, loc, name, description, target_id, target_memory_id, target_loc, target_ref, "
    "is_runnable, position, priority, condition_json, data_json"
)
_EDGE_WIDTH = len(_EDGE_COLUMNS.split(", "))
_EDGE_MARKS = ", ".join("?" * _EDGE_WIDTH)
_EDGE_COLUMNS_OF_E = ", ".join(f"e.{c}" for c in _EDGE_COLUMNS.split(", "))  # joined with its source node
# The edge fields of the live server (priority, condition, data), added after the graph's own schema: a
# migration component of their own, written in the SQL both engines share.
EDGE_COMPONENT = "hadron-edges"
EDGE_MIGRATIONS = [
    """
    ALTER TABLE edges ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE edges ADD COLUMN condition_json TEXT;
    ALTER TABLE edges ADD COLUMN data_json TEXT;
    CREATE INDEX edges_by_loc ON edges (loc);
    """
]


def _node(row: Sequence[Any]) -> NodeRecord:
    return NodeRecord(
        id=row[0], memory_id=row[1], loc=row[2], name=row[3], node_type=row[4], object_type=row[5],
        description=row[6], content=row[7], seq=row[8], tags=json.loads(row[9]),
        properties=json.loads(row[10]), data=json.loads(row[11]) if row[11] is not None else None,
        llm_model=row[12], ai_agent=row[13], revision=row[14], created_at=row[15], updated_at=row[16],
        created_by=row[17], updated_by=row[18], deleted_at=row[19],
    )  # fmt: skip


def _edge(row: Sequence[Any]) -> EdgeRecord:
    return EdgeRecord(
        id=row[0], source_id=row[1], loc=row[2], name=row[3], description=row[4], target_id=row[5],
        target_memory_id=row[6], target_loc=row[7], target_ref=row[8], is_runnable=bool(row[9]),
        position=row[10], priority=row[11], condition=json.loads(row[12]) if row[12] is not None else None,
        data=json.loads(row[13]) if row[13] is not None else None,
    )  # fmt: skip


def _node_values(node: NodeRecord) -> tuple[Any, ...]:
    return (
        node.id, node.memory_id, node.loc, node.name, node.node_type, node.object_type, node.description,
        node.content, node.seq, _json(node.tags), _json(node.properties),
        _json(node.data) if node.data is not None else None, node.llm_model, node.ai_agent, node.revision,
        node.created_at, node.updated_at, node.created_by, node.updated_by, node.deleted_at,
    )  # fmt: skip


def _chunks(items: Sequence[str], size: int = 500) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _upper(loc: str) -> str:
    # Every descendant loc starts with `<loc>:`; ';' sorts right after ':', so this is a range scan.
    return loc + ";"


class SqliteGraphStore(_SqliteBase):
    # Seals the nodes of encrypted memories on write and opens them on read (sealing.py); None: clear.
    codec: NodeCodec | None = None

    def __init__(self, db: Database | PortableDatabase) -> None:
        super().__init__(db)
        db.migrate(EDGE_COMPONENT, EDGE_MIGRATIONS)

    def node_by_loc(self, memory_id: str, loc: str) -> NodeRecord | None:
        row = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = ? AND loc = ? AND deleted_at IS NULL",
            (memory_id, loc),
        ).fetchone()
        return self._read(row) if row else None

    def node_by_id(self, node_id: str) -> NodeRecord | None:
        row = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE id = ? AND deleted_at IS NULL", (node_id,)
        ).fetchone()
        return self._read(row) if row else None

    def _read(self, row: Sequence[Any]) -> NodeRecord:
        node = _node(row)
        return self.codec.open(node) if self.codec is not None else node

    def _seal(self, node: NodeRecord) -> NodeRecord:
        return self.codec.seal(node) if self.codec is not None else node

    def insert_node(self, node: NodeRecord) -> None:
        node = self._seal(node)
        with self.atomic() as tx:
            tx.execute(
                f"INSERT INTO nodes ({_NODE_COLUMNS}, parent_loc) VALUES ({', '.join('?' * 21)})",
                (*_node_values(node), node.loc.rpartition(":")[0]),
            )

    def update_node(self, node: NodeRecord) -> None:
        values = _node_values(self._seal(node))
        columns = _NODE_COLUMNS.split(", ")[1:]
        assignments = ", ".join(f"{c} = ?" for c in columns)
        with self.atomic() as tx:
            tx.execute(
                f"UPDATE nodes SET {assignments}, parent_loc = ? WHERE id = ?",
                (*values[1:], node.loc.rpartition(":")[0], node.id),
            )

    def replace_edges(self, source_id: str, edges: Sequence[EdgeRecord]) -> None:
        with self.atomic() as tx:
            tx.execute("DELETE FROM edges WHERE source_id = ?", (source_id,))
            tx.executemany(
                f"INSERT INTO edges ({_EDGE_COLUMNS}) VALUES ({_EDGE_MARKS})",
                [_edge_values(e) for e in edges],
            )

    def upsert_edge(self, edge: EdgeRecord) -> EdgeRecord:
        with self.atomic() as tx:
            row = tx.execute(
                f"SELECT {_EDGE_COLUMNS} FROM edges WHERE source_id = ? AND loc = ?",
                (edge.source_id, edge.loc),
            ).fetchone()
            if row is not None:
                return _edge(row)
            position = tx.execute(
                "SELECT COALESCE(MAX(position), -1) + 1 FROM edges WHERE source_id = ?", (edge.source_id,)
            ).fetchone()[0]
            edge = replace(edge, position=position)
            tx.execute(f"INSERT INTO edges ({_EDGE_COLUMNS}) VALUES ({_EDGE_MARKS})", _edge_values(edge))
        return edge

    def nodes_at(self, memory_ids: Sequence[str], loc: str) -> list[NodeRecord]:
        """The live nodes at ``loc`` in any of ``memory_ids`` (a bare loc read across memories)."""
        out: list[NodeRecord] = []
        for chunk in _chunks(list(memory_ids)):
            rows = self.conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM nodes WHERE loc = ? AND deleted_at IS NULL "
                f"AND memory_id IN ({', '.join('?' * len(chunk))}) ORDER BY memory_id",
                (loc, *chunk),
            ).fetchall()
            out.extend(self._read(r) for r in rows)
        return out

    def edge_by_id(self, edge_id: str) -> EdgeRecord | None:
        """An edge whose source node is live (an edge of a deleted node is gone with it)."""
        row = self.conn.execute(
            f"SELECT {_EDGE_COLUMNS_OF_E} FROM edges e JOIN nodes n ON n.id = e.source_id "
            "WHERE e.id = ? AND n.deleted_at IS NULL",
            (edge_id,),
        ).fetchone()
        return _edge(row) if row else None

    def edges_at(self, memory_id: str, loc: str) -> list[EdgeRecord]:
        """The edges with loc ``loc`` whose live source node is in ``memory_id`` (an edge URN's candidates)."""
        rows = self.conn.execute(
            f"SELECT {_EDGE_COLUMNS_OF_E} FROM edges e JOIN nodes n ON n.id = e.source_id "
            "WHERE e.loc = ? AND n.memory_id = ? AND n.deleted_at IS NULL ORDER BY n.loc, e.id",
            (loc, memory_id),
        ).fetchall()
        return [_edge(r) for r in rows]

    def update_edge(self, edge: EdgeRecord) -> None:
        """Rewrite one edge's fields (its source and position stay)."""
        columns = _EDGE_COLUMNS.split(", ")[2:]
        values = _edge_values(edge)[2:]
        assignments = ", ".join(f"{c} = ?" for c in columns)
        with self.atomic() as tx:
            tx.execute(f"UPDATE edges SET {assignments} WHERE id = ?", (*values, edge.id))

    def edges_from(self, source_ids: Sequence[str]) -> dict[str, list[EdgeRecord]]:
        out: dict[str, list[EdgeRecord]] = {}
        for chunk in _chunks(list(source_ids)):
            rows = self.conn.execute(
                f"SELECT {_EDGE_COLUMNS} FROM edges WHERE source_id IN ({', '.join('?' * len(chunk))}) "
                "ORDER BY source_id, position",
                tuple(chunk),
            ).fetchall()
            for row in rows:
                out.setdefault(row[1], []).append(_edge(row))
        return out

    def add_revision(self, node: NodeRecord, operation: str, actor: str, reason: str | None) -> None:
        self.add_revisions([(node, reason)], operation, actor)

    def add_revisions(
        self, items: Sequence[tuple[NodeRecord, str | None]], operation: str, actor: str, *, full: bool = True
    ) -> None:
        """One revision per node; ``full`` snapshots every field, else only the address (moves, deletes)."""
        columns = _NODE_COLUMNS.split(", ")
        rows = []
        for node, reason in items:
            if full:
                snapshot = dict(zip(columns, _node_values(self._seal(node)), strict=True))
            else:
                snapshot = {"id": node.id, "memory_id": node.memory_id, "loc": node.loc, "name": node.name}
            rows.append((node.id, node.revision, operation, actor, node.updated_at, reason, _json(snapshot)))
        with self.atomic() as tx:
            tx.executemany(
                "INSERT INTO node_revisions (node_id, revision, operation, actor, at, reason, snapshot) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def revisions(self, node_id: str, limit: int = 20) -> list[Revision]:
        rows = self.conn.execute(
            "SELECT node_id, revision, operation, actor, at, reason FROM node_revisions WHERE node_id = ? "
            "ORDER BY id DESC LIMIT ?",
            (node_id, limit),
        ).fetchall()
        return [Revision(*r) for r in rows]

    def children(self, memory_id: str, parent: str, limit: int = 1000) -> list[NodeRecord]:
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = ? AND parent_loc = ? "
            "AND deleted_at IS NULL ORDER BY seq IS NULL, seq, loc LIMIT ?",
            (memory_id, parent, limit),
        ).fetchall()
        return [self._read(r) for r in rows]

    def branch_locs(self, memory_id: str, parent: str) -> list[str]:
        """The distinct parent locs of the live nodes at or below ``parent`` ("": the whole memory), in
        order: every loc under which something lives, whether or not a node sits there."""
        if not parent:
            rows = self.conn.execute(
                "SELECT DISTINCT parent_loc FROM nodes WHERE memory_id = ? AND deleted_at IS NULL "
                "ORDER BY parent_loc",
                (memory_id,),
            ).fetchall()
        else:
            # A range on the (memory_id, parent_loc) index: the parent itself, then `<parent>:...`.
            rows = self.conn.execute(
                "SELECT DISTINCT parent_loc FROM nodes WHERE memory_id = ? AND deleted_at IS NULL "
                "AND parent_loc >= ? AND parent_loc < ? ORDER BY parent_loc",
                (memory_id, parent, _upper(parent)),
            ).fetchall()
        return [r[0] for r in rows if r[0] == parent or r[0].startswith(parent + ":") or not parent]

    def subtree(self, memory_id: str, loc: str) -> list[NodeRecord]:
        """The node at ``loc`` (if live) and every live descendant, parents before children."""
        root = self.node_by_loc(memory_id, loc)
        # A range on the (memory_id, loc) index; an OR with the root's equality would scan the memory.
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = ? AND deleted_at IS NULL "
            "AND loc > ? AND loc < ? ORDER BY length(loc), loc",
            (memory_id, loc + ":", _upper(loc)),
        ).fetchall()
        return ([root] if root else []) + [self._read(r) for r in rows]

    def live_locs(self, memory_id: str, locs: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for chunk in _chunks(list(locs)):
            rows = self.conn.execute(
                f"SELECT loc, id FROM nodes WHERE memory_id = ? AND deleted_at IS NULL "
                f"AND loc IN ({', '.join('?' * len(chunk))})",
                (memory_id, *chunk),
            ).fetchall()
            out.update({r[0]: r[1] for r in rows})
        return out

    def count_descendants(self, memory_id: str, loc: str) -> int:
        row = self.conn.execute(
            "SELECT COUNT(*) FROM nodes WHERE memory_id = ? AND deleted_at IS NULL AND loc > ? AND loc < ?",
            (memory_id, loc + ":", _upper(loc)),
        ).fetchone()
        return int(row[0])

    def relocate(self, moves: Sequence[tuple[str, str, str, str]], actor: str, at: str) -> None:
        """Apply ``(node_id, memory_id, loc, name)`` moves and point edges at their new addresses."""
        with self.atomic() as tx:
            tx.executemany(
                "UPDATE nodes SET memory_id = ?, loc = ?, parent_loc = ?, name = ?, revision = revision + 1, "
                "updated_at = ?, updated_by = ? WHERE id = ?",
                [(m, loc, loc.rpartition(":")[0], name, at, actor, nid) for nid, m, loc, name in moves],
            )
            tx.executemany(
                "UPDATE edges SET target_memory_id = ?, target_loc = ? WHERE target_id = ?",
                [(m, loc, nid) for nid, m, loc, _ in moves],
            )

    def retarget_dangling(self, source_ids: Sequence[str], src: str, old: str, dst: str, new: str) -> int:
        """Edges of moved nodes whose unresolved target lay inside the moved subtree follow it."""
        changed = 0
        with self.atomic() as tx:
            for chunk in _chunks(list(source_ids)):
                cursor = tx.execute(
                    "UPDATE edges SET target_memory_id = ?, target_loc = ? || substr(target_loc, ?) "
                    f"WHERE source_id IN ({', '.join('?' * len(chunk))}) AND target_id IS NULL "
                    "AND target_memory_id = ? AND (target_loc = ? OR (target_loc > ? AND target_loc < ?))",
                    (dst, new, len(old) + 1, *chunk, src, old, old + ":", _upper(old)),
                )
                changed += cursor.rowcount
        return changed

    def soft_delete(self, node_ids: Sequence[str], at: str) -> None:
        with self.atomic() as tx:
            tx.executemany(
                "UPDATE nodes SET deleted_at = ?, revision = revision + 1, updated_at = ? WHERE id = ?",
                [(at, at, nid) for nid in node_ids],
            )

    def hard_delete(self, node_ids: Sequence[str]) -> None:
        with self.atomic() as tx:
            for chunk in _chunks(list(node_ids)):
                marks = ", ".join("?" * len(chunk))
                tx.execute(f"DELETE FROM edges WHERE source_id IN ({marks})", tuple(chunk))
                tx.execute(f"DELETE FROM node_embeddings WHERE node_id IN ({marks})", tuple(chunk))
                tx.execute(f"DELETE FROM nodes WHERE id IN ({marks})", tuple(chunk))

    def incoming_edges(self, node_ids: Sequence[str]) -> list[tuple[EdgeRecord, str]]:
        """Edges targeting any of ``node_ids``, each with its source node's memory id."""
        out: list[tuple[EdgeRecord, str]] = []
        for chunk in _chunks(list(node_ids)):
            rows = self.conn.execute(
                f"SELECT {_EDGE_COLUMNS_OF_E}, n.memory_id FROM edges e JOIN nodes n ON n.id = e.source_id "
                f"WHERE e.target_id IN ({', '.join('?' * len(chunk))})",
                tuple(chunk),
            ).fetchall()
            out.extend((_edge(r), r[_EDGE_WIDTH]) for r in rows)
        return out

    def delete_edges(self, edge_ids: Sequence[str]) -> None:
        with self.atomic() as tx:
            tx.executemany("DELETE FROM edges WHERE id = ?", [(e,) for e in edge_ids])

    def objects(self, memory_id: str, object_type: str) -> list[NodeRecord]:
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = ? AND object_type = ? "
            "AND deleted_at IS NULL ORDER BY created_at, id",
            (memory_id, object_type),
        ).fetchall()
        return [self._read(r) for r in rows]

    def memory_nodes(self, memory_id: str) -> Iterator[NodeRecord]:
        cursor = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = ? AND deleted_at IS NULL ORDER BY loc",
            (memory_id,),
        )
        for row in cursor:
            yield self._read(row)

    def failed_embeddings(self, memory_id: str) -> list[tuple[str, str, str | None]]:
        rows = self.conn.execute(
            "SELECT n.id, n.loc, e.error FROM node_embeddings e JOIN nodes n ON n.id = e.node_id "
            "WHERE n.memory_id = ? AND n.deleted_at IS NULL AND e.status = 'failed' ORDER BY n.loc",
            (memory_id,),
        ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]


def _edge_values(e: EdgeRecord) -> tuple[Any, ...]:
    return (
        e.id, e.source_id, e.loc, e.name, e.description, e.target_id, e.target_memory_id, e.target_loc,
        e.target_ref, int(e.is_runnable), e.position, e.priority,
        _json(e.condition) if e.condition is not None else None, _json(e.data) if e.data is not None else None,
    )  # fmt: skip
