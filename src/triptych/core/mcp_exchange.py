"""One stateless MCP exchange answered in JSON by the SDK's server kernel, in the request's own task.

A stateless JSON endpoint (Metergraph's ``/v1/agent/mcp``) gets one JSON-RPC request per POST and
answers it with one JSON-RPC response. The SDK's ``Server`` answers it through ``serve_one`` (its
single-exchange driver: method and params validation, ``initialize``, the handlers, the result's wire
form, the error ladder), the way the SDK answers its own 2026-07-28 JSON requests. What this leaves out
is the SDK's stateless session manager, which for each request builds a transport, memory streams, a
server task and a dispatcher to carry that one message (decision 0101: measured, it cost more than the
rest of a trivial call).

No back-channel: a handler's requests to the client raise ``NoBackChannelError`` and its notifications
(progress, logs) have no wire, as in the SDK's JSON response mode.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.connection import Connection
from mcp.server.runner import serve_one
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION, INTERNAL_ERROR, RequestId
from starlette.requests import Request

log = logging.getLogger(__name__)


@dataclass
class _Exchange:
    """The SDK's ``DispatchContext`` for one request answered in JSON."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: MessageMetadata
    can_send_request: bool = False
    # Never set: the client cancels by closing the connection (the server then stops the request's task).
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        return None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


class StatelessExchange:
    """A server answering one JSON-RPC request at a time; ``run()`` holds its lifespan (the app enters it
    as it enters the session managers)."""

    def __init__(self, server: Server[Any]) -> None:
        self.server = server
        self._lifespan_state: Any = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.server.lifespan(self.server) as state:
            self._lifespan_state = state
            yield

    async def answer(
        self, request: Request, msg_id: RequestId, method: str, params: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The JSON-RPC response to a request; the protocol revision is its ``MCP-Protocol-Version``."""
        version = request.headers.get("mcp-protocol-version") or DEFAULT_NEGOTIATED_VERSION
        transport = TransportContext(kind="streamable-http", can_send_request=False, headers=request.headers)
        exchange = _Exchange(transport, msg_id, ServerMessageMetadata(request_context=request))
        connection = Connection.from_envelope(version, None, None)
        try:
            result = await serve_one(
                self.server,
                exchange,
                method,
                params,
                connection=connection,
                lifespan_state=self._lifespan_state,
            )
        except Exception as exc:
            error = handler_exception_to_error_data(exc)
            if error is None:
                log.exception("MCP %s failed", method)
                return {
                    "jsonrpc": "2.0",
                    "id": msg_id,
                    "error": {"code": INTERNAL_ERROR, "message": "Internal error"},
                }
            return {"jsonrpc": "2.0", "id": msg_id, "error": error.model_dump(mode="json", exclude_none=True)}
        return {"jsonrpc": "2.0", "id": msg_id, "result": result}
