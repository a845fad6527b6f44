"""Assembles the Hadron surface: its database, access policy, services, tools and the endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server import Server
from starlette.routing import Route

from triptych.config import Settings
from triptych.core.db import Database
from triptych.core.embed import Embedder
from triptych.core.surface import Mounted, Shared
from triptych.hadron.access import AccessPolicy
from triptych.hadron.errors import render_error
from triptych.hadron.identity import authenticator
from triptych.hadron.search_store import SqliteSearchStore
from triptych.hadron.server import HadronEndpoint, build_server
from triptych.hadron.services.embedding import NodeEmbedder
from triptych.hadron.services.nodes import NodeService
from triptych.hadron.services.objects import ObjectService
from triptych.hadron.services.scopes import ScopeService
from triptych.hadron.services.search import SearchService
from triptych.hadron.services.selection import SelectionService
from triptych.hadron.services.tenancy import TenancyAdmin
from triptych.hadron.services.validate import ValidateService
from triptych.hadron.store import SqliteGraphStore, SqliteTenancyStore, open_database
from triptych.hadron.tools.apps import app_tools
from triptych.hadron.tools.base import Ctx, Tool
from triptych.hadron.tools.edges import edge_tools
from triptych.hadron.tools.memories import memory_tools
from triptych.hadron.tools.nodes import node_tools
from triptych.hadron.tools.objects import object_tools
from triptych.hadron.tools.scopes import scope_tools
from triptych.hadron.tools.search import search_tools
from triptych.hadron.tools.server_info import server_info_tools
from triptych.hadron.tools.validate import validate_tools

__all__ = ["Hadron", "mount", "render_error"]

INSTRUCTIONS = (
    "Hadron graph memory. Call hadron_list_memories to see where you can read and write, bind one with "
    "hadron_set_active_memory, then read and write nodes by loc. hadron_find_nodes searches under the search "
    "ladder and says what it searched in its first line. Send a stable X-Hadron-Client-Id header "
    "to keep selections across reconnects; hadron_server_info says what this build can do."
)


def database_path(settings: Settings) -> Path:
    return settings.data_dir / "hadron.db"


@dataclass
class Hadron:
    db: Database
    tenancy: SqliteTenancyStore
    graph: SqliteGraphStore
    access: AccessPolicy
    selections: SelectionService
    nodes: NodeService
    objects: ObjectService
    validator: ValidateService
    scopes: ScopeService
    search: SearchService
    embedder: NodeEmbedder

    @classmethod
    def open(cls, path: Path, embedder: Embedder | None = None) -> Hadron:
        """The surface over ``hadron.db``; without an embedder nodes are not embedded (admin, tests)."""
        db = open_database(path)
        tenancy = SqliteTenancyStore(db)
        access = AccessPolicy(tenancy)
        graph = SqliteGraphStore(db)
        selections = SelectionService(tenancy, access)
        nodes = NodeService(tenancy, graph, access, selections)
        store = SqliteSearchStore(db, embedder.dim if embedder else None, embedder.name if embedder else None)
        node_embedder = NodeEmbedder(store, embedder)
        nodes.embedder = node_embedder
        scopes = ScopeService(tenancy, access, selections, store)
        return cls(
            db,
            tenancy,
            graph,
            access,
            selections,
            nodes,
            ObjectService(graph, access, nodes),
            ValidateService(tenancy, graph, access),
            scopes,
            SearchService(tenancy, access, nodes, scopes, store, node_embedder),
            node_embedder,
        )

    def admin(self) -> TenancyAdmin:
        return TenancyAdmin(self.tenancy)

    def tools(self) -> list[Tool[Ctx]]:
        return [
            *memory_tools(self.access, self.selections),
            *app_tools(self.access, self.selections),
            *server_info_tools(self.selections),
            *node_tools(self.nodes),
            *edge_tools(self.nodes),
            *object_tools(self.objects),
            *validate_tools(self.validator),
            *search_tools(self.search),
            *scope_tools(self.scopes),
        ]

    def mcp_server(self) -> Server[Any]:
        return build_server(self.tools(), self.selections, INSTRUCTIONS)

    def close(self) -> None:
        self.db.close()


def mount(shared: Shared) -> Mounted:
    settings = shared.settings
    hadron = Hadron.open(database_path(settings), shared.embedder)
    endpoint = HadronEndpoint(
        hadron.mcp_server(), settings, authenticator(settings, hadron.tenancy), hadron.selections
    )
    return Mounted(
        routes=[Route("/hadron/mcp", endpoint=endpoint)], endpoints=[endpoint], on_close=[hadron.close]
    )
