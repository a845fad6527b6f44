"""Nodes and edges: create/upsert, update, merge data, edges, get, next, list, move and delete.

Every rule of the graph tools lives in this family of modules, each holding one job: resolution and the
committed state (``node_context``), writes (``node_writes``), listings (``node_tree``), subtree moves and
deletes (``node_subtrees``); the views are here. A tool passes what the caller sent; the service resolves
the memory (the URN in the reference, else the memory argument, else the session's active memory), asks
``AccessPolicy`` for read or write access, validates against the memory's schema, and writes the node,
its edges and its revision in one transaction. ``NodeService`` is the one object tools, REST routes and
the other Hadron services call; it hands each call to its job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from triptych.hadron.domain.edges import edge_urn
from triptych.hadron.domain.loc import node_urn
from triptych.hadron.domain.model import EdgeRecord, Memory, NodeRecord
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.node_context import NodeContext, urn_error
from triptych.hadron.services.node_subtrees import CHAT_ROOT_TYPES, SubtreeWrites
from triptych.hadron.services.node_tree import MAX_TREE, Folder, NodeTree
from triptych.hadron.services.node_writes import MAX_EDGES, EdgeInput, NodeFields, NodeWrites

# The names other modules, benchmarks and tests import from here.
__all__ = [
    "CHAT_ROOT_TYPES",
    "MAX_EDGES",
    "MAX_TREE",
    "EdgeInput",
    "Folder",
    "NodeFields",
    "NodeService",
    "urn_error",
]


@dataclass(eq=False, repr=False)  # adds no field: the generated __init__ calls __post_init__
class NodeService(NodeContext):
    def __post_init__(self) -> None:
        self.writes = NodeWrites(self)
        self.listing = NodeTree(self)
        self.subtrees = SubtreeWrites(self)
        # Each call goes to its job, with that job's signature (bound once, not wrapped).
        self.create = self.writes.create
        self.update = self.writes.update
        self.merge_data = self.writes.merge_data
        self.create_edge = self.writes.create_edge
        self.next_node = self.listing.next_node
        self.tree = self.listing.tree
        self.move = self.subtrees.move
        self.delete = self.subtrees.delete

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
