"""HTTP plumbing shared by the surfaces: MCP endpoints behind bearer auth, and JSON error responses."""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from triptych.core.config import Settings
from triptych.core.errors import AuthRequired, CredentialsMissing, Invalid, TriptychError
from triptych.core.mcp import PRINCIPAL_KEY, guard

Authenticator = Callable[[str | None], Any]

# The largest request an MCP endpoint reads unless it says otherwise (Metronix reads more: a whole
# document travels in one metronix_store request).
MCP_MAX_BODY = 4 * 1024 * 1024


def transport_security() -> TransportSecuritySettings:
    # The SDK's own Host/Origin check is off: ``core.mcp.guard`` runs first, the same for every endpoint.
    # (The SDK still refuses a POST that is not application/json.)
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


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


def bearer_challenge(exc: TriptychError) -> str:
    """The ``WWW-Authenticate`` of a 401: a plain ``Bearer`` when no token was sent, and
    ``error="invalid_token"`` only when one was sent and refused (RFC 6750 section 3.1)."""
    return "Bearer" if isinstance(exc, CredentialsMissing) else 'Bearer error="invalid_token"'


def error_body(exc: TriptychError) -> dict[str, Any]:
    return {"error": exc.to_dict()}


def body_too_large(
    limit: int, declared: str | None, render: Callable[[TriptychError], dict[str, Any]] = error_body
) -> dict[str, Any]:
    """The JSON-RPC error for a request over ``limit`` bytes, with the surface's error (``render``) in
    ``data``.

    MCP clients show a JSON-RPC error's message (the official one turns a bare 413 into "Server returned
    an error response"), so the message names the limit.
    """
    size = int(declared) if declared and declared.isdigit() else None
    what = f"is {size:,} bytes" if size is not None else "is larger than that"
    exc = Invalid(
        f"Request body too large: the limit of this MCP endpoint is {limit // (1024 * 1024)} MiB "
        f"({limit:,} bytes); this request {what}",
        hint="Send less in one request: split the content into parts, each stored by its own call",
        details={"limit_bytes": limit, "request_bytes": size},
    )
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": exc.message, "data": render(exc)},
    }


class McpEndpoint:
    """An ASGI endpoint: the Host/Origin guard, then the bearer token, then the MCP session manager.

    ``authenticate`` returns the caller (or None when auth is off) and raises ``AuthRequired`` for a
    missing, malformed, forged or expired token, which becomes HTTP 401 with ``WWW-Authenticate``
    (``bearer_challenge``).
    The caller is put in the request scope under ``caller_key`` for the server's ``Bind``. A surface
    whose transport differs (Hadron's protocol revisions and lost sessions) overrides ``refuse`` and
    ``forward``.
    """

    def __init__(
        self,
        server: Server[Any],
        settings: Settings,
        authenticate: Authenticator,
        *,
        caller_key: str = PRINCIPAL_KEY,
        stateless: bool = False,
        # A POST is answered with one JSON body, not an SSE stream: no tool of ours sends anything
        # during a call, and the per-request stream (its task, its ping task) cost more than the
        # call itself (decision 0102). Notifications still go out on the session's GET stream.
        json_response: bool = True,
        max_body: int = MCP_MAX_BODY,
        render: Callable[[TriptychError], dict[str, Any]] = error_body,
    ) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=server,
            json_response=json_response,
            stateless=stateless,
            security_settings=transport_security(),
            max_request_body_size=max_body,
        )
        self._authenticate = authenticate
        self._caller_key = caller_key
        self.max_body = max_body
        self._render = render
        self._allowed_hosts = list(settings.allowed_hosts)
        self._allowed_origins = list(settings.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        send = jsonrpc_plain_errors(send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refused = guard(headers, self._allowed_hosts, self._allowed_origins)
        if refused is not None:
            # The SDK transport's own words and statuses for these refusals.
            status, text = (
                (421, "Invalid Host header") if refused == "host" else (403, "Invalid Origin header")
            )
            await Response(text, status_code=status)(scope, receive, send)
            return
        if await self.refuse(scope, receive, send, headers):
            return
        try:
            caller = self._authenticate(headers.get("authorization"))
        except AuthRequired as exc:
            await send_json(send, 401, error_body(exc), {"WWW-Authenticate": bearer_challenge(exc)})
            return
        if caller is not None:
            scope[self._caller_key] = caller
        await self.forward(scope, receive, send, headers, caller)

    async def refuse(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> bool:
        """Answer a request the surface's transport does not serve (before auth); True when answered."""
        return False

    async def forward(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], caller: Any
    ) -> None:
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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
                    await send_json(send, 413, body_too_large(self.max_body, declared, self._render))
                return
            await send(message)

        await self.manager.handle_request(scope, receive, send_or_explain)
