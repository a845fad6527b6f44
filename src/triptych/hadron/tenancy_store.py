"""Tenancy persistence: orgs, users, apps and their keys, memories, grants and client selections. The SQL is
written once (``TenancySql``) for both engines; ``SqliteTenancyStore`` and ``PostgresTenancyStore`` run it
over each engine's schema (``sqlite_schema.HADRON``, ``pg_schema.HADRON``, applied when the database opens).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.hadron import write_keys
from triptych.hadron.dialect import POSTGRES, SQLITE, EngineStore
from triptych.hadron.domain.model import App, Memory, Org, User
from triptych.hadron.store import _chunks, _json, hash_key, new_id, utcnow


class TenancySql(EngineStore):
    """The tenancy SQL both engines run."""

    def __init__(self, db: Database | NativeDatabase, clock: Callable[[], str] = utcnow) -> None:
        super().__init__(db)
        self.clock = clock

    # orgs and users
    def add_org(self, root: str, name: str) -> Org:
        org = Org(new_id(), root, name)
        with self.atomic(write_keys.root(root)) as tx:
            tx.execute(
                f"INSERT INTO orgs VALUES ({self.dialect.marks(4)})", (org.id, root, name, self.clock())
            )
        return org

    def org(self, org_id: str) -> Org | None:
        p = self.dialect.p
        row = self.conn.execute(f"SELECT id, root, name FROM orgs WHERE id = {p}", (org_id,)).fetchone()
        return Org(*row) if row else None

    def org_by_root(self, root: str) -> Org | None:
        p = self.dialect.p
        row = self.conn.execute(f"SELECT id, root, name FROM orgs WHERE root = {p}", (root,)).fetchone()
        return Org(*row) if row else None

    def add_user(self, handle: str, name: str) -> User:
        user = User(new_id(), handle, name)
        with self.atomic(write_keys.root(handle)) as tx:
            tx.execute(
                f"INSERT INTO users VALUES ({self.dialect.marks(4)})", (user.id, handle, name, self.clock())
            )
        return user

    def user(self, user_id: str) -> User | None:
        p = self.dialect.p
        row = self.conn.execute(f"SELECT id, handle, name FROM users WHERE id = {p}", (user_id,)).fetchone()
        return User(*row) if row else None

    def user_by_handle(self, handle: str) -> User | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT id, handle, name FROM users WHERE handle = {p}", (handle,)
        ).fetchone()
        return User(*row) if row else None

    def set_org_member(self, org_id: str, user_id: str, role: str) -> None:
        with self.atomic(write_keys.org(org_id)) as tx:
            tx.execute(
                f"INSERT INTO org_members VALUES ({self.dialect.marks(3)}) "
                "ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role",
                (org_id, user_id, role),
            )

    def org_memberships(self, user_id: str) -> list[tuple[Org, str]]:
        p = self.dialect.p
        rows = self.conn.execute(
            "SELECT o.id, o.root, o.name, m.role FROM org_members m JOIN orgs o ON o.id = m.org_id "
            f"WHERE m.user_id = {p} ORDER BY o.root",
            (user_id,),
        ).fetchall()
        return [(Org(r[0], r[1], r[2]), r[3]) for r in rows]

    def users_in_orgs(self, org_ids: Sequence[str]) -> list[User]:
        if not org_ids:
            return []
        among, params = self.dialect.one_of("m.org_id", org_ids)
        rows = self.conn.execute(
            "SELECT DISTINCT u.id, u.handle, u.name FROM users u JOIN org_members m ON m.user_id = u.id "
            f"WHERE {among} ORDER BY u.handle",
            params,
        ).fetchall()
        return [User(r[0], r[1], r[2]) for r in rows]

    def org_role(self, org_id: str, user_id: str) -> str | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT role FROM org_members WHERE org_id = {p} AND user_id = {p}", (org_id, user_id)
        ).fetchone()
        return str(row[0]) if row else None

    # apps
    _APP = "SELECT id, slug, name, org_id, owner_user_id, root FROM apps"

    def add_app(self, slug: str, name: str, org: Org | None, owner: User | None) -> App:
        root = org.root if org else owner.handle if owner else ""
        app = App(new_id(), slug, name, org.id if org else None, owner.id if owner else None, root)
        with self.atomic(write_keys.root(root)) as tx:
            tx.execute(
                f"INSERT INTO apps VALUES ({self.dialect.marks(7)})",
                (app.id, slug, name, app.org_id, app.owner_user_id, root, self.clock()),
            )
        return app

    def app(self, app_id: str) -> App | None:
        p = self.dialect.p
        row = self.conn.execute(self._APP + f" WHERE id = {p}", (app_id,)).fetchone()
        return App(*row) if row else None

    def app_by_urn(self, root: str, slug: str) -> App | None:
        p = self.dialect.p
        row = self.conn.execute(self._APP + f" WHERE root = {p} AND slug = {p}", (root, slug)).fetchone()
        return App(*row) if row else None

    def apps(self) -> list[App]:
        return [App(*r) for r in self.conn.execute(self._APP + " ORDER BY root, slug").fetchall()]

    def set_app_member(self, app_id: str, user_id: str, role: str) -> None:
        with self.atomic(write_keys.team(app_id)) as tx:
            tx.execute(
                f"INSERT INTO app_members VALUES ({self.dialect.marks(3)}) "
                "ON CONFLICT (app_id, user_id) DO UPDATE SET role = excluded.role",
                (app_id, user_id, role),
            )

    def app_role(self, app_id: str, user_id: str) -> str | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT role FROM app_members WHERE app_id = {p} AND user_id = {p}", (app_id, user_id)
        ).fetchone()
        return str(row[0]) if row else None

    def app_member_ids(self, app_id: str) -> list[str]:
        p = self.dialect.p
        rows = self.conn.execute(f"SELECT user_id FROM app_members WHERE app_id = {p}", (app_id,)).fetchall()
        return [r[0] for r in rows]

    def add_app_key(self, app_id: str, raw: str, label: str | None) -> str:
        p = self.dialect.p
        key_id = new_id()
        with self.atomic(write_keys.team(app_id)) as tx:
            tx.execute(
                f"INSERT INTO app_keys VALUES ({p}, {p}, {p}, {p}, {p}, {p}, NULL)",
                (key_id, app_id, hash_key(raw), "…" + raw[-4:], label, self.clock()),
            )
        return key_id

    def app_for_key(self, raw: str) -> App | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT app_id FROM app_keys WHERE key_hash = {p} AND revoked_at IS NULL", (hash_key(raw),)
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
        with self.atomic(write_keys.root(memory.root)) as tx:
            tx.execute(
                "INSERT INTO memories (id, root, slug, name, description, class, org_id, app_id, user_id, "
                f"encrypted, schema_json, embedding_policy, created_at) VALUES ({self.dialect.marks(13)})",
                (
                    memory.id, memory.root, memory.slug, memory.name, memory.description,
                    memory.memory_class, memory.org_id, memory.app_id, memory.user_id, int(memory.encrypted),
                    _json(memory.schema) if memory.schema else None, memory.embedding_policy, self.clock(),
                ),
            )  # fmt: skip
        return memory

    def memory(self, memory_id: str) -> Memory | None:
        p = self.dialect.p
        sql = self._MEMORY + f" WHERE id = {p} AND deleted_at IS NULL"
        row = self.conn.execute(sql, (memory_id,)).fetchone()
        return self._memory(row) if row else None

    def memory_by_key(self, root: str, slug: str) -> Memory | None:
        p = self.dialect.p
        row = self.conn.execute(
            self._MEMORY + f" WHERE root = {p} AND slug = {p} AND deleted_at IS NULL", (root, slug)
        ).fetchone()
        return self._memory(row) if row else None

    def memories(self) -> list[Memory]:
        rows = self.conn.execute(self._MEMORY + " WHERE deleted_at IS NULL ORDER BY root, slug").fetchall()
        return [self._memory(r) for r in rows]

    def set_memory_schema(self, memory_id: str, schema: dict[str, Any] | None) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.execute(
                f"UPDATE memories SET schema_json = {p} WHERE id = {p}",
                (_json(schema) if schema is not None else None, memory_id),
            )

    def set_embedding_policy(self, memory_id: str, policy: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.execute(f"UPDATE memories SET embedding_policy = {p} WHERE id = {p}", (policy, memory_id))

    def grant(self, memory_id: str, principal_type: str, principal_id: str, access: str) -> None:
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.execute(
                f"INSERT INTO memory_access VALUES ({self.dialect.marks(4)}) ON CONFLICT (memory_id, principal_type, "
                "principal_id) DO UPDATE SET access = excluded.access",
                (memory_id, principal_type, principal_id, access),
            )

    def grants(self, memory_id: str) -> dict[tuple[str, str], str]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT principal_type, principal_id, access FROM memory_access WHERE memory_id = {p}",
            (memory_id,),
        ).fetchall()
        return {(r[0], r[1]): r[2] for r in rows}

    def grants_of(self, memory_ids: Sequence[str]) -> dict[str, dict[tuple[str, str], str]]:
        """``grants`` of several memories in one read per 500."""
        out: dict[str, dict[tuple[str, str], str]] = {}
        for chunk in _chunks(list(memory_ids)):
            among, params = self.dialect.one_of("memory_id", chunk)
            rows = self.conn.execute(
                f"SELECT memory_id, principal_type, principal_id, access FROM memory_access WHERE {among}",
                params,
            ).fetchall()
            for r in rows:
                out.setdefault(r[0], {})[(r[1], r[2])] = r[3]
        return out

    def attach_memory(self, app_id: str, memory_id: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.team(app_id)) as tx:
            position = tx.execute(
                f"SELECT COALESCE(MAX(position), -1) + 1 FROM app_memories WHERE app_id = {p}", (app_id,)
            ).fetchone()[0]
            tx.execute(
                f"INSERT INTO app_memories VALUES ({self.dialect.marks(3)}) ON CONFLICT DO NOTHING",
                (app_id, memory_id, position),
            )

    def attached_memories(self, app_id: str) -> list[str]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT memory_id FROM app_memories WHERE app_id = {p} ORDER BY position", (app_id,)
        ).fetchall()
        return [r[0] for r in rows]

    # selections persisted per (user, X-Hadron-Client-Id)
    def load_selection(self, user_id: str, client_id: str) -> dict[str, Any] | None:
        p = self.dialect.p
        row = self.conn.execute(
            "SELECT app_id, memory_id, org_id, scope_id, session_id FROM client_selections "
            f"WHERE user_id = {p} AND client_id = {p}",
            (user_id, client_id),
        ).fetchone()
        return dict(row) if row else None

    def save_selection(self, user_id: str, client_id: str, values: dict[str, Any]) -> None:
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(
                "INSERT INTO client_selections (user_id, client_id, app_id, memory_id, org_id, scope_id, "
                f"session_id, updated_at) VALUES ({self.dialect.marks(8)}) ON CONFLICT (user_id, client_id) "
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
