"""Node writes: create (or upsert), update, merge into ``data``, and add one edge.

Each write resolves the memory through ``NodeContext``, asks for write access, refuses a Channel's
address, validates against the memory's schema, and writes the node, its edges and its revision in one
transaction under the memory's key, building on the node as committed (docs/decisions/0280). Split from
``nodes.py`` (issue 29); ``NodeService`` hands these calls here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.domain import schema as schemas
from triptych.hadron.domain.loc import check_loc, is_id, node_urn
from triptych.hadron.domain.model import EdgeRecord, Memory, NodeRecord
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import BadInput, NotFound
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.node_context import NodeJob, urn_error
from triptych.hadron.services.selection import SessionState
from triptych.hadron.store import new_id

MAX_EDGES = 500


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


class NodeWrites(NodeJob):
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
        ref = self.nodes.parse_ref(loc)
        mem = self.access.write_memory(caller, self.nodes.memory_of(caller, state, ref, memory))
        self.nodes.check_generic_write(mem, ref.loc)
        self._check_fields(fields.values)
        now, actor = self.nodes.clock(), caller.actor
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
        if existing is None and self.nodes.attribute is not None:
            self.nodes.attribute(state, node)
        self.nodes.embedded(mem, [node])
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

    def update(
        self,
        caller: HadronCaller,
        state: SessionState,
        loc: str,
        fields: NodeFields,
        edges: Sequence[EdgeInput] | None,
        reason: str | None,
    ) -> tuple[Memory, NodeRecord]:
        mem, node = self.nodes.find(caller, state, loc)
        self.access.write_memory(caller, mem)
        self.nodes.check_generic_write(mem, node.loc)
        if not (fields.present or edges is not None):
            raise BadInput("nothing to update: pass at least one field", hint="See the tool's input schema")
        self._check_fields({k: fields.values.get(k) for k in fields.present})
        now = self.nodes.clock()
        with self.graph.atomic(write_keys.memory(mem.id)):
            node = self.nodes.as_committed(mem, node)
            updated = self._apply(node, fields, now, caller.actor)
            schemas.validate(mem.schema, updated.object_type, updated.properties)
            self.graph.update_node(updated)
            if edges is not None:
                self.graph.replace_edges(node.id, self._resolve_edges(caller, mem, node.id, edges))
            self.graph.add_revision(updated, "update", caller.actor, reason)
        self.nodes.embedded(mem, [updated])
        return mem, updated

    def merge_data(
        self, caller: HadronCaller, state: SessionState, ref: str, patch: Any
    ) -> tuple[Memory, NodeRecord]:
        if not isinstance(patch, dict):
            kind = "null" if patch is None else "an array" if isinstance(patch, list) else "a scalar"
            raise BadInput(f"the data patch must be a JSON object, got {kind}", details={"field": "data"})
        mem, node = self.nodes.find(caller, state, ref)
        self.access.write_memory(caller, mem)
        self.nodes.check_generic_write(mem, node.loc)
        with self.graph.atomic(write_keys.memory(mem.id)):
            node = self.nodes.as_committed(mem, node)
            merged = {**(node.data or {}), **patch}
            updated = replace(
                node,
                data=merged,
                revision=node.revision + 1,
                updated_at=self.nodes.clock(),
                updated_by=caller.actor,
            )
            self.graph.update_node(updated)
            self.graph.add_revision(updated, "update_data", caller.actor, None)
        return mem, updated

    def create_edge(
        self, caller: HadronCaller, state: SessionState, source: str, edge: EdgeInput
    ) -> tuple[Memory, NodeRecord, EdgeRecord, bool]:
        ref = self.nodes.parse_ref(source, qualified=True)
        mem = self.nodes.memory_of(caller, state, ref)
        node = self.graph.node_by_loc(mem.id, ref.loc)
        if node is None:
            raise NotFound("node", node_urn(mem.root, mem.slug, ref.loc))
        self.access.write_memory(caller, mem)
        self.nodes.check_generic_write(mem, ref.loc)
        with self.graph.atomic(write_keys.memory(mem.id)):
            node = self.nodes.as_committed(mem, node)
            record = self._edge(caller, mem, node.id, edge, 0)
            stored = self.graph.upsert_edge(record)
            created = stored.id == record.id
            if created:
                node = replace(
                    node, revision=node.revision + 1, updated_at=self.nodes.clock(), updated_by=caller.actor
                )
                self.graph.update_node(node)
                self.graph.add_revision(node, "create_edge", caller.actor, f"edge {stored.loc}")
        return mem, node, stored, created

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
            ref = self.nodes.parse_ref(target)
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
