"""HTTP plumbing shared by the surfaces: MCP endpoints behind bearer auth, and JSON error responses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from triptych.config import Settings
from triptych.core.auth import Principal, bearer_token
from triptych.core.errors import AuthRequired, InvalidParams, TriptychError
from triptych.core.mcp import PRINCIPAL_KEY

Authenticator = Callable[[str | None], Principal | None]

# The largest request an MCP endpoint reads (a metronix_store document travels in one request).
MCP_MAX_BODY = 4 * 1024 * 1024


def transport_security(settings: Settings) -> TransportSecuritySettings:
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(settings.allowed_hosts),
        allowed_origins=list(settings.allowed_origins),
    )


async def send_json(
    send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    payload = json.dumps(body).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


def error_body(exc: TriptychError) -> dict[str, Any]:
    return {"error": exc.to_dict()}


def body_too_large(limit: int, declared: str | None) -> dict[str, Any]:
    """The JSON-RPC error for a request over ``limit`` bytes, with the contract's error in ``data``.

    MCP clients show a JSON-RPC error's message (the official one turns a bare 413 into "Server returned
    an error response"), so the message names the limit.
    """
    size = int(declared) if declared and declared.isdigit() else None
    what = f"is {size:,} bytes" if size is not None else "is larger than that"
    exc = InvalidParams(
        f"Request body too large: the limit of this MCP endpoint is {limit // (1024 * 1024)} MiB "
        f"({limit:,} bytes); this request {what}",
        hint="Split the document into parts, each stored with its own doc_label, "
        "or import large files with `triptych kb import`",
        details={"limit_bytes": limit, "request_bytes": size},
    )
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": exc.message, "data": error_body(exc)},
    }


class McpEndpoint:
    """An ASGI endpoint: authenticate the bearer token, then hand the request to the MCP session manager.

    ``authenticate`` returns the caller (or None when auth is off) and raises ``AuthRequired`` for a
    missing, malformed, forged or expired token, which becomes HTTP 401 with ``WWW-Authenticate: Bearer``.
    """

    def __init__(
        self,
        server: Server[Any],
        settings: Settings,
        authenticate: Authenticator,
        *,
        stateless: bool = False,
        json_response: bool = False,
        max_body: int = MCP_MAX_BODY,
    ) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=server,
            json_response=json_response,
            stateless=stateless,
            security_settings=transport_security(settings),
            max_request_body_size=max_body,
        )
        self._authenticate = authenticate
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            principal = self._authenticate(headers.get("authorization"))
        except AuthRequired as exc:
            await send_json(send, 401, error_body(exc), {"WWW-Authenticate": 'Bearer error="invalid_token"'})
            return
        if principal is not None:
            scope[PRINCIPAL_KEY] = principal
        await self.forward(scope, receive, send)

    async def forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hand the request to the session manager; its bare 413 for an oversized body becomes a
        JSON-RPC error that names the limit."""
        refused = False

        async def send_or_explain(message: Message) -> None:
            nonlocal refused
            if message["type"] == "http.response.start" and message["status"] == 413:
                refused = True
                return
            if refused:
                if message["type"] == "http.response.body" and not message.get("more_body", False):
                    declared = Headers(scope=scope).get("content-length")
                    await send_json(send, 413, body_too_large(self.max_body, declared))
                return
            await send(message)

        await self.manager.handle_request(scope, receive, send_or_explain)


def jwt_authenticator(settings: Settings) -> Authenticator:
    """Auth off: every caller is the local principal. Auth on: a valid bearer JWT is required."""
    if not settings.auth_enabled:
        return lambda _header: None
    from triptych.core.auth import TokenVerifier

    verifier = TokenVerifier(settings)

    def authenticate(header: str | None) -> Principal:
        token = bearer_token(header)
        if token is None:
            raise AuthRequired("missing bearer token: send 'Authorization: Bearer <jwt>'")
        return verifier.verify(token)

    return authenticate
