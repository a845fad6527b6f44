"""Runs one of these test MCP servers over stdio, or over streamable HTTP with ``--http PORT``."""

import sys
from typing import Any

import anyio
from mcp.server import Server


def run(server: Server[Any]) -> None:
    if "--http" in sys.argv:
        import uvicorn

        port = int(sys.argv[sys.argv.index("--http") + 1])
        uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
        return
    from mcp.server.stdio import stdio_server

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
