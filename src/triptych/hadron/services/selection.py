"""Per-session selections (active App, memory, organization, scope), their persistence per
``X-Hadron-Client-Id``, the organization ladder, and what ``hadron_server_info`` reports.

Selections live with the MCP session (in this process). A client that sends ``X-Hadron-Client-Id``
(trimmed, 1-200 characters, else ignored) has them saved per (user, client id) and restored on its
next connection; every restored selection is re-authorized first, so lost access never comes back.
App-key callers have no per-user selection to restore. Several server workers need sticky routing.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import app_short_form, is_urn, strip_urn_prefix, urn_type
from triptych.hadron.domain.model import AccessLevel, App, Memory, Org
from triptych.hadron.errors import (
    AppAmbiguous,
    BadInput,
    Forbidden,
    NoActiveApp,
    NoActiveMemory,
    NotFound,
    OrgRequired,
)
from triptych.hadron.identity import HadronCaller
from triptych.hadron.store import TenancyStore

MAX_CLIENT_ID = 200
MAX_SESSIONS = 10_000
LOST_SESSION_WINDOW = 15 * 60.0  # seconds a dead session id counts toward "re-established"


def client_id_from(header: str | None) -> str | None:
    """The contract's rule: trimmed, at most 200 characters; empty or longer is treated as absent."""
    if header is None:
        return None
    value = header.strip()
    return value if 0 < len(value) <= MAX_CLIENT_ID else None


@dataclass
class SessionState:
    session_id: str
    caller_key: str
    client_id: str | None = None
    app_id: str | None = None
    memory_id: str | None = None
    org_id: str | None = None
    scope_id: str | None = None  # the active scope (issue 6)
    # The worker session hadron_start_session opened in this MCP session: nodes created here are
    # attributed to it (issue 14). Not persisted: a reconnect recovers it with hadron_whoami.
    work_session_id: str | None = None
    replaced: bool = False  # this session replaced an earlier one
    restored: list[str] = field(default_factory=list)  # selections brought back from the client id
    dropped: list[str] = field(default_factory=list)  # restored selections refused on re-authorization
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass(frozen=True, slots=True)
class OrgResolution:
    org: Org | None
    rung: str  # call | active-app | active-org | app-key | single-membership | personal | unresolved
    memberships: tuple[Org, ...] = ()


@dataclass(frozen=True, slots=True)
class ReachableMemory:
    """A memory the caller may read (``hadron_list_memories``)."""

    memory: Memory
    access: AccessLevel
    in_active_app: bool  # the session's active App owns it or has it attached


