"""Assembles the Metergraph surface. Its tools arrive with the telemetry issue; the endpoint answers now."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp.server import Server
from starlette.routing import Route

from triptych.core.errors import TriptychError
from triptych.core.http import McpEndpoint, jwt_authenticator
from triptych.core.mcp import build_server
from triptych.core.surface import Mounted, Shared

# Metergraph's stateless endpoint refuses bodies over 1 MiB.
MAX_BODY = 1024 * 1024


def render_error(exc: TriptychError) -> types.CallToolResult:
    body = {"error": {"code": exc.code.lower(), "message": exc.message}}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body))], is_error=True
    )


def mcp_server() -> Server[Any]:
    return build_server("metergraph", [], render_error, "Metergraph LLM usage and cost telemetry.")


def mount(shared: Shared) -> Mounted:
    endpoint = McpEndpoint(
        mcp_server(),
        shared.settings,
        jwt_authenticator(shared.settings),
        stateless=True,
        json_response=True,
        max_body=MAX_BODY,
    )
    return Mounted(routes=[Route("/v1/agent/mcp", endpoint=endpoint)], endpoints=[endpoint])
