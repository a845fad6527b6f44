"""Builds the ASGI app: each surface mounts its MCP endpoints and routes over one set of shared resources."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from triptych import __version__
from triptych.config import Settings
from triptych.core.embed import Embedder
from triptych.core.lastresort import LastResort
from triptych.core.surface import Mounted, Shared
from triptych.hadron import surface as hadron
from triptych.metergraph import surface as metergraph
from triptych.metronix import surface as metronix

log = logging.getLogger(__name__)


def create_app(settings: Settings, embedder: Embedder | None = None) -> Starlette:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    shared = Shared(settings, embedder)
    _, metronix_mounted = metronix.mount(shared)
    surfaces: list[Mounted] = [metronix_mounted, hadron.mount(shared), metergraph.mount(shared)]
    ready = {"value": False}

    async def health(request: Request) -> Response:
        if not ready["value"]:
            return JSONResponse({"status": "starting"}, status_code=503)
        body = {"status": "ok", "version": __version__, "embedding_model": shared.embedder.name}
        return JSONResponse({**body, "auth": settings.auth_enabled})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Starlette does not run a mounted app's lifespan: every session manager is entered here.
        async with contextlib.AsyncExitStack() as stack:
            for surface in surfaces:
                for endpoint in surface.endpoints:
                    await stack.enter_async_context(endpoint.manager.run())
                for start in surface.on_startup:
                    start()
            ready["value"] = True
            log.info("triptych %s ready, data in %s", __version__, settings.data_dir)
            try:
                yield
            finally:
                ready["value"] = False
                for surface in surfaces:
                    for close in surface.on_close:
                        close()

    routes: list[BaseRoute] = [route for surface in surfaces for route in surface.routes]
    routes.append(Route("/health", health, methods=["GET"]))
    shapes = {prefix: body for surface in surfaces for prefix, body in surface.error_shapes.items()}
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(LastResort, shapes=shapes)])
