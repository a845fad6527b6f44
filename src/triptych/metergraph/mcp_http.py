"""The stateless remote MCP endpoint ``/v1/agent/mcp``, served by the official SDK like the other
surfaces: the SDK server ``core.mcp.build_server`` makes answers ``initialize``, ``ping``, ``tools/list``
and ``tools/call``, one stateless JSON exchange per POST (``core.mcp_exchange``; decisions 0100, 0101).

What the contract fixes and the SDK's transport would answer otherwise is checked here, before the
message reaches the SDK (each refusal in the contract's words): a foreign ``Host`` is 421 and a foreign
``Origin`` 403; only POST is served (405); bodies over 1 MiB are 413 with -32700; a missing or refused
key is the contract's 401/403 document; the body is decoded through the guarded ``core.jsonbody``
(-32700); anything but one JSON-RPC 2.0 object is -32600; an ``MCP-Protocol-Version`` header naming a
revision other than 2025-11-25, 2025-06-18 and 2025-03-26 (a 2.x client's 2026-07-28 probe) is -32022
with the supported list, so the client falls back to ``initialize``; notifications and responses are
202 with no body; ``params`` that are not an object are -32602. Unknown tools and arguments outside a
tool's schema are JSON-RPC -32602 and unexpected failures -32603 (``render_error``); every other
refusal is a tool result carrying the contract's ``error.code``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import RequestId
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from triptych.core import jsonbody
from triptych.core.config import Settings
from triptych.core.errors import TriptychError
from triptych.core.mcp import PRINCIPAL_KEY, ArgumentsInvalid, UnknownTool, build_server, guard, text_result
from triptych.core.mcp_exchange import StatelessExchange
from triptych.metergraph.errors import (
    BY_KIND,
    ForbiddenError,
    MetergraphError,
    Unauthenticated,
    check_response_size,
    error_document,
)
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.tools import PRIVATE_ARGUMENTS, MetergraphTool
from triptych.metergraph.web import BodyTooLarge, json_response, read_body
from triptych.metergraph.workspace import tool_visible

log = logging.getLogger(__name__)

LATEST = "2025-11-25"
ACCEPTED_REVISIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
UNSUPPORTED_PROTOCOL_VERSION = -32022
INVALID_PARAMS = -32602
INSTRUCTIONS = (
    "Metergraph: LLM usage, cost, latency and trace metadata for one workspace. Call "
    "metergraph_get_capabilities first. Investigation tools are content-free (content_included: false); "
    "check coverage.completeness and pricing.cost before presenting a figure as the whole answer."
)

Authenticate = Callable[[Request], AgentPrincipal]


def _error(msg_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def _text(document: dict[str, Any]) -> str:
    # The document as sorted, compact JSON (the contract's examples).
    return json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def tool_result(document: dict[str, Any], is_error: bool = False) -> dict[str, Any]:
    """A result whose text is the document as sorted, compact JSON, in its wire form."""
    return text_result(_text(document), document, is_error=is_error)


def render_result(document: dict[str, Any]) -> dict[str, Any]:
    text = _text(document)
    check_response_size(len(text))  # over 5 MiB: a response_too_large tool result
    return text_result(text, document)


def error_renderer(tool_names: Sequence[str]) -> Callable[[TriptychError], dict[str, Any]]:
    """Refusals as the contract answers them: a call that does not fit the tools' schemas is a protocol
    error (-32602), an unexpected failure -32603, anything else a tool result with ``error.code``."""
    names = sorted(tool_names)

    def render(exc: TriptychError) -> dict[str, Any]:
        if isinstance(exc, UnknownTool):
            raise MCPError(INVALID_PARAMS, "Unknown tool", {"tools": names})
        if isinstance(exc, ArgumentsInvalid):
            raise MCPError(INVALID_PARAMS, f"Invalid arguments for {exc.tool}: {exc.message}")
        if exc.kind == "internal":
            log.error("metergraph tool failed: %s", exc.message)
            raise MCPError(-32603, "Internal error")
        return tool_result(error_document(exc), is_error=True)

    return render


def principal_of(ctx: ServerRequestContext[Any, Any]) -> AgentPrincipal:
    principal = ctx.request.scope.get(PRINCIPAL_KEY) if ctx.request is not None else None
    if not isinstance(principal, AgentPrincipal):  # the endpoint authenticates every request first
        raise Unauthenticated("missing bearer token: send 'Authorization: Bearer <agent key>'")
    return principal


def build_mcp_server(tools: Sequence[MetergraphTool]) -> Server[Any]:
    """Metergraph's tools on the SDK server, with the key's principal as their context."""
    return build_server(
        "metergraph",
        tools,
        bind=lambda ctx, tool: nullcontext(principal_of(ctx)),
        render_error=error_renderer([t.name for t in tools]),
        error_codes=BY_KIND,
        instructions=INSTRUCTIONS,
        render_result=render_result,
        visible=lambda ctx, tool: tool_visible(principal_of(ctx), tool.name),
        private_arguments=PRIVATE_ARGUMENTS,
    )


class StatelessEndpoint:
    """``/v1/agent/mcp``: the guard, the method, the body bound, the key, the message's envelope and
    revision (the contract's answers), then the SDK's server answers the message (``core.mcp_exchange``)."""

    def __init__(
        self,
        server: Server[Any],
        settings: Settings,
        authenticate: Authenticate,
        max_body: int = 1024 * 1024,
    ) -> None:
        self.manager = StatelessExchange(server)  # the app enters its ``run()`` with the session managers
        self._authenticate = authenticate
        self.max_body = max_body
        self._allowed_hosts = list(settings.allowed_hosts)
        self._allowed_origins = list(settings.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        outcome = await self._refusal(request)
        if isinstance(outcome, Response):
            response = outcome
        else:
            principal, msg_id, method, params = outcome
            scope[PRINCIPAL_KEY] = principal
            response = json_response(await self.manager.answer(request, msg_id, method, params))
        await response(scope, receive, send)

    async def _refusal(self, request: Request) -> Response | tuple[AgentPrincipal, RequestId, str, Any]:
        """The contract's answer to a request the SDK must not see, or the caller and the request."""
        # DNS-rebinding guard, as on the other MCP endpoints: unknown Host 421, foreign Origin 403.
        refused = guard(request.headers, self._allowed_hosts, self._allowed_origins)
        if refused == "host":
            return json_response(_error(None, -32600, "Invalid Host header"), 421)
        if refused == "origin":
            # The contract's error document (not a JSON-RPC body): a browser page was refused, not a message.
            return json_response(error_document(ForbiddenError("this Origin may not call the endpoint")), 403)
        if request.method != "POST":
            return Response(status_code=405, headers={"Allow": "POST"})
        try:
            body = await read_body(request, self.max_body)
        except BodyTooLarge:
            return json_response(_error(None, -32700, "Message exceeds 1 MiB"), 413)
        try:
            principal = self._authenticate(request)
        except MetergraphError as exc:
            status = 403 if exc.code == "forbidden" else 401
            return json_response(
                {"error": {"code": exc.code, "message": exc.message}},
                status,
                {"WWW-Authenticate": 'Bearer error="invalid_token"'} if status == 401 else None,
            )
        version = request.headers.get("mcp-protocol-version")
        try:
            message = jsonbody.parse(body, allow_nul=True)  # arguments: parse_args names the field
        except jsonbody.JsonRefused as exc:
            return json_response(_error(None, -32700, f"Parse error: {exc.message}"), 400)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return json_response(_error(None, -32600, "Invalid Request: send one JSON-RPC 2.0 object"), 400)
        msg_id = message.get("id")
        if version is not None and version not in ACCEPTED_REVISIONS:
            return json_response(
                _error(
                    msg_id,
                    UNSUPPORTED_PROTOCOL_VERSION,
                    "Unsupported protocol version",
                    {"supported": list(ACCEPTED_REVISIONS), "requested": version},
                ),
                400,
            )
        if "method" not in message or "id" not in message:
            return Response(status_code=202)  # a notification or a response: nothing to answer
        method = message["method"]
        # JSON-RPC ids are strings or numbers (the SDK's are strings or integers).
        valid_id = isinstance(msg_id, str | int) and not isinstance(msg_id, bool)
        if not isinstance(method, str) or not isinstance(msg_id, str | int) or not valid_id:
            return json_response(_error(msg_id if valid_id else None, -32600, "Invalid Request"), 400)
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return json_response(_error(msg_id, INVALID_PARAMS, "params must be an object"))
        if method == "initialize" and params and params.get("protocolVersion") not in ACCEPTED_REVISIONS:
            # The SDK would agree to any revision it knows (2024-11-05 too); the contract offers its latest.
            params = {**params, "protocolVersion": LATEST}
        return principal, msg_id, method, params
