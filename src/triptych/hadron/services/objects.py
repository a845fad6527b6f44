"""The object store: typed records over nodes. An object is a node with an ``objectType``, shown as
``{id, type, ...fields}``; its loc (``<type>:<key>``) and name are derived and hidden. Writes are
validated against the memory's schema when the collection is declared; ``id`` and ``type`` are
reserved."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.access import AccessPolicy
from triptych.hadron.domain import schema as schemas
from triptych.hadron.domain.loc import check_loc, is_id, node_urn
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.domain.urn import UrnError, has_scheme_prefix
from triptych.hadron.domain.where import compile_where
from triptych.hadron.errors import BadInput, NotFound, SchemaViolation, UrnAlreadyExists
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import NodeService, urn_error
from triptych.hadron.services.selection import SessionState
from triptych.hadron.store import GraphStore, new_id, utcnow

OBJECT_NODE_TYPE = "record"


def record(node: NodeRecord) -> dict[str, Any]:
    return {"id": node.id, "type": node.object_type, **node.properties}


class ObjectService:
    def __init__(
        self, graph: GraphStore, access: AccessPolicy, nodes: NodeService, clock: Callable[[], str] = utcnow
    ) -> None:
        self.graph = graph
        self.access = access
        self.nodes = nodes
        self.clock = clock

    @staticmethod
    def _check(type_: str, fields: Any) -> dict[str, Any]:
        try:
            check_loc(type_, "type")
        except UrnError as exc:
            raise urn_error(exc) from exc
        if ":" in type_:
            raise BadInput("type is one atom (a collection name), without ':'", details={"field": "type"})
        if not isinstance(fields, dict):
            raise BadInput("fields must be a JSON object", details={"field": "fields"})
        reserved = schemas.RESERVED_FIELDS & set(fields)
        if reserved:
            name = sorted(reserved)[0]
            raise SchemaViolation(name, f"{name!r} is reserved (the object envelope's id and type)")
        return fields

    def create(
        self,
        caller: HadronCaller,
        memory_ref: str,
        type_: str,
        fields: Any,
        key: str | None,
        name: str | None,
    ) -> tuple[Memory, NodeRecord]:
        fields = self._check(type_, fields)
        memory = self.access.write_memory(caller, memory_ref)
        natural = key or new_id()[:16]
        try:
            check_loc(natural, "key")
        except UrnError as exc:
            raise urn_error(exc) from exc
        if ":" in natural:
            raise BadInput("key is one atom, without ':'", details={"field": "key"})
        loc = f"{type_}:{natural}"
        schemas.validate(memory.schema, type_, fields)
        now = self.clock()
        with self.graph.atomic(write_keys.memory(memory.id)):
            if self.graph.node_by_loc(memory.id, loc) is not None:
                raise UrnAlreadyExists(
                    f"an object {type_} with key {natural!r} already exists in {memory.urn}"
                )
            node = NodeRecord(
                id=new_id(), memory_id=memory.id, loc=loc, name=name or natural, node_type=OBJECT_NODE_TYPE,
                object_type=type_, description=None, content=None, seq=None, tags=[], properties=dict(fields),
                data=None, llm_model=None, ai_agent=None, revision=1, created_at=now, updated_at=now,
                created_by=caller.actor, updated_by=caller.actor,
            )  # fmt: skip
            self.graph.insert_node(node)
            self.graph.add_revision(node, "create", caller.actor, None)
        self.nodes.embedded(memory, [node])
        return memory, node

    def get(self, caller: HadronCaller, state: SessionState, ref: str) -> tuple[Memory, NodeRecord]:
        ref = ref.strip()
        if not is_id(ref) and not has_scheme_prefix(ref):
            raise BadInput("ref is an object id or a node URN", details={"field": "ref"})
        try:
            memory, node = self.nodes.find(caller, state, ref)
        except NotFound as exc:
            raise NotFound("object", ref) from exc
        if node.object_type is None:
            raise NotFound("object", ref)
        return memory, node

    def update(
        self, caller: HadronCaller, state: SessionState, ref: str, fields: Any, reason: str | None
    ) -> tuple[Memory, NodeRecord]:
        memory, node = self.get(caller, state, ref)
        self.access.write_memory(caller, memory)
        if not isinstance(fields, dict):
            raise BadInput("fields must be a JSON object", details={"field": "fields"})
        self._check(node.object_type or "", fields)
        with self.graph.atomic(
            write_keys.memory(memory.id)
        ):  # read, merge and write under the memory's key: a concurrent merge waits
            current = self.graph.node_by_id(node.id)
            if current is None or current.memory_id != memory.id:  # moved out meanwhile
                raise NotFound("object", ref)
            merged = {**current.properties, **fields}
            schemas.validate(memory.schema, current.object_type, merged)
            updated = replace(
                current,
                properties=merged,
                revision=current.revision + 1,
                updated_at=self.clock(),
                updated_by=caller.actor,
            )
            self.graph.update_node(updated)
            self.graph.add_revision(updated, "update", caller.actor, reason)
        self.nodes.embedded(memory, [updated])
        return memory, updated

    def delete(
        self, caller: HadronCaller, state: SessionState, ref: str, hard: bool
    ) -> tuple[Memory, NodeRecord]:
        memory, node = self.get(caller, state, ref)
        self.nodes.delete(caller, state, node_urn(memory.root, memory.slug, node.loc), hard, False, False)
        return memory, node

    def find(
        self,
        caller: HadronCaller,
        memory_ref: str,
        type_: str,
        match: dict[str, Any] | None,
        where: Any,
        sort: Mapping[str, str] | None,
        limit: int,
        offset: int,
    ) -> tuple[Memory, list[NodeRecord], int]:
        memory, _ = self.access.read_memory(caller, memory_ref)
        predicate = compile_where(where) if where is not None else None
        declared = schemas.collections(memory.schema).get(type_, {})
        equal = {k: _cast_like(declared, k, v) for k, v in (match or {}).items()}
        for field, direction in (sort or {}).items():
            if direction not in ("asc", "desc"):
                raise BadInput(f"sort {field!r}: use 'asc' or 'desc'", details={"field": "sort"})
        rows = []
        for node in self.graph.objects(memory.id, type_):
            if any(node.properties.get(k) != v for k, v in equal.items()):
                continue
            if predicate is not None and not predicate(node.properties, node.data):
                continue
            rows.append(node)
        for field, direction in reversed(list((sort or {}).items())):
            present = [n for n in rows if n.properties.get(field) is not None]
            absent = [n for n in rows if n.properties.get(field) is None]
            present.sort(key=lambda n: _sort_key(n.properties[field]), reverse=direction == "desc")
            rows = present + absent
        return memory, rows[offset : offset + limit], len(rows)


def _sort_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, int | float):
        return (1, value)
    return (2, str(value))


def _cast_like(collection: dict[str, Any], field: str, value: Any) -> Any:
    """``match`` infers the cast from the schema: "5" matches a number field's 5."""
    declared = collection.get("properties", {}).get(field, {})
    kind = declared.get("type") if isinstance(declared, dict) else None
    try:
        if kind in ("number", "integer") and isinstance(value, str):
            number = float(value)
            return int(number) if kind == "integer" or number.is_integer() else number
        if kind == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if kind == "string" and not isinstance(value, str):
            return str(value)
    except ValueError:
        return value
    return value
