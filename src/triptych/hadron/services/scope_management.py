"""The scope tools' writes and listings: create, update, delete, list, and the session's active scope.
A scope is managed by CONTRIBUTOR+ of its organization, or for an App or Agent owner by ADMIN of the
App's organization (or the personal App's owner). Split from ``scopes.py`` (issue 29);
``ScopeService`` hands these calls here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from triptych.hadron.access import require_identity
from triptych.hadron.domain.loc import is_id, strip_urn_prefix
from triptych.hadron.domain.model import Scope
from triptych.hadron.domain.team import Agent
from triptych.hadron.errors import BadInput, NoActiveApp, NotFound
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.scope_ladder import RESERVED
from triptych.hadron.services.scope_lookup import ScopeJob
from triptych.hadron.services.selection import SessionState
from triptych.hadron.store import new_id

SCOPE_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")


class ScopeManagement(ScopeJob):
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
        target = self.scopes.context_app(caller, state, app)
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
        self.scopes.require_manage(caller, owner_type, owner_id)
        memory_ids = self._memory_ids(caller, memory_urns)
        if self.store.scope_named(owner_type, owner_id, name) is not None:
            raise BadInput(
                f"this owner already has a scope named {name!r}",
                details={"field": "name"},
                code="SCOPE_NAME_TAKEN",
            )
        now = self.scopes.clock()
        scope = Scope(new_id(), name, description, owner_type, owner_id, memory_ids, caller.actor, now, now)  # type: ignore[arg-type]
        self.store.add_scope(scope)
        return scope

    def _own(self, caller: HadronCaller, scope_id: str) -> Scope:
        require_identity(caller)
        scope = self.store.scope(scope_id.strip()) if is_id(scope_id.strip()) else None
        if scope is None or not self.scopes.can_read(caller, scope):
            raise NotFound("scope", scope_id, hint="Pass the scope's id (hadron_list_scopes prints it)")
        self.scopes.require_manage(caller, scope.owner_type, scope.owner_id)
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
        updated = replace(scope, **changes, updated_at=self.scopes.clock())
        self.store.update_scope(updated)
        return updated

    def delete(self, caller: HadronCaller, scope_id: str) -> Scope:
        scope = self._own(caller, scope_id)
        self.store.delete_scope(scope.id, self.scopes.clock())
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
            app = self.scopes.context_app(caller, state, app_ref)
            org = self.scopes.context_org(caller, state, app)
            owners = self.scopes.tiers(app, org)
            parts = ([f"App {app.urn}"] if app else []) + ([f"organization {org.urn}"] if org else [])
            context = " › ".join(parts) if parts else "no App and no organization"
        out: list[tuple[str, Scope]] = []
        for tier, owner_id in owners:
            for scope in self.store.scopes_of(tier, owner_id):
                if self.scopes.can_read(caller, scope) and (name is None or scope.name == name):
                    out.append((tier, scope))
        return context, out

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
        resolved = self.scopes.get(caller, state, ref)
        state.scope_id = resolved.scope.id
        self.selections.persist(caller, state)
        return resolved.scope
