"""HTTP plumbing shared by the surfaces: MCP endpoints behind bearer auth, and JSON error responses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from triptych.config import Settings
from triptych.core.errors import AuthRequired, TriptychError
from triptych.core.mcp import PRINCIPAL_KEY, guard

Authenticator = Callable[[str | None], Any]


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


def error_body(exc: TriptychError) -> dict[str, Any]:
    return {"error": exc.to_dict()}


class McpEndpoint:
    """An ASGI endpoint: the Host/Origin guard, then the bearer token, then the MCP session manager.

    ``authenticate`` returns the caller (or None when auth is off) and raises ``AuthRequired`` for a
    missing, malformed, forged or expired token, which becomes HTTP 401 with ``WWW-Authenticate: Bearer``.
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
        json_response: bool = False,
        max_body: int = 4 * 1024 * 1024,
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
        self._allowed_hosts = list(settings.allowed_hosts)
        self._allowed_origins = list(settings.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            await send_json(send, 401, error_body(exc), {"WWW-Authenticate": 'Bearer error="invalid_token"'})
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
        await self.manager.handle_request(scope, receive, send)
