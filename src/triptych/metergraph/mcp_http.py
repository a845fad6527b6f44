"""The stateless remote MCP endpoint ``/v1/agent/mcp``: one JSON-RPC message per POST.

Requests are answered with ``application/json``; notifications and responses with 202 and no body.
Protocol revisions 2025-11-25, 2025-06-18 and 2025-03-26 are accepted; an ``MCP-Protocol-Version``
header naming another revision (a 2.x client's 2026-07-28 ``server/discover`` probe) is refused with
-32022 and the supported list, so the client falls back to ``initialize``. Bodies over 1 MiB are 413
with -32700; a foreign ``Origin`` is 403; schema violations are -32602.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from triptych import __version__
from triptych.core import jsonbody
from triptych.core.errors import TriptychError
from triptych.core.mcp import ArgumentsInvalid, UnknownTool, definition_json, guard
from triptych.metergraph.errors import ForbiddenError, MetergraphError, check_response_size, error_document
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.tools import MetergraphTool, principal_bind, toolbox, visible_tools
from triptych.metergraph.web import BodyTooLarge, json_response, read_body

log = logging.getLogger(__name__)

LATEST = "2025-11-25"
ACCEPTED_REVISIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
UNSUPPORTED_PROTOCOL_VERSION = -32022
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


def _result(msg_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def tool_result(document: dict[str, Any], is_error: bool = False) -> dict[str, Any]:
    text = json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return {"content": [{"type": "text", "text": text}], "structuredContent": document, "isError": is_error}


class McpRpc:
    """JSON-RPC dispatch, shared by the HTTP endpoint (and usable in-process by tests). Tools run
    through ``core.mcp.Toolbox``; what is Metergraph's own is the stateless protocol around them."""

    def __init__(self, tools: list[MetergraphTool]) -> None:
        self.tools = tools
        self.toolbox = toolbox(tools)
        # The schemas never change: built once, not on every stateless tools/list.
        self.definitions = {t.name: definition_json(t) for t in tools}

    async def handle(self, principal: AgentPrincipal, message: dict[str, Any]) -> dict[str, Any]:
        msg_id = message.get("id")
        method = message.get("method")
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            return _error(msg_id, -32602, "params must be an object")
        params = params or {}
        if method == "initialize":
            requested = params.get("protocolVersion")
            selected = requested if requested in ACCEPTED_REVISIONS else LATEST
            return _result(
                msg_id,
                {
                    "protocolVersion": selected,
                    "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": {"name": "metergraph", "version": __version__},
                    "instructions": INSTRUCTIONS,
                },
            )
        if method == "ping":
            return _result(msg_id, {})
        if method == "tools/list":
            return _result(
                msg_id, {"tools": [self.definitions[t.name] for t in visible_tools(self.tools, principal)]}
            )
        if method == "tools/call":
            return await self._call(principal, msg_id, params)
        return _error(msg_id, -32601, "Method not found")

    async def _call(self, principal: AgentPrincipal, msg_id: Any, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            return _error(msg_id, -32602, "tools/call needs a tool name")
        try:
            document = await self.toolbox.call(name, params.get("arguments"), principal_bind(principal))
            result = tool_result(document)
            check_response_size(len(result["content"][0]["text"]))
        # A call that does not fit the tools' schemas is a protocol error here, not a tool result.
        except UnknownTool:
            return _error(msg_id, -32602, "Unknown tool", {"tools": self.toolbox.names})
        except ArgumentsInvalid as exc:
            return _error(msg_id, -32602, f"Invalid arguments for {name}: {exc.message}")
        except TriptychError as exc:
            if exc.kind != "internal":
                return _result(msg_id, tool_result(error_document(exc), is_error=True))
            log.error("metergraph tool %s failed: %s", name, exc.message)
            return _error(msg_id, -32603, "Internal error")
        except Exception:
            log.exception("metergraph tool %s failed", name)
            return _error(msg_id, -32603, "Internal error")
        return _result(msg_id, result)


@dataclass
class StatelessEndpoint:
    """``/v1/agent/mcp``: the guard, the body bound, the key, then one JSON-RPC message."""

    rpc: McpRpc
    authenticate: Authenticate
    allowed_origins: list[str]
    max_body: int = 1024 * 1024
    # None: no Host check (an in-process endpoint has no Host to check).
    allowed_hosts: list[str] | None = None

    async def handle(self, request: Request) -> Response:
        # DNS-rebinding guard, as on the other MCP endpoints: unknown Host 421, foreign Origin 403.
        refused = guard(request.headers, self.allowed_hosts, self.allowed_origins)
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
            principal = self.authenticate(request)
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
        if version is not None and version not in ACCEPTED_REVISIONS:
            return json_response(
                _error(
                    message.get("id"),
                    UNSUPPORTED_PROTOCOL_VERSION,
                    "Unsupported protocol version",
                    {"supported": list(ACCEPTED_REVISIONS), "requested": version},
                ),
                400,
            )
        if "method" not in message or "id" not in message:
            return Response(status_code=202)  # a notification or a response: nothing to answer
        if not isinstance(message.get("method"), str):
            return json_response(_error(message.get("id"), -32600, "Invalid Request"), 400)
        return json_response(await self.rpc.handle(principal, message))
