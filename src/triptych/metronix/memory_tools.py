"""Metronix agent-memory MCP tools: the eight contract tools, each also under its ``metronix_memory_*`` name."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from triptych.core.mcp import Tool, ToolArgs
from triptych.metronix.access import Caller
from triptych.metronix.memory import MemoryService

Scope = Literal["global", "per_agent", "session"]
Kind = Literal["fact", "preference", "pinned"]
WORKSPACE = Field(None, description='Target workspace (default: "default", or your first granted workspace)')
STATUS = Field(
    None,
    description='Lifecycle statuses to include (default ["active"]); ["all"] disables the filter. Valid: active, '
    "candidate, stale, superseded, archived, conflicted, review_needed, all",
)


class StoreArgs(ToolArgs):
    content: str = Field(description="Memory content")
    agent_id: str = Field(description="Agent identity (1-64 of A-Z a-z 0-9 . _ -)")
    workspace_id: str | None = WORKSPACE
    scope: str = Field("per_agent", description="global, per_agent or session")
    tags: list[str] = Field(default_factory=list, description="Tags for filtering")
    importance_score: float = Field(0.5, ge=0.0, le=1.0, description="Importance (0.0-1.0)")
    source_type: str = Field("", description="Free-form origin label")
    session_id: str | None = Field(None, description="Required when scope=session")
    kind: Kind | None = Field(None, description="fact (default), preference or pinned")
    metadata: dict[str, Any] | None = Field(None, description="Extra key-value metadata")


class SearchArgs(ToolArgs):
    query: str = Field(description="Natural language query")
    agent_id: str = Field(description="Agent identity")
    workspace_id: str | None = WORKSPACE
    scope: str | None = Field(None, description="Filter by scope (global, per_agent, session)")
    tags: list[str] | None = Field(None, description="Filter by tags (intersection)")
    session_id: str | None = Field(None, description="Session ID for the session-boost signal")
    top_k: int = Field(5, ge=1, le=50, description="Results to return (1-50)")
    status: list[str] | None = STATUS
    kind: Kind | None = Field(None, description="Filter by kind")


class DeleteArgs(ToolArgs):
    record_id: str = Field(description="Record ID to delete")
    workspace_id: str | None = WORKSPACE


class BatchStoreArgs(ToolArgs):
    # Records are checked one by one in the service, so one bad record never aborts the batch.
    records: list[Any] = Field(
        description="Array of {content, tags?} objects (max 100)",
        json_schema_extra={"items": {"type": "object"}},
    )
    agent_id: str = Field(description="Agent identity (same for all records)")
    workspace_id: str | None = WORKSPACE
    scope: str = Field("per_agent", description="Scope for all records")
    importance_score: float = Field(0.5, ge=0.0, le=1.0, description="Importance for all records (0.0-1.0)")
    source_type: str = Field("", description="Origin label for all records")
    session_id: str | None = Field(None, description="Required when scope=session")
    kind: Kind | None = Field(None, description="Kind for all records")


class ListArgs(ToolArgs):
    agent_id: str = Field(description="Agent identity")
    workspace_id: str | None = WORKSPACE
    scope: str | None = Field(None, description="Filter by scope")
    tags: list[str] | None = Field(None, description="Filter by tags (intersection)")
    limit: int = Field(20, ge=1, le=100, description="Results per page (1-100)")
    offset: int = Field(0, ge=0, description="Pagination offset")
    status: list[str] | None = STATUS
    kind: Kind | None = Field(None, description="Filter by kind")


class UpdateArgs(ToolArgs):
    record_id: str = Field(description="Record ID to update")
    workspace_id: str | None = WORKSPACE
    content: str | None = Field(None, description="New content (triggers re-embedding)")
    tags: list[str] | None = Field(None, description="Replace tags")
    importance_score: float | None = Field(None, ge=0.0, le=1.0, description="New importance (0.0-1.0)")
    kind: Kind | None = Field(None, description="New kind")


class ReviewListArgs(ToolArgs):
    workspace_id: str | None = WORKSPACE
    reason: str | None = Field(
        None, description="Filter: possible_duplicate / possible_contradiction / low_confidence_decision"
    )
    record_id: str | None = Field(None, description="Filter to review entries for a specific memory record")
    limit: int = Field(20, ge=1, le=100, description="Page size (1-100)")
    offset: int = Field(0, ge=0, description="Pagination offset")


class ReviewResolveArgs(ToolArgs):
    review_id: str = Field(description="Review entry id")
    workspace_id: str | None = WORKSPACE
    action: str = Field(description="keep / archive / merge_into:<record_id> / discard")
    notes: str | None = Field(None, description="Free-form audit note (capped at 1024 chars)")


def memory_tools(service: MemoryService) -> list[Tool[Caller]]:
    def store(caller: Caller, a: StoreArgs) -> dict[str, Any]:
        return service.store_record(
            caller.principal, workspace_id=a.workspace_id, content=a.content, agent_id=a.agent_id,
            scope=a.scope, tags=a.tags, importance_score=a.importance_score, source_type=a.source_type,
            session_id=a.session_id, kind=a.kind, metadata=a.metadata,
        )  # fmt: skip

    def search(caller: Caller, a: SearchArgs) -> dict[str, Any]:
        return service.search(
            caller.principal, workspace_id=a.workspace_id, query=a.query, agent_id=a.agent_id, scope=a.scope,
            tags=a.tags, session_id=a.session_id, top_k=a.top_k, status=a.status, kind=a.kind,
        )  # fmt: skip

    def delete(caller: Caller, a: DeleteArgs) -> dict[str, Any]:
        return service.delete(caller.principal, a.workspace_id, a.record_id)

    def batch_store(caller: Caller, a: BatchStoreArgs) -> dict[str, Any]:
        return service.batch_store(
            caller.principal, workspace_id=a.workspace_id, records=a.records, agent_id=a.agent_id,
            scope=a.scope, importance_score=a.importance_score, source_type=a.source_type,
            session_id=a.session_id, kind=a.kind,
        )  # fmt: skip

    def list_(caller: Caller, a: ListArgs) -> dict[str, Any]:
        return service.list_records(
            caller.principal, workspace_id=a.workspace_id, agent_id=a.agent_id, scope=a.scope, tags=a.tags,
            limit=a.limit, offset=a.offset, status=a.status, kind=a.kind,
        )  # fmt: skip

    def update(caller: Caller, a: UpdateArgs) -> dict[str, Any]:
        return service.update(
            caller.principal, workspace_id=a.workspace_id, record_id=a.record_id, content=a.content,
            tags=a.tags, importance_score=a.importance_score, kind=a.kind,
        )  # fmt: skip

    def review_list(caller: Caller, a: ReviewListArgs) -> dict[str, Any]:
        return service.review_list(caller.principal, a.workspace_id, a.reason, a.record_id, a.limit, a.offset)

    def review_resolve(caller: Caller, a: ReviewResolveArgs) -> dict[str, Any]:
        return service.review_resolve(caller.principal, a.workspace_id, a.review_id, a.action, a.notes)

    specs: list[tuple[str, str, type[ToolArgs], Any, bool]] = [
        (
            "memory_store",
            "Persist an agent memory record; deduplicates by content hash.",
            StoreArgs,
            store,
            False,
        ),
        (
            "memory_search",
            "Hybrid search over agent memory: dense + keyword first stage, entity graph and session recency. "
            "score = 0.6*dense_score + 0.3*graph_score + 0.1*session_boost.",
            SearchArgs,
            search,
            True,
        ),
        ("memory_delete", "Delete a persistent (non-session) memory record.", DeleteArgs, delete, False),
        (
            "memory_batch_store",
            "Persist up to 100 memory records in order; one bad record never aborts the batch.",
            BatchStoreArgs,
            batch_store,
            False,
        ),
        ("memory_list", "Enumerate an agent's memory records with honest pagination.", ListArgs, list_, True),
        (
            "memory_update",
            "Update a memory record in place; only the fields passed change.",
            UpdateArgs,
            update,
            False,
        ),
        (
            "memory_review_list",
            "Pending memory review-queue entries (possible duplicates, contradictions, low-confidence decisions).",
            ReviewListArgs,
            review_list,
            True,
        ),
        (
            "memory_review_resolve",
            "Resolve one review entry: keep, archive, merge_into:<record_id> or discard (soft; nothing is deleted).",
            ReviewResolveArgs,
            review_resolve,
            False,
        ),
    ]
    tools = [Tool(name, text, args, handler, read_only) for name, text, args, handler, read_only in specs]
    # The upstream product's own clients and guides call the same tools by these names.
    aliases = [
        Tool("metronix_" + t.name, t.description + f" (alias of {t.name})", t.args, t.handler, t.read_only)
        for t in tools
    ]
    return tools + aliases
