"""Registers: hadron_register_list, hadron_register_add, hadron_register_remove."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput


class RegisterListArgs(ToolArgs):
    owner: str | None = Field(None, description="The owner App (URN or id; defaults to the active App)")
    channel: str | None = Field(None, description="Only this Channel (id or address)")
    attendee: str | None = Field(
        None, description="Only entries naming this worker or user (and the wide ones)"
    )


class RegisterAddArgs(ToolArgs):
    channel: str = Field(description="The Channel (id or address)")
    attendee: str | None = Field(
        None,
        description="A worker (name, URN, id) or a user (@handle); omitted: every attendee in the owner's context",
    )
    role: str | None = Field(None, description="The attendee's part, e.g. moderator")
    mentionOnly: bool = Field(False, description="Takes part only when mentioned")


class RegisterRemoveArgs(ToolArgs):
    id: str = Field(description="The entry's id (hadron_register_list prints it)")


def describe(view: dict[str, Any]) -> str:
    attendee = view["attendee"]
    who = (
        "every attendee"
        if attendee is None
        else str(attendee.get("name") or "@" + str(attendee.get("handle")))
    )
    extras = [f"role {view['role']}"] if view["role"] else []
    if view["mentionOnly"]:
        extras.append("mention only")
    return f"- {view['id']}: {who} in {view['channel']}" + (f" ({', '.join(extras)})" if extras else "")


def list_(svc: Services, ctx: Ctx, args: RegisterListArgs) -> ToolOutput:
    entries = svc.registers.list(ctx.caller, ctx.session, args.owner, args.channel, args.attendee)
    views = [svc.registers.view(e) for e in entries]
    text = "\n".join([f"{len(views)} register entr{'y' if len(views) == 1 else 'ies'} (intent, not permission):",
                      *(describe(v) for v in views)])  # fmt: skip
    return ToolOutput(text, {"entries": views, "count": len(views)})


def add(svc: Services, ctx: Ctx, args: RegisterAddArgs) -> ToolOutput:
    entry = svc.registers.add(ctx.caller, args.channel, args.attendee, args.role, args.mentionOnly)
    view = svc.registers.view(entry)
    return ToolOutput(
        "Declared " + describe(view).removeprefix("- ") + ". It grants nothing.", {"entry": view}
    )


def remove(svc: Services, ctx: Ctx, args: RegisterRemoveArgs) -> ToolOutput:
    entry = svc.registers.remove(ctx.caller, args.id)
    return ToolOutput(f"Withdrew register entry {entry.id}.", {"id": entry.id, "removed": True})


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_register_list",
        "Who is declared to take part in what: register entries by owner App, Channel or attendee.",
        RegisterListArgs,
        list_,
    ),
    DeclaredTool(
        "hadron_register_add",
        "Declare that an attendee takes part in a Channel (intent, never permission: the host memory decides "
        "who may read or post). Omitting attendee declares every attendee in the owner's context.",
        RegisterAddArgs,
        add,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_register_remove",
        "Withdraw a register entry by its id. Refusals: [register_entry_not_found], FORBIDDEN.",
        RegisterRemoveArgs,
        remove,
        read_only=False,
    ),
]
