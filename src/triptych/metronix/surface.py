"""Assembles the Metronix surface: its store, services and MCP server, from settings."""

from __future__ import annotations

import gc
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from mcp.server import Server
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from triptych.core.config import Settings
from triptych.core.embed import Embedder, build_embedder
from triptych.core.http import McpEndpoint
from triptych.core.lastresort import jsonrpc_internal_error
from triptych.core.mcp import Tool, build_server, register
from triptych.core.mcp_sources import sources_path
from triptych.core.partitions import STOP_WAIT
from triptych.core.pg import PgDatabase
from triptych.core.surface import Mounted, Shared
from triptych.metronix.access import Caller, caller_bind, jwt_authenticator
from triptych.metronix.answer import AnswerService, LlmClient
from triptych.metronix.errors import BY_KIND, error_body, render_error
from triptych.metronix.knowledge import MAX_REQUEST_BYTES, KnowledgeService
from triptych.metronix.memory import MemoryService, MemorySettings
from triptych.metronix.memory_store import MemoryStore, PostgresMemoryStore, SqliteMemoryStore
from triptych.metronix.memory_tools import MEMORY_TOOLS
from triptych.metronix.openai_api import OPENAI_PATHS, answer_routes, openai_internal_error
from triptych.metronix.pg_store import PostgresKnowledgeStore
from triptych.metronix.rest import memory_routes
from triptych.metronix.store import KnowledgeStore, SqliteKnowledgeStore, utcnow, vectors_dir
from triptych.metronix.sync import SyncService
from triptych.metronix.tools import KNOWLEDGE_TOOLS, SYNC_TOOLS

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Metronix: a knowledge base and agent memory. Use metronix_search_fast for passages, metronix_get for a "
    "whole document, metronix_store to index one. Always pass workspace_id explicitly."
)


@dataclass
class Metronix:
    settings: Settings
    embedder: Embedder
    knowledge: KnowledgeService
    memory: MemoryService
    sync: SyncService
    answers: AnswerService
    # The background warm-up reads the database; ``close`` waits for it before closing the connections.
    warming: threading.Thread | None = field(default=None, repr=False)
    # Server mode's database: its lease makes the start-up jobs run in one worker at a time.
    pg: PgDatabase | None = field(default=None, repr=False)

    @classmethod
    def open(cls, settings: Settings, embedder: Embedder | None = None) -> Metronix:
        embedder = embedder or build_embedder(
            settings.embed_url,
            settings.embed_model,
            settings.embed_api_key,
            settings.embed_threads,
            settings.embed_bulk_threads,
        )
        store: KnowledgeStore
        memory_store: MemoryStore
        pg: PgDatabase | None = None
        if settings.database_url:
            # Server mode: the knowledge base and agent memory in PostgreSQL, shared by every worker.
            pg = PgDatabase(settings.database_url)
            store = PostgresKnowledgeStore(pg, embedder.dim, saved=vectors_dir(settings.metronix_db))
            memory_store = PostgresMemoryStore(pg, embedder.dim)
        else:
            sqlite_store = SqliteKnowledgeStore(settings.metronix_db, embedder.dim)
            store, memory_store = sqlite_store, SqliteMemoryStore(sqlite_store.db, embedder.dim)
        knowledge = KnowledgeService(
            store, embedder, default_workspace=settings.default_workspace, chunk_tokens=settings.chunk_tokens
        )
        memory_settings = MemorySettings(
            session_ttl=settings.memory_session_ttl,
            dense_weight=settings.memory_dense_weight,
            graph_weight=settings.memory_graph_weight,
            session_weight=settings.memory_session_weight,
            reconciler_threshold=settings.reconciler_threshold,
            decision_threshold=settings.decision_threshold,
        )
        memory = MemoryService(memory_store, embedder, memory_settings, settings.default_workspace)
        sources = sources_path(settings.data_dir, settings.mcp_sources)
        sync = SyncService(knowledge, sources, settings.sync_timeout)
        llm = (
            LlmClient(
                settings.llm_url, settings.llm_model or "default", settings.llm_api_key, settings.llm_timeout
            )
            if settings.llm_url
            else None
        )
        return cls(settings, embedder, knowledge, memory, sync, AnswerService(knowledge, llm), pg=pg)

    def tools(self) -> list[Tool[Caller]]:
        return [
            *register(KNOWLEDGE_TOOLS, self.knowledge),
            *register(SYNC_TOOLS, self.sync),
            *register(MEMORY_TOOLS, self.memory),
        ]

    def start(self) -> None:
        """Warm the model and finish any freshness check a crash interrupted."""
        warm = getattr(self.embedder, "warm_up", None)
        if warm is not None:
            warm()
        if self.pg is None:
            self._recover()
        else:
            # Workers starting together: one recovers, the others find the lease taken and go on (the
            # lease holder files every queued check; a filing is unique, so a check a live worker has
            # in flight and the holder runs again is still filed once).
            with self.pg.lease("metronix-start-jobs") as mine:
                if mine:
                    self._recover()
                else:
                    log.info("another worker runs the start-up jobs (freshness checks, expiry)")
        # Load every workspace's memory and knowledge-base indexes off the request path: at 100,000
        # records the first search would otherwise wait seconds for them.
        self.warming = threading.Thread(target=self._warm, name="memory-index-warm", daemon=True)
        self.warming.start()

    def _recover(self) -> None:
        self.memory.run_pending_checks()
        self.memory.store.purge_expired(utcnow())

    def _warm(self) -> None:
        self.memory.store.warm()
        self.knowledge.store.warm()
        # The caches just loaded are long-lived: at 10,000 records a full collection walked them for
        # 170-180 ms, once every few hundred calls. Frozen objects are skipped by the collector (and
        # still freed by reference counting when a cache is replaced).
        gc.freeze()

    def mcp_server(self, stdio_agent_id: str | None = None) -> Server[Any]:
        return build_server(
            "metronix",
            self.tools(),
            bind=caller_bind(stdio_agent_id),
            render_error=render_error,
            error_codes=BY_KIND,
            instructions=INSTRUCTIONS,
        )

    def close(self) -> None:
        """Stop the background work of every store and service, then close the database: the caches'
        loads and graph builds first (a warm-up still running then ends at its next load), the warm-up,
        the services' embedding threads, and last the store that owns the connections (decision 0420)."""
        self.memory.store.stop()
        self.knowledge.store.stop()
        if self.warming is not None:
            self.warming.join(STOP_WAIT)
            if self.warming.is_alive():
                log.warning("the index warm-up did not end within %.0f s of the close", STOP_WAIT)
        self.knowledge.close()
        self.memory.close()
        self.knowledge.store.close()


