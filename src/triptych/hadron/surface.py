"""Assembles the Hadron surface. Its tools arrive with the graph-memory issues; the endpoint answers now."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server import Server
from starlette.routing import Route

from triptych.core.errors import TriptychError
from triptych.core.http import McpEndpoint, jwt_authenticator
from triptych.core.mcp import build_server
from triptych.core.surface import Mounted, Shared


def render_error(exc: TriptychError) -> types.CallToolResult:
    # Hadron refusals are text that starts with the typed code, then the message.
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{exc.code}: {exc.message}")], is_error=True
    )


def mcp_server() -> Server[Any]:
    return build_server("hadron", [], render_error, "Hadron graph memory and team coordination.")


def mount(shared: Shared) -> Mounted:
    endpoint = McpEndpoint(mcp_server(), shared.settings, jwt_authenticator(shared.settings))
    return Mounted(routes=[Route("/hadron/mcp", endpoint=endpoint)], endpoints=[endpoint])
