"""A small MCP server with tools, for Hadron's MCP tool actions.

Usage: tool_server.py LOG_FILE (stdio) | tool_server.py LOG_FILE --http PORT
Tools: ``lookup`` (answers ``found <term> (limit <n>)`` and appends the call to LOG_FILE, so a test
sees what reached the outside), ``fail`` (always an error result), ``slow`` (sleeps ``seconds``).
"""

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp_runner import run

TOOLS = [
    types.Tool(
        name="lookup",
        description="Look a term up",
        input_schema={
            "type": "object",
            "properties": {"term": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["term"],
        },
    ),
    types.Tool(name="fail", description="Always fails", input_schema={"type": "object"}),
    types.Tool(
        name="slow",
        description="Sleeps",
        input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
    ),
]


def build(log: Path) -> Server[Any]:
    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        with log.open("a") as handle:
            handle.write(json.dumps({"tool": params.name, "arguments": args}) + "\n")
        if params.name == "lookup":
            text = f"found {args.get('term')} (limit {args.get('limit')})"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
        if params.name == "slow":
            await anyio.sleep(float(args.get("seconds", 5)))
            return types.CallToolResult(content=[types.TextContent(type="text", text="slept")])
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="the backend is down")], is_error=True
        )

    return Server("tool-server", on_list_tools=list_tools, on_call_tool=call_tool)


def main() -> None:
    server = build(Path(sys.argv[1]))
    run(server)


if __name__ == "__main__":
    main()