class StatelessEndpoint(McpEndpoint):
    """Server mode's ``/mcp``: no MCP sessions, so any worker answers any request of a client (a
    session lives in one process: a request that reached another worker got 404). Metronix's tools keep
    nothing per session. POST only: a GET would hold an idle stream open, and 405 tells clients there is
    none."""

    async def refuse(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> bool:
        if scope.get("method") == "POST":
            return False
        await Response("Method Not Allowed", status_code=405, headers={"Allow": "POST"})(scope, receive, send)
        return True


def mount(shared: Shared) -> tuple[Metronix, Mounted]:
    metronix = Metronix.open(shared.settings, shared.embedder)
    authenticate = jwt_authenticator(shared.settings)
    server_mode = shared.settings.database_url is not None
    endpoint = (StatelessEndpoint if server_mode else McpEndpoint)(
        metronix.mcp_server(),
        shared.settings,
        authenticate,
        stateless=server_mode,
        max_body=MAX_REQUEST_BYTES,
        render=lambda exc: {"error": error_body(exc)},
    )
    rest = memory_routes(metronix.memory, metronix.knowledge, authenticate, shared.settings.auth_enabled)
    # Route, not Mount: a Mount answers POST /mcp with a redirect to /mcp/.
    return metronix, Mounted(
        routes=[Route("/mcp", endpoint=endpoint), *rest, *answer_routes(metronix.answers, authenticate)],
        endpoints=[endpoint],
        on_startup=[metronix.start],
        on_close=[metronix.close],
        error_shapes={"/mcp": jsonrpc_internal_error(), **{p: openai_internal_error() for p in OPENAI_PATHS}},
        gauges=[
            (
                "triptych_metronix_freshness_queue",
                "Agent-memory writes whose freshness check (duplicates, contradictions) has not run yet",
                (),
                lambda: [((), float(metronix.memory.store.reviews.queued_checks()))],
            )
        ],
    )
