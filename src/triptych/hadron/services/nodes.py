"""Nodes and edges: create/upsert, update, merge data, edges, get, next, list, move and delete.

Every rule of the graph tools lives here. A tool passes what the caller sent; this service resolves
the memory (the URN in the reference, else the memory argument, else the session's active memory),
asks ``AccessPolicy`` for read or write access, validates against the memory's schema, and writes
the node, its edges and its revision in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain import schema as schemas
from triptych.hadron.domain.edges import edge_urn
from triptych.hadron.domain.loc import (
    MemoryKey,
    NodeRef,
    check_loc,
    is_id,
    leaf,
    node_urn,
    parent_loc,
    parse_memory_ref,
    parse_node_ref,
    require_qualified_node,
)
from triptych.hadron.domain.model import EdgeRecord, Memory, NodeRecord
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import (
    BadInput,
    Conflict,
    HadronError,
    NotFound,
    UrnAlreadyExists,
    UrnNotQualified,
)
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.embedding import NodeEmbedder
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import GraphStore, TenancyStore, new_id, utcnow

CHAT_ROOT_TYPES = frozenset(("chat",))
MAX_EDGES = 500
MAX_TREE = 2000  # entries one hadron_list_nodes answer holds


@dataclass(frozen=True, slots=True)
class Folder:
    """A loc in a listing that nodes live under but no node occupies (an implicit folder)."""

    loc: str
    seq: None = None


@dataclass(frozen=True, slots=True)
class EdgeInput:
    target: str  # node id, node URN or loc (relative to the source's memory)
    name: str | None = None
    description: str | None = None
    loc: str | None = None
    is_runnable: bool = False


@dataclass(frozen=True, slots=True)
class NodeFields:
    """The writable fields of a node; ``present`` names those the caller actually passed."""

    values: dict[str, Any]
    present: frozenset[str]


def urn_error(exc: UrnError) -> HadronError:
    if exc.reason == "urn-not-qualified":
        return UrnNotQualified(str(exc), details={"reason": exc.reason, "value": exc.value})
    return BadInput(
        str(exc), details={"reason": exc.reason, "value": exc.value, "segment": exc.offending_segment}
    )


class NodeService:
    def __init__(
        self,
        tenancy: TenancyStore,
        graph: GraphStore,
        access: AccessPolicy,
        selections: SelectionService,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.graph = graph
        self.access = access
        self.selections = selections
        self.clock = clock
        # Embeds written nodes by their memory's policy (search, issue 6); None embeds nothing.
        self.embedder: NodeEmbedder | None = None
        # Derived data kept after a committed write (abstracts, issue 18), and extra fields a node's full
        # view carries (an action's runs): each a callable, so this service imports none of them.
        self.derived: list[Callable[[Memory, Sequence[NodeRecord]], None]] = []
        self.extras: list[Callable[[NodeRecord], dict[str, Any]]] = []
        # Refuses a generic write on a Channel's address ([loc_protected], issue 14): (memory, loc,
        # containing) where ``containing`` also refuses a subtree holding an address.
        self.guard: Callable[[Memory, str, bool], None] | None = None
        # Attributes a node created inside a worker session to that session (issue 14).
        self.attribute: Callable[[SessionState, NodeRecord], None] | None = None
        self.session_of: Callable[[str], str | None] | None = None
        # Mirrors a committed move into Git-backed memories (issue 18): (src, dst, [(id, old, new)], actor).
        self.moved: Callable[[Memory, Memory, list[tuple[str, str, str]], str], None] | None = None

    def _guard(self, memory: Memory, loc: str, containing: bool = False) -> None:
        if self.guard is not None:
            self.guard(memory, loc, containing)

    def check_generic_write(self, memory: Memory, loc: str) -> None:
        """Refuse (``[loc_protected]``) a generic write at ``loc`` when a Channel's address holds it."""
        self._guard(memory, loc)

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

    # ── views ──────────────────────────────────────────────────────────────

    def view(
        self, caller: HadronCaller, memory: Memory, node: NodeRecord, revisions: int = 10
    ) -> dict[str, Any]:
        edges = self.graph.edges_from([node.id]).get(node.id, [])
        return {
            "id": node.id,
            "urn": node_urn(memory.root, memory.slug, node.loc),
            "memoryUrn": memory.urn,
            "loc": node.loc,
            "name": node.name,
            "nodeType": node.node_type,
            "objectType": node.object_type,
            "description": node.description,
            "content": node.content,
            "seq": node.seq,
            "tags": node.tags,
            "properties": node.properties,
            "data": node.data,
            "llmModel": node.llm_model,
            "aiAgent": node.ai_agent,
            "revision": node.revision,
            "createdAt": node.created_at,
            "updatedAt": node.updated_at,
            "createdBy": node.created_by,
            "updatedBy": node.updated_by,
            # The worker session the node was created in, if any (issue 14).
            "sessionId": self.session_of(node.id) if self.session_of is not None else None,
            "edges": [self.edge_view(caller, e, memory) for e in edges],
            "revisions": [
                {
                    "revision": r.revision,
                    "operation": r.operation,
                    "actor": r.actor,
                    "at": r.at,
                    "reason": r.reason,
                }
                for r in self.graph.revisions(node.id, revisions)
            ]
            if revisions
            else [],
        } | {key: value for extra in self.extras for key, value in extra(node).items()}

    def edge_view(
        self, caller: HadronCaller, edge: EdgeRecord, source: Memory | None = None
    ) -> dict[str, Any]:
        """An edge as the tools show it; ``source`` (the source node's memory) adds its URN."""
        target: dict[str, Any] | None = None
        node = self.graph.node_by_id(edge.target_id) if edge.target_id else None
        if node is None and edge.target_memory_id and edge.target_loc:
            node = self.graph.node_by_loc(edge.target_memory_id, edge.target_loc)
        memory_id = node.memory_id if node else edge.target_memory_id
        memory = self.tenancy.memory(memory_id) if memory_id else None
        readable = memory is not None and self.access.memory_level(caller, memory) is not None
        if memory is not None and readable:
            loc = node.loc if node else edge.target_loc or ""
            target = {
                "id": node.id if node else None,
                "urn": node_urn(memory.root, memory.slug, loc),
                "loc": loc,
            }
        elif memory is None and not edge.target_memory_id:
            target = {"id": None, "urn": None, "ref": edge.target_ref}  # a dangling id reference
        return {
            "id": edge.id,
            **({"urn": edge_urn(source.root, source.slug, edge.loc)} if source is not None else {}),
            "loc": edge.loc,
            "name": edge.name,
            "description": edge.description,
            "isRunnable": edge.is_runnable,
            "priority": edge.priority,
            "condition": edge.condition,
            "data": edge.data,
            "target": target,  # null when the far end is in a memory you cannot read
            "dangling": node is None,
        }

    # ── writes ─────────────────────────────────────────────────────────────

    def _check_fields(self, values: dict[str, Any]) -> None:
        data = values.get("data")
        if data is not None and not isinstance(data, dict):
            raise BadInput("data must be a JSON object", details={"field": "data"})
        tags = values.get("tags")
        if tags is not None and not all(isinstance(t, str) for t in tags):
            raise BadInput("tags must be strings", details={"field": "tags"})
        if "name" in values and (values["name"] is None or not str(values["name"]).strip()):
            raise BadInput("name must not be empty", details={"field": "name"})

    def _resolve_edges(
        self, caller: HadronCaller, memory: Memory, source_id: str, edges: Sequence[EdgeInput]
    ) -> list[EdgeRecord]:
        if len(edges) > MAX_EDGES:
            raise BadInput(f"at most {MAX_EDGES} edges per node", details={"field": "edges"})
        out: list[EdgeRecord] = []
        seen: set[str] = set()
        for position, edge in enumerate(edges):
            record = self._edge(caller, memory, source_id, edge, position)
            if record.loc in seen:
                raise BadInput(f"two edges share the edge loc {record.loc!r}", details={"field": "edges"})
            seen.add(record.loc)
            out.append(record)
        return out

    def _edge(
        self, caller: HadronCaller, memory: Memory, source_id: str, edge: EdgeInput, position: int
    ) -> EdgeRecord:
        target = edge.target.strip()
        if not target:
            raise BadInput(
                "an edge needs a target (targetId, targetUrn or targetLoc)", details={"field": "edges"}
            )
        target_id: str | None = None
        target_memory: Memory | None = None
        target_loc: str | None = None
        if is_id(target):
            node = self.graph.node_by_id(target)
            if node is not None and self.access.can_read_id(caller, node.memory_id):
                target_id, target_loc = node.id, node.loc
                target_memory = self.tenancy.memory(node.memory_id)
        else:
            ref = self.parse_ref(target)
            # Cross-memory edges only into memories the caller can read (else: not found).
            target_memory = self.access.read_memory(caller, ref.memory)[0] if ref.memory else memory
            target_loc = ref.loc
            found = self.graph.node_by_loc(target_memory.id, ref.loc)
            target_id = found.id if found else None
        loc = edge.loc or target_loc or target
        try:
            loc = check_loc(loc, "edge loc")
        except UrnError as exc:
            raise urn_error(exc) from exc
        return EdgeRecord(
            id=new_id(),
            source_id=source_id,
            loc=loc,
            name=edge.name,
            description=edge.description,
            target_id=target_id,
            target_memory_id=target_memory.id if target_memory else None,
            target_loc=target_loc,
            target_ref=target,
            is_runnable=edge.is_runnable,
            position=position,
        )

    def create(
        self,
        caller: HadronCaller,
        state: SessionState,
        loc: str,
        fields: NodeFields,
        edges: Sequence[EdgeInput] | None,
        memory: str | None = None,
        operation: str = "create",
    ) -> tuple[Memory, NodeRecord, bool]:
        """Create the node at ``loc``, or upsert it when it exists; returns (memory, node, created)."""
        ref = self.parse_ref(loc)
        mem = self.access.write_memory(caller, self.memory_of(caller, state, ref, memory))
        self._guard(mem, ref.loc)
        self._check_fields(fields.values)
        now, actor = self.clock(), caller.actor
        with self.graph.atomic(write_keys.memory(mem.id)):
            existing = self.graph.node_by_loc(mem.id, ref.loc)
            if existing is not None:
                node = self._apply(existing, fields, now, actor)
                op = "upsert"
            else:
                v = fields.values
                node = NodeRecord(
                    id=new_id(), memory_id=mem.id, loc=ref.loc, name=str(v["name"]).strip(),
                    node_type=v.get("nodeType") or "info", object_type=v.get("objectType"),
                    description=v.get("description"), content=v.get("content"), seq=v.get("seq"),
                    tags=list(v.get("tags") or []), properties=dict(v.get("properties") or {}),
                    data=v.get("data"), llm_model=v.get("llmModel"), ai_agent=v.get("aiAgent"), revision=1,
                    created_at=now, updated_at=now, created_by=actor, updated_by=actor,
                )  # fmt: skip
                op = operation
            schemas.validate(mem.schema, node.object_type, node.properties)
            if existing is None:
                self.graph.insert_node(node)
            else:
                self.graph.update_node(node)
            if edges is not None:
                self.graph.replace_edges(node.id, self._resolve_edges(caller, mem, node.id, edges))
            self.graph.add_revision(node, op, actor, None)
        if existing is None and self.attribute is not None:
            self.attribute(state, node)
        self.embedded(mem, [node])
        return mem, node, existing is None

    @staticmethod
    def _apply(node: NodeRecord, fields: NodeFields, now: str, actor: str) -> NodeRecord:
        names = {
            "name": "name", "nodeType": "node_type", "objectType": "object_type", "description": "description",
            "content": "content", "seq": "seq", "tags": "tags", "properties": "properties", "data": "data",
            "llmModel": "llm_model", "aiAgent": "ai_agent",
        }  # fmt: skip
        changes: dict[str, Any] = {}
        for key in fields.present & names.keys():
            value = fields.values.get(key)
            if key in ("tags",):
                value = list(value or [])
            elif key == "properties":
                value = dict(value or {})
            elif key == "nodeType":
                value = value or "info"
            elif key == "name":
                value = str(value).strip()
            changes[names[key]] = value
        return replace(node, **changes, revision=node.revision + 1, updated_at=now, updated_by=actor)

    def _subtree_at(self, mem: Memory, loc: str) -> list[NodeRecord]:
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

    def _as_committed(self, mem: Memory, node: NodeRecord) -> NodeRecord:
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

    def update(
        self,
        caller: HadronCaller,
        state: SessionState,
        loc: str,
        fields: NodeFields,
        edges: Sequence[EdgeInput] | None,
        reason: str | None,
    ) -> tuple[Memory, NodeRecord]:
        mem, node = self.find(caller, state, loc)
        self.access.write_memory(caller, mem)
        self._guard(mem, node.loc)
        if not (fields.present or edges is not None):
            raise BadInput("nothing to update: pass at least one field", hint="See the tool's input schema")
        self._check_fields({k: fields.values.get(k) for k in fields.present})
        now = self.clock()
        with self.graph.atomic(write_keys.memory(mem.id)):
            node = self._as_committed(mem, node)
            updated = self._apply(node, fields, now, caller.actor)
            schemas.validate(mem.schema, updated.object_type, updated.properties)
            self.graph.update_node(updated)
            if edges is not None:
                self.graph.replace_edges(node.id, self._resolve_edges(caller, mem, node.id, edges))
            self.graph.add_revision(updated, "update", caller.actor, reason)
        self.embedded(mem, [updated])
        return mem, updated

    def merge_data(
        self, caller: HadronCaller, state: SessionState, ref: str, patch: Any
    ) -> tuple[Memory, NodeRecord]:
        if not isinstance(patch, dict):
            kind = "null" if patch is None else "an array" if isinstance(patch, list) else "a scalar"
            raise BadInput(f"the data patch must be a JSON object, got {kind}", details={"field": "data"})
        mem, node = self.find(caller, state, ref)
        self.access.write_memory(caller, mem)
        self._guard(mem, node.loc)
        with self.graph.atomic(write_keys.memory(mem.id)):
            node = self._as_committed(mem, node)
            merged = {**(node.data or {}), **patch}
            updated = replace(
                node,
                data=merged,
                revision=node.revision + 1,
                updated_at=self.clock(),
                updated_by=caller.actor,
            )
            self.graph.update_node(updated)
            self.graph.add_revision(updated, "update_data", caller.actor, None)
        return mem, updated

    def create_edge(
        self, caller: HadronCaller, state: SessionState, source: str, edge: EdgeInput
    ) -> tuple[Memory, NodeRecord, EdgeRecord, bool]:
        ref = self.parse_ref(source, qualified=True)
        mem = self.memory_of(caller, state, ref)
        node = self.graph.node_by_loc(mem.id, ref.loc)
        if node is None:
            raise NotFound("node", node_urn(mem.root, mem.slug, ref.loc))
        self.access.write_memory(caller, mem)
        self._guard(mem, ref.loc)
        with self.graph.atomic(write_keys.memory(mem.id)):
            node = self._as_committed(mem, node)
            record = self._edge(caller, mem, node.id, edge, 0)
            stored = self.graph.upsert_edge(record)
            created = stored.id == record.id
            if created:
                node = replace(
                    node, revision=node.revision + 1, updated_at=self.clock(), updated_by=caller.actor
                )
                self.graph.update_node(node)
                self.graph.add_revision(node, "create_edge", caller.actor, f"edge {stored.loc}")
        return mem, node, stored, created

    # ── reads ──────────────────────────────────────────────────────────────

    def next_node(
        self, caller: HadronCaller, state: SessionState, parent: str, current: str | None
    ) -> tuple[Memory, NodeRecord | None]:
        ref = self.parse_ref(parent)
        mem = self.memory_of(caller, state, ref)
        children = self.graph.children(mem.id, ref.loc)
        if current is None:
            return mem, children[0] if children else None
        cur = self.parse_ref(current)
        cur_loc = cur.loc if ":" in cur.loc or cur.memory else f"{ref.loc}:{cur.loc}"
        for index, child in enumerate(children):
            if child.loc == cur_loc:
                return mem, children[index + 1] if index + 1 < len(children) else None
        raise NotFound("node", node_urn(mem.root, mem.slug, cur_loc))

    def tree(
        self, caller: HadronCaller, state: SessionState, parent: str | None, memory: str | None, depth: int
    ) -> tuple[Memory, str, list[tuple[int, NodeRecord | Folder]]]:
        """The tree under ``parent`` (the memory's root without one) to ``depth`` levels, children in
        seq then loc order, at most 2,000 entries. A loc that something lives under but no node occupies
        (``tasks`` when only ``tasks:nightly-digest`` was written) is listed as an implicit ``Folder``
        at its place, at every depth, as the memory's loc tree has it."""
        if parent:
            ref = self.parse_ref(parent)
            mem = self.memory_of(caller, state, ref, memory)
            root = ref.loc
        else:
            mem = self.memory_of(caller, state, NodeRef(""), memory)
            root = ""
        branches = self.graph.branch_locs(mem.id, root)
        if root and not branches and self.graph.node_by_loc(mem.id, root) is None:
            raise NotFound("node", node_urn(mem.root, mem.slug, root))
        folders = self._implicit_folders(mem.id, root, branches, depth)
        out: list[tuple[int, NodeRecord | Folder]] = []

        def walk(loc: str, level: int) -> None:
            entries: list[NodeRecord | Folder] = [*self.graph.children(mem.id, loc), *folders.get(loc, ())]
            entries.sort(key=lambda e: (e.seq is None, e.seq or 0, e.loc))
            for entry in entries:
                if len(out) >= MAX_TREE:
                    return
                out.append((level, entry))
                if level < depth:
                    walk(entry.loc, level + 1)

        walk(root, 1)
        return mem, root, out

    def _implicit_folders(
        self, memory_id: str, root: str, branches: Sequence[str], depth: int
    ) -> dict[str, list[Folder]]:
        """The implicit folders within ``depth`` levels of ``root``, by the loc they sit under."""
        base = len(root.split(":")) if root else 0
        candidates: set[str] = set()
        for branch in branches:
            atoms = branch.split(":") if branch else []
            # Every ancestor of a parent loc, below the root and no deeper than the listing reaches.
            for end in range(base + 1, min(len(atoms), base + depth) + 1):
                candidates.add(":".join(atoms[:end]))
        live = self.graph.live_locs(memory_id, sorted(candidates))
        folders: dict[str, list[Folder]] = {}
        for loc in sorted(candidates - set(live)):
            folders.setdefault(parent_loc(loc), []).append(Folder(loc))
        return folders

    # ── move and delete ────────────────────────────────────────────────────

    def move(
        self,
        caller: HadronCaller,
        state: SessionState,
        source: str,
        target: str,
        overwrite: bool,
        rename_to_leaf: bool,
    ) -> tuple[Memory, Memory, str, int]:
        src_ref = self.parse_ref(source)
        src = self.memory_of(caller, state, src_ref)
        dst_ref = self.parse_ref(target)
        dst = self.memory_of(
            caller, state, NodeRef(dst_ref.loc, dst_ref.memory or MemoryKey(src.root, src.slug))
        )
        self.access.write_memory(caller, src)
        self.access.write_memory(caller, dst)
        old, new = src_ref.loc, dst_ref.loc
        self._guard(src, old, True)  # a move out of, into or over a Channel's address
        self._guard(dst, new, True)
        if src.id == dst.id and (new == old or new.startswith(old + ":")):
            raise BadInput(f"cannot move {old!r} onto itself or under its own subtree")
        cross = src.id != dst.id
        if cross:
            self._check_cross_memory_move(src, dst, self._subtree_at(src, old))
        now = self.clock()
        # Both memories' keys, taken in one fixed order: a reverse move waits, never deadlocks.
        with self.graph.atomic(write_keys.memory(src.id), write_keys.memory(dst.id)):
            # The subtree as committed once the keys are held: one moved, grown or deleted meanwhile
            # moves as it now is (or is not found), never as it was read before (docs/decisions/0280).
            subtree = self._subtree_at(src, old)
            if cross:
                self._check_cross_memory_move(src, dst, subtree)
            moving = {n.id for n in subtree}
            relocated = [(n, new + n.loc[len(old) :]) for n in subtree]
            taken = {
                loc: nid
                for loc, nid in self.graph.live_locs(dst.id, [loc for _, loc in relocated]).items()
                if nid not in moving
            }
            if new in taken and overwrite:
                victim = self.graph.node_by_id(taken.pop(new))
                if victim is not None:
                    self.graph.soft_delete([victim.id], now)
                    self.graph.add_revision(
                        replace(victim, deleted_at=now, revision=victim.revision + 1, updated_at=now),
                        "delete",
                        caller.actor,
                        "overwritten by a move",
                    )
            if taken:
                first = sorted(taken)[:5]
                raise UrnAlreadyExists(
                    f"the move would land on {len(taken)} existing node(s): "
                    + ", ".join(node_urn(dst.root, dst.slug, loc) for loc in first),
                    hint="Pass overwrite: true to replace the node at the target (descendant slots never are)",
                    details={"collisions": [node_urn(dst.root, dst.slug, loc) for loc in first]},
                )
            moves = []
            for node, loc in relocated:
                name = leaf(new) if rename_to_leaf and node.loc == old else node.name
                moves.append((node.id, dst.id, loc, name))
            self.graph.relocate(moves, caller.actor, now)
            self.graph.retarget_dangling([n.id for n in subtree], src.id, old, dst.id, new)
            revisions: list[tuple[NodeRecord, str | None]] = [
                (
                    replace(
                        node, memory_id=dst.id, loc=loc, name=name, revision=node.revision + 1, updated_at=now
                    ),
                    f"from {node_urn(src.root, src.slug, node.loc)}",
                )
                for (node, loc), (_, _, _, name) in zip(relocated, moves, strict=True)
            ]
            self.graph.add_revisions(revisions, "move", caller.actor, full=False)
        if src.id != dst.id:  # re-indexed under the destination memory's policy
            moved = self.graph.subtree(dst.id, new)
            self.embedded(dst, moved)
        if self.moved is not None:
            self.moved(src, dst, [(node.id, node.loc, loc) for node, loc in relocated], caller.actor)
        return src, dst, new, len(subtree)

    def _check_cross_memory_move(self, src: Memory, dst: Memory, subtree: list[NodeRecord]) -> None:
        for memory in (src, dst):
            if memory.encrypted:
                raise BadInput(
                    f"cross-memory moves are refused for encrypted memories ({memory.urn})",
                    details={"reason": "encrypted_memory", "memoryUrn": memory.urn},
                )
        for node in subtree:
            if node.node_type in CHAT_ROOT_TYPES:
                raise BadInput(
                    f"the subtree contains a chat root ({node.loc}); chats are tied to their memory's class",
                    details={"reason": "chat_root", "loc": node.loc},
                )
            problem = schemas.violation(dst.schema, node.object_type, node.properties)
            if problem is not None:
                problem.details["loc"] = node.loc
                problem.details["memoryUrn"] = dst.urn
                raise problem

    def delete(
        self, caller: HadronCaller, state: SessionState, urn: str, hard: bool, recursive: bool, cascade: bool
    ) -> tuple[Memory, str, int, int]:
        """Returns (memory, loc, nodes deleted, cross-memory edges removed)."""
        ref = self.parse_ref(urn, qualified=True)
        mem = self.memory_of(caller, state, ref)
        self._subtree_at(mem, ref.loc)  # not found before not writable, as for every node write
        self.access.write_memory(caller, mem)
        self._guard(mem, ref.loc, True)  # a recursive delete containing an address too
        now = self.clock()
        removed = 0
        # The memory's key only: the cross-memory edges removed are rows of other memories' nodes, but
        # nothing of theirs is numbered or counted (no log entry, generation or revision).
        with self.graph.atomic(write_keys.memory(mem.id)):
            # Read under the key: a node moved out meanwhile (now another memory's, under its key) is
            # not deleted by id, and a child added meanwhile is counted (docs/decisions/0280).
            subtree = self._subtree_at(mem, ref.loc)
            if len(subtree) > 1 and not recursive:
                raise Conflict(
                    f"{node_urn(mem.root, mem.slug, ref.loc)} has {len(subtree) - 1} descendant(s)",
                    hint="Pass recursive: true to delete the whole subtree",
                    details={"descendants": len(subtree) - 1},
                )
            ids = [n.id for n in subtree]
            if hard:
                idset = set(ids)
                crossing = [e.id for e, source_memory in self.graph.incoming_edges(ids)
                            if source_memory != mem.id and e.source_id not in idset]  # fmt: skip
                outgoing = self.graph.edges_from(ids)
                crossing += [e.id for edges in outgoing.values() for e in edges
                             if e.target_memory_id is not None and e.target_memory_id != mem.id]  # fmt: skip
                if crossing and not cascade:
                    raise Conflict(
                        f"the subtree has {len(crossing)} cross-memory edge(s)",
                        hint="Pass cascadeCrossMemoryEdges: true to remove them with the nodes",
                        details={"crossMemoryEdges": len(crossing)},
                    )
                self.graph.delete_edges(crossing)
                removed = len(crossing)
                gone: list[tuple[NodeRecord, str | None]] = [
                    (replace(n, revision=n.revision + 1, updated_at=now), None) for n in subtree
                ]
                self.graph.add_revisions(gone, "hard_delete", caller.actor, full=False)
                self.graph.hard_delete(ids)
            else:
                self.graph.soft_delete(ids, now)
                soft: list[tuple[NodeRecord, str | None]] = [
                    (replace(n, deleted_at=now, revision=n.revision + 1, updated_at=now), None)
                    for n in subtree
                ]
                self.graph.add_revisions(soft, "delete", caller.actor, full=False)
        return mem, ref.loc, len(ids), removed
