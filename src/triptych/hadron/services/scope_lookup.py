"""What every scope job starts from: the stores, the App and organization a call runs in, who may read
and manage a scope, and a scope found by id or resolved by name (app › agent › organization, never
unioned). ``ScopeService`` (``scopes.py``) is this lookup; it hands the search views and the ladder to
``scope_ladder`` and the scope tools' writes and listings to ``scope_management``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import is_id
from triptych.hadron.domain.model import App, Org, Scope, role_at_least
from triptych.hadron.errors import Forbidden, NotFound, ScopeAmbiguous
from triptych.hadron.identity import HadronCaller
from triptych.hadron.search_store import SearchStore
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import TenancyStore, utcnow

TIERS = ("app", "agent", "organization")


@dataclass(frozen=True, slots=True)
class Resolved:
    scope: Scope
    tier: str
    shadowed: tuple[Scope, ...] = ()


@dataclass(eq=False, repr=False)  # a service: compared and shown by identity
class ScopeLookup:
    tenancy: TenancyStore
    access: AccessPolicy
    selections: SelectionService
    store: SearchStore
    agents: AgentService
    clock: Callable[[], str] = utcnow

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

    def tiers(self, app: App | None, org: Org | None) -> list[tuple[str, str]]:
        """The owners a name resolves against, in order: the App, its installed Agents, the organization."""
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
        for owner_type, owner_id in self.tiers(app, org):
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


class ScopeJob:
    """One job of ``ScopeService``: it holds the service itself and the stores."""

    def __init__(self, scopes: ScopeLookup) -> None:
        self.scopes = scopes
        self.tenancy = scopes.tenancy
        self.access = scopes.access
        self.selections = scopes.selections
        self.store = scopes.store
        self.agents = scopes.agents
