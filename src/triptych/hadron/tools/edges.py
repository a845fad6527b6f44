"""Edge tools: hadron_create_edge (the contract), and the live server's hadron_update_edge and
hadron_delete_edge (first-class edges, addressed by id or ``hrn:edge:`` URN)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from triptych.hadron.domain.edges import edge_urn
from triptych.hadron.domain.loc import node_urn
from triptych.hadron.services.edges import EDGE_FIELDS, PRIORITY_BOUND
from triptych.hadron.services.nodes import EdgeInput
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

EDGE_REF = "The edge's id (hadron_get_node lists it) or its URN, hrn:edge:<root>:<memory>:<loc>"


class CreateEdgeArgs(ToolArgs):
    sourceUrn: str = Field(description="Fully-qualified source node URN")
    targetUrn: str = Field(description="Target node URN or id (another memory must be readable)")
    name: str | None = None
    loc: str | None = Field(None, description="The edge's loc (default: the target's loc); idempotent on it")
    description: str | None = None
    isRunnable: bool = False


class UpdateEdgeArgs(ToolArgs):
    edgeRef: str = Field(description=EDGE_REF)
    name: str | None = Field(None, description="Relationship name (null or empty clears it)")
    loc: str | None = Field(None, description="New edge loc, unique among the source node's edges")
    description: str | None = Field(None, description="Null clears it")
    isRunnable: bool | None = None
    priority: int | None = Field(
        None, ge=-PRIORITY_BOUND, lt=PRIORITY_BOUND, description="Order among the node's edges (default 0)"
    )
    condition: Any = Field(None, description="A JSONLogic gate (any JSON; null clears it)")
    data: dict[str, Any] | None = Field(
        None, description="The edge's data bag, replaced whole (null clears it)"
    )


class DeleteEdgeArgs(ToolArgs):
    edgeRef: str = Field(description=EDGE_REF)


def create_edge(svc: Services, ctx: Ctx, args: CreateEdgeArgs) -> ToolOutput:
    edge = EdgeInput(args.targetUrn, args.name, args.description, args.loc, args.isRunnable)
    mem, node, stored, created = svc.nodes.create_edge(ctx.caller, ctx.session, args.sourceUrn, edge)
    view = svc.nodes.edge_view(ctx.caller, stored, mem)
    source = node_urn(mem.root, mem.slug, node.loc)
    target = (view["target"] or {}).get("urn") or args.targetUrn
    verb = "Added edge" if created else "Edge already present"
    return ToolOutput(
        f"{verb} {stored.loc}: {source} → {target}{' [dangling]' if view['dangling'] else ''}",
        {"sourceUrn": source, "edge": view, "created": created},
    )


def update_edge(svc: Services, ctx: Ctx, args: UpdateEdgeArgs) -> ToolOutput:
    changes = {name: getattr(args, name) for name in EDGE_FIELDS if name in args.model_fields_set}
    mem, source, stored = svc.edges.update(ctx.caller, args.edgeRef, changes)
    view = svc.nodes.edge_view(ctx.caller, stored, mem)
    source_urn = node_urn(mem.root, mem.slug, source.loc)
    target = (view["target"] or {}).get("urn") or "(in a memory you cannot read)"
    label = f" ({stored.name})" if stored.name else ""
    return ToolOutput(
        f"Updated edge {view['urn']}: {source_urn} → {target}{label} [id {stored.id}]",
        {"sourceUrn": source_urn, "edge": view, "changed": sorted(changes)},
    )


def delete_edge(svc: Services, ctx: Ctx, args: DeleteEdgeArgs) -> ToolOutput:
    mem, source, gone = svc.edges.delete(ctx.caller, args.edgeRef)
    source_urn = node_urn(mem.root, mem.slug, source.loc)
    urn = edge_urn(mem.root, mem.slug, gone.loc)
    return ToolOutput(
        f"Deleted edge {urn} of {source_urn} [id {gone.id}]",
        {"deleted": True, "id": gone.id, "urn": urn, "loc": gone.loc, "sourceUrn": source_urn},
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_create_edge",
        "Add one outgoing edge without touching the others; idempotent on the edge loc. Targets may dangle "
        "(hadron_validate reports them); cross-memory targets must be in a memory you can read.",
        CreateEdgeArgs,
        create_edge,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_update_edge",
        "Update one edge by its id or hrn:edge URN: only the fields you pass change (name, loc, description, "
        "isRunnable, priority, condition, data). Needs write access to the source node's memory.",
        UpdateEdgeArgs,
        update_edge,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_delete_edge",
        "Delete one edge by its id or hrn:edge URN, leaving the node's other edges; it disappears from node "
        "reads, hadron_find_nodes and expand walks at once. Needs write access to the source node's memory.",
        DeleteEdgeArgs,
        delete_edge,
        read_only=False,
    ),
]
