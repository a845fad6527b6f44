"""Hadron's records and vocabularies (names as in the upstream GraphQL schema)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from triptych.hadron.domain.loc import app_urn, memory_urn, org_urn, user_urn

OrgRole = Literal["OWNER", "ADMIN", "CONTRIBUTOR", "READER"]
ORG_ROLES: tuple[OrgRole, ...] = ("OWNER", "ADMIN", "CONTRIBUTOR", "READER")
AppRole = OrgRole  # AppMembershipRole has the same four words
MemoryClass = Literal["app", "group", "knowledge", "personal", "private", "system"]
MEMORY_CLASSES: tuple[MemoryClass, ...] = ("app", "group", "knowledge", "personal", "private", "system")
AccessLevel = Literal["read-only", "read-write"]
ACCESS_LEVELS: tuple[AccessLevel, ...] = ("read-only", "read-write")

_RANK = {"READER": 0, "CONTRIBUTOR": 1, "ADMIN": 2, "OWNER": 3}


def role_at_least(role: str | None, minimum: OrgRole) -> bool:
    return role is not None and _RANK.get(role, -1) >= _RANK[minimum]


@dataclass(frozen=True, slots=True)
class Org:
    id: str
    root: str
    name: str

    @property
    def urn(self) -> str:
        return org_urn(self.root)


@dataclass(frozen=True, slots=True)
class User:
    id: str
    handle: str
    name: str

    @property
    def urn(self) -> str:
        return user_urn(self.handle)


@dataclass(frozen=True, slots=True)
class App:
    id: str
    slug: str
    name: str
    org_id: str | None
    owner_user_id: str | None
    root: str  # the owning org's root, or the owning user's handle

    @property
    def urn(self) -> str:
        return app_urn(self.root, self.slug)


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    root: str
    slug: str
    name: str
    description: str
    memory_class: MemoryClass
    org_id: str | None
    app_id: str | None
    user_id: str | None
    encrypted: bool = False
    schema: dict[str, Any] | None = None
    # How nodes are embedded on write: "content" (name, description, tags and content) or "none".
    embedding_policy: str = "none"

    @property
    def urn(self) -> str:
        return memory_urn(self.root, self.slug)

    @property
    def owner_type(self) -> str:
        return "app" if self.app_id else "user" if self.user_id else "org"


EMBEDDING_POLICIES = ("content", "none")
ScopeOwnerType = Literal["organization", "app", "agent"]
SCOPE_OWNER_TYPES: tuple[ScopeOwnerType, ...] = ("organization", "app", "agent")


@dataclass(frozen=True, slots=True)
class Scope:
    """A named, ordered list of memories owned by one organization, app or agent: a search lens."""

    id: str
    name: str
    description: str | None
    owner_type: ScopeOwnerType
    owner_id: str
    memory_ids: tuple[str, ...]
    created_by: str
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class EdgeRecord:
    id: str
    source_id: str
    loc: str
    name: str | None
    description: str | None
    target_id: str | None
    target_memory_id: str | None
    target_loc: str | None
    target_ref: str  # what the writer passed, for a dangling target
    is_runnable: bool
    position: int
    # The live server's edge fields (hadron_update_edge): order among a node's edges, a JSONLogic gate
    # and a data bag; stored by the ``hadron-edges`` migration component.
    priority: int = 0
    condition: Any = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class NodeRecord:
    id: str
    memory_id: str
    loc: str
    name: str
    node_type: str
    object_type: str | None
    description: str | None
    content: str | None
    seq: int | None
    tags: list[str]
    properties: dict[str, Any]
    data: dict[str, Any] | None
    llm_model: str | None
    ai_agent: str | None
    revision: int
    created_at: str
    updated_at: str
    created_by: str
    updated_by: str
    deleted_at: str | None = None
    edges: list[EdgeRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Revision:
    node_id: str
    revision: int
    operation: str
    actor: str
    at: str
    reason: str | None
