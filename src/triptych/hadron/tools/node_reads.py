"""The live server's node reads: hadron_get_nodes (many nodes in one call) and hadron_read_node (one node by
id, URN or bare loc, across the memories the caller can read)."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.services.node_reads import MAX_BATCH_NODES
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput
from triptych.hadron.tools.nodes import render_node


class GetNodesArgs(ToolArgs):
    refs: list[str] | None = Field(
        None,
        description=f"Node ids or fully qualified node URNs, answered in this order (at most {MAX_BATCH_NODES})",
    )
    memory: str | None = Field(None, description="With locPrefix: the memory (URN or id) of a subtree read")
    locPrefix: str | None = Field(None, description="With memory: the node at this loc and its descendants")


class ReadNodeArgs(ToolArgs):
    ref: str = Field(description="Node id, node URN, or bare loc (resolved across your memories)")
    memoryRef: str | None = Field(None, description="Memory URN or id a bare loc is read in")
    raw: bool = Field(False, description="Accepted for the live server's shape: content is always as stored")


def get_nodes(svc: Services, ctx: Ctx, args: GetNodesArgs) -> ToolOutput:
    batch = svc.reads.batch(ctx.caller, args.refs, args.memory, args.locPrefix)
    head = f"{len(batch.nodes)} node(s)"
    if batch.unavailable:
        head += f"; unavailable (not found, or not readable by you): {', '.join(batch.unavailable)}"
    if batch.truncated:
        head += f"; truncated at the size cap, {len(batch.omitted)} omitted (read them in another call)"
    text = "\n\n———\n".join([head, *(render_node(view) for view in batch.nodes)])
    return ToolOutput(
        text,
        {
            "nodes": batch.nodes,
            "unavailable": batch.unavailable,
            "truncated": batch.truncated,
            "omitted": batch.omitted,
        },
    )


def read_node(svc: Services, ctx: Ctx, args: ReadNodeArgs) -> ToolOutput:
    memory, node = svc.reads.read(ctx.caller, args.ref, args.memoryRef)
    view = svc.reads.nodes.view(ctx.caller, memory, node)
    return ToolOutput(render_node(view), view)


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_get_nodes",
        f"Read many full nodes in one call: refs (ids or node URNs, in order, at most {MAX_BATCH_NODES}) or "
        "memory + locPrefix (a subtree, in loc order). Refs you cannot read come back in unavailable; past the "
        "response-size cap the rest are listed in omitted with truncated: true.",
        GetNodesArgs,
        get_nodes,
    ),
    DeclaredTool(
        "hadron_read_node",
        "Read one node by id, node URN or bare loc. A bare loc is read in memoryRef when given, else across "
        "every memory you can read (AMBIGUOUS_NODE_LOC when several hold it); the active memory is not used.",
        ReadNodeArgs,
        read_node,
    ),
]
