"""App and organization selection: hadron_list_apps, hadron_set_active_app, hadron_set_active_org."""

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


class SetActiveAppArgs(ToolArgs):
    app: str = Field(
        description="Canonical App URN (hrn:app:<root>:<slug>), a short form (<org-root>:<slug>, e.g. "
        "acme.com:ops; @<handle>:<slug> for a personal App), an id, or a unique display name"
    )


class SetActiveOrgArgs(ToolArgs):
    org: str | None = Field(None, description="hrn:org:<root> or id of an organization you are a member of")
    clear: bool = Field(False, description="Drop the active organization")


def list_apps(svc: Services, ctx: Ctx, args: NoArgs) -> ToolOutput:
    rows = [
        {
            "urn": app.urn,
            "id": app.id,
            "name": app.name,
            "role": role,
            "active": app.id == ctx.session.app_id,
        }
        for app, role in svc.selections.visible_apps(ctx.caller)
    ]
    if not rows:
        text = "No Apps: your identity is not a member of any App or of an organization that owns one."
    else:
        lines = [f"{len(rows)} Apps (URN — your role — name):"]
        lines += [
            f"- {r['urn']} — {r['role']} — {r['name']}{' [active]' if r['active'] else ''}" for r in rows
        ]
        text = "\n".join(lines)
    return ToolOutput(text, {"apps": rows, "count": len(rows)})


def set_active_app(svc: Services, ctx: Ctx, args: SetActiveAppArgs) -> ToolOutput:
    app, role = svc.selections.set_active_app(ctx.caller, ctx.session, args.app)
    return ToolOutput(
        f"Active App: {app.urn} ({app.name}); your role: {role}",
        {"appUrn": app.urn, "id": app.id, "name": app.name, "role": role},
    )


def set_active_org(svc: Services, ctx: Ctx, args: SetActiveOrgArgs) -> ToolOutput:
    org = svc.selections.set_active_org(ctx.caller, ctx.session, args.org, args.clear)
    if org is None:
        return ToolOutput("Active organization cleared.", {"orgUrn": None, "cleared": True})
    return ToolOutput(
        f"Active organization: {org.urn} ({org.name})",
        {"orgUrn": org.urn, "id": org.id, "cleared": False},
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_list_apps",
        "List the Hadron Apps the caller has access to, each with its canonical URN and the caller's role.",
        NoArgs,
        list_apps,
    ),
    DeclaredTool(
        "hadron_set_active_app",
        "Pin an App as the active scope for the rest of the MCP session (canonical URN, short form "
        "<org-root>:<slug> or @<handle>:<slug>, or unique display name). Refusals: [app_not_found], "
        "[app_identifier_ambiguous].",
        SetActiveAppArgs,
        set_active_app,
    ),
    DeclaredTool(
        "hadron_set_active_org",
        "Set — or with clear: true drop — the active organization: the tenancy an org-scoped read runs "
        "against. Persisted per client instance. Not available to App keys.",
        SetActiveOrgArgs,
        set_active_org,
    ),
]
