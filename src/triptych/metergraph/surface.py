"""Assembles the Metergraph surface: store and services, the stateless MCP endpoint, ingest, OTLP,
the Agent Access REST mirrors and ``/healthz``.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.routing import Route

from triptych.core.lastresort import jsonrpc_internal_error
from triptych.core.metrics import Sample
from triptych.core.surface import Mounted, Shared
from triptych.metergraph.errors import internal_error_document
from triptych.metergraph.import_sync_rest import import_sync_routes
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.links import AppLinks, public_base
from triptych.metergraph.mcp_http import StatelessEndpoint, build_mcp_server
from triptych.metergraph.pages.routes import page_routes
from triptych.metergraph.replay_rest import replay_routes
from triptych.metergraph.report_rest import report_routes
from triptych.metergraph.rest import (
    agent_principal,
    agent_routes,
    health_route,
    ingest_routes,
    unknown_agent_path,
)
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings
from triptych.metergraph.sqlite_call_store import SqliteCallStore

# Metergraph's stateless endpoint refuses bodies over 1 MiB.
MAX_BODY = 1024 * 1024


def open_metergraph(shared: Shared) -> Metergraph:
    # Ingest needs an app token and reads an agent key (or static MG_* tokens), whatever TRIPTYCH_AUTH_ENABLED.
    mg_settings = load_metergraph_settings()
    links = AppLinks(public_base(mg_settings.public_url, shared.settings.host, shared.settings.port))
    # Analysis runs score with the shared embedding model, loaded the first time a run needs it.
    mg = Metergraph.open(
        shared.settings.data_dir,
        mg_settings,
        embedder=lambda: shared.embedder,
        links=links,
        database_url=shared.settings.database_url,
    )
    if mg.columns is not None:
        mg.columns.start()  # the server keeps the metadata projection caught up in the background
    if isinstance(mg.calls, SqliteCallStore):
        mg.calls.folder.start()  # and folds ingested calls into the rollups soon after they commit
    mg.incidents.start()  # and sweeps the incident detectors over the workspaces that received calls
    mg.webhooks.start()  # and posts their events to the workspaces' webhooks (pending ones first)
    # Runs a stopped server left queued or running can never finish (their thread is gone).
    mg.analysis.fail_abandoned()
    return mg


def mount(shared: Shared) -> Mounted:
    mg = open_metergraph(shared)

    def authenticate(request: Request) -> AgentPrincipal:
        return agent_principal(mg, request)

    settings = shared.settings
    endpoint = StatelessEndpoint(build_mcp_server(mg.tools), settings, authenticate, MAX_BODY)
    routes = [
        # Route, not Mount: the exact path only; the trailing-slash path is a 404.
        Route("/v1/agent/mcp", endpoint, methods=["GET", "POST", "DELETE"]),
        *ingest_routes(mg),
        *import_sync_routes(mg),
        *agent_routes(mg),
        *replay_routes(mg),
        *report_routes(mg),
        health_route(),
        *page_routes(mg, settings.data_dir),  # the app pages app links open (/app/...)
        # Last: every other /v1/agent path (the trailing-slash forms too) is the contract's 404 document.
        unknown_agent_path(),
    ]
    document = internal_error_document()
    shapes = {"/v1/agent/mcp": jsonrpc_internal_error(), "/v1": document, "/healthz": document}
    gauges: list[tuple[str, str, Sequence[str], Sample]] = []
    if isinstance(mg.calls, SqliteCallStore):
        folder = mg.calls.folder
        gauges.append(
            (
                "triptych_metergraph_rollup_fold_pending",
                "Ingested calls this worker has not yet folded into the embedded engine's rollups",
                (),
                lambda: [((), float(folder.pending))],
            )
        )
    return Mounted(
        routes=routes, endpoints=[endpoint], on_close=[mg.close], error_shapes=shapes, gauges=gauges
    )
