"""Setting up a world: organizations, users, apps, memberships, memories, grants and app keys.

Used by the ``triptych hadron`` admin CLI (and tests). These are operator actions on the local
database, so they take no caller; every name is checked against the URN slug rules here.
"""

from __future__ import annotations

import json
from typing import Any

from triptych.hadron.domain import urn
from triptych.hadron.domain.loc import (
    app_urn,
    memory_urn,
    org_urn,
    split_bare_key,
    strip_urn_prefix,
    user_urn,
)
from triptych.hadron.domain.model import (
    ACCESS_LEVELS,
    EMBEDDING_POLICIES,
    MEMORY_CLASSES,
    ORG_ROLES,
    App,
    Memory,
    MemoryClass,
    Org,
    User,
)
from triptych.hadron.domain.schema import check_memory_schema
from triptych.hadron.errors import BadInput, NotFound, UrnAlreadyExists
from triptych.hadron.identity import new_app_key
from triptych.hadron.store import TenancyStore, new_id


def _checked(kind: str, value: str, check: Any) -> str:
    try:
        check(value)
    except urn.UrnError as exc:
        raise BadInput(f"invalid {kind} {value!r}: {exc.reason}", details={"reason": exc.reason}) from exc
    return value


def _default_embedding(memory_class: str, encrypted: bool) -> str:
    # As upstream: knowledge memories get a vector index by default, other classes opt in.
    return "content" if memory_class == "knowledge" and not encrypted else "none"


