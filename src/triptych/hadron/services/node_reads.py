"""The live server's node reads beyond hadron_get_node: many nodes in one call (hadron_get_nodes) and the
uniform single read by id, URN or bare loc (hadron_read_node).

hadron_get_nodes takes either ``refs`` (ids or fully qualified node URNs, answered in input order) or
``memory`` + ``locPrefix`` (a subtree, in loc order). A ref of the wrong shape fails the call; a
well-formed ref naming nothing the caller may read is listed in ``unavailable``, denied and missing
alike, so the answer never tells whether an unreadable node exists. At most ``MAX_BATCH_NODES`` nodes
per call (more is refused); past ``MAX_BATCH_BYTES`` of node views the rest are listed in ``omitted``
with ``truncated: true``, never dropped silently.

hadron_read_node resolves ``ref`` as an id, then a node URN, then a bare loc: in ``memoryRef`` when
given, else across every memory the caller can read, where a loc found in several is refused with
``AMBIGUOUS_NODE_LOC`` rather than answered with one of them. Denied and missing both read
``[node_not_found]``.

Node content is returned as stored: Triptych renders templates only when an action runs
(hadron_run_action), so ``raw`` changes nothing here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from triptych.hadron.access import require_identity
from triptych.hadron.domain.loc import (
    MemoryKey,
    NodeRef,
    is_id,
    is_other_than_node_urn,
    node_urn,
    parse_memory_ref,
    parse_node_ref,
    require_qualified_node,
)
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import AmbiguousNodeLoc, BadInput, NotFound
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import NodeService, urn_error

MAX_BATCH_NODES = 200  # the live server's BATCH_READ_MAX_NODES
MAX_BATCH_BYTES = 1_000_000  # its response-size cap, counted on the node views' JSON


@dataclass
class Batch:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return bool(self.omitted)


class NodeReadService:
    def __init__(self, nodes: NodeService) -> None:
        self.nodes = nodes
        self.graph = nodes.graph
        self.access = nodes.access
        self.tenancy = nodes.tenancy

    # ── hadron_get_nodes ───────────────────────────────────────────────────

    def batch(
        self, caller: HadronCaller, refs: Sequence[str] | None, memory: str | None, loc_prefix: str | None
    ) -> Batch:
        require_identity(caller)
        if refs is not None and (memory is not None or loc_prefix is not None):
            raise BadInput("pass either refs, or memory with locPrefix, not both")
        if refs is None:
            if memory is None or not loc_prefix:
                raise BadInput("pass refs (node ids or URNs), or memory with locPrefix (a subtree)")
            return self._subtree(caller, memory, loc_prefix)
        return self._refs(caller, refs)

    def _refs(self, caller: HadronCaller, refs: Sequence[str]) -> Batch:
        wanted: list[str] = []
        for ref in refs:  # a repeated ref yields its node once
            if ref not in wanted:
                wanted.append(ref)
        if len(wanted) > MAX_BATCH_NODES:
            raise BadInput(
                f"at most {MAX_BATCH_NODES} refs per call, got {len(wanted)}",
                details={"field": "refs", "max": MAX_BATCH_NODES},
                hint="Split the refs into several calls",
            )
        parsed = [(ref, self._batch_ref(ref)) for ref in wanted]  # every shape checked before any read
        memories: dict[str, Memory | None] = {}
        found: list[tuple[str, Memory, NodeRecord]] = []
        out = Batch()
        for ref, key in parsed:
            hit = self._readable_node(caller, ref.strip(), key, memories)
            if hit is None:
                out.unavailable.append(ref)
            else:
                found.append((ref, *hit))
        return self._views(caller, found, out)

    @staticmethod
    def _batch_ref(ref: str) -> MemoryKey | None:
        """None for an id; the memory of a fully qualified node URN; anything else fails the call."""
        value = ref.strip()
        if is_id(value):
            return None
        if is_other_than_node_urn(value):
            raise BadInput(f"refs takes node ids and node URNs, got {ref!r}", details={"ref": ref})
        try:
            node_ref = require_qualified_node(value)
        except UrnError as exc:
            raise urn_error(exc) from exc
        return node_ref.memory

    def _readable_node(
        self, caller: HadronCaller, ref: str, key: MemoryKey | None, memories: dict[str, Memory | None]
    ) -> tuple[Memory, NodeRecord] | None:
        if key is None:
            node = self.graph.node_by_id(ref)
            memory = self._memory(caller, node.memory_id, memories) if node is not None else None
        else:
            node, memory = None, self._memory_by_key(caller, key, memories)
            if memory is not None:
                node = self.graph.node_by_loc(memory.id, parse_node_ref(ref).loc)
        return (memory, node) if memory is not None and node is not None else None

    def _memory(self, caller: HadronCaller, memory_id: str, cache: dict[str, Memory | None]) -> Memory | None:
        if memory_id not in cache:
            memory = self.tenancy.memory(memory_id)
            readable = memory is not None and self.access.memory_level(caller, memory) is not None
            cache[memory_id] = memory if readable else None
        return cache[memory_id]

    def _memory_by_key(
        self, caller: HadronCaller, key: MemoryKey, cache: dict[str, Memory | None]
    ) -> Memory | None:
        memory = self.tenancy.memory_by_key(key.root, key.slug)
        return self._memory(caller, memory.id, cache) if memory is not None else None

    def _subtree(self, caller: HadronCaller, memory_ref: str, loc_prefix: str) -> Batch:
        memory = self.access.read_memory(caller, memory_ref)[0]
        try:
            loc = parse_node_ref(loc_prefix).loc
        except UrnError as exc:
            raise urn_error(exc) from exc
        count = self.graph.count_descendants(memory.id, loc) + 1
        if count > MAX_BATCH_NODES:
            raise BadInput(
                f"{node_urn(memory.root, memory.slug, loc)} holds {count} nodes, over the {MAX_BATCH_NODES} "
                "a call reads",
                details={"field": "locPrefix", "max": MAX_BATCH_NODES, "nodes": count},
                hint="Read a narrower locPrefix, or pass refs in chunks",
            )
        subtree = sorted(self.graph.subtree(memory.id, loc), key=lambda n: n.loc)
        return self._views(caller, [(n.id, memory, n) for n in subtree], Batch())

    def _views(self, caller: HadronCaller, found: list[tuple[str, Memory, NodeRecord]], out: Batch) -> Batch:
        size = 0
        for index, (_ref, memory, node) in enumerate(found):
            view = self.nodes.view(caller, memory, node, revisions=0)
            size += len(json.dumps(view, ensure_ascii=False, default=str))
            if out.nodes and size > MAX_BATCH_BYTES:  # at least one node always comes back
                out.omitted = [r for r, _, _ in found[index:]]
                break
            out.nodes.append(view)
        return out

    # ── hadron_read_node ───────────────────────────────────────────────────

    def read(self, caller: HadronCaller, ref: str, memory_ref: str | None) -> tuple[Memory, NodeRecord]:
        require_identity(caller)
        value = ref.strip()
        memories: dict[str, Memory | None] = {}
        if is_id(value):
            hit = self._readable_node(caller, value, None, memories)
            if hit is None:
                raise NotFound("node", ref)
            return hit
        try:
            node_ref = parse_node_ref(value)
        except UrnError as exc:
            raise urn_error(exc) from exc
        if memory_ref is not None:
            memory = self.access.read_memory(caller, memory_ref)[0]
            if node_ref.memory is not None and (memory.root, memory.slug) != (
                node_ref.memory.root,
                node_ref.memory.slug,
            ):
                raise BadInput(f"the ref names {node_ref.memory.urn} but memoryRef names {memory.urn}")
            node = self.graph.node_by_loc(memory.id, node_ref.loc)
            if node is None:
                raise NotFound("node", node_urn(memory.root, memory.slug, node_ref.loc))
            return memory, node
        if node_ref.memory is None:
            node_ref = self._as_urn(caller, value, memories) or node_ref
        if node_ref.memory is not None:
            hit = self._readable_node(caller, node_urn(node_ref.memory.root, node_ref.memory.slug, node_ref.loc),
                                      node_ref.memory, memories)  # fmt: skip
            if hit is None:
                raise NotFound("node", node_urn(node_ref.memory.root, node_ref.memory.slug, node_ref.loc))
            return hit
        return self._across(caller, node_ref.loc)

    def _as_urn(self, caller: HadronCaller, value: str, memories: dict[str, Memory | None]) -> NodeRef | None:
        """An unprefixed ``<root>:<slug>:<loc>`` whose first two atoms name a readable memory, as its URN."""
        atoms = value.split(":")
        if len(atoms) < 3:
            return None
        try:
            key = parse_memory_ref(":".join(atoms[:2]))
        except UrnError:
            return None
        if key is None or self._memory_by_key(caller, key, memories) is None:
            return None
        return parse_node_ref(f"hrn:node:{value}")

    def _across(self, caller: HadronCaller, loc: str) -> tuple[Memory, NodeRecord]:
        readable = {m.id: m for m, _ in self.access.readable(caller)}
        hits = self.graph.nodes_at(list(readable), loc)
        if not hits:
            raise NotFound("node", loc, hint="Pass memoryRef or a full URN to read in one memory")
        if len(hits) > 1:
            candidates = [readable[n.memory_id] for n in hits]
            raise AmbiguousNodeLoc(
                f"the loc {loc!r} names a node in {len(hits)} memories you can read",
                details={"loc": loc, "memoryIds": [m.id for m in candidates],
                         "memoryUrns": [m.urn for m in candidates]},
            )  # fmt: skip
        return readable[hits[0].memory_id], hits[0]
