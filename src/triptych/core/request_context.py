"""Who asked, through which door, and how it went: the request id and the request middleware.

Every HTTP request gets an id: the client's ``X-Request-Id`` when it sends a usable one (up to 128 letters,
digits and ``.:_-``), a new one otherwise. It comes back as ``X-Request-Id`` on the response, and every log
line written while the request runs carries it (``core/logs.py`` reads these context variables), so a
client's complaint finds its lines. The middleware also counts the request for ``/metrics`` and writes one
line per request to the ``triptych.requests`` logger.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from triptych.core.metrics import observe_request

REQUEST_ID: ContextVar[str | None] = ContextVar("triptych_request_id", default=None)
SURFACE: ContextVar[str | None] = ContextVar("triptych_surface", default=None)
TOOL: ContextVar[str | None] = ContextVar("triptych_tool", default=None)

HEADER = "x-request-id"
_HEADER_BYTES = HEADER.encode()
STATE_KEY = "request_id"
_USABLE = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

log = logging.getLogger("triptych.requests")
# How many paths ``RequestContext`` remembers the surface of before it starts again.
_REMEMBERED_PATHS = 1024


def request_id(headers: Mapping[str, str]) -> str:
    """The client's request id if usable (a log line must not carry whatever a client sends), else new."""
    given = headers.get(HEADER, "")
    return given if given and _USABLE.fullmatch(given) else new_request_id()


def new_request_id() -> str:
    """A random (version 4) UUID as 32 hex digits, as ``uuid.uuid4().hex`` writes it, without building
    the ``UUID`` object on every request."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return raw.hex()


def request_id_of(scope: Mapping[str, Any] | None) -> str | None:
    """The id the middleware gave the request whose ASGI scope this is (None outside one)."""
    state = (scope or {}).get("state") or {}
    value = state.get(STATE_KEY)
    return value if isinstance(value, str) else None


class RequestContext:
    """The outermost middleware: request id, the surface a path belongs to, metrics and the request line.

    ``doors`` maps path prefixes to surface names; the longest matching prefix wins."""

    def __init__(self, app: ASGIApp, doors: Sequence[tuple[str, str]]) -> None:
        self.app = app
        self.doors = sorted(doors, key=lambda door: len(door[0]), reverse=True)
        # The answer per path, remembered: the walk over every door's prefix cost more than the rest of
        # this middleware. Bounded, since paths with ids in them are as many as clients make up.
        self._surfaces: dict[str, str] = {}

    def surface_of(self, path: str) -> str:
        surface = self._surfaces.get(path)
        if surface is None:
            surface = self._match(path)
            if len(self._surfaces) >= _REMEMBERED_PATHS:
                self._surfaces.clear()
            self._surfaces[path] = surface
        return surface

    def _match(self, path: str) -> str:
        for prefix, surface in self.doors:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return surface
        return "server"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", []) if k.lower() == _HEADER_BYTES), b"")
        rid = request_id({HEADER: given.decode("latin-1")})
        scope.setdefault("state", {})[STATE_KEY] = rid
        surface = self.surface_of(scope.get("path", ""))
        tokens = (REQUEST_ID.set(rid), SURFACE.set(surface))
        status = {"code": 500}
        started = time.perf_counter()

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message["headers"] = [
                    *(h for h in message.get("headers", []) if h[0].lower() != _HEADER_BYTES),
                    (_HEADER_BYTES, rid.encode()),
                ]
            await send(message)

        try:
            await self.app(scope, receive, stamped)
        finally:
            seconds = time.perf_counter() - started
            method = scope.get("method", "GET")
            observe_request(surface, method, status["code"], seconds)
            if log.isEnabledFor(logging.INFO):  # off by default: no record built per request
                extra = {"duration_ms": round(seconds * 1000, 2), "outcome": status["code"]}
                log.info("%s %s %d", method, scope.get("path", ""), status["code"], extra=extra)
            SURFACE.reset(tokens[1])
            REQUEST_ID.reset(tokens[0])
