"""Git-backed memories: hadron_sync_graph (one sync from the memory's repository; the repository wins)."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput


class SyncGraphArgs(ToolArgs):
    memoryUrn: str | None = Field(
        default=None,
        description="The Git-backed memory to sync (hrn:mem:<root>:<slug>); default: the active memory",
    )


def sync_graph(svc: Services, ctx: Ctx, args: SyncGraphArgs) -> ToolOutput:
    report = svc.gitsync.sync(ctx.caller, ctx.session, args.memoryUrn)
    data = report.as_dict()
    counts = data["counts"]
    lines = [
        f"Synced {report.memory.urn} from {report.url} at {report.commit[:12]}"
        + (f" (previous {report.previous[:12]})" if report.previous else " (first sync)"),
        ", ".join(f"{name} {n}" for name, n in counts.items()),
    ]
    for name in ("created", "updated", "deleted"):
        if data[name]:
            lines.append(f"{name}: " + ", ".join(data[name][:20]) + (" …" if counts[name] > 20 else ""))
    lines += [f"renamed: {r['from']} -> {r['to']}" for r in data["renamed"][:20]]
    lines += [f"conflict: {c['loc']} ({c['path']}): {c['reason']}" for c in data["conflicts"][:20]]
    lines += [f"skipped: {s['path']}: {s['reason']}" for s in data["skipped"][:20]]
    return ToolOutput("\n".join(lines), data)


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_sync_graph",
        "Trigger a one-shot sync of a memory backed by a Git source: the repository wins. Files map to "
        "nodes (path -> loc, front matter -> data, Markdown body -> content); reports the nodes created, "
        "updated, deleted and renamed, and conflicts with edits made in Hadron. Needs write access; a "
        "failed sync changes nothing.",
        SyncGraphArgs,
        sync_graph,
    )
]