class TenancyAdmin:
    def __init__(self, store: TenancyStore) -> None:
        self.store = store

    def org(self, ref: str) -> Org:
        root = strip_urn_prefix(ref, "org")
        org = self.store.org_by_root(root) or self.store.org(ref)
        if org is None:
            raise NotFound("org", ref)
        return org

    def user(self, handle: str) -> User:
        user = self.store.user_by_handle(strip_urn_prefix(handle, "user").lstrip("@"))
        if user is None:
            raise NotFound("user", handle)
        return user

    def app(self, ref: str) -> App:
        root, slug = split_bare_key(strip_urn_prefix(ref, "app"))
        app = self.store.app_by_urn(root, slug) if root else self.store.app(ref)
        if app is None:
            raise NotFound("app", ref)
        return app

    def memory(self, ref: str) -> Memory:
        root, slug = split_bare_key(strip_urn_prefix(ref, "mem", "memory"))
        memory = self.store.memory_by_key(root, slug) if root else self.store.memory(ref)
        if memory is None:
            raise NotFound("memory", ref)
        return memory

    # ── creation ───────────────────────────────────────────────────────────

    def create_org(self, root: str, name: str | None = None) -> Org:
        _checked("organization root", root, urn.validate_org_slug)
        if self.store.org_by_root(root):
            raise UrnAlreadyExists(f"organization {org_urn(root)} already exists")
        return self.store.add_org(root, name or root)

    def create_user(self, handle: str, name: str | None = None) -> User:
        _checked("user handle", handle, urn.validate_user_handle)
        if self.store.user_by_handle(handle):
            raise UrnAlreadyExists(f"user {user_urn(handle)} already exists")
        return self.store.add_user(handle, name or handle)

    def add_org_member(self, org_ref: str, handle: str, role: str) -> tuple[Org, User, str]:
        role = role.upper()
        if role not in ORG_ROLES:
            raise BadInput(f"role must be one of {', '.join(ORG_ROLES)}")
        org, user = self.org(org_ref), self.user(handle)
        self.store.set_org_member(org.id, user.id, role)
        return org, user, role

    def create_app(self, slug: str, name: str | None, org_ref: str | None, owner: str | None) -> App:
        _checked("app slug", slug, urn.validate_user_slug)
        if (org_ref is None) == (owner is None):
            raise BadInput("an app is owned by exactly one of an organization (--org) or a user (--owner)")
        org = self.org(org_ref) if org_ref else None
        user = self.user(owner) if owner else None
        root = org.root if org else user.handle if user else ""
        if self.store.app_by_urn(root, slug):
            raise UrnAlreadyExists(f"app {app_urn(root, slug)} already exists")
        return self.store.add_app(slug, name or slug, org, user)

    def add_app_member(self, app_ref: str, handle: str, role: str) -> tuple[App, User, str]:
        role = role.upper()
        if role not in ORG_ROLES:
            raise BadInput(f"role must be one of {', '.join(ORG_ROLES)}")
        app, user = self.app(app_ref), self.user(handle)
        self.store.set_app_member(app.id, user.id, role)
        return app, user, role

    def create_app_key(self, app_ref: str, label: str | None = None) -> tuple[App, str]:
        app = self.app(app_ref)
        raw = new_app_key()
        self.store.add_app_key(app.id, raw, label)
        return app, raw

    def create_memory(
        self,
        slug: str,
        memory_class: str,
        *,
        org: str | None = None,
        app: str | None = None,
        user: str | None = None,
        name: str | None = None,
        description: str = "",
        encrypted: bool = False,
        embedding: str | None = None,
    ) -> Memory:
        _checked("memory slug", slug, urn.validate_user_slug)
        if memory_class not in MEMORY_CLASSES:
            raise BadInput(f"memory class must be one of {', '.join(MEMORY_CLASSES)}")
        if sum(x is not None for x in (org, app, user)) != 1:
            raise BadInput("a memory is owned by exactly one of an organization, an app or a user")
        if memory_class in ("personal", "private") and user is None:
            raise BadInput(f"a {memory_class} memory is owned by a user")
        owner_org = self.org(org) if org else None
        owner_app = self.app(app) if app else None
        owner_user = self.user(user) if user else None
        root = (
            owner_org.root
            if owner_org
            else owner_app.root
            if owner_app
            else owner_user.handle
            if owner_user
            else ""
        )
        if self.store.memory_by_key(root, slug):
            raise UrnAlreadyExists(f"memory {memory_urn(root, slug)} already exists")
        klass: MemoryClass = memory_class
        policy = embedding or _default_embedding(klass, encrypted)
        if policy not in EMBEDDING_POLICIES:
            raise BadInput(f"embedding must be one of {', '.join(EMBEDDING_POLICIES)}")
        memory = Memory(
            id=new_id(),
            root=root,
            slug=slug,
            name=name or slug,
            description=description,
            memory_class=klass,
            org_id=owner_org.id if owner_org else None,
            app_id=owner_app.id if owner_app else None,
            user_id=owner_user.id if owner_user else None,
            encrypted=encrypted,
            embedding_policy=policy,
        )
        return self.store.add_memory(memory)

    def set_embedding(self, memory_ref: str, policy: str) -> Memory:
        """Change how the memory's nodes are embedded from the next write on (``content`` or ``none``)."""
        if policy not in EMBEDDING_POLICIES:
            raise BadInput(f"embedding must be one of {', '.join(EMBEDDING_POLICIES)}")
        memory = self.memory(memory_ref)
        self.store.set_embedding_policy(memory.id, policy)
        return memory

    def grant(self, memory_ref: str, access: str, *, user: str | None = None, app: str | None = None) -> str:
        if access not in ACCESS_LEVELS:
            raise BadInput(f"access must be one of {', '.join(ACCESS_LEVELS)}")
        if (user is None) == (app is None):
            raise BadInput("grant to exactly one of a user or an app")
        memory = self.memory(memory_ref)
        if user is not None:
            who = self.user(user)
            self.store.grant(memory.id, "user", who.id, access)
            return f"{who.urn} has {access} on {memory.urn}"
        target = self.app(app or "")
        self.store.grant(memory.id, "app", target.id, access)
        return f"{target.urn} has {access} on {memory.urn}"

    def attach(self, app_ref: str, memory_ref: str) -> tuple[App, Memory]:
        app, memory = self.app(app_ref), self.memory(memory_ref)
        self.store.attach_memory(app.id, memory.id)
        return app, memory

    def set_schema(self, memory_ref: str, schema_text: str | None) -> Memory:
        memory = self.memory(memory_ref)
        schema: dict[str, Any] | None = None
        if schema_text is not None:
            try:
                schema = json.loads(schema_text)
            except json.JSONDecodeError as exc:
                raise BadInput(f"the schema is not JSON: {exc}") from exc
            check_memory_schema(schema)
        self.store.set_memory_schema(memory.id, schema)
        return memory
