"""What a search covers and how that is reported: a scope's readable memories, the built-in views
(``app``, ``global``), the caller's own memories, the search ladder (rungs 2-5) and a scope's
explanation. Split from ``scopes.py`` (issue 29); ``ScopeService`` hands these calls here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from triptych.hadron.access import require_identity
from triptych.hadron.domain.loc import node_urn
from triptych.hadron.domain.model import App, Memory, Org, Scope
from triptych.hadron.errors import NoActiveApp
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.scope_lookup import Resolved, ScopeJob
from triptych.hadron.services.selection import SessionState

RESERVED = ("app", "global")
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


class ScopeLadder(ScopeJob):
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
            "owner": self.scopes.owner_label(scope),
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
        label = f'{who} "{scope.name}" ({resolved.tier} {self.scopes.owner_label(scope)})'
        return SearchScope(rung, label, memories, dropped)

    def builtin(self, caller: HadronCaller, state: SessionState, name: str, rung: str) -> SearchScope:
        if name == "app":
            app = self.scopes.context_app(caller, state)
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
        return self.scope_view(caller, state, self.scopes.get(caller, state, ref), rung)

    # ── the ladder ──────────────────────────────────────────────────────

    def ladder(self, caller: HadronCaller, state: SessionState) -> SearchScope:
        """Rungs 2-5: the active scope, the active App, the active organization, your own memories."""
        require_identity(caller)
        notes: list[str] = []
        if state.scope_id:
            scope = self.store.scope(state.scope_id)
            if scope is not None and self.scopes.can_read(caller, scope):
                return self.scope_view(caller, state, Resolved(scope, scope.owner_type), "active-scope")
            state.scope_id = None
            self.selections.persist(caller, state)
            notes.append("the active scope no longer resolves and was cleared")
        app = self.scopes.context_app(caller, state)
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

    def explain(
        self, caller: HadronCaller, state: SessionState, ref: str, app_ref: str | None, loc: str | None
    ) -> dict[str, Any]:
        if ref.strip() in RESERVED:
            view = self.builtin(caller, state, ref.strip(), "scope")
            resolved = None
        else:
            resolved = self.scopes.get(caller, state, ref, app_ref)
            view = self.scope_view(caller, state, resolved, "scope")
        out: dict[str, Any] = {
            "scope": ref,
            "id": resolved.scope.id if resolved else None,
            "name": resolved.scope.name if resolved else ref.strip(),
            "tier": resolved.tier if resolved else "built-in",
            "owner": self.scopes.owner_label(resolved.scope) if resolved else None,
            "memoryUrns": [m.urn for m in view.memories],
            "droppedForAccess": view.dropped,
            "shadowed": [
                {"id": s.id, "name": s.name, "ownerType": s.owner_type, "owner": self.scopes.owner_label(s)}
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
