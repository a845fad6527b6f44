"""Search scopes and the search ladder: which memories a search covers, and how that is reported.

A scope is a named, ordered list of memories owned by one organization, app or agent. It narrows and
never grants: it resolves to its memories the caller may read, and the others are a count, never names.
Names are 1-64 of ``[a-z0-9_-]``, unique per owner among live scopes; ``app`` and ``global`` are the
built-in views. A name resolves in an App's context, app › agent › organization, never unioned.

With no memory selector a search runs under the first rung that applies: a scope named in the call,
the active scope, the active App's memories (``app``), the active organization (``global``), the caller's
own user-owned memories. The active memory is not a rung. Explicit selectors (``memoryUrn``,
``memoryUrns``, ``allMemories``, ``parentRel``) outrank rungs 2-5 but intersect with a named scope.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import is_id, node_urn, strip_urn_prefix
from triptych.hadron.domain.model import App, Memory, Org, Scope, role_at_least
from triptych.hadron.domain.team import Agent
from triptych.hadron.errors import BadInput, Forbidden, NoActiveApp, NotFound, ScopeAmbiguous
from triptych.hadron.identity import HadronCaller
from triptych.hadron.search_store import SearchStore
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import TenancyStore, new_id, utcnow

SCOPE_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")
RESERVED = ("app", "global")
TIERS = ("app", "agent", "organization")
MAX_LISTED = 10


@dataclass
class SearchScope:
    """What a search actually covers, and how to say so in the scope line."""

    rung: str  # scope | active-scope | app | global | personal | memoryUrn | memoryUrns | allMemories | parentRel
    label: str
    memories: list[Memory]
    dropped: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        urns = [m.urn for m in self.memories]
        shown = ", ".join(urns[:MAX_LISTED]) + (
            f" and {len(urns) - MAX_LISTED} more" if len(urns) > MAX_LISTED else ""
        )
        noun = "memory" if len(urns) == 1 else "memories"
        what = f"{len(urns)} {noun}" + (f" ({shown})" if urns else "")
        text = f"scope: {self.label} — searched {what}; {self.dropped} dropped for access"
        return text + "".join(f"; {note}" for note in self.notes)

    def data(self) -> dict[str, Any]:
        return {
            "rung": self.rung,
            "label": self.label,
            "memoryUrns": [m.urn for m in self.memories],
            "droppedForAccess": self.dropped,
            "notes": self.notes,
        }


@dataclass(frozen=True, slots=True)
class Resolved:
    scope: Scope
    tier: str
    shadowed: tuple[Scope, ...] = ()


class ScopeService:
    def __init__(
        self,
        tenancy: TenancyStore,
        access: AccessPolicy,
        selections: SelectionService,
        store: SearchStore,
        agents: AgentService,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.access = access
        self.selections = selections
        self.store = store
        self.agents = agents
        self.clock = clock

    # ── context ─────────────────────────────────────────────────────────

    def context_app(
        self, caller: HadronCaller, state: SessionState, app_ref: str | None = None
    ) -> App | None:
        if app_ref:
            return self.selections.resolve_app(caller, app_ref)[0]
        if caller.kind == "app" and caller.app is not None:
            return caller.app
        app = self.tenancy.app(state.app_id) if state.app_id else None
        return app if app is not None and self.access.app_role(caller, app) is not None else None

    def context_org(self, caller: HadronCaller, state: SessionState, app: App | None) -> Org | None:
        if app is not None and app.org_id:
            return self.tenancy.org(app.org_id)
        resolution = self.selections.resolve_org(caller, state)
        return resolution.org

    def owner_label(self, scope: Scope) -> str:
        if scope.owner_type == "organization":
            org = self.tenancy.org(scope.owner_id)
            return org.urn if org else scope.owner_id
        if scope.owner_type == "app":
            app = self.tenancy.app(scope.owner_id)
            return app.urn if app else scope.owner_id
        agent = self.agents.team.agent(scope.owner_id)
        return agent.urn if agent else f"agent {scope.owner_id}"

    # ── who may read and manage ─────────────────────────────────────────

    def can_read(self, caller: HadronCaller, scope: Scope) -> bool:
        if scope.owner_type == "organization":
            if caller.kind == "app" and caller.app is not None:
                return caller.app.org_id == scope.owner_id
            return (
                caller.user is not None and self.tenancy.org_role(scope.owner_id, caller.user.id) is not None
            )
        if scope.owner_type == "app":
            app = self.tenancy.app(scope.owner_id)
            return app is not None and self.access.app_role(caller, app) is not None
        agent = self.agents.team.agent(scope.owner_id)  # an Agent's scopes: readable where its App is
        app = self.tenancy.app(agent.app_id) if agent else None
        return app is not None and self.access.app_role(caller, app) is not None

    def require_manage(self, caller: HadronCaller, owner_type: str, owner_id: str) -> None:
        """CONTRIBUTOR+ of an owning org; for an app owner ADMIN of its org or the owner of a personal app."""
        require_identity(caller)
        user = caller.user
        allowed = False
        if user is not None and caller.kind == "user":
            if owner_type == "organization":
                allowed = role_at_least(self.tenancy.org_role(owner_id, user.id), "CONTRIBUTOR")
            elif owner_type in ("app", "agent"):
                agent = self.agents.team.agent(owner_id) if owner_type == "agent" else None
                app = self.tenancy.app(agent.app_id if agent else owner_id)
                if app is not None:
                    allowed = app.owner_user_id == user.id or (
                        app.org_id is not None
                        and role_at_least(self.tenancy.org_role(app.org_id, user.id), "ADMIN")
                    )
        if not allowed:
            raise Forbidden(
                "creating or changing a scope needs CONTRIBUTOR on its organization, or for an App owner ADMIN "
                "of the App's organization (or owning the personal App)",
                details={"ownerType": owner_type},
            )

    # ── lookup ──────────────────────────────────────────────────────────

    def _tiers(self, app: App | None, org: Org | None) -> list[tuple[str, str]]:
        tiers: list[tuple[str, str]] = []
        if app is not None:
            tiers.append(("app", app.id))
            # The App's installed Agents, between the App and the organization.
            tiers += [("agent", agent.id) for agent in self.agents.agents(app)]
        if org is not None:
            tiers.append(("organization", org.id))
        return tiers

    def resolve_name(
        self, caller: HadronCaller, state: SessionState, name: str, app_ref: str | None = None
    ) -> Resolved:
        app = self.context_app(caller, state, app_ref)
        org = self.context_org(caller, state, app)
        hits = []
        for owner_type, owner_id in self._tiers(app, org):
            scope = self.store.scope_named(owner_type, owner_id, name)
            if scope is not None and self.can_read(caller, scope):
                hits.append((owner_type, scope))
        if not hits:
            raise NotFound("scope", name, hint="hadron_list_scopes lists the scopes a name resolves against")
        tier, winner = hits[0]
        if tier == "agent" and len(hits) > 1 and hits[1][0] == "agent":
            ids = [s.id for t, s in hits if t == "agent"]
            raise ScopeAmbiguous(
                f"{len(ids)} installed Agents each own a scope named {name!r}", details={"candidates": ids}
            )
        return Resolved(winner, tier, tuple(s for _, s in hits[1:]))

    def get(
        self, caller: HadronCaller, state: SessionState, ref: str, app_ref: str | None = None
    ) -> Resolved:
        require_identity(caller)
        ref = ref.strip()
        if is_id(ref):
            scope = self.store.scope(ref)
            if scope is None or not self.can_read(caller, scope):
                raise NotFound("scope", ref)
            return Resolved(scope, scope.owner_type)
        return self.resolve_name(caller, state, ref, app_ref)

    # ── views ───────────────────────────────────────────────────────────

    def _readable(
        self, caller: HadronCaller, memory_ids: Sequence[str], known: dict[str, Memory] | None = None
    ) -> tuple[list[Memory], int]:
        """The memories ``caller`` may read, in order, and how many others there were. ``known``: the
        memories already loaded by id, so that none is read twice."""
        found, dropped = [], 0
        for memory_id in dict.fromkeys(memory_ids):
            memory = known[memory_id] if known and memory_id in known else self.tenancy.memory(memory_id)
            if memory is None:
                dropped += 1
            else:
                found.append(memory)
        levels = self.access.levels(caller, found)
        out = [memory for memory, level in zip(found, levels, strict=True) if level is not None]
        return out, dropped + len(found) - len(out)

    def app_view(self, caller: HadronCaller, app: App) -> tuple[list[Memory], int]:
        attached = self.tenancy.attached_memories(app.id)
        every = {m.id: m for m in self.tenancy.memories()}
        owned = [m.id for m in every.values() if m.app_id == app.id]
        return self._readable(caller, [*attached, *owned], every)

    def org_view(self, caller: HadronCaller, org: Org) -> tuple[list[Memory], int]:
        apps = {a.id for a in self.tenancy.apps() if a.org_id == org.id}
        every = {m.id: m for m in self.tenancy.memories()}
        ids = [m.id for m in every.values() if m.org_id == org.id or (m.app_id in apps)]
        return self._readable(caller, ids, every)

    def row(self, caller: HadronCaller, scope: Scope, tier: str | None = None) -> dict[str, Any]:
        """A scope as the scope tools show it: its memories the caller may read, in order, and how many
        others there are (a count, never their names)."""
        memories, dropped = self._readable(caller, scope.memory_ids)
        return {
            "id": scope.id,
            "name": scope.name,
            "description": scope.description,
            "ownerType": scope.owner_type,
            "owner": self.owner_label(scope),
            "tier": tier or scope.owner_type,
            "memoryUrns": [m.urn for m in memories],
            "droppedForAccess": dropped,
            "createdBy": scope.created_by,
            "updatedAt": scope.updated_at,
        }

    def scope_view(
        self, caller: HadronCaller, state: SessionState, resolved: Resolved, rung: str
    ) -> SearchScope:
        scope = resolved.scope
        memories, dropped = self._readable(caller, scope.memory_ids)
        who = "active scope" if rung == "active-scope" else "scope"
        label = f'{who} "{scope.name}" ({resolved.tier} {self.owner_label(scope)})'
        return SearchScope(rung, label, memories, dropped)

    def builtin(self, caller: HadronCaller, state: SessionState, name: str, rung: str) -> SearchScope:
        if name == "app":
            app = self.context_app(caller, state)
            if app is None:
                raise NoActiveApp('the built-in scope "app" needs an active App')
            memories, dropped = self.app_view(caller, app)
            return SearchScope(rung, f"app {app.urn} (its memories)", memories, dropped)
        org = self.selections.require_org(caller, state).org
        if org is None:
            return self.personal(caller, rung)
        memories, dropped = self.org_view(caller, org)
        return SearchScope(rung, f"global (organization {org.urn})", memories, dropped)

    def personal(self, caller: HadronCaller, rung: str = "personal") -> SearchScope:
        user_id = caller.user.id if caller.user else None
        memories = [m for m in self.tenancy.memories() if user_id is not None and m.user_id == user_id]
        return SearchScope(rung, "personal (your own user-owned memories)", memories, 0)

    def named(self, caller: HadronCaller, state: SessionState, ref: str, rung: str = "scope") -> SearchScope:
        if ref.strip() in RESERVED:
            return self.builtin(caller, state, ref.strip(), rung)
        return self.scope_view(caller, state, self.get(caller, state, ref), rung)

    # ── the ladder ──────────────────────────────────────────────────────

    def ladder(self, caller: HadronCaller, state: SessionState) -> SearchScope:
        """Rungs 2-5: the active scope, the active App, the active organization, your own memories."""
        require_identity(caller)
        notes: list[str] = []
        if state.scope_id:
            scope = self.store.scope(state.scope_id)
            if scope is not None and self.can_read(caller, scope):
                return self.scope_view(caller, state, Resolved(scope, scope.owner_type), "active-scope")
            state.scope_id = None
            self.selections.persist(caller, state)
            notes.append("the active scope no longer resolves and was cleared")
        app = self.context_app(caller, state)
        if app is not None:
            memories, dropped = self.app_view(caller, app)
            return SearchScope("app", f"app {app.urn} (the active App's memories)", memories, dropped, notes)
        resolution = self.selections.require_org(caller, state)
        if resolution.org is not None:
            memories, dropped = self.org_view(caller, resolution.org)
            label = f"global (organization {resolution.org.urn}, chosen by {resolution.rung})"
            return SearchScope("global", label, memories, dropped, notes)
        view = self.personal(caller)
        view.notes = notes
        return view

    # ── management ──────────────────────────────────────────────────────

    @staticmethod
    def check_name(name: str) -> str:
        if not SCOPE_NAME.match(name):
            raise BadInput(
                "a scope name is 1-64 characters of [a-z0-9_-]", details={"field": "name", "name": name}
            )
        if name in RESERVED:
            raise BadInput(
                f"{name!r} is reserved for the built-in view",
                details={"field": "name", "reserved": list(RESERVED)},
            )
        return name

    def _memory_ids(self, caller: HadronCaller, refs: Sequence[str]) -> tuple[str, ...]:
        if not refs:
            raise BadInput("memoryUrns needs at least one memory", details={"field": "memoryUrns"})
        ids: list[str] = []
        for ref in refs:
            memory, _ = self.access.read_memory(caller, ref)  # every memory must be one you can read
            if memory.id not in ids:
                ids.append(memory.id)
        return tuple(ids)

    def _owner(
        self, caller: HadronCaller, state: SessionState, org: str | None, agent: str | None, app: str | None
    ) -> tuple[str, str]:
        given = [x for x in (org, agent, app) if x]
        if len(given) > 1:
            raise BadInput("pass at most one of organizationRef, agentRef, appRef")
        if agent:
            return "agent", self._agent(caller, agent).id
        if org:
            ref = org.strip()
            root = strip_urn_prefix(ref, "org")
            found = self.tenancy.org_by_root(root) or self.tenancy.org(ref)
            if (
                found is None
                or caller.user is None
                or self.tenancy.org_role(found.id, caller.user.id) is None
            ):
                raise NotFound("org", ref)
            return "organization", found.id
        target = self.context_app(caller, state, app)
        if target is None:
            raise NoActiveApp("with no owner ref the active App owns the scope, and none is selected")
        return "app", target.id

    def _agent(self, caller: HadronCaller, ref: str) -> Agent:
        """An installed Agent by URN or id, in an App the caller may use; else ``[agent_not_found]``."""
        agent = self.agents.by_ref(ref)
        app = self.tenancy.app(agent.app_id) if agent else None
        if agent is None or app is None or self.access.app_role(caller, app) is None:
            raise NotFound(
                "agent", ref, hint="Pass an installed Agent's URN or id (hadron_search kind agent)"
            )
        return agent

    def create(
        self,
        caller: HadronCaller,
        state: SessionState,
        name: str,
        memory_urns: Sequence[str],
        description: str | None,
        org: str | None,
        agent: str | None,
        app: str | None,
    ) -> Scope:
        require_identity(caller)
        self.check_name(name)
        owner_type, owner_id = self._owner(caller, state, org, agent, app)
        self.require_manage(caller, owner_type, owner_id)
        memory_ids = self._memory_ids(caller, memory_urns)
        if self.store.scope_named(owner_type, owner_id, name) is not None:
            raise BadInput(
                f"this owner already has a scope named {name!r}",
                details={"field": "name"},
                code="SCOPE_NAME_TAKEN",
            )
        now = self.clock()
        scope = Scope(new_id(), name, description, owner_type, owner_id, memory_ids, caller.actor, now, now)  # type: ignore[arg-type]
        self.store.add_scope(scope)
        return scope

    def _own(self, caller: HadronCaller, scope_id: str) -> Scope:
        require_identity(caller)
        scope = self.store.scope(scope_id.strip()) if is_id(scope_id.strip()) else None
        if scope is None or not self.can_read(caller, scope):
            raise NotFound("scope", scope_id, hint="Pass the scope's id (hadron_list_scopes prints it)")
        self.require_manage(caller, scope.owner_type, scope.owner_id)
        return scope

    def update(
        self,
        caller: HadronCaller,
        scope_id: str,
        name: str | None,
        description: str | None,
        memory_urns: Sequence[str] | None,
        present: set[str],
    ) -> Scope:
        scope = self._own(caller, scope_id)
        changes: dict[str, Any] = {}
        if name is not None and name != scope.name:
            self.check_name(name)
            if self.store.scope_named(scope.owner_type, scope.owner_id, name) is not None:
                raise BadInput(
                    f"this owner already has a scope named {name!r}",
                    details={"field": "name"},
                    code="SCOPE_NAME_TAKEN",
                )
            changes["name"] = name
        if "description" in present:
            changes["description"] = description
        if memory_urns is not None:
            changes["memory_ids"] = self._memory_ids(caller, memory_urns)  # replaces, never merges
        if not changes and not present:
            raise BadInput("nothing to update: pass name, description or memoryUrns")
        updated = replace(scope, **changes, updated_at=self.clock())
        self.store.update_scope(updated)
        return updated

    def delete(self, caller: HadronCaller, scope_id: str) -> Scope:
        scope = self._own(caller, scope_id)
        self.store.delete_scope(scope.id, self.clock())
        return scope

    def listing(
        self,
        caller: HadronCaller,
        state: SessionState,
        app_ref: str | None,
        owner_type: str | None,
        owner_ref: str | None,
        name: str | None,
    ) -> tuple[str, list[tuple[str, Scope]]]:
        require_identity(caller)
        if (owner_type is None) != (owner_ref is None):
            raise BadInput("pass ownerType and ownerRef together")
        owners: list[tuple[str, str]]
        if owner_type is not None and owner_ref is not None:
            if owner_type == "organization":
                owners = [self._owner(caller, state, owner_ref, None, None)]
            elif owner_type == "app":
                owners = [("app", self.selections.resolve_app(caller, owner_ref)[0].id)]
            else:
                owners = [("agent", self._agent(caller, owner_ref).id)]
            context = f"{owner_type} {owner_ref}"
        else:
            app = self.context_app(caller, state, app_ref)
            org = self.context_org(caller, state, app)
            owners = self._tiers(app, org)
            parts = ([f"App {app.urn}"] if app else []) + ([f"organization {org.urn}"] if org else [])
            context = " › ".join(parts) if parts else "no App and no organization"
        out: list[tuple[str, Scope]] = []
        for tier, owner_id in owners:
            for scope in self.store.scopes_of(tier, owner_id):
                if self.can_read(caller, scope) and (name is None or scope.name == name):
                    out.append((tier, scope))
        return context, out

    def explain(
        self, caller: HadronCaller, state: SessionState, ref: str, app_ref: str | None, loc: str | None
    ) -> dict[str, Any]:
        if ref.strip() in RESERVED:
            view = self.builtin(caller, state, ref.strip(), "scope")
            resolved = None
        else:
            resolved = self.get(caller, state, ref, app_ref)
            view = self.scope_view(caller, state, resolved, "scope")
        out: dict[str, Any] = {
            "scope": ref,
            "id": resolved.scope.id if resolved else None,
            "name": resolved.scope.name if resolved else ref.strip(),
            "tier": resolved.tier if resolved else "built-in",
            "owner": self.owner_label(resolved.scope) if resolved else None,
            "memoryUrns": [m.urn for m in view.memories],
            "droppedForAccess": view.dropped,
            "shadowed": [
                {"id": s.id, "name": s.name, "ownerType": s.owner_type, "owner": self.owner_label(s)}
                for s in (resolved.shadowed if resolved else ())
            ],
            "label": view.label,
        }
        if loc:
            present = self.store.live_locs_in([m.id for m in view.memories], loc.strip())
            winner = next((m for m in view.memories if m.id in present), None)
            out["loc"] = loc.strip()
            out["winner"] = (
                {"memoryUrn": winner.urn, "urn": node_urn(winner.root, winner.slug, loc.strip())}
                if winner
                else None
            )
        return out

    def set_active(
        self, caller: HadronCaller, state: SessionState, ref: str | None, clear: bool
    ) -> Scope | None:
        require_identity(caller)
        if clear:
            state.scope_id = None
            self.selections.persist(caller, state)
            return None
        if not ref:
            raise BadInput("pass scope (an id or a name) or clear: true", details={"field": "scope"})
        if ref.strip() in RESERVED:
            raise BadInput(
                f"{ref.strip()!r} is a built-in view, not a stored scope; it is already a rung of the ladder",
                details={"field": "scope"},
            )
        resolved = self.get(caller, state, ref)
        state.scope_id = resolved.scope.id
        self.selections.persist(caller, state)
        return resolved.scope
