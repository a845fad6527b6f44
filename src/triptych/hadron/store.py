"""Hadron persistence: tenancy (orgs, users, apps, keys, memories, grants), client selections, and
the graph (nodes, edges, revisions) in one SQLite file, ``hadron.db``, or in PostgreSQL (server mode).

``TenancyStore`` and ``GraphStore`` are the engine-neutral interfaces the services use (protocols
below). ``TenancySql`` and ``GraphSql`` hold their SQL once, in the dialect SQLite 3.35+ and PostgreSQL
share (``dialect.py``); ``SqliteTenancyStore``/``SqliteGraphStore`` run it on a ``core.db.Database`` over
``sqlite_schema``, ``PostgresTenancyStore``/``PostgresGraphStore`` on a ``core.pg.PortableDatabase`` over
``pg_schema``. Every multi-row write runs inside one transaction; the services open it through ``atomic()``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.pg import PortableDatabase
from triptych.hadron import pg_schema, sqlite_schema
from triptych.hadron.dialect import POSTGRES, SQLITE, EngineStore
from triptych.hadron.domain.model import App, EdgeRecord, Memory, NodeRecord, Org, Revision, User


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


# ─── The SQL both engines share, and a class per engine ─────────────────────────


def open_database(path: Path) -> Database:
    """``hadron.db`` at ``path``, migrated (component "main"; the stores migrate their own components)."""
    return Database(path, sqlite_schema.HADRON)


class TenancySql(EngineStore):
    """The tenancy SQL both engines run."""

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


class SqliteTenancyStore(TenancySql):
    dialect = SQLITE


class PostgresTenancyStore(TenancySql):
    dialect = POSTGRES


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
EDGE_COMPONENT = "hadron-edges"


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


class GraphSql(EngineStore):
    """The graph SQL both engines run."""

    # Seals the nodes of encrypted memories on write and opens them on read (sealing.py); None: clear.
    codec: NodeCodec | None = None

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


class SqliteGraphStore(GraphSql):
    dialect = SQLITE
    schema = ((EDGE_COMPONENT, sqlite_schema.EDGES),)


class PostgresGraphStore(GraphSql):
    dialect = POSTGRES
    schema = ((EDGE_COMPONENT, pg_schema.EDGES),)
