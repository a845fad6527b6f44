"""What every node job starts from: the stores, the access policy, the hooks the surface wires after
construction, the resolution of a reference to a readable memory and a live node, and the re-read of a
node as committed once its memory's key is held.

``NodeService`` (``nodes.py``) is this context with the node views; it hands writes to ``node_writes``,
listings to ``node_tree`` and subtree moves and deletes to ``node_subtrees``. Each job holds the service
itself and reads the hooks at call time, so a hook the surface wires after construction reaches all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import (
    MemoryKey,
    NodeRef,
    is_id,
    node_urn,
    parse_memory_ref,
    parse_node_ref,
    require_qualified_node,
)
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import BadInput, HadronError, NotFound, UrnNotQualified
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.embedding import NodeEmbedder
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import GraphStore, TenancyStore, utcnow


def urn_error(exc: UrnError) -> HadronError:
    if exc.reason == "urn-not-qualified":
        return UrnNotQualified(str(exc), details={"reason": exc.reason, "value": exc.value})
    return BadInput(
        str(exc), details={"reason": exc.reason, "value": exc.value, "segment": exc.offending_segment}
    )


@dataclass(eq=False, repr=False)  # a service: compared and shown by identity
class NodeContext:
    tenancy: TenancyStore
    graph: GraphStore
    access: AccessPolicy
    selections: SelectionService
    clock: Callable[[], str] = utcnow
    # The hooks below are wired by the surface after construction (none is a constructor argument).
    # Embeds written nodes by their memory's policy (search, issue 6); None embeds nothing.
    embedder: NodeEmbedder | None = field(default=None, init=False)
    # Derived data kept after a committed write (abstracts, issue 18), and extra fields a node's full
    # view carries (an action's runs): each a callable, so this service imports none of them.
    derived: list[Callable[[Memory, Sequence[NodeRecord]], None]] = field(default_factory=list, init=False)
    extras: list[Callable[[NodeRecord], dict[str, Any]]] = field(default_factory=list, init=False)
    # Refuses a generic write on a Channel's address ([loc_protected], issue 14): (memory, loc,
    # containing) where ``containing`` also refuses a subtree holding an address.
    guard: Callable[[Memory, str, bool], None] | None = field(default=None, init=False)
    # Attributes a node created inside a worker session to that session (issue 14).
    attribute: Callable[[SessionState, NodeRecord], None] | None = field(default=None, init=False)
    session_of: Callable[[str], str | None] | None = field(default=None, init=False)
    # Mirrors a committed move into Git-backed memories (issue 18): (src, dst, [(id, old, new)], actor).
    moved: Callable[[Memory, Memory, list[tuple[str, str, str]], str], None] | None = field(
        default=None, init=False
    )

    def check_generic_write(self, memory: Memory, loc: str, containing: bool = False) -> None:
        """Refuse (``[loc_protected]``) a generic write at ``loc`` when a Channel's address holds it;
        ``containing`` also refuses a subtree that holds one (moves, recursive deletes)."""
        if self.guard is not None:
            self.guard(memory, loc, containing)

    def embedded(self, memory: Memory, nodes: Sequence[NodeRecord]) -> None:
        """After a committed write: embed by the memory's policy (a failure is recorded, never raised)."""
        if self.embedder is not None:
            self.embedder.on_write(memory, nodes)
        for keep in self.derived:
            keep(memory, nodes)

    # ── resolution ─────────────────────────────────────────────────────────

    def parse_ref(self, value: str, *, qualified: bool = False) -> NodeRef:
        try:
            return require_qualified_node(value) if qualified else parse_node_ref(value)
        except UrnError as exc:
            raise urn_error(exc) from exc

    def memory_of(
        self, caller: HadronCaller, state: SessionState, ref: NodeRef, memory: str | None = None
    ) -> Memory:
        """The (readable) memory a reference lives in: its URN, else ``memory``, else the active one."""
        require_identity(caller)
        if ref.memory is not None:
            if memory is not None and self._key(memory) not in (ref.memory, None):
                raise BadInput(f"the loc names {ref.memory.urn} but the memory argument names {memory}")
            return self.access.read_memory(caller, ref.memory)[0]
        if memory is not None:
            return self.access.read_memory(caller, memory)[0]
        return self.selections.active_memory(caller, state)

    def _key(self, memory: str) -> MemoryKey | None:
        try:
            return parse_memory_ref(memory)
        except UrnError as exc:
            raise urn_error(exc) from exc

    def find(
        self, caller: HadronCaller, state: SessionState, value: str, memory: str | None = None
    ) -> tuple[Memory, NodeRecord]:
        """A live node by id, URN or loc that the caller may read; else ``[node_not_found]``."""
        value = value.strip()
        if is_id(value):
            node = self.graph.node_by_id(value)
            found = self.tenancy.memory(node.memory_id) if node is not None else None
            if node is not None and found is not None and self.access.memory_level(caller, found) is not None:
                return found, node
            if not (memory or state.memory_id):
                raise NotFound("node", value)
        ref = self.parse_ref(value)
        mem = self.memory_of(caller, state, ref, memory)
        node = self.graph.node_by_loc(mem.id, ref.loc)
        if node is None:
            raise NotFound("node", node_urn(mem.root, mem.slug, ref.loc))
        return mem, node

    # ── the committed state ────────────────────────────────────────────────

    def subtree_at(self, mem: Memory, loc: str) -> list[NodeRecord]:
        """The live node at ``loc`` and its descendants, root first; ``[node_not_found]`` without it."""
        subtree = self.graph.subtree(mem.id, loc)
        if not subtree or subtree[0].loc != loc:
            raise NotFound("node", node_urn(mem.root, mem.slug, loc))
        return subtree

    def committed(self, mem: Memory, node: NodeRecord) -> NodeRecord | None:
        """``node`` as committed now if it is still live at its address in ``mem``; else ``None``."""
        current = self.graph.node_by_id(node.id)
        if current is None or current.memory_id != mem.id or current.loc != node.loc:
            return None
        return current

    def as_committed(self, mem: Memory, node: NodeRecord) -> NodeRecord:
        """``node`` read again under ``mem``'s key (called inside its transaction): the write builds on
        the last committed revision, never on the one read before the key was held. A node moved or
        deleted meanwhile is no longer at the address the caller named: ``[node_not_found]``, rather
        than written back into the memory it left (docs/decisions/0280)."""
        current = self.committed(mem, node)
        if current is None:
            raise NotFound(
                "node",
                node_urn(mem.root, mem.slug, node.loc),
                hint="It was moved or deleted meanwhile: look it up again (hadron_get_node)",
            )
        return current


class NodeJob:
    """One job of ``NodeService``: it holds the service itself, so the hooks wired after construction
    are read at call time, and the stores, which never change."""

    def __init__(self, nodes: NodeContext) -> None:
        self.nodes = nodes
        self.graph = nodes.graph
        self.access = nodes.access
        self.tenancy = nodes.tenancy
