"""Node tools: create (upsert), create parent, update, merge data, get, next, list, move, delete."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, model_validator

from triptych.core.bounds import SQLITE_MAX_INT
from triptych.hadron.domain.loc import leaf, node_urn
from triptych.hadron.services.nodes import EdgeInput, Folder, NodeFields
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

LOC = "Loc path inside the memory (a:b:c) or a full node URN (hrn:node:<root>:<memory>:<loc>)"


class EdgeArg(ToolArgs):
    targetId: str | None = Field(None, description="Target node id, loc or URN")
    targetUrn: str | None = Field(None, description="Target node URN (another memory must be readable)")
    targetLoc: str | None = Field(None, description="Target loc in the source node's memory")
    name: str | None = None
    description: str | None = None
    loc: str | None = Field(
        None, description="The edge's own loc (default: the target's loc); unique per node"
    )
    isRunnable: bool = False

    @model_validator(mode="after")
    def _one_target(self) -> EdgeArg:
        given = [v for v in (self.targetId, self.targetUrn, self.targetLoc) if v]
        if len(given) != 1:
            raise ValueError("each edge needs exactly one of targetId, targetUrn or targetLoc")
        return self

    def as_input(self) -> EdgeInput:
        target = self.targetId or self.targetUrn or self.targetLoc or ""
        return EdgeInput(target, self.name, self.description, self.loc, self.isRunnable)


class NodeBody(ToolArgs):
    description: str | None = None
    content: str | None = Field(None, description="Markdown body")
    seq: int | None = Field(
        None,
        ge=-SQLITE_MAX_INT - 1,
        le=SQLITE_MAX_INT,
        description="Order among siblings (hadron_get_next_node walks by it)",
    )
    tags: list[str] | None = None
    properties: dict[str, Any] | None = Field(
        None, description="Typed fields; validated against the memory's schema when objectType is set"
    )
    data: dict[str, Any] | None = Field(None, description="The data bag; replaces the whole bag")
    edges: list[EdgeArg] | None = Field(None, description="Replaces the node's full edge set")
    llmModel: str | None = None
    aiAgent: str | None = None


class CreateNodeArgs(NodeBody):
    loc: str = Field(description=LOC)
    name: str = Field(description="Display title")
    nodeType: str = Field("info", description="Node type (default info; parent for sections)")
    objectType: str | None = Field(None, description="Schema collection this node belongs to")
    memoryId: str | None = Field(
        None, description="Memory URN or id (default: the loc's URN, else the active memory)"
    )


class CreateParentArgs(ToolArgs):
    loc: str = Field(description=LOC)
    name: str
    description: str | None = None
    seq: int | None = Field(None, ge=-SQLITE_MAX_INT - 1, le=SQLITE_MAX_INT)
    tags: list[str] | None = None
    memoryId: str | None = Field(None, description="Memory URN or id (default: the active memory)")


class UpdateNodeArgs(NodeBody):
    loc: str = Field(description=LOC)
    name: str | None = None
    nodeType: str | None = None
    objectType: str | None = None
    reason: str | None = Field(None, description="Why; stored in the revision history")


class UpdateNodeDataArgs(ToolArgs):
    nodeUrn: str = Field(description="Node URN or id")
    data: Any = Field(description="A JSON object whose top-level keys overwrite the data bag's")


class GetNodeArgs(ToolArgs):
    loc: str = Field(description=LOC)


class GetNextNodeArgs(ToolArgs):
    parent: str = Field(description="Parent loc or URN")
    current: str | None = Field(None, description="The current child (loc or URN); omit for the first")


class ListNodesArgs(ToolArgs):
    parentRel: str | None = Field(None, description="Parent loc or URN (default: the memory's root)")
    memoryUrn: str | None = Field(None, description="Memory (default: the active memory)")
    depth: int = Field(1, ge=1, le=10, description="Levels to descend (1-10)")


class MoveNodeArgs(ToolArgs):
    urn: str = Field(description="The node's current URN (or loc in the active memory)")
    targetUrn: str = Field(description="Destination URN; another memory performs a cross-memory move")
    overwrite: bool = Field(False, description="Soft-delete an existing node at the target first")
    renameToLeaf: bool = Field(False, description="Also set name to the target loc's last atom")


class DeleteNodeArgs(ToolArgs):
    urn: str = Field(description="Fully-qualified node URN")
    hard: bool = Field(False, description="Remove the rows instead of soft-deleting")
    recursive: bool = Field(False, description="Also delete every descendant")
    cascadeCrossMemoryEdges: bool = Field(False, description="Hard delete: remove cross-memory edges too")


_BODY = ("description", "content", "seq", "tags", "properties", "data", "llmModel", "aiAgent")


def _fields(args: ToolArgs, names: tuple[str, ...], always: tuple[str, ...] = ()) -> NodeFields:
    present = frozenset(n for n in names if n in args.model_fields_set or n in always)
    return NodeFields({n: getattr(args, n, None) for n in names}, present)


def render_node(view: dict[str, Any]) -> str:
    lines = ["---", f"urn: {view['urn']}", f"id: {view['id']}", f"name: {view['name']}"]
    for key in ("nodeType", "objectType", "description", "seq", "llmModel", "aiAgent"):
        if view.get(key) is not None:
            lines.append(f"{key}: {view[key]}")
    if view["tags"]:
        lines.append(f"tags: {json.dumps(view['tags'], ensure_ascii=False)}")
    last = view["revisions"][0] if view["revisions"] else None
    revision = f"revision: {view['revision']}"
    if last:
        revision += f" ({last['operation']} by {last['actor']} at {last['at']}"
        revision += f", reason: {last['reason']})" if last["reason"] else ")"
    lines += [revision, "---"]
    if view["content"]:
        lines.append(view["content"])
    if view["properties"]:
        lines += ["", "## properties", json.dumps(view["properties"], ensure_ascii=False, sort_keys=True)]
    if view["data"] is not None:
        lines += ["", "## data", json.dumps(view["data"], ensure_ascii=False, sort_keys=True)]
    abstract = view.get("abstract")
    if abstract:
        lines += [
            "",
            f"## abstract ({abstract['method']}{', stale' if abstract['stale'] else ''})",
            abstract["text"],
        ]
    if view["edges"]:
        lines += ["", "## edges"]
        for edge in view["edges"]:
            target = edge["target"]
            where = (
                "(in a memory you cannot read)" if target is None else target.get("urn") or target.get("ref")
            )
            note = " [dangling]" if edge["dangling"] and target is not None else ""
            label = f" ({edge['name']})" if edge["name"] else ""
            # The id is what hadron_update_edge and hadron_delete_edge take when the edge's URN is ambiguous.
            lines.append(f"- {edge['loc']} → {where}{label}{note} [edge id {edge['id']}]")
    if view.get("runs"):
        lines += ["", "## runs (newest first)"]
        for run in view["runs"]:
            args = json.dumps(run["args"], ensure_ascii=False, sort_keys=True)
            lines.append(
                f"- {run['at']} {run['actor']}: {run['outcome']} (revision {run['revision']}, "
                f"{run['durationMs']} ms, args {args})"
            )
    return "\n".join(lines)


def written(svc: Services, ctx: Ctx, mem: Any, node: Any, verb: str) -> ToolOutput:
    view = svc.nodes.view(ctx.caller, mem, node, revisions=1)
    return ToolOutput(f"{verb} {view['urn']} (revision {node.revision})", view)


def create_node(svc: Services, ctx: Ctx, args: CreateNodeArgs) -> ToolOutput:
    fields = _fields(args, ("name", "nodeType", "objectType", *_BODY), always=("name",))
    edges = [e.as_input() for e in args.edges] if args.edges is not None else None
    mem, node, created = svc.nodes.create(ctx.caller, ctx.session, args.loc, fields, edges, args.memoryId)
    return written(svc, ctx, mem, node, "Created" if created else "Updated (upsert)")


def create_parent_node(svc: Services, ctx: Ctx, args: CreateParentArgs) -> ToolOutput:
    values = {"name": args.name, "nodeType": "parent", "description": args.description, "seq": args.seq,
              "tags": args.tags}  # fmt: skip
    present = frozenset({"name", "nodeType"} | (args.model_fields_set & {"description", "seq", "tags"}))
    mem, node, created = svc.nodes.create(
        ctx.caller, ctx.session, args.loc, NodeFields(values, present), None, args.memoryId
    )
    return written(svc, ctx, mem, node, "Created parent" if created else "Updated parent (upsert)")


def update_node(svc: Services, ctx: Ctx, args: UpdateNodeArgs) -> ToolOutput:
    fields = _fields(args, ("name", "nodeType", "objectType", *_BODY))
    edges = [e.as_input() for e in args.edges] if args.edges is not None else None
    mem, node = svc.nodes.update(ctx.caller, ctx.session, args.loc, fields, edges, args.reason)
    return written(svc, ctx, mem, node, "Updated")


def update_node_data(svc: Services, ctx: Ctx, args: UpdateNodeDataArgs) -> ToolOutput:
    mem, node = svc.nodes.merge_data(ctx.caller, ctx.session, args.nodeUrn, args.data)
    return written(svc, ctx, mem, node, "Merged data into")


def get_node(svc: Services, ctx: Ctx, args: GetNodeArgs) -> ToolOutput:
    mem, node = svc.nodes.find(ctx.caller, ctx.session, args.loc)
    view = svc.nodes.view(ctx.caller, mem, node)
    return ToolOutput(render_node(view), view)


def get_next_node(svc: Services, ctx: Ctx, args: GetNextNodeArgs) -> ToolOutput:
    mem, node = svc.nodes.next_node(ctx.caller, ctx.session, args.parent, args.current)
    if node is None:
        return ToolOutput("No next node: that was the last child.", {"node": None})
    view = svc.nodes.view(ctx.caller, mem, node)
    return ToolOutput(render_node(view), {"node": view})


def list_nodes(svc: Services, ctx: Ctx, args: ListNodesArgs) -> ToolOutput:
    mem, root, rows = svc.nodes.tree(ctx.caller, ctx.session, args.parentRel, args.memoryUrn, args.depth)
    items: list[dict[str, Any]] = []
    lines = []
    for d, entry in rows:
        indent = "  " * (d - 1)
        if isinstance(entry, Folder):
            items.append({"loc": entry.loc, "name": leaf(entry.loc), "description": None, "nodeType": None,
                          "depth": d, "implicit": True})  # fmt: skip
            lines.append(f"{indent}- {entry.loc} — (implicit folder: no node here, nodes beneath)")
            continue
        items.append({"loc": entry.loc, "name": entry.name, "description": entry.description,
                      "nodeType": entry.node_type, "depth": d, "implicit": False})  # fmt: skip
        lines.append(
            f"{indent}- {entry.loc} — {entry.name}" + (f": {entry.description}" if entry.description else "")
        )
    # The heading names what was listed: the memory, or the parent node by its node URN.
    where = node_urn(mem.root, mem.slug, root) if root else mem.urn
    folders = sum(1 for item in items if item["implicit"])
    count = f"{len(items) - folders} node(s)" + (f", {folders} implicit folder(s)" if folders else "")
    head = f"{where} — {count}, depth {args.depth}"
    return ToolOutput(
        "\n".join([head, *lines]),
        {
            "memoryUrn": mem.urn,
            "parent": root or None,
            "parentUrn": where if root else None,
            "nodes": items,
        },
    )


def move_node(svc: Services, ctx: Ctx, args: MoveNodeArgs) -> ToolOutput:
    src, dst, loc, count = svc.nodes.move(
        ctx.caller, ctx.session, args.urn, args.targetUrn, args.overwrite, args.renameToLeaf
    )
    urn = node_urn(dst.root, dst.slug, loc)
    kind = "cross-memory move" if src.id != dst.id else "move"
    return ToolOutput(
        f"Moved {count} node(s) to {urn} ({kind})",
        {"urn": urn, "moved": count, "crossMemory": src.id != dst.id, "fromMemoryUrn": src.urn},
    )


def delete_node(svc: Services, ctx: Ctx, args: DeleteNodeArgs) -> ToolOutput:
    mem, loc, count, edges = svc.nodes.delete(
        ctx.caller, ctx.session, args.urn, args.hard, args.recursive, args.cascadeCrossMemoryEdges
    )
    urn = node_urn(mem.root, mem.slug, loc)
    how = "Hard-deleted" if args.hard else "Soft-deleted"
    extra = f", removed {edges} cross-memory edge(s)" if edges else ""
    return ToolOutput(
        f"{how} {urn} ({count} node(s){extra})",
        {"urn": urn, "deleted": count, "hard": args.hard, "crossMemoryEdgesRemoved": edges},
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_create_node",
        "Create or upsert a node. nodeType defaults to info. data replaces the whole data bag "
        "(hadron_update_node_data merges); edges replaces the edge set (hadron_create_edge appends one).",
        CreateNodeArgs,
        create_node,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_create_parent_node",
        "Create a section/category container node (nodeType pinned to parent).",
        CreateParentArgs,
        create_parent_node,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_update_node",
        "Partially update a node: only the fields you pass change. data replaces the whole data bag (use "
        "hadron_update_node_data to merge); edges replaces the edge set; reason is kept in the revision history.",
        UpdateNodeArgs,
        update_node,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_update_node_data",
        "Merge a JSON object into a node's data bag (shallow: the patch's top-level keys win, other keys stay). "
        "The patch must be an object. To replace the whole bag use hadron_update_node.",
        UpdateNodeDataArgs,
        update_node_data,
        read_only=False,
    ),
    DeclaredTool("hadron_get_node", "Read a single node by loc path or full URN.", GetNodeArgs, get_node),
    DeclaredTool(
        "hadron_get_next_node",
        "Read the next sibling under a parent, ordered by seq (the first child without current).",
        GetNextNodeArgs,
        get_next_node,
    ),
    DeclaredTool(
        "hadron_list_nodes",
        "Browse the tree under a parent: names and descriptions only, optionally to a depth. A loc with "
        "nodes beneath but no node of its own is listed as an implicit folder (implicit: true).",
        ListNodesArgs,
        list_nodes,
    ),
    DeclaredTool(
        "hadron_move_node",
        "Move a node with its whole loc-subtree, within a memory or across memories. Ids and names are kept "
        "(renameToLeaf re-derives the name). A collision refuses URN_ALREADY_EXISTS unless overwrite.",
        MoveNodeArgs,
        move_node,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_delete_node",
        "Delete a node: soft by default, hard: true removes the rows. Refuses with descendants unless "
        "recursive; a hard delete refuses cross-memory edges unless cascadeCrossMemoryEdges.",
        DeleteNodeArgs,
        delete_node,
        read_only=False,
    ),
]
