"""What a surface hands the app: its routes, the MCP endpoints whose session managers the app runs,
and what to do at startup and shutdown. Each surface builds this in its own ``surface.mount()``, so
``app.py`` never needs to know a surface's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.routing import BaseRoute

from triptych.core.config import Settings
from triptych.core.embed import Embedder, build_embedder
from triptych.core.metrics import Sample


class Runs(Protocol):
    def run(self) -> AbstractAsyncContextManager[None]: ...


class Endpoint(Protocol):
    """An MCP endpoint: the app enters its ``manager``'s ``run()`` (an SDK session manager's, or
    ``core.mcp_exchange.StatelessExchange``'s) for the app's lifetime."""

    @property
    def manager(self) -> Runs: ...


class Shared:
    """Resources several surfaces use, created once: the settings and the embedding model."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            s = self.settings
            self._embedder = build_embedder(
                s.embed_url, s.embed_model, s.embed_api_key, s.embed_threads, s.embed_bulk_threads
            )
        return self._embedder


@dataclass
class Mounted:
    routes: list[BaseRoute] = field(default_factory=list)
    endpoints: list[Endpoint] = field(default_factory=list)
    on_startup: list[Callable[[], None]] = field(default_factory=list)
    # What a close returns is not read: the lifespan names any thread still running itself (app.py).
    on_close: list[Callable[[], object]] = field(default_factory=list)
    # Path prefix -> the JSON body of an unexpected 500 at that door, in its contract's shape
    # (core/lastresort.py); paths no surface claims get the root INTERNAL_ERROR shape.
    error_shapes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Gauges for /metrics: (name, help, label names, sampler) as ``core.metrics.register_gauge`` takes them.
    gauges: list[tuple[str, str, Sequence[str], Sample]] = field(default_factory=list)
