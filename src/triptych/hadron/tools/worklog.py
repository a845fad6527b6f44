"""The team worklog: hadron_record_work, hadron_team_work_items."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

Kind = Literal["pr", "issue", "commit", "branch", "repo"]


class RecordWorkArgs(ToolArgs):
    session: str = Field(description="The session the work is attributed to (ended sessions are accepted)")
    tool: str = Field(max_length=64, description="e.g. github")
    kind: Kind = Field(description="pr | issue | commit | branch | repo")
    ref: str = Field(max_length=2_000, description="Any accepted spelling (github: owner/repo#N, a URL, ...)")
    action: str = Field(
        max_length=64, description="A free verb: opened, merged, reviewed, closed, pushed, ..."
    )
    detail: dict[str, Any] | None = Field(
        None, description="Display extras (title, URL): stored, never filtered on"
    )
    app: str | None = Field(None, description="App URN or id (defaults to the active App)")


class TeamWorkItemsArgs(ToolArgs):
    ref: str | None = Field(None, description="In any accepted spelling: normalized before matching")
    session: str | None = Field(None, description="Only this session's records")
    tool: str | None = Field(None)
    kind: Kind | None = Field(None)
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0)
    app: str | None = Field(None, description="App URN or id (defaults to the active App)")


def record(svc: Services, ctx: Ctx, args: RecordWorkArgs) -> ToolOutput:
    item = svc.worklog.record(ctx.caller, ctx.session, args.session, args.tool, args.kind, args.ref, args.action,
                          args.detail, args.app)  # fmt: skip
    view = svc.worklog.view(item)
    note = f" (normalized from {args.ref.strip()!r})" if args.ref.strip() != item.ref else ""
    return ToolOutput(
        f"Recorded {item.tool} {item.kind} {item.ref}{note}: {item.action}, session {item.session_id}.",
        {"item": view},
    )


def items(svc: Services, ctx: Ctx, args: TeamWorkItemsArgs) -> ToolOutput:
    app, found, total = svc.worklog.items(ctx.caller, ctx.session, args.ref, args.session, args.tool, args.kind,
                                      args.limit, args.offset, args.app)  # fmt: skip
    views = [svc.worklog.view(i) for i in found]
    lines = [f"{len(views)} of {total} work item(s) of {app.urn}, newest first:"]
    lines += [f"- {v['createdAt']} {v['tool']} {v['kind']} {v['ref']} {v['action']} by {v['recordedBy']} "
              f"(session {v['sessionId']})" for v in views]  # fmt: skip
    return ToolOutput("\n".join(lines), {"items": views, "total": total, "appUrn": app.urn})


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_record_work",
        "Record one external work milestone (a PR opened, a branch pushed, an issue closed) against the session "
        "that did it. Echoes the stored record with its canonical ref. github refs: owner/repo#N (pr, issue), "
        "owner/repo@sha (commit), owner/repo:branch, owner/repo, web URLs, SSH remotes; a bare number is "
        "refused. Refusals: WORK_REF_INVALID, SESSION_NOT_FOUND, SESSION_NOT_IN_APP, SESSION_WORKER_NOT_IN_APP, "
        "WORKER_RETIRED, TEAM_AGENT_NOT_FOUND, TEAM_AGENT_AMBIGUOUS, FORBIDDEN.",
        RecordWorkArgs,
        record,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_team_work_items",
        "The provenance query: work items newest first with the total count, filtered by ref (any accepted "
        "spelling), session, tool, kind. Each item carries its sessionId.",
        TeamWorkItemsArgs,
        items,
    ),
]
