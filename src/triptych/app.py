"""Builds the ASGI app: each surface mounts its MCP endpoints and routes over one set of shared resources."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from triptych import __version__
from triptych.core.config import Settings
from triptych.core.embed import Embedder
from triptych.core.lastresort import LastResort
from triptych.core.metrics import GaugeSampler, metrics_endpoint, observe_evictions, register_gauge
from triptych.core.partitions import BUDGET
from triptych.core.pg import pool_use
from triptych.core.request_context import RequestContext
from triptych.core.search import BUILDS
from triptych.core.surface import Mounted, Shared
from triptych.hadron import surface as hadron
from triptych.metergraph import surface as metergraph
from triptych.metronix import surface as metronix

log = logging.getLogger(__name__)


def create_app(settings: Settings, embedder: Embedder | None = None) -> Starlette:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    BUDGET.configure(settings.index_memory_mb)
    BUDGET.on_evict = observe_evictions
    shared = Shared(settings, embedder)
    _, metronix_mounted = metronix.mount(shared)
    named: dict[str, Mounted] = {
        "metronix": metronix_mounted,
        "hadron": hadron.mount(shared),
        "metergraph": metergraph.mount(shared),
    }
    surfaces = list(named.values())
    sampler = GaugeSampler()
    register_gauge(
        "triptych_index_builds_in_progress", "Vector graphs (HNSW) being built in the background", (),
        lambda: [((), float(BUILDS.count))],
    )  # fmt: skip
    register_gauge(
        "triptych_index_resident_bytes", "Memory held by in-process index partitions, by index (an estimate)",
        ("index",), lambda: [((kind,), float(b)) for kind, (b, _) in _resident().items()],
    )  # fmt: skip
    register_gauge(
        "triptych_index_resident_partitions", "In-process index partitions (workspaces, memories) held, by index",
        ("index",), lambda: [((kind,), float(n)) for kind, (_, n) in _resident().items()],
    )  # fmt: skip
    register_gauge(
        "triptych_index_memory_budget_bytes", "TRIPTYCH_INDEX_MEMORY_MB in bytes (0: no limit)", (),
        lambda: [((), float(BUDGET.limit or 0))],
    )  # fmt: skip
    register_gauge(
        "triptych_db_pool_connections", "PostgreSQL pool connections (size, idle) and requests waiting for one",
        ("state",), pool_use,
    )  # fmt: skip
    for surface in surfaces:
        for gauge in surface.gauges:
            register_gauge(*gauge)
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
            sampler.start()
            ready["value"] = True
            log.info("triptych %s ready, data in %s", __version__, settings.data_dir)
            try:
                yield
            finally:
                ready["value"] = False
                sampler.stop()
                for surface in surfaces:
                    for close in surface.on_close:
                        close()
                left = lingering_threads()
                if left:  # each owner stops and joins what it started (decision 0420): name any it missed
                    log.warning("threads still running after the surfaces closed: %s", ", ".join(left))
                else:
                    log.info("surfaces closed, no background thread left")

    routes: list[BaseRoute] = [route for surface in surfaces for route in surface.routes]
    routes.append(Route("/health", health, methods=["GET"]))
    routes.append(Route("/metrics", metrics_endpoint(settings.metrics_token), methods=["GET"]))
    shapes = {prefix: body for surface in surfaces for prefix, body in surface.error_shapes.items()}
    # Each request is labelled with the surface whose route it reached (the static part of the path).
    doors = [(_static_prefix(route), name) for name, surface in named.items() for route in surface.routes]
    middleware = [Middleware(RequestContext, doors=doors), Middleware(LastResort, shapes=shapes)]
    return Starlette(routes=routes, lifespan=lifespan, middleware=middleware)


# The server's own pools, which it stops after the lifespan ends: AnyIO's worker threads (synchronous
# handlers) and the event loop's default executor.
SERVER_THREADS = ("AnyIO worker thread", "asyncio_")


def lingering_threads() -> list[str]:
    """The names of the threads alive besides this one, the main thread and the server's own pools."""
    mine = (threading.current_thread(), threading.main_thread())
    return sorted(
        t.name for t in threading.enumerate() if t not in mine and not t.name.startswith(SERVER_THREADS)
    )


def _resident() -> dict[str, tuple[int, int]]:
    """Bytes and partitions per index kind, with both kinds present (a gauge at 0 rather than missing)."""
    return {"vectors": (0, 0), "keywords": (0, 0), **BUDGET.resident()}


def _static_prefix(route: BaseRoute) -> str:
    path = str(getattr(route, "path", ""))
    return path.split("{", 1)[0].rstrip("/") or "/"
