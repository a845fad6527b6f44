"""Memory selection: hadron_list_memories, hadron_set_active_memory."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.tools.base import (
    Ctx,
    DeclaredTool,
    HadronTool,
    NoArgs,
    Services,
    ToolArgs,
    ToolOutput,
)
from triptych.hadron.tools.server_info import unknown_user


class SetActiveMemoryArgs(ToolArgs):
    memoryUrn: str = Field(description="The memory to bind (hrn:mem:<org-or-user>:<slug>, or its id)")


def list_memories(svc: Services, ctx: Ctx, args: NoArgs) -> ToolOutput:
    active = ctx.session.memory_id
    rows = []
    for reach in svc.selections.reachable_memories(ctx.caller, ctx.session):
        memory = reach.memory
        rows.append(
            {
                "urn": memory.urn,
                "id": memory.id,
                "name": memory.name,
                "class": memory.memory_class,
                "owner": memory.owner_type,
                "access": reach.access,
                "encrypted": memory.encrypted,
                "active": memory.id == active,
                "inActiveApp": reach.in_active_app,
            }
        )
    if not rows:
        unknown = unknown_user(ctx)
        text = (
            f"No memories: {unknown}."
            if unknown
            else "No memories: your identity has no access to any memory yet."
        )
    else:
        lines = [f"{len(rows)} memories you can reach (URN — access — class — name):"]
        for row in rows:
            marks = " [active]" if row["active"] else ""
            marks += " [app]" if row["inActiveApp"] else ""
            lines.append(f"- {row['urn']} — {row['access']} — {row['class']} — {row['name']}{marks}")
        text = "\n".join(lines)
    return ToolOutput(text, {"memories": rows, "count": len(rows)})


def set_active_memory(svc: Services, ctx: Ctx, args: SetActiveMemoryArgs) -> ToolOutput:
    memory = svc.selections.set_active_memory(ctx.caller, ctx.session, args.memoryUrn)
    level = svc.selections.memory_level(ctx.caller, memory)
    persisted = " (saved for this X-Hadron-Client-Id)" if ctx.session.client_id and ctx.caller.user else ""
    return ToolOutput(
        f"Active memory: {memory.urn} ({level}){persisted}",
        {"memoryUrn": memory.urn, "id": memory.id, "access": level, "persisted": bool(persisted)},
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_list_memories",
        "List every memory accessible to the caller, with URN and access level (read-only or read-write). "
        "The authoritative inventory of where you can read and write.",
        NoArgs,
        list_memories,
    ),
    DeclaredTool(
        "hadron_set_active_memory",
        "Bind a memory as the session default for subsequent calls that take an optional memoryUrn or loc.",
        SetActiveMemoryArgs,
        set_active_memory,
    ),
]
