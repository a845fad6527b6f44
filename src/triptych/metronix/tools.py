"""Metronix knowledge-base and sync MCP tools, declared at module level: argument models (the contract as\ndata) and thin adapters onto the services; the surface registers them with its services."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from triptych.core.mcp import DeclaredTool, ToolArgs
from triptych.metronix.access import Caller
from triptych.metronix.arguments import requested_workspace, workspace_field
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.sync import SyncService


class SearchFastArgs(ToolArgs):
    query: str = Field(description="Natural language query or keyword")
    workspace_id: str | None = workspace_field()
    top_k: int = Field(10, ge=1, le=50, description="Results to return (1-50)")


class GetArgs(ToolArgs):
    doc_label: str = Field(description="Document label (e.g. jira:MTRNIX-303, confluence:12345)")
    workspace_id: str | None = workspace_field("Workspace containing the document")


class StoreArgs(ToolArgs):
    content: str = Field(description="Document content")
    title: str | None = Field(None, description="Document title")
    workspace_id: str | None = workspace_field()
    doc_label: str | None = Field(None, description="Unique identifier (MEM-{hex} if omitted)")
    metadata: dict[str, Any] | None = Field(
        None, description="Additional key-value metadata (url, date, ...)"
    )


class StatusArgs(ToolArgs):
    workspace_id: str | None = workspace_field("Workspace to check")


def search_fast(service: KnowledgeService, caller: Caller, args: SearchFastArgs) -> dict[str, Any]:
    return service.search(caller.principal, requested_workspace(args), args.query, args.top_k)


def get(service: KnowledgeService, caller: Caller, args: GetArgs) -> dict[str, Any]:
    return service.get(caller.principal, requested_workspace(args), args.doc_label)


def store(service: KnowledgeService, caller: Caller, args: StoreArgs) -> dict[str, Any]:
    result = service.store_document(
        caller.principal, requested_workspace(args), args.content, args.title, args.doc_label, args.metadata
    )
    return {"success": True, "doc_label": result.doc_label, "chunks_stored": result.chunks_stored}


def status(service: KnowledgeService, caller: Caller, args: StatusArgs) -> dict[str, Any]:
    return service.status(caller.principal, requested_workspace(args))


SEARCH_FAST = DeclaredTool(
    "metronix_search_fast",
    "Low-latency hybrid search (BM25 + dense vectors, fused) over the knowledge base. Returns raw "
    "document chunks without LLM synthesis; use it as the default search tool.",
    SearchFastArgs,
    search_fast,
)
GET = DeclaredTool(
    "metronix_get",
    "Retrieve a specific document by its unique label (get doc_label values from metronix_search_fast).",
    GetArgs,
    get,
)
STORE = DeclaredTool(
    "metronix_store",
    "Index a new document into the knowledge base "
    "(chunking, embedding, vector and keyword indexing). "
    "Storing an existing doc_label replaces that document atomically.",
    StoreArgs,
    store,
    read_only=False,
)
STATUS = DeclaredTool(
    "metronix_status", "Workspace health check and document statistics.", StatusArgs, status
)
# The knowledge-base tools, registered with the surface's ``KnowledgeService``.
KNOWLEDGE_TOOLS: list[DeclaredTool[KnowledgeService, Caller]] = [SEARCH_FAST, GET, STORE, STATUS]


class SyncArgs(ToolArgs):
    source: str | None = Field(None, description="Specific MCP server name (syncs all if omitted)")
    workspace_id: str | None = workspace_field()
    force_full: bool = Field(False, description="Force full sync, skip change detection")


async def sync(service: SyncService, caller: Caller, args: SyncArgs) -> dict[str, Any]:
    return await service.sync(caller.principal, requested_workspace(args), args.source, args.force_full)


SYNC = DeclaredTool(
    "metronix_sync",
    "Sync documents from the MCP sources registered in .metronix/mcp_servers.json: each resource "
    "becomes the document mcp:<source>:<uri>; unchanged ones are skipped, vanished ones removed.",
    SyncArgs,
    sync,
    read_only=False,
)
SYNC_TOOLS: list[DeclaredTool[SyncService, Caller]] = [SYNC]
