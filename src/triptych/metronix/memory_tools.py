"""Metronix agent-memory MCP tools: the eight contract tools, each also under its ``metronix_memory_*`` name."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import Field, JsonValue

from triptych.core.bounds import MAX_OFFSET
from triptych.core.mcp import DeclaredTool, ToolArgs
from triptych.metronix.access import Caller, acting_agent, review_actor
from triptych.metronix.arguments import (
    REVIEW_ACTION,
    ReviewReason,
    Scope,
    StatusName,
    requested_workspace,
    status_field,
    workspace_field,
)
from triptych.metronix.memory import MAX_BATCH, MAX_TOP_K, MCP_DEFAULTS, MemoryService

Kind = Literal["fact", "preference", "pinned"]
MAX_LIMIT = MCP_DEFAULTS.max_list_limit
AGENT_ID = "Agent identity (1-64 of A-Z a-z 0-9 . _ -); equal to X-Agent-Id when the connection sends one"
SCOPE_FILTER = "Filter by scope (global, per_agent, session)"


class StoreArgs(ToolArgs):
    content: str = Field(description="Memory content")
    agent_id: str = Field(description=AGENT_ID)
    workspace_id: str | None = workspace_field()
    scope: Scope = Field("per_agent", description="global, per_agent or session")
    tags: list[str] = Field([], description="Tags for filtering")
    importance_score: float = Field(0.5, ge=0.0, le=1.0, description="Importance (0.0-1.0)")
    source_type: str = Field("", description="Free-form origin label")
    session_id: str | None = Field(None, description="Required when scope=session")
    kind: Kind | None = Field(None, description="fact (default), preference or pinned")
    metadata: dict[str, Any] | None = Field(None, description="Extra key-value metadata")


class SearchArgs(ToolArgs):
    query: str = Field(description="Natural language query")
    agent_id: str = Field(description=AGENT_ID)
    workspace_id: str | None = workspace_field()
    scope: Scope | None = Field(None, description=SCOPE_FILTER)
    tags: list[str] | None = Field(None, description="Filter by tags (intersection)")
    session_id: str | None = Field(None, description="Session ID for the session-boost signal")
    top_k: int = Field(5, ge=1, le=MAX_TOP_K, description=f"Results to return (1-{MAX_TOP_K})")
    status: list[StatusName] | None = status_field()
    kind: Kind | None = Field(None, description="Filter by kind")


class DeleteArgs(ToolArgs):
    record_id: str = Field(description="Record ID to delete")
    workspace_id: str | None = workspace_field()


# What one batch record is. Advertised, not checked by the model: the service checks each record, so one
# bad record gets its own error and never aborts the batch (the reference's rule).
BATCH_RECORD: dict[str, JsonValue] = {
    "type": "object",
    "properties": {
        "content": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        "metadata": {"type": "object"},
    },
    "required": ["content"],
}


class BatchStoreArgs(ToolArgs):
    records: list[Any] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=f"Array of {{content, tags?}} objects (max {MAX_BATCH})",
        json_schema_extra={"items": BATCH_RECORD},
    )
    agent_id: str = Field(description=AGENT_ID + " (same for all records)")
    workspace_id: str | None = workspace_field()
    scope: Scope = Field("per_agent", description="Scope for all records")
    importance_score: float = Field(0.5, ge=0.0, le=1.0, description="Importance for all records (0.0-1.0)")
    source_type: str = Field("", description="Origin label for all records")
    session_id: str | None = Field(None, description="Required when scope=session")
    kind: Kind | None = Field(None, description="Kind for all records")


class ListArgs(ToolArgs):
    agent_id: str = Field(description=AGENT_ID)
    workspace_id: str | None = workspace_field()
    scope: Scope | None = Field(None, description=SCOPE_FILTER)
    tags: list[str] | None = Field(None, description="Filter by tags (intersection)")
    limit: int = Field(20, ge=1, le=MAX_LIMIT, description=f"Results per page (1-{MAX_LIMIT})")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Pagination offset")
    status: list[StatusName] | None = status_field()
    kind: Kind | None = Field(None, description="Filter by kind")


class UpdateArgs(ToolArgs):
    record_id: str = Field(description="Record ID to update")
    workspace_id: str | None = workspace_field()
    content: str | None = Field(None, description="New content (triggers re-embedding)")
    tags: list[str] | None = Field(None, description="Replace tags")
    importance_score: float | None = Field(None, ge=0.0, le=1.0, description="New importance (0.0-1.0)")
    kind: Kind | None = Field(None, description="New kind")


class ReviewListArgs(ToolArgs):
    workspace_id: str | None = workspace_field()
    reason: ReviewReason | None = Field(
        None, description="Filter: possible_duplicate / possible_contradiction / low_confidence_decision"
    )
    record_id: str | None = Field(None, description="Filter to review entries for a specific memory record")
    limit: int = Field(20, ge=1, le=MAX_LIMIT, description=f"Page size (1-{MAX_LIMIT})")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Pagination offset")


class ReviewResolveArgs(ToolArgs):
    review_id: str = Field(description="Review entry id")
    workspace_id: str | None = workspace_field()
    action: str = Field(
        pattern=REVIEW_ACTION, description="keep / archive / merge_into:<record_id> / discard"
    )
    notes: str | None = Field(None, description="Free-form audit note (capped at 1024 chars)")


def store(service: MemoryService, caller: Caller, a: StoreArgs) -> dict[str, Any]:
    return service.store_record(
        caller.principal, workspace_id=requested_workspace(a), content=a.content, agent_id=acting_agent(caller, a.agent_id),
        scope=a.scope, tags=a.tags, importance_score=a.importance_score, source_type=a.source_type,
        session_id=a.session_id, kind=a.kind, metadata=a.metadata,
    )  # fmt: skip


def search(service: MemoryService, caller: Caller, a: SearchArgs) -> dict[str, Any]:
    return service.search(
        caller.principal, workspace_id=requested_workspace(a), query=a.query, agent_id=acting_agent(caller, a.agent_id), scope=a.scope,
        tags=a.tags, session_id=a.session_id, top_k=a.top_k, status=a.status, kind=a.kind,
    )  # fmt: skip


def delete(service: MemoryService, caller: Caller, a: DeleteArgs) -> dict[str, Any]:
    return service.delete(caller.principal, requested_workspace(a), a.record_id, caller.agent_id)


def batch_store(service: MemoryService, caller: Caller, a: BatchStoreArgs) -> dict[str, Any]:
    return service.batch_store(
        caller.principal, workspace_id=requested_workspace(a), records=a.records, agent_id=acting_agent(caller, a.agent_id),
        scope=a.scope, importance_score=a.importance_score, source_type=a.source_type,
        session_id=a.session_id, kind=a.kind,
    )  # fmt: skip


def list_(service: MemoryService, caller: Caller, a: ListArgs) -> dict[str, Any]:
    return service.list_records(
        caller.principal, workspace_id=requested_workspace(a), agent_id=acting_agent(caller, a.agent_id), scope=a.scope, tags=a.tags,
        limit=a.limit, offset=a.offset, status=a.status, kind=a.kind,
    )  # fmt: skip


def update(service: MemoryService, caller: Caller, a: UpdateArgs) -> dict[str, Any]:
    return service.update(
        caller.principal, workspace_id=requested_workspace(a), record_id=a.record_id, content=a.content,
        tags=a.tags, importance_score=a.importance_score, kind=a.kind, caller_agent=caller.agent_id,
    )  # fmt: skip


def review_list(service: MemoryService, caller: Caller, a: ReviewListArgs) -> dict[str, Any]:
    return service.review_list(
        caller.principal, requested_workspace(a), a.reason, a.record_id, a.limit, a.offset
    )


def review_resolve(service: MemoryService, caller: Caller, a: ReviewResolveArgs) -> dict[str, Any]:
    return service.review_resolve(
        caller.principal, requested_workspace(a), a.review_id, a.action, a.notes, review_actor(caller)
    )


MemoryTool = DeclaredTool[MemoryService, Caller]
STORE = DeclaredTool(
    "memory_store", "Persist an agent memory record; deduplicates by content hash.", StoreArgs, store, False
)
SEARCH = DeclaredTool(
    "memory_search",
    "Hybrid search over agent memory: dense + keyword first stage, entity graph and session recency. "
    "score = 0.6*dense_score + 0.3*graph_score + 0.1*session_boost.",
    SearchArgs,
    search,
)
DELETE = DeclaredTool(
    "memory_delete", "Delete a persistent (non-session) memory record.", DeleteArgs, delete, False
)
BATCH_STORE = DeclaredTool(
    "memory_batch_store",
    "Persist up to 100 memory records in order; one bad record never aborts the batch.",
    BatchStoreArgs,
    batch_store,
    False,
)
LIST = DeclaredTool(
    "memory_list", "Enumerate an agent's memory records with honest pagination.", ListArgs, list_
)
UPDATE = DeclaredTool(
    "memory_update",
    "Update a memory record in place; only the fields passed change.",
    UpdateArgs,
    update,
    False,
)
REVIEW_LIST = DeclaredTool(
    "memory_review_list",
    "Pending memory review-queue entries (possible duplicates, contradictions, low-confidence decisions).",
    ReviewListArgs,
    review_list,
)
REVIEW_RESOLVE = DeclaredTool(
    "memory_review_resolve",
    "Resolve one review entry: keep, archive, merge_into:<record_id> or discard (soft; nothing is deleted).",
    ReviewResolveArgs,
    review_resolve,
    False,
)
CONTRACT_TOOLS: list[MemoryTool] = [
    STORE,
    SEARCH,
    DELETE,
    BATCH_STORE,
    LIST,
    UPDATE,
    REVIEW_LIST,
    REVIEW_RESOLVE,
]
# The upstream product's own clients and guides call the same tools by these names.
ALIASES = [
    replace(t, name="metronix_" + t.name, description=t.description + f" (alias of {t.name})")
    for t in CONTRACT_TOOLS
]
# The agent-memory tools, registered with the surface's ``MemoryService``.
MEMORY_TOOLS: list[MemoryTool] = CONTRACT_TOOLS + ALIASES
