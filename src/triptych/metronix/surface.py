"""Assembles the Metronix surface: its store, services and MCP server, from settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server import Server
from starlette.routing import Route

from triptych.config import Settings
from triptych.core.embed import Embedder, build_embedder
from triptych.core.http import McpEndpoint, jwt_authenticator
from triptych.core.mcp import Tool, build_server
from triptych.core.surface import Mounted, Shared
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.store import SqliteKnowledgeStore
from triptych.metronix.tools import knowledge_tools, render_error

INSTRUCTIONS = (
    "Metronix: a knowledge base and agent memory. Use metronix_search_fast for passages, metronix_get for a "
    "whole document, metronix_store to index one. Always pass workspace_id explicitly."
)


@dataclass
class Metronix:
    settings: Settings
    embedder: Embedder
    knowledge: KnowledgeService

    @classmethod
    def open(cls, settings: Settings, embedder: Embedder | None = None) -> Metronix:
        embedder = embedder or build_embedder(
            settings.embed_url, settings.embed_model, settings.embed_api_key, settings.embed_threads
        )
        store = SqliteKnowledgeStore(settings.metronix_db, embedder.dim)
        knowledge = KnowledgeService(
            store, embedder, default_workspace=settings.default_workspace, chunk_tokens=settings.chunk_tokens
        )
        return cls(settings, embedder, knowledge)

    def tools(self) -> list[Tool]:
        return knowledge_tools(self.knowledge)

    def mcp_server(self, stdio_agent_id: str | None = None) -> Server[Any]:
        return build_server("metronix", self.tools(), render_error, INSTRUCTIONS, stdio_agent_id)

    def close(self) -> None:
        self.knowledge.store.close()


def mount(shared: Shared) -> tuple[Metronix, Mounted]:
    metronix = Metronix.open(shared.settings, shared.embedder)
    endpoint = McpEndpoint(metronix.mcp_server(), shared.settings, jwt_authenticator(shared.settings))
    warm = getattr(metronix.embedder, "warm_up", None)
    # Route, not Mount: a Mount answers POST /mcp with a redirect to /mcp/.
    return metronix, Mounted(
        routes=[Route("/mcp", endpoint=endpoint)],
        endpoints=[endpoint],
        on_startup=[warm] if warm is not None else [],
        on_close=[metronix.close],
    )
