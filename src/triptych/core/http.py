"""HTTP plumbing shared by the surfaces: MCP endpoints behind bearer auth, and JSON error responses."""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Message, Receive, Scope, Send

from triptych.config import Settings
from triptych.core.auth import Principal, bearer_token
from triptych.core.errors import AuthRequired, TriptychError
from triptych.core.mcp import PRINCIPAL_KEY

Authenticator = Callable[[str | None], Principal | None]


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


def jsonrpc_plain_errors(send: Send) -> Send:
    """The SDK answers a few transport refusals in plain text (a wrong Content-Type 400, a body over the
    limit 413, ...): rewrite those into JSON-RPC errors, so every MCP answer is JSON-RPC."""
    held: dict[str, Any] = {}

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            content_type = dict(message.get("headers", [])).get(b"content-type", b"")
            if not content_type.startswith(b"application/json"):
                held.update(start=message, body=b"")
                return
        if "start" in held and message["type"] == "http.response.body":
            held["body"] += message.get("body", b"")
            if message.get("more_body", False):
                return
            start = held.pop("start")
            text = held.pop("body").decode("utf-8", "replace").strip() or HTTPStatus(start["status"]).phrase
            payload = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}})
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in _REPLACED]
            headers += [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": payload.encode()})
            return
        await send(message)

    return wrapped


_REPLACED = (b"content-type", b"content-length")


def error_body(exc: TriptychError) -> dict[str, Any]:
    return {"error": exc.to_dict()}


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
        max_body: int = 4 * 1024 * 1024,
    ) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=server,
            json_response=json_response,
            stateless=stateless,
            security_settings=transport_security(settings),
            max_request_body_size=max_body,
        )
        self._authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            principal = self._authenticate(headers.get("authorization"))
        except AuthRequired as exc:
            await send_json(send, 401, error_body(exc), {"WWW-Authenticate": 'Bearer error="invalid_token"'})
            return
        if principal is not None:
            scope[PRINCIPAL_KEY] = principal
        await self.manager.handle_request(scope, receive, jsonrpc_plain_errors(send))


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
