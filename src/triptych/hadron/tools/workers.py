"""Workers: hadron_cast_worker, hadron_list_workers, hadron_get_worker, hadron_update_worker."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.services.sessions import age
from triptych.hadron.services.workers import RosterLine
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput


class CastWorkerArgs(ToolArgs):
    # Optional in the schema only so that omitting it refuses WORKER_NAME_REQUIRED with its reason.
    name: str | None = Field(
        None, description="The worker's name: required in effect, unique per App, permanent"
    )
    role: str | None = Field(
        None, description="Picks the installed agent by personaRole; the casting's role label"
    )
    agent: str | None = Field(None, description="Agent URN or id (must be installed in the App)")
    app: str | None = Field(None, description="App URN or id (defaults to the active App)")
    promptOverride: str | None = Field(None, max_length=65_536, description="Per-worker individuality")


class ListWorkersArgs(ToolArgs):
    includeRetired: bool = Field(False, description="Also list retired workers")
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0)
    app: str | None = Field(None, description="App URN or id (defaults to the session's or the active App)")
    session: str | None = Field(None, description="Your session id: names the App and keeps the session live")


class GetWorkerArgs(ToolArgs):
    workerRef: str = Field(description="Name (needs App context), URN or id")
    app: str | None = Field(None, description="App URN or id, for a name")
    session: str | None = Field(None, description="Your session id: names its App and keeps the session live")


class UpdateWorkerArgs(GetWorkerArgs):
    promptOverride: str | None = Field(
        None,
        max_length=65_536,
        description="Replaces the whole override; omit to change nothing, '' to clear",
    )


def roster_text(line: RosterLine) -> str:
    w = line.worker
    if line.held_by_you:
        hold = "held by YOU"
    elif line.held_by:
        hold = f"held by {line.held_by}"
    else:
        hold = "unheld — binding it holds it"
    parts = [f"- {w.name} ({w.role}) — {hold}"]
    if line.live_session_id:
        parts.append("session live")
    else:
        parts.append("no live session")
        # The age only beside no live session: next to one it would read as presence.
        parts.append(f"last driven {age(line.last_driven_at)}" if line.last_driven_at else "never driven")
    text = ", ".join(parts)
    return text + (" [retired]" if w.retired else "")


def cast(svc: Services, ctx: Ctx, args: CastWorkerArgs) -> ToolOutput:
    worker = svc.workers.cast(
        ctx.caller, ctx.session, args.name, args.role, args.agent, args.app, args.promptOverride
    )
    view = svc.workers.view(ctx.caller, worker)
    text = (
        f"Cast {worker.name} ({worker.role}) — id {worker.id}, {worker.urn}.\n"
        f"Pass the id as workerRef to hadron_start_session.\n\nBoot briefing:\n{view['bootBriefing']}"
    )
    return ToolOutput(text, {"worker": view})


def roster(svc: Services, ctx: Ctx, args: ListWorkersArgs) -> ToolOutput:
    app, lines, total = svc.workers.roster(
        ctx.caller, ctx.session, args.includeRetired, args.limit, args.offset, args.app, args.session
    )
    views = [svc.workers.view(ctx.caller, line.worker, briefing=False) for line in lines]
    head = f"{total} worker(s) of {app.urn}" + (" (retired included)" if args.includeRetired else "") + ":"
    text = "\n".join([head, *(roster_text(line) for line in lines)]) if lines else f"No workers in {app.urn}."
    return ToolOutput(text, {"appUrn": app.urn, "workers": views, "total": total})


def get(svc: Services, ctx: Ctx, args: GetWorkerArgs) -> ToolOutput:
    worker = svc.workers.resolve(ctx.caller, ctx.session, args.workerRef, args.app, args.session)
    view = svc.workers.view(ctx.caller, worker)
    text = "\n".join(
        [
            roster_text(svc.workers.line(ctx.caller, worker)).removeprefix("- "),
            f"id {worker.id}, {worker.urn}",
            "",
            "Prompt override:",
            worker.prompt_override or "(none)",
            "",
            "Boot briefing:",
            view["bootBriefing"],
        ]
    )
    return ToolOutput(text, {"worker": view})


def update(svc: Services, ctx: Ctx, args: UpdateWorkerArgs) -> ToolOutput:
    worker = svc.workers.update(
        ctx.caller, ctx.session, args.workerRef, args.promptOverride, args.app, args.session
    )
    view = svc.workers.view(ctx.caller, worker)
    changed = (
        "unchanged" if args.promptOverride is None else "cleared" if args.promptOverride == "" else "replaced"
    )
    return ToolOutput(
        f"{worker.name}: prompt override {changed}; it reaches the worker at its next bind.",
        {"worker": view, "changed": args.promptOverride is not None},
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_cast_worker",
        "Cast a worker (a named AI team member) of an agent installed in the team App; returns its id, name and "
        "boot briefing. Refusals: WORKER_NAME_REQUIRED, WORKER_NAME_TAKEN (unique per App, case-insensitive, "
        "forever), FORBIDDEN (App keys and readers cannot staff), [agent_not_found].",
        CastWorkerArgs,
        cast,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_list_workers",
        "The App's roster: name, URN, role, who holds each name, whether a worker session is live on it, when it "
        "was last driven (or never driven), and whether it is retired.",
        ListWorkersArgs,
        roster,
    ),
    DeclaredTool(
        "hadron_get_worker",
        "Read one worker with its boot briefing (re-rendered live) and raw promptOverride. A pure read: the way "
        "to recover a briefing after a context compaction. A worker you may not read is [worker_not_found].",
        GetWorkerArgs,
        get,
    ),
    DeclaredTool(
        "hadron_update_worker",
        "Amend a worker's promptOverride (the only field that changes; it replaces the whole override, '' "
        "clears it). Reaches the worker at its next bind. Refusals: WORKER_RETIRED, FORBIDDEN.",
        UpdateWorkerArgs,
        update,
        read_only=False,
    ),
]
