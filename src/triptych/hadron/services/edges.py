"""First-class edges of the live server: update and delete one edge by its id or URN.

An edge belongs to its source node: reading it needs read access to the source node's memory, changing
it write access there (with the memory's lock, ``AccessPolicy.write_memory``). A change bumps the
source node's revision and records it in the revision history, as hadron_create_edge does. Every read
of edges (node views, hadron_find_nodes' edges and ``expand`` walks, hadron_validate, action
dependencies) reads the edges table itself, so a changed or deleted edge reads changed or gone at once,
on every worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.access import require_identity
from triptych.hadron.domain.edges import EdgeRef, edge_urn, parse_edge_ref
from triptych.hadron.domain.loc import check_loc, node_urn
from triptych.hadron.domain.model import EdgeRecord, Memory, NodeRecord
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import BadInput, NotFound, UrnAlreadyExists
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import NodeService, urn_error

# The fields hadron_update_edge may change, by argument name.
EDGE_FIELDS = ("name", "loc", "description", "isRunnable", "priority", "condition", "data")
PRIORITY_BOUND = 2**31  # a 32-bit integer, as the live server's Int


class EdgeService:
    def __init__(self, nodes: NodeService) -> None:
        self.nodes = nodes
        self.graph = nodes.graph
        self.access = nodes.access
        self.tenancy = nodes.tenancy

    def find(self, caller: HadronCaller, value: str) -> tuple[Memory, NodeRecord, EdgeRecord]:
        """The edge ``value`` names (id or URN), with its source node and that node's memory, if the
        caller may read it; an edge in a memory the caller cannot read is ``[edge_not_found]``."""
        require_identity(caller)
        try:
            ref = parse_edge_ref(value)
        except UrnError as exc:
            raise urn_error(exc) from exc
        if ref.id is not None:
            return self._by_id(caller, ref.id, value)
        return self._by_urn(caller, ref)

    def _by_id(self, caller: HadronCaller, edge_id: str, shown: str) -> tuple[Memory, NodeRecord, EdgeRecord]:
        edge = self.graph.edge_by_id(edge_id)
        source = self.graph.node_by_id(edge.source_id) if edge is not None else None
        memory = self.tenancy.memory(source.memory_id) if source is not None else None
        if (
            edge is None
            or source is None
            or memory is None
            or self.access.memory_level(caller, memory) is None
        ):
            raise NotFound("edge", shown, hint="hadron_get_node lists a node's edges with their ids")
        return memory, source, edge

    def _by_urn(self, caller: HadronCaller, ref: EdgeRef) -> tuple[Memory, NodeRecord, EdgeRecord]:
        assert ref.memory is not None
        memory = self.access.read_memory(caller, ref.memory)[0]
        urn = edge_urn(memory.root, memory.slug, ref.loc)
        candidates = self.graph.edges_at(memory.id, ref.loc)
        if not candidates:
            raise NotFound("edge", urn, hint="hadron_get_node lists a node's edges with their ids")
        if len(candidates) > 1:
            # An edge's loc is unique per source node, so one URN may name edges of several nodes.
            sources = [self.graph.node_by_id(e.source_id) for e in candidates]
            raise BadInput(
                f"{urn} names {len(candidates)} edges (one per source node): pass the edge's id",
                details={
                    "reason": "ambiguous_edge_loc",
                    "candidates": [
                        {"id": e.id, "sourceUrn": node_urn(memory.root, memory.slug, s.loc) if s else None}
                        for e, s in zip(candidates, sources, strict=True)
                    ],
                },
                hint="hadron_get_node on the source node lists its edges with their ids",
            )
        edge = candidates[0]
        source = self.graph.node_by_id(edge.source_id)
        if source is None:  # pragma: no cover - edges_at joins live source nodes
            raise NotFound("edge", urn)
        return memory, source, edge

    def update(
        self, caller: HadronCaller, value: str, changes: Mapping[str, Any]
    ) -> tuple[Memory, NodeRecord, EdgeRecord]:
        """Change the fields named in ``changes`` (argument names; a None clears a nullable field)."""
        memory, source, edge = self.find(caller, value)
        self.access.write_memory(caller, memory)
        self.nodes.check_generic_write(memory, source.loc)
        if not changes:
            raise BadInput("nothing to update: pass at least one of " + ", ".join(EDGE_FIELDS))
        updated = self._apply(memory, edge, changes)
        with self.graph.atomic(write_keys.memory(memory.id)):
            if updated.loc != edge.loc and any(
                e.loc == updated.loc for e in self.graph.edges_from([source.id]).get(source.id, [])
            ):
                raise UrnAlreadyExists(
                    f"{node_urn(memory.root, memory.slug, source.loc)} already has an edge at loc {updated.loc!r}",
                    details={"edgeUrn": edge_urn(memory.root, memory.slug, updated.loc)},
                    hint="An edge's loc is unique among its source node's edges; pick another loc",
                )
            self.graph.update_edge(updated)
            source = self._revise(caller, source, "update_edge", updated.loc)
        return memory, source, updated

    def delete(self, caller: HadronCaller, value: str) -> tuple[Memory, NodeRecord, EdgeRecord]:
        memory, source, edge = self.find(caller, value)
        self.access.write_memory(caller, memory)
        self.nodes.check_generic_write(memory, source.loc)
        with self.graph.atomic(write_keys.memory(memory.id)):
            self.graph.delete_edges([edge.id])
            source = self._revise(caller, source, "delete_edge", edge.loc)
        return memory, source, edge

    def _revise(self, caller: HadronCaller, source: NodeRecord, operation: str, loc: str) -> NodeRecord:
        revised = replace(
            source, revision=source.revision + 1, updated_at=self.nodes.clock(), updated_by=caller.actor
        )
        self.graph.update_node(revised)
        self.graph.add_revision(revised, operation, caller.actor, f"edge {loc}")
        return revised

    @staticmethod
    def _apply(memory: Memory, edge: EdgeRecord, changes: Mapping[str, Any]) -> EdgeRecord:
        out = edge
        if "name" in changes:
            name = changes["name"]
            out = replace(out, name=(name.strip() or None) if isinstance(name, str) else None)
        if "description" in changes:
            out = replace(out, description=changes["description"])
        if "loc" in changes:
            if changes["loc"] is None:
                raise BadInput(
                    "loc cannot be cleared: an edge's loc is its identity", details={"field": "loc"}
                )
            try:
                out = replace(out, loc=check_loc(str(changes["loc"]).strip(), "edge loc"))
            except UrnError as exc:
                raise urn_error(exc) from exc
        if "isRunnable" in changes:
            out = replace(out, is_runnable=bool(changes["isRunnable"]))
        if "priority" in changes:
            priority = changes["priority"]
            if priority is None:
                priority = 0
            if not -PRIORITY_BOUND <= priority < PRIORITY_BOUND:
                raise BadInput("priority must be a 32-bit integer", details={"field": "priority"})
            out = replace(out, priority=priority)
        for field in ("condition", "data"):
            if field not in changes:
                continue
            value = changes[field]
            if field == "data" and value is not None and not isinstance(value, dict):
                raise BadInput("data must be a JSON object (or null to clear it)", details={"field": "data"})
            if value is not None and memory.encrypted:
                # Edge rows are not sealed (only node content and data are): a bag on an edge of an
                # encrypted memory would sit in clear text.
                raise BadInput(
                    f"{memory.urn} is encrypted: edges there carry no {field} (it would be stored unsealed)",
                    details={"field": field, "reason": "encrypted_memory", "memoryUrn": memory.urn},
                )
            out = replace(out, **{field: value})
        return out
