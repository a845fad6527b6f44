"""Edge tools: hadron_create_edge."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.domain.loc import node_urn
from triptych.hadron.services.nodes import EdgeInput, NodeService
from triptych.hadron.tools.base import Ctx, Tool, ToolArgs, ToolOutput


class CreateEdgeArgs(ToolArgs):
    sourceUrn: str = Field(description="Fully-qualified source node URN")
    targetUrn: str = Field(description="Target node URN or id (another memory must be readable)")
    name: str | None = None
    loc: str | None = Field(None, description="The edge's loc (default: the target's loc); idempotent on it")
    description: str | None = None
    isRunnable: bool = False


def edge_tools(nodes: NodeService) -> list[Tool[Ctx]]:
    def create_edge(ctx: Ctx, args: CreateEdgeArgs) -> ToolOutput:
        edge = EdgeInput(args.targetUrn, args.name, args.description, args.loc, args.isRunnable)
        mem, node, stored, created = nodes.create_edge(ctx.caller, ctx.session, args.sourceUrn, edge)
        view = nodes.edge_view(ctx.caller, stored)
        source = node_urn(mem.root, mem.slug, node.loc)
        target = (view["target"] or {}).get("urn") or args.targetUrn
        verb = "Added edge" if created else "Edge already present"
        return ToolOutput(
            f"{verb} {stored.loc}: {source} → {target}{' [dangling]' if view['dangling'] else ''}",
            {"sourceUrn": source, "edge": view, "created": created},
        )

    return [
        Tool(
            "hadron_create_edge",
            "Add one outgoing edge without touching the others; idempotent on the edge loc. Targets may dangle "
            "(hadron_validate reports them); cross-memory targets must be in a memory you can read.",
            CreateEdgeArgs,
            create_edge,
            read_only=False,
        )
    ]
