"""Actions: hadron_run_action (load an action node, resolve its dependencies, execute it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput


class RunActionArgs(ToolArgs):
    loc: str = Field(description="The action node: loc in the active memory, full node URN, or id")
    args: dict[str, Any] | None = Field(
        None, description="Arguments, validated against the action's parameters (data.action.parameters)"
    )


def run_action(svc: Services, ctx: Ctx, args: RunActionArgs) -> ToolOutput:
    result = svc.actions.run(ctx.caller, ctx.session, args.loc, args.args or {})
    run = result.run
    head = (
        f"Ran {result.urn} ({run.kind}, revision {run.node_revision}) in {run.duration_ms:.1f} ms "
        f"[run {run.id}]"
    )
    data = {
        "urn": result.urn,
        "output": result.output,
        "dependencies": result.dependencies,
        **run.view(),
    }
    return ToolOutput(f"{head}\n{result.output}", data)


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_run_action",
        "Load an action-type node (nodeType action, declared in data.action), resolve its dependencies "
        "(its edges; isRunnable action dependencies run first) and execute it: a template renders text from "
        "args and the dependencies' content; an mcp-tool action calls a tool on a registered MCP source "
        "(only when the operator enabled it). args is validated against the action's parameters first. "
        "Every run is recorded; hadron_get_node on the action shows its latest runs.",
        RunActionArgs,
        run_action,
        read_only=False,
        open_world=True,
    )
]