class SelectionService:
    def __init__(self, tenancy: TenancyStore, access: AccessPolicy) -> None:
        self.tenancy = tenancy
        self.access = access
        self._sessions: OrderedDict[tuple[str, str], SessionState] = OrderedDict()
        self._lost: dict[str, float] = {}
        self._lock = threading.Lock()

    # ── sessions ───────────────────────────────────────────────────────────

    def note_lost_session(self, caller: HadronCaller) -> None:
        """A request named a session this process does not know (a restart, an expiry)."""
        now = time.monotonic()
        with self._lock:
            self._lost[caller.key] = now
            if len(self._lost) > MAX_SESSIONS:  # forget the stale ones
                self._lost = {k: t for k, t in self._lost.items() if now - t < LOST_SESSION_WINDOW}

    def session(self, caller: HadronCaller, session_id: str, client_id: str | None) -> SessionState:
        key = (session_id, caller.key)
        with self._lock:
            state = self._sessions.get(key)
            if state is not None:
                self._sessions.move_to_end(key)
                return state
            state = SessionState(session_id, caller.key, client_id)
            self._sessions[key] = state
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
            lost_at = self._lost.pop(caller.key, None)
        if lost_at is not None and time.monotonic() - lost_at < LOST_SESSION_WINDOW:
            state.replaced = True
        if client_id is not None and caller.kind == "user" and caller.user is not None:
            self._restore(caller, state)
        return state

    def _restore(self, caller: HadronCaller, state: SessionState) -> None:
        assert caller.user is not None and state.client_id is not None
        saved = self.tenancy.load_selection(caller.user.id, state.client_id)
        if saved is None:
            self._save(caller, state)
            return
        if saved.get("session_id") != state.session_id:
            state.replaced = True
        if saved.get("app_id"):
            app = self.tenancy.app(saved["app_id"])
            if app is not None and self.access.app_role(caller, app) is not None:
                state.app_id = app.id
                state.restored.append(f"active App {app.urn}")
            else:
                state.dropped.append("active App")
        if saved.get("memory_id"):
            memory = self.tenancy.memory(saved["memory_id"])
            if memory is not None and self.access.memory_level(caller, memory) is not None:
                state.memory_id = memory.id
                state.restored.append(f"active memory {memory.urn}")
            else:
                state.dropped.append("active memory")
        if saved.get("org_id"):
            if self.tenancy.org_role(saved["org_id"], caller.user.id) is not None:
                state.org_id = saved["org_id"]
                org = self.tenancy.org(saved["org_id"])
                state.restored.append(f"active organization {org.urn if org else saved['org_id']}")
            else:
                state.dropped.append("active organization")
        if saved.get("scope_id"):
            # Re-authorized where it is used: the search ladder checks the scope on every search.
            state.scope_id = saved["scope_id"]
            state.restored.append("active scope")
        self._save(caller, state)

    def persist(self, caller: HadronCaller, state: SessionState) -> None:
        """Save the session's selections for its client id (a no-op without one)."""
        self._save(caller, state)

    def _save(self, caller: HadronCaller, state: SessionState) -> None:
        if state.client_id is None or caller.kind != "user" or caller.user is None:
            return
        self.tenancy.save_selection(
            caller.user.id,
            state.client_id,
            {
                "app_id": state.app_id,
                "memory_id": state.memory_id,
                "org_id": state.org_id,
                "scope_id": state.scope_id,
                "session_id": state.session_id,
            },
        )

    # ── memory ─────────────────────────────────────────────────────────────

    def set_active_memory(self, caller: HadronCaller, state: SessionState, ref: str) -> Memory:
        memory, _ = self.access.read_memory(caller, ref)
        state.memory_id = memory.id
        self._save(caller, state)
        return memory

    def reachable_memories(self, caller: HadronCaller, state: SessionState) -> list[ReachableMemory]:
        """Every memory the caller may read, with its access level and whether it is in the active App."""
        require_identity(caller)
        readable = self.access.readable(caller)
        app = self.access.tenancy.app(state.app_id) if state.app_id else None
        attached = set(self.access.tenancy.attached_memories(app.id)) if app else set()
        return [
            ReachableMemory(
                memory, level, app is not None and (memory.app_id == app.id or memory.id in attached)
            )
            for memory, level in readable
        ]

    def memory_level(self, caller: HadronCaller, memory: Memory) -> AccessLevel | None:
        return self.access.memory_level(caller, memory)

    def active_memory(self, caller: HadronCaller, state: SessionState) -> Memory:
        """The session's memory, re-authorized now; ``[no_active_memory]`` when none is bound."""
        require_identity(caller)
        if state.memory_id is None:
            raise NoActiveMemory("no memory given and no active memory bound for this session")
        memory = self.tenancy.memory(state.memory_id)
        if memory is None or self.access.memory_level(caller, memory) is None:
            state.memory_id = None
            self._save(caller, state)
            raise NotFound("memory", "(the active memory)", hint="Bind another with hadron_set_active_memory")
        return memory

    # ── apps ───────────────────────────────────────────────────────────────

    def visible_apps(self, caller: HadronCaller) -> list[tuple[App, str]]:
        """The Apps the caller may see, each with the caller's role in it."""
        require_identity(caller)
        return self.access.visible_apps(caller)

    def resolve_app(self, caller: HadronCaller, ref: str) -> tuple[App, str]:
        """An App the caller may use, by canonical URN, id, short form or unique display name.

        Short forms, as the CLI writes them: ``<org-root>:<slug>`` (``acme.com:ops``), and for a
        user-owned App ``@<handle>:<slug>`` or ``<handle>:<slug>``. A ref that is not a short form of a
        visible App is tried as an id, a display name (case-insensitive) or a bare slug; naming more
        than one App is ``app_identifier_ambiguous`` (with the candidates' URNs), none ``app_not_found``.
        """
        require_identity(caller)
        ref = ref.strip()
        visible = self.access.visible_apps(caller)
        hint = "hadron_list_apps lists the Apps you can use"
        if is_urn(ref):
            key = app_short_form(strip_urn_prefix(ref, "app")) if urn_type(ref) == "app" else None
            found = [(a, r) for a, r in visible if key is not None and _is_app(a, *key)]
            if not found:
                raise NotFound("app", ref, hint=hint)
            return found[0]
        key = app_short_form(ref)
        matches = [(a, r) for a, r in visible if key is not None and _is_app(a, *key)]
        if not matches:
            matches = [
                (a, r) for a, r in visible if a.id == ref or a.name.lower() == ref.lower() or a.slug == ref
            ]
        if not matches:
            raise NotFound("app", ref, hint=hint)
        if len(matches) > 1:
            urns = sorted(a.urn for a, _ in matches)
            raise AppAmbiguous(
                f"{ref!r} names {len(matches)} Apps: {', '.join(urns)}", details={"candidates": urns}
            )
        return matches[0]

    def set_active_app(self, caller: HadronCaller, state: SessionState, ref: str) -> tuple[App, str]:
        app, role = self.resolve_app(caller, ref)
        state.app_id = app.id
        self._save(caller, state)
        return app, role

    def active_app(self, caller: HadronCaller, state: SessionState) -> App:
        """The App a strict tool works in: an app key's own, else the re-authorized selection."""
        if caller.kind == "app" and caller.app is not None:
            return caller.app
        app = self.tenancy.app(state.app_id) if state.app_id else None
        if app is None or self.access.app_role(caller, app) is None:
            raise NoActiveApp("this tool needs an active App and none is selected for this session")
        return app

    # ── organizations ──────────────────────────────────────────────────────

    def set_active_org(
        self, caller: HadronCaller, state: SessionState, ref: str | None, clear: bool
    ) -> Org | None:
        require_identity(caller)
        if caller.kind == "app":
            raise Forbidden(
                "an App key carries its organization in the credential and cannot select another",
                details={"principal": "app"},
            )
        if clear:
            state.org_id = None
            self._save(caller, state)
            return None
        if not ref:
            raise BadInput("pass org (hrn:org:<root> or id) or clear: true", details={"field": "org"})
        org = self._member_org(caller, ref)
        state.org_id = org.id
        self._save(caller, state)
        return org

    def _member_org(self, caller: HadronCaller, ref: str) -> Org:
        root = strip_urn_prefix(ref, "org")
        org = self.tenancy.org_by_root(root) or self.tenancy.org(root)
        if org is None or caller.user is None or self.tenancy.org_role(org.id, caller.user.id) is None:
            raise NotFound("org", ref, hint="You can select only organizations you are a member of")
        return org

    def resolve_org(
        self, caller: HadronCaller, state: SessionState, named: str | None = None
    ) -> OrgResolution:
        """The organization ladder: named › active App's org › selection › app key › single membership
        › (no membership) own memories. Two or more memberships and none of those: unresolved."""
        if caller.kind == "app" and caller.app is not None:
            org = self.tenancy.org(caller.app.org_id) if caller.app.org_id else None
            return OrgResolution(org, "app-key")
        if caller.user is None:
            return OrgResolution(None, "unresolved")
        if named:
            return OrgResolution(self._member_org(caller, named), "call")
        app = self.tenancy.app(state.app_id) if state.app_id else None
        if app is not None and app.org_id and self.access.app_role(caller, app) is not None:
            return OrgResolution(self.tenancy.org(app.org_id), "active-app")
        if state.org_id and self.tenancy.org_role(state.org_id, caller.user.id) is not None:
            return OrgResolution(self.tenancy.org(state.org_id), "active-org")
        memberships = tuple(org for org, _ in self.tenancy.org_memberships(caller.user.id))
        if len(memberships) == 1:
            return OrgResolution(memberships[0], "single-membership")
        if not memberships:
            return OrgResolution(None, "personal")
        return OrgResolution(None, "unresolved", memberships)

    def require_org(
        self, caller: HadronCaller, state: SessionState, named: str | None = None
    ) -> OrgResolution:
        """For org-scoped reads: refuse ``ORG_REQUIRED`` (listing the memberships) when unresolved."""
        resolution = self.resolve_org(caller, state, named)
        if resolution.rung == "unresolved" and resolution.memberships:
            urns = [o.urn for o in resolution.memberships]
            raise OrgRequired(
                f"you belong to {len(urns)} organizations; pick one: {', '.join(urns)}",
                details={"memberships": urns},
            )
        return resolution


def _is_app(app: App, root: str, slug: str, personal: bool) -> bool:
    """Whether ``app`` is the App ``root``:``slug`` (``personal``: written ``@handle``, a user's App only)."""
    return (app.root, app.slug) == (root, slug) and (not personal or app.owner_user_id is not None)
