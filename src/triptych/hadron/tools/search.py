"""Search tools: hadron_find_nodes (four modes and survey) and hadron_search (entities across kinds)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from triptych.hadron.domain.loc import node_urn
from triptych.hadron.services.search import (
    ENTITY_TYPES,
    MAX_SEARCH_QUERY,
    FindQuery,
    FindResult,
    Hit,
)
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

PREVIEW = 300

EntityType = Literal["organization", "memory", "node", "agent", "app", "aiServiceConfig", "user"]
SearchField = Literal["urn", "name", "description", "pk", "content"]


class FindNodesArgs(ToolArgs):
    query: str = Field(description='What to look for; "*" or "" lists everything (survey mode)')
    mode: Literal["keyword", "vector", "hybrid", "regex"] = Field(
        "keyword",
        description="keyword (stemmed full text, default), vector or hybrid (semantic; needs the memory's "
        "vector index), regex (an RE2 regular expression, linear-time: no backreferences or lookaround, over name, description and content)",
    )
    scope: str | None = Field(None, description="A scope id or name (or the built-in app / global)")
    parentRel: str | None = Field(None, description="Only the subtree under this node (a full node URN)")
    memoryUrn: str | None = Field(None, description="Search this memory")
    memoryUrns: list[str] | None = Field(
        None, description="Search these memories (unreadable ones are counted)"
    )
    allMemories: bool = Field(False, description="Search every memory you can read")
    objectType: str | None = Field(None, description="Only nodes of this schema collection")
    where: dict[str, Any] | None = Field(
        None,
        description='Predicate over properties/data: leaves {path (a list of keys, ["tier"], or a dotted '
        "string), <eq|ne|in|lt|lte|gt|gte|between|exists|contains>, field, as}, branches and/or/not; depth <= 4, "
        "<= 32 leaves, paths <= 8 segments. "
        "It filters first, then the mode ranks the survivors.",
    )
    isRunnable: bool | None = Field(None, description="Only runnable (action) nodes, or only the others")
    brief: bool = Field(False, description="Return name, URN, description and edges only")
    limit: int = Field(20, ge=1, le=100, description="Most nodes to return (1-100)")
    minScore: float | None = Field(
        None, description="Drop ranked hits scoring below this (scales differ per mode); ignored by survey"
    )
    expand: int = Field(0, ge=0, le=3, description="Also return neighbours along outgoing edges, 0-3 hops")
    granularity: Literal["node", "chunk"] = Field(
        "node", description="node: one entry per node; chunk: also the best-matching passage with offsets"
    )


class SearchArgs(ToolArgs):
    query: str = Field(
        max_length=MAX_SEARCH_QUERY,
        description=f"An id, URN or name (case-insensitive substring; pk is exact), at most {MAX_SEARCH_QUERY} "
        "characters",
    )
    entityTypes: list[EntityType] | None = Field(
        None, description=f"Kinds to search: {', '.join(ENTITY_TYPES)}"
    )
    fields: list[SearchField] | None = Field(
        None,
        description="Fields to match: urn, name, description, pk (exact), content (node bodies, opt-in; "
        "skips encrypted memories). Default: pk for an id, urn for a URN, else name and urn.",
    )
    scope: str | None = Field(None, description="A scope id or name; narrows the memory and node slices")
    limit: int = Field(50, ge=1, le=200, description="Most hits (1-200)")


def _hit(hit: Hit, edges: dict[str, list[dict[str, Any]]], brief: bool) -> dict[str, Any]:
    node, memory = hit.node, hit.memory
    out: dict[str, Any] = {
        "urn": node_urn(memory.root, memory.slug, node.loc),
        "name": node.name,
        "description": node.description,
        "edges": edges.get(node.id, []),
    }
    if not brief:
        out.update(
            {
                "id": node.id,
                "memoryUrn": memory.urn,
                "loc": node.loc,
                "nodeType": node.node_type,
                "objectType": node.object_type,
                "tags": node.tags,
                "properties": node.properties,
                "data": node.data,
                "content": node.content,
                "updatedAt": node.updated_at,
            }
        )
    out["score"] = hit.score
    if hit.keyword_score is not None or hit.vector_score is not None:
        out["keywordScore"] = hit.keyword_score
        out["vectorScore"] = hit.vector_score
    if hit.expanded_from:
        out["expandedFrom"] = hit.expanded_from
    if hit.passage is not None:
        out["passage"] = hit.passage
    return out


def _render(result: FindResult, rows: list[dict[str, Any]], query: str, brief: bool) -> str:
    lines = [result.view.line()]
    how = "survey (everything, in loc order)" if result.survey else f'{result.mode} "{query}"'
    ranked = [r for r in rows if "expandedFrom" not in r]
    head = f"{how}: {len(ranked)} node(s)"
    if len(rows) > len(ranked):
        head += f" + {len(rows) - len(ranked)} neighbour(s) by expand"
    if result.degraded:
        head += f" [degraded: {', '.join(result.degraded)}]"
    lines.append(head)
    if not rows:
        lines.append("No nodes found. Read the scope line above: it says what was searched.")
    for i, row in enumerate(rows, 1):
        score = f" (score {row['score']})" if row["score"] is not None else ""
        via = f" [via {row['expandedFrom']}]" if "expandedFrom" in row else ""
        lines.append(f"{i}. {row['name']} — {row['urn']}{score}{via}")
        if row["description"]:
            lines.append(f"   {row['description']}")
        if row.get("abstract"):
            stale = " [stale]" if row["abstract"]["stale"] else ""
            lines.append(f"   abstract{stale}: {row['abstract']['text']}")
        if "passage" in row and row["passage"]:
            p = row["passage"]
            lines.append(
                f"   passage {p['chunkIndex']} [{p['charStart']}:{p['charEnd']}]: {p['text'][:PREVIEW]}"
            )
        elif not brief and row.get("content"):
            text = row["content"].replace("\n", " ")
            lines.append(f"   {text[:PREVIEW]}{'…' if len(text) > PREVIEW else ''}")
        if brief and row["edges"]:
            lines.append(
                "   edges: "
                + ", ".join(f"{e['loc']} → {e['target'] or '(unreadable)'}" for e in row["edges"])
            )
    return "\n".join(lines)


def find_nodes(svc: Services, ctx: Ctx, args: FindNodesArgs) -> ToolOutput:
    q = FindQuery(
        query=args.query, mode=args.mode, scope=args.scope, parent_rel=args.parentRel, memory_urn=args.memoryUrn,
        memory_urns=tuple(args.memoryUrns) if args.memoryUrns is not None else None,
        all_memories=args.allMemories, object_type=args.objectType, where=args.where,
        is_runnable=args.isRunnable, brief=args.brief, limit=args.limit, min_score=args.minScore,
        expand=args.expand, granularity=args.granularity,
    )  # fmt: skip
    result = svc.search.find_nodes(ctx.caller, ctx.session, q)
    edges = svc.search.edge_summaries(ctx.caller, result.hits)
    rows = [_hit(h, edges, args.brief) for h in result.hits]
    if result.survey and svc.abstracts is not None:  # survey mode shows each node's abstract (issue 18)
        found = svc.abstracts([h.node for h in result.hits])
        for hit, row in zip(result.hits, rows, strict=True):
            row["abstract"] = found.get(hit.node.id)
    data = {
        "scope": result.view.data(),
        "mode": "survey" if result.survey else result.mode,
        "hits": rows,
        "total": len(rows),
        "degraded": ",".join(result.degraded) or None,
    }
    return ToolOutput(_render(result, rows, args.query, args.brief), data)


def search(svc: Services, ctx: Ctx, args: SearchArgs) -> ToolOutput:
    hits, degraded, view = svc.search.entities(
        ctx.caller, ctx.session, args.query, args.entityTypes, args.fields, args.scope, args.limit
    )
    where = view.line() if view is not None else "scope: everything you can read"
    lines = [
        where,
        f'{len(hits)} match(es) for "{args.query}"'
        + (f" [degraded: {'; '.join(degraded)}]" if degraded else ""),
    ]
    for hit in hits:
        label = hit["urn"] or hit["id"]
        lines.append(
            f"- {hit['entityType']}: {hit['name']} — {label} (matched {hit['matchedField']}, score {hit['score']})"
        )
    data = {
        "hits": hits,
        "total": len(hits),
        "degraded": degraded,
        "scope": view.data() if view is not None else None,
    }
    return ToolOutput("\n".join(lines), data)


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_find_nodes",
        "Relevance-ranked node search. mode: keyword (default, stemmed full text), vector/hybrid (semantic, "
        'needs the memory\'s vector index), regex. query "*" or "" lists everything (survey). Filters: '
        "objectType, where, isRunnable, parentRel. With no memory selector it runs under the search ladder "
        "(scope › active scope › active App › active organization › your own memories), never the active "
        "memory: read the scope line at the top of every result.",
        FindNodesArgs,
        find_nodes,
    ),
    DeclaredTool(
        "hadron_search",
        "Find a known entity by id, URN or name across organizations, memories, nodes, agents, apps, AI "
        "service configs and users in one ranked list. Case-insensitive substring (pk is exact), never "
        "stemmed; for concept search over node text use hadron_find_nodes.",
        SearchArgs,
        search,
    ),
]
