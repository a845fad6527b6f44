"""The last-resort handler: an exception no door caught still answers in that door's contract shape.

Starlette's own fallback answers a plain-text ``500 Internal Server Error`` and re-raises to the server,
which then dropped the next request on the same keep-alive connection (2 of 5 trials). This middleware
catches what escaped, logs the traceback (it never reaches the client), and answers a JSON 500 in the
shape of the door the path belongs to: each surface declares its doors' shapes (``Mounted.error_shapes``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from triptych.core.errors import InternalError
from triptych.core.http import error_body, send_json

log = logging.getLogger(__name__)
MESSAGE = "Unexpected server error; the request changed nothing it could not finish"


def jsonrpc_internal_error() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": f"Internal error: {MESSAGE}"}}


class LastResort:
    """ASGI middleware: ``shapes`` maps a path prefix to the JSON body of a 500 at that door (the longest
    prefix wins; other paths get the root ``INTERNAL_ERROR`` shape)."""

    def __init__(self, app: ASGIApp, shapes: Mapping[str, dict[str, Any]]) -> None:
        self.app = app
        self.shapes = sorted(shapes.items(), key=lambda item: len(item[0]), reverse=True)
        self.default = error_body(InternalError(MESSAGE, hint="Check the server log"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "finished": False}

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["finished"] = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if state["finished"]:
                return  # the answer went out whole; nothing is left to say
            if state["started"]:
                raise  # a stream broken halfway: only closing the connection tells the client
            await send_json(send, 500, self.body_for(str(scope.get("path", ""))))

    def body_for(self, path: str) -> dict[str, Any]:
        for prefix, body in self.shapes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return body
        return self.default
