"""Server identity: hadron_server_info (callable before authentication)."""

from __future__ import annotations

from triptych import __version__
from triptych.hadron.identity import LOCAL_HANDLE
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, NoArgs, Services, ToolOutput

# One token per feature this build really has; tokens are added when a feature ships, never early.
CAPABILITIES = (
    "app-selection",
    "org-selection",
    "client-session-state",
    "reconnect-notice",
    "graph-nodes",
    "node-revisions",
    "cross-memory-move",
    "object-store",
    "schema-validation",
    "node-search",
    "vector-search",
    "search-scopes",
    "entity-search",
    "worker-model",
    "worker-boot-briefing",
    "team-chat",
    "team-worklog",
    "session-app-recovery",
    "channels",
)


def unknown_user(ctx: Ctx) -> str | None:
    """For a caller whose subject has no Hadron user (with auth off: ``local`` before it is created), who
    it is and the command that makes it: such a caller reaches nothing, and the tools it tries first say
    so. None for any other caller."""
    if ctx.caller.kind != "user" or ctx.caller.user is not None:
        return None
    handle = ctx.caller.handle
    auth_off = ", and with auth off every call without a bearer is 'local'" if handle == LOCAL_HANDLE else ""
    return (
        f"no user '{handle}' on this server{auth_off}: create it with `triptych hadron user create {handle}`,"
        " then give it an organization or memories"
    )


def server_info(svc: Services, ctx: Ctx, args: NoArgs) -> ToolOutput:
    # This build's tokens, then those of features that depend on the deployment (``Services.capabilities``).
    capabilities = (*CAPABILITIES, *svc.capabilities)
    state = ctx.session
    lines = [f"server: {ctx.server_url or 'stdio'}", f"version: {__version__}"]
    lines.append("capabilities: " + ", ".join(capabilities))
    org_data: dict[str, object] = {"urn": None, "rung": "unauthenticated"}
    if ctx.caller.kind == "anonymous":
        lines.append("organization: none (not authenticated)")
    else:
        resolution = svc.selections.resolve_org(ctx.caller, state)
        if (unknown := unknown_user(ctx)) is not None:
            # Instead of an ORG_REQUIRED with no memberships, what a newcomer's first call with auth off met
            # (the structured rung below stays the resolver's).
            lines.append(f"organization: none ({unknown})")
        elif resolution.org is not None:
            lines.append(f"organization: {resolution.org.urn} (chosen by: {resolution.rung})")
        elif resolution.rung == "personal":
            lines.append("organization: none (no membership: your own user-owned memories)")
        else:
            urns = ", ".join(o.urn for o in resolution.memberships) or "none"
            lines.append(f"organization: unresolved (ORG_REQUIRED; memberships: {urns})")
        org_data = {"urn": resolution.org.urn if resolution.org else None, "rung": resolution.rung}
    if state.replaced and state.client_id is not None and ctx.caller.user is not None:
        restored = ", ".join(state.restored) or "nothing was selected"
        connection = (
            "re-established (the previous MCP session ended; selections were restored from "
            f"X-Hadron-Client-Id: {restored})"
        )
        if state.dropped:
            connection += f"; dropped after re-authorization: {', '.join(state.dropped)}"
    elif state.replaced:
        connection = (
            "re-established (the previous MCP session ended; any active App or active memory selection "
            "was reset)"
        )
    else:
        connection = "new"
    lines.append(f"connection: {connection}")
    return ToolOutput(
        "\n".join(lines),
        {
            "server": ctx.server_url,
            "version": __version__,
            "capabilities": list(capabilities),
            "organization": org_data,
            "connection": {
                "reestablished": state.replaced,
                "restored": state.restored,
                "dropped": state.dropped,
                "clientId": state.client_id is not None,
            },
        },
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_server_info",
        "Return the deployment URL, the version, the capability tokens this build carries, the organization "
        "currently resolved (and which rung chose it), and whether this connection was re-established. "
        "Safe to call before authentication.",
        NoArgs,
        server_info,
        public=True,
    )
]
