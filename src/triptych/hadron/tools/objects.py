"""Object store tools: create, get, update (merge), delete, find."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from triptych.core.bounds import MAX_OFFSET
from triptych.hadron.domain.loc import node_urn
from triptych.hadron.services.objects import record
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput


class CreateObjectArgs(ToolArgs):
    memoryUrn: str = Field(description="The memory (hrn:mem:<root>:<slug> or id)")
    type: str = Field(description="The collection (objectType)")
    fields: dict[str, Any] = Field(description="The record's fields; id and type are reserved")
    key: str | None = Field(None, description="Natural id, unique per collection (default: generated)")
    name: str | None = None


class RefArgs(ToolArgs):
    ref: str = Field(description="Object id or node URN")


class UpdateObjectArgs(ToolArgs):
    ref: str = Field(description="Object id or node URN")
    fields: dict[str, Any] = Field(description="Fields to merge (patch wins, unmentioned fields kept)")
    reason: str | None = Field(None, description="Stored in the revision history")


class DeleteObjectArgs(ToolArgs):
    ref: str = Field(description="Object id or node URN")
    hard: bool = Field(False, description="Remove the row instead of soft-deleting")


class FindObjectsArgs(ToolArgs):
    memoryUrn: str
    type: str = Field(description="The collection")
    match: dict[str, Any] | None = Field(
        None, description="Equality shorthand {field: value}, cast from the schema"
    )
    where: dict[str, Any] | None = Field(
        None, description="The hadron_find_nodes predicate grammar, ANDed with match"
    )
    sort: dict[str, Literal["asc", "desc"]] | None = Field(None, description='{field: "asc" | "desc"}')
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)


def out(verb: str, node: Any, memory: Any) -> ToolOutput:
    rec = record(node)
    urn = node_urn(memory.root, memory.slug, node.loc)
    text = f"{verb} {rec['type']} {rec['id']} ({urn}, revision {node.revision})\n"
    return ToolOutput(text + json.dumps(rec, ensure_ascii=False, sort_keys=True), rec)


def create_object(svc: Services, ctx: Ctx, args: CreateObjectArgs) -> ToolOutput:
    memory, node = svc.objects.create(ctx.caller, args.memoryUrn, args.type, args.fields, args.key, args.name)
    return out("Created", node, memory)


def get_object(svc: Services, ctx: Ctx, args: RefArgs) -> ToolOutput:
    memory, node = svc.objects.get(ctx.caller, ctx.session, args.ref)
    rec = record(node)
    return ToolOutput(json.dumps(rec, ensure_ascii=False, sort_keys=True), rec)


def update_object(svc: Services, ctx: Ctx, args: UpdateObjectArgs) -> ToolOutput:
    memory, node = svc.objects.update(ctx.caller, ctx.session, args.ref, args.fields, args.reason)
    return out("Updated", node, memory)


def delete_object(svc: Services, ctx: Ctx, args: DeleteObjectArgs) -> ToolOutput:
    memory, node = svc.objects.delete(ctx.caller, ctx.session, args.ref, args.hard)
    how = "Hard-deleted" if args.hard else "Soft-deleted"
    return ToolOutput(
        f"{how} {node.object_type} {node.id}", {"id": node.id, "deleted": True, "hard": args.hard}
    )


def find_objects(svc: Services, ctx: Ctx, args: FindObjectsArgs) -> ToolOutput:
    memory, rows, total = svc.objects.find(
        ctx.caller, args.memoryUrn, args.type, args.match, args.where, args.sort, args.limit, args.offset
    )
    recs = [record(n) for n in rows]
    text = f"{len(recs)} of {total} {args.type} object(s) in {memory.urn}"
    if recs:
        text += "\n" + "\n".join(json.dumps(r, ensure_ascii=False, sort_keys=True) for r in recs)
    return ToolOutput(text, {"objects": recs, "total": total})


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_create_object",
        "Create a record in a collection; fields are validated against the memory's schema when the "
        "collection is declared. id and type are reserved.",
        CreateObjectArgs,
        create_object,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_get_object",
        "Read one object by id or node URN as {id, type, ...fields}.",
        RefArgs,
        get_object,
    ),
    DeclaredTool(
        "hadron_update_object",
        "Shallow-merge fields into an object (atomic; patch wins, unmentioned fields kept), then re-validate.",
        UpdateObjectArgs,
        update_object,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_delete_object",
        "Delete an object: soft by default; hard: true removes the row. Non-recursive.",
        DeleteObjectArgs,
        delete_object,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_find_objects",
        "Query one collection -> {objects, total}: match (equality, cast from the schema), where (the "
        "predicate grammar, ANDed with match), sort, limit, offset.",
        FindObjectsArgs,
        find_objects,
    ),
]
