"""Scope tools: list, create, update, delete, explain, set active."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from triptych.core.bounds import MAX_OFFSET
from triptych.hadron.services.scopes import SCOPE_NAME
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput


class ListScopesArgs(ToolArgs):
    app: str | None = Field(None, description="List this App's context instead of the active App's")
    ownerType: Literal["organization", "app", "agent"] | None = Field(None, description="With ownerRef")
    ownerRef: str | None = Field(None, description="One owner's scopes (organization or App URN or id)")
    name: str | None = Field(None, description="Only scopes with this name")
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)


class CreateScopeArgs(ToolArgs):
    name: str = Field(
        pattern=SCOPE_NAME.pattern,
        description="1-64 characters of [a-z0-9_-], unique per owner; app and global are reserved",
    )
    memoryUrns: list[str] = Field(
        min_length=1, description="The memories, in order (at least one; each one you can read)"
    )
    organizationRef: str | None = Field(
        None, description="Owning organization (default: the active App owns it)"
    )
    agentRef: str | None = Field(None, description="Owning agent")
    appRef: str | None = Field(None, description="Owning App")
    description: str | None = None


class UpdateScopeArgs(ToolArgs):
    scope: str = Field(description="The scope's id")
    name: str | None = Field(None, pattern=SCOPE_NAME.pattern, description="New name (1-64 of [a-z0-9_-])")
    description: str | None = None
    memoryUrns: list[str] | None = Field(
        None, min_length=1, description="Replaces the memory list (never merges)"
    )


class DeleteScopeArgs(ToolArgs):
    scope: str = Field(description="The scope's id")


class ExplainScopeArgs(ToolArgs):
    scope: str | None = Field(None, description="The scope's id")
    name: str | None = Field(None, description="Or its name, resolved in the App's context")
    app: str | None = Field(None, description="Resolve the name in this App's context")
    loc: str | None = Field(None, description="Which memory would win for this loc")


class SetActiveScopeArgs(ToolArgs):
    scope: str | None = Field(None, description="Scope id or name")
    clear: bool = Field(False, description="Drop the active scope")


def list_scopes(svc: Services, ctx: Ctx, args: ListScopesArgs) -> ToolOutput:
    context, found = svc.scopes.listing(
        ctx.caller, ctx.session, args.app, args.ownerType, args.ownerRef, args.name
    )
    page = found[args.offset : args.offset + args.limit]
    rows = [svc.scopes.row(ctx.caller, s, tier) for tier, s in page]
    lines = [
        f"{len(found)} scope(s) in {context}" + (f" (showing {len(rows)})" if len(rows) < len(found) else "")
    ]
    for row in rows:
        lines.append(
            f"- {row['name']} ({row['tier']} {row['owner']}) id={row['id']}: {len(row['memoryUrns'])} memories"
        )
    return ToolOutput("\n".join(lines), {"context": context, "scopes": rows, "total": len(found)})


def create_scope(svc: Services, ctx: Ctx, args: CreateScopeArgs) -> ToolOutput:
    scope = svc.scopes.create(
        ctx.caller, ctx.session, args.name, args.memoryUrns, args.description,
        args.organizationRef, args.agentRef, args.appRef,
    )  # fmt: skip
    row = svc.scopes.row(ctx.caller, scope)
    return ToolOutput(f"Created scope {scope.name} ({row['ownerType']} {row['owner']}) id={scope.id}", row)


def update_scope(svc: Services, ctx: Ctx, args: UpdateScopeArgs) -> ToolOutput:
    present = set(args.model_fields_set) - {"scope"}
    scope = svc.scopes.update(ctx.caller, args.scope, args.name, args.description, args.memoryUrns, present)
    return ToolOutput(f"Updated scope {scope.name} id={scope.id}", svc.scopes.row(ctx.caller, scope))


def delete_scope(svc: Services, ctx: Ctx, args: DeleteScopeArgs) -> ToolOutput:
    scope = svc.scopes.delete(ctx.caller, args.scope)
    return ToolOutput(
        f"Deleted scope {scope.name} id={scope.id}; the name is free again",
        {"id": scope.id, "name": scope.name, "deleted": True},
    )


def explain(svc: Services, ctx: Ctx, args: ExplainScopeArgs) -> ToolOutput:
    ref = args.scope or args.name
    if not ref:
        from triptych.hadron.errors import BadInput

        raise BadInput("pass scope (an id) or name", details={"field": "scope"})
    out = svc.scopes.explain(ctx.caller, ctx.session, ref, args.app, args.loc)
    lines = [
        f"{out['label']}: {len(out['memoryUrns'])} readable memories in order; "
        f"{out['droppedForAccess']} dropped for access; tier {out['tier']}"
    ]
    lines += [f"{i}. {urn}" for i, urn in enumerate(out["memoryUrns"], 1)]
    for s in out["shadowed"]:
        lines.append(f"shadows: {s['name']} ({s['ownerType']} {s['owner']}) id={s['id']}")
    if "loc" in out:
        winner = out["winner"]
        lines.append(
            f"loc {out['loc']}: " + (f"{winner['urn']} wins" if winner else "no memory in the scope has it")
        )
    return ToolOutput("\n".join(lines), out)


def set_active_scope(svc: Services, ctx: Ctx, args: SetActiveScopeArgs) -> ToolOutput:
    scope = svc.scopes.set_active(ctx.caller, ctx.session, args.scope, args.clear)
    persisted = bool(ctx.session.client_id and ctx.caller.user)
    note = " (saved for this X-Hadron-Client-Id)" if persisted else ""
    if scope is None:
        return ToolOutput(f"Active scope cleared{note}", {"scope": None, "persisted": persisted})
    row = svc.scopes.row(ctx.caller, scope)
    return ToolOutput(
        f"Active scope: {scope.name} ({row['owner']}) id={scope.id}{note}",
        {**row, "persisted": persisted},
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_list_scopes",
        "List the scopes you may read. With no filter, the active App's context: its own scopes, its "
        "installed Agents', and its organization's (what a bare scope name resolves against there).",
        ListScopesArgs,
        list_scopes,
    ),
    DeclaredTool(
        "hadron_create_scope",
        "Create a scope: a named, ordered list of memories that narrows searches and never grants. With no "
        "owner ref the active App owns it. Every memory must be one you can read.",
        CreateScopeArgs,
        create_scope,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_update_scope",
        "Rename, re-describe, or replace a scope's memory list (memoryUrns replaces, never merges).",
        UpdateScopeArgs,
        update_scope,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_delete_scope",
        "Soft-delete a scope; its name is free again at once. Attaches or detaches nothing.",
        DeleteScopeArgs,
        delete_scope,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_scope_explain",
        "What a scope resolves to for you: readable memories in order, how many were dropped for access, "
        "which owner tier won, the scopes it shadowed, and with loc which memory would win for that address.",
        ExplainScopeArgs,
        explain,
    ),
    DeclaredTool(
        "hadron_set_active_scope",
        "Set the scope hadron_find_nodes and hadron_search run under when a call names no scope and no "
        "memory, or drop it with clear: true. Persisted per client instance, like the active App.",
        SetActiveScopeArgs,
        set_active_scope,
    ),
]
