"""Builds the ASGI app: the three MCP endpoints, REST routes and health, over one set of services."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from triptych import __version__
from triptych.config import Settings
from triptych.core.embed import Embedder
from triptych.core.http import McpEndpoint, jwt_authenticator
from triptych.hadron import surface as hadron
from triptych.metergraph import surface as metergraph
from triptych.metronix.surface import Metronix

log = logging.getLogger(__name__)


def create_app(settings: Settings, embedder: Embedder | None = None) -> Starlette:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    metronix = Metronix.open(settings, embedder)
    authenticate = jwt_authenticator(settings)
    endpoints = {
        "/mcp": McpEndpoint(metronix.mcp_server(), settings, authenticate),
        "/hadron/mcp": McpEndpoint(hadron.mcp_server(), settings, authenticate),
        "/v1/agent/mcp": McpEndpoint(
            metergraph.mcp_server(),
            settings,
            authenticate,
            stateless=True,
            json_response=True,
            max_body=metergraph.MAX_BODY,
        ),
    }
    ready = {"value": False}

    async def health(request: Request) -> Response:
        if not ready["value"]:
            return JSONResponse({"status": "starting"}, status_code=503)
        return JSONResponse(
            {
                "status": "ok",
                "version": __version__,
                "embedding_model": metronix.embedder.name,
                "auth": settings.auth_enabled,
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Starlette does not run a mounted app's lifespan: every session manager is entered here.
        async with contextlib.AsyncExitStack() as stack:
            for endpoint in endpoints.values():
                await stack.enter_async_context(endpoint.manager.run())
            warm = getattr(metronix.embedder, "warm_up", None)
            if warm is not None:
                warm()
            ready["value"] = True
            log.info("triptych %s ready, data in %s", __version__, settings.data_dir)
            try:
                yield
            finally:
                ready["value"] = False
                metronix.close()

    # Route, not Mount: a Mount answers POST /mcp with a redirect to /mcp/.
    routes = [Route(path, endpoint=endpoint) for path, endpoint in endpoints.items()]
    routes.append(Route("/health", health, methods=["GET"]))
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.metronix = metronix
    return app
