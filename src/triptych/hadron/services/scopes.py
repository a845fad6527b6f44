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

from dataclasses import dataclass

from triptych.hadron.services.scope_ladder import MAX_LISTED, RESERVED, ScopeLadder, SearchScope
from triptych.hadron.services.scope_lookup import TIERS, Resolved, ScopeLookup
from triptych.hadron.services.scope_management import SCOPE_NAME, ScopeManagement

# The names other modules, benchmarks and tests import from here.
__all__ = [
    "MAX_LISTED",
    "RESERVED",
    "SCOPE_NAME",
    "TIERS",
    "Resolved",
    "ScopeService",
    "SearchScope",
]


@dataclass(eq=False, repr=False)  # adds no field: the generated __init__ calls __post_init__
class ScopeService(ScopeLookup):
    """Scopes and the search ladder; each call goes to its job (the lookup is this class itself)."""

    def __post_init__(self) -> None:
        self.views = ScopeLadder(self)
        self.management = ScopeManagement(self)
        # Bound once, not wrapped: each keeps its job's signature.
        self.app_view = self.views.app_view
        self.org_view = self.views.org_view
        self.row = self.views.row
        self.scope_view = self.views.scope_view
        self.builtin = self.views.builtin
        self.personal = self.views.personal
        self.named = self.views.named
        self.ladder = self.views.ladder
        self.explain = self.views.explain
        self.check_name = self.management.check_name
        self.create = self.management.create
        self.update = self.management.update
        self.delete = self.management.delete
        self.listing = self.management.listing
        self.set_active = self.management.set_active
