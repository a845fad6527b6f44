"""Validate: hadron_validate (a read-only sweep of one memory)."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput


class ValidateArgs(ToolArgs):
    memoryUrn: str = Field(description="Fully-qualified memory URN (hrn:mem:<root>:<slug>)")


def validate(svc: Services, ctx: Ctx, args: ValidateArgs) -> ToolOutput:
    r = svc.validator.validate(ctx.caller, args.memoryUrn)
    lines = [f"Validated {r.memory.urn}: {r.nodes} node(s), {r.issues} issue(s)"]
    lines.append(f"broken edges: {len(r.broken_edges)}")
    lines += [f"- {i['source']} —{i['edge']}→ {i['target']}" for i in r.broken_edges]
    lines.append(f"missing content: {len(r.missing_content)}")
    lines += [f"- {i['urn']}" for i in r.missing_content]
    lines.append(f"embedding failures: {len(r.embedding_failures)}")
    lines += [f"- {i['urn']}: {i['error']}" for i in r.embedding_failures]
    lines.append(f"schema violations: {len(r.schema_violations)}")
    lines += [f"- {i['urn']}: {i['message']}" for i in r.schema_violations]
    lines.append(f"stale abstracts: {len(r.stale_abstracts)}")
    lines += [f"- {i['urn']}: the content changed since its abstract was written" for i in r.stale_abstracts]
    if r.stale_abstracts:
        lines.append(
            "  (the next content write refreshes one; `triptych hadron memory abstracts "
            f"{r.memory.urn}` refreshes them all)"
        )
    data = {
        "memoryUrn": r.memory.urn,
        "nodes": r.nodes,
        "issues": r.issues,
        "brokenEdges": r.broken_edges,
        "missingContent": r.missing_content,
        "embeddingFailures": r.embedding_failures,
        "schemaViolations": r.schema_violations,
        "staleAbstracts": r.stale_abstracts,
    }
    return ToolOutput("\n".join(lines), data)


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_validate",
        "Walk a memory and report broken edges, missing content, stale abstracts, embedding failures and schema "
        "violations (including records written before the schema existed). Read-only; safe any time.",
        ValidateArgs,
        validate,
    )
]
