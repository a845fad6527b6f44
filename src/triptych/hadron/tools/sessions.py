"""Worker sessions: hadron_start_session, hadron_end_session, hadron_whoami."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from triptych.hadron.services.sessions import SessionEnd, SessionStart
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

PROTOCOL = (
    "Protocol: 1. read the boot briefing  2. save plan  3. work (nodes you create are attributed to this "
    "session)  4. update memory  5. record milestones with hadron_record_work  6. close with hadron_end_session "
    "(handoff: what the next stint needs). Pass session on every team tool: it keeps this session live."
)


class StartSessionArgs(ToolArgs):
    description: str = Field(description="What this stint is for")
    type: Literal["DEVELOPER", "CHATBOT", "AUTOMATION", "EDGE"] = Field(
        "DEVELOPER", description="Session type"
    )
    repo: str | None = Field(None, description="Repository worked in")
    branch: str | None = Field(None, description="Branch worked on")
    prNumber: int | None = Field(
        None, ge=1, description="PR number (hadron_record_work kind pr refreshes it)"
    )
    language: str | None = Field(None, description="Main language")
    llmModel: str | None = Field(None, description="The model driving the session")
    parentSessionId: str | None = Field(None, description="A parent session")
    prevSessionId: str | None = Field(None, description="The previous session of this stint")
    workerRef: str | None = Field(
        None, description="Work AS this worker (id from hadron_cast_worker, URN or name)"
    )
    force: bool = Field(
        False,
        description="Take over a WORKER_TAKEN worker: only on the user's explicit override (never a hold)",
    )


class EndSessionArgs(ToolArgs):
    id: str = Field(description="The session id")
    handoff: str | None = Field(
        None, max_length=65_536, description="What the next driver reads (worker-bound sessions only)"
    )
    summary: str | None = Field(None, max_length=2_000, description="A display-only label")
    errorCount: int | None = Field(None, ge=0)
    turnCount: int | None = Field(None, ge=0)
    inputTokens: int | None = Field(None, ge=0)
    outputTokens: int | None = Field(None, ge=0)


class WhoamiArgs(ToolArgs):
    limit: int = Field(10, ge=1, le=50, description="At most this many sessions (default 10, cap 50)")
    includeEnded: bool = Field(False, description="Also list recently ended sessions")


def start(svc: Services, ctx: Ctx, args: StartSessionArgs) -> ToolOutput:
    app = svc.selections.active_app(ctx.caller, ctx.session)
    worker = (
        svc.workers.resolve(ctx.caller, ctx.session, args.workerRef, app.urn, None)
        if args.workerRef
        else None
    )
    fields = SessionStart(
        description=args.description, type=args.type, repo=args.repo, branch=args.branch,
        pr_number=args.prNumber, language=args.language, llm_model=args.llmModel,
        parent_session_id=args.parentSessionId, prev_session_id=args.prevSessionId,
    )  # fmt: skip
    session, displaced = svc.sessions.start(ctx.caller, ctx.session, app, fields, worker, args.force)
    data = {"sessionId": session.id, "session": svc.sessions.view(session), "protocol": PROTOCOL,
            "displacedSessionIds": [s.id for s in displaced]}  # fmt: skip
    lines = [f"Session {session.id} started in {app.urn}."]
    if worker is not None:
        worker = svc.workers.reload(worker)
        briefing = svc.workers.briefing(worker)
        data["worker"] = svc.workers.view(ctx.caller, worker, briefing=False)
        data["bootBriefing"] = briefing
        lines.append(f"Working as {worker.name} ({worker.role}), {worker.urn}.")
        if displaced:
            lines.append("Took over from session(s): " + ", ".join(s.id for s in displaced))
        lines += ["", "Boot briefing:", briefing]
    else:
        lines.append("Not bound to a worker (pass workerRef to work as one).")
    lines += ["", PROTOCOL]
    return ToolOutput("\n".join(lines), data)


def end(svc: Services, ctx: Ctx, args: EndSessionArgs) -> ToolOutput:
    svc.selections.active_app(ctx.caller, ctx.session)  # strict: needs App context
    fields = SessionEnd(
        handoff=args.handoff, summary=args.summary, error_count=args.errorCount, turn_count=args.turnCount,
        input_tokens=args.inputTokens, output_tokens=args.outputTokens,
    )  # fmt: skip
    session = svc.sessions.end(ctx.caller, args.id, fields)
    if ctx.session.work_session_id == session.id:
        ctx.session.work_session_id = None
    view = svc.sessions.view(session)
    view["handoffWritten"] = args.handoff is not None
    text = f"Session {session.id} ended at {session.ended_at}."
    if args.handoff is not None:
        text += " Its handoff is what the next stint of this worker inherits at bind."
    return ToolOutput(text, {"session": view})


def whoami(svc: Services, ctx: Ctx, args: WhoamiArgs) -> ToolOutput:
    found = svc.sessions.whoami(ctx.caller, args.limit, args.includeEnded)
    views = [svc.sessions.view(s) for s in found]
    if not views:
        text = "No open worker sessions." + (
            "" if args.includeEnded else " (includeEnded: true lists ended ones)"
        )
    else:
        lines = [f"{len(views)} session(s) (id — worker — App — started):"]
        for v in views:
            worker = f"{v['worker']['name']} ({v['worker']['role']})" if v["worker"] else "no worker"
            state = "ended " + str(v["endedAt"]) if v["endedAt"] else ("live" if v["live"] else "idle")
            lines.append(f"- {v['id']} — {worker} — {v['appUrn']} — {v['startedAt']} [{state}]")
        lines.append("hadron_get_worker re-renders a worker's boot briefing.")
        text = "\n".join(lines)
    return ToolOutput(text, {"sessions": views, "count": len(views)})


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_start_session",
        "Open a worker session (the Hadron Session row, not your chat session) and get its id for attribution. "
        "Pass workerRef to work as a named worker; its boot briefing comes back. Refusals: [no_active_app], "
        "WORKER_HELD (force never reaches a hold), WORKER_TAKEN (retry with force: true only on the user's "
        "explicit override), WORKER_RETIRED, [worker_not_found].",
        StartSessionArgs,
        start,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_end_session",
        "Close a worker session and, for a worker-bound one, write its closing handoff (what the next stint "
        "inherits at bind). Only the attributed user or a pure App key (its own App's sessions) may end one. "
        "Refusals: SESSION_NOT_FOUND, SESSION_ENDED, SESSION_NOT_WORKER_BOUND (handoff on an unbound "
        'session; it stays open), Forbidden: session "<id>" belongs to a different App or user.',
        EndSessionArgs,
        end,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_whoami",
        "What am I driving right now? Your open worker sessions, each with its worker, App and start: the way "
        "to recover a session id after a context compaction.",
        WhoamiArgs,
        whoami,
    ),
]
