"""hadron_replace_text: search-and-replace across many nodes (the live server's tool)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from triptych.hadron.services.replace import ReplaceRequest
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

TextField = Literal["content", "name", "description", "tags", "alias", "abstract"]


class ReplaceTextArgs(ToolArgs):
    oldText: str = Field(description="Text to find (literal), or an RE2 pattern with regex: true; not empty")
    newText: str = Field(description="Replacement; may be empty. With regex: $1, $<name>, $& and $$")
    fields: list[TextField] = Field(description="Text fields to search: content, name, description, tags")
    nodeIds: list[str] | None = Field(None, description="Node ids or fully qualified node URNs")
    memoryIds: list[str] | None = Field(None, description="Memory URNs or ids: every live node of each")
    prefix: str | None = Field(None, description="With memoryIds: only this loc and its descendants")
    regex: bool = False
    caseInsensitive: bool = False
    dryRun: bool = Field(False, description="Count the matches without writing anything")
    reason: str | None = Field(None, description="Why; recorded in each changed node's revision history")


def replace_text(svc: Services, ctx: Ctx, args: ReplaceTextArgs) -> ToolOutput:
    request = ReplaceRequest(
        args.oldText, args.newText, tuple(dict.fromkeys(args.fields)), tuple(args.nodeIds or ()),
        tuple(args.memoryIds or ()), args.prefix, args.regex, args.caseInsensitive, args.dryRun, args.reason,
    )  # fmt: skip
    result = svc.replace.replace_text(ctx.caller, request)
    verb = "Would change" if result.dry_run else "Changed"
    lines = [
        f"{verb} {result.changed} of {result.scanned} node(s) scanned, {result.replacements} replacement(s)"
        + (" (dry run: nothing written)" if result.dry_run else "")
    ]
    lines += [
        f"- {r['memoryUrn']} {r['loc']}: " + ", ".join(f"{f['field']} ×{f['matches']}" for f in r["fields"])
        for r in result.results
    ]
    if result.unavailable:
        lines.append(f"unavailable (not found, or not readable by you): {', '.join(result.unavailable)}")
    return ToolOutput(
        "\n".join(lines),
        {
            "dryRun": result.dry_run,
            "nodesScanned": result.scanned,
            "nodesChanged": result.changed,
            "totalReplacements": result.replacements,
            "results": result.results,
            "unavailable": result.unavailable,
        },
    )


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_replace_text",
        "Search and replace text across many nodes in one call: select nodeIds and/or memoryIds (prefix narrows "
        "to a subtree), pick fields (content, name, description, tags); literal by default, regex: true for "
        "RE2 with $1 references. dryRun previews the counts. Every change is kept in the revision history.",
        ReplaceTextArgs,
        replace_text,
        read_only=False,
    )
]
