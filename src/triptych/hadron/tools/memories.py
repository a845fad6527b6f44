"""Memory selection: hadron_list_memories, hadron_set_active_memory."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.services.selection import SelectionService
from triptych.hadron.tools.base import Ctx, NoArgs, Tool, ToolArgs, ToolOutput


class SetActiveMemoryArgs(ToolArgs):
    memoryUrn: str = Field(description="The memory to bind (hrn:mem:<org-or-user>:<slug>, or its id)")


def memory_tools(access: AccessPolicy, selections: SelectionService) -> list[Tool[Ctx]]:
    def list_memories(ctx: Ctx, args: NoArgs) -> ToolOutput:
        require_identity(ctx.caller)
        readable = access.readable(ctx.caller)
        active = ctx.session.memory_id
        app = access.tenancy.app(ctx.session.app_id) if ctx.session.app_id else None
        attached = set(access.tenancy.attached_memories(app.id)) if app else set()
        rows = []
        for memory, level in readable:
            rows.append(
                {
                    "urn": memory.urn,
                    "id": memory.id,
                    "name": memory.name,
                    "class": memory.memory_class,
                    "owner": memory.owner_type,
                    "access": level,
                    "encrypted": memory.encrypted,
                    "active": memory.id == active,
                    "inActiveApp": app is not None and (memory.app_id == app.id or memory.id in attached),
                }
            )
        if not rows:
            text = "No memories: your identity has no access to any memory yet."
        else:
            lines = [f"{len(rows)} memories you can reach (URN — access — class — name):"]
            for row in rows:
                marks = " [active]" if row["active"] else ""
                marks += " [app]" if row["inActiveApp"] else ""
                lines.append(f"- {row['urn']} — {row['access']} — {row['class']} — {row['name']}{marks}")
            text = "\n".join(lines)
        return ToolOutput(text, {"memories": rows, "count": len(rows)})

    def set_active_memory(ctx: Ctx, args: SetActiveMemoryArgs) -> ToolOutput:
        memory = selections.set_active_memory(ctx.caller, ctx.session, args.memoryUrn)
        level = access.memory_level(ctx.caller, memory)
        persisted = (
            " (saved for this X-Hadron-Client-Id)" if ctx.session.client_id and ctx.caller.user else ""
        )
        return ToolOutput(
            f"Active memory: {memory.urn} ({level}){persisted}",
            {"memoryUrn": memory.urn, "id": memory.id, "access": level, "persisted": bool(persisted)},
        )

    return [
        Tool(
            "hadron_list_memories",
            "List every memory accessible to the caller, with URN and access level (read-only or read-write). "
            "The authoritative inventory of where you can read and write.",
            NoArgs,
            list_memories,
        ),
        Tool(
            "hadron_set_active_memory",
            "Bind a memory as the session default for subsequent calls that take an optional memoryUrn or loc.",
            SetActiveMemoryArgs,
            set_active_memory,
        ),
    ]
