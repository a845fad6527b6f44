"""A small MCP server whose resources come from a JSON file, re-read on every request.

Usage: resource_server.py RESOURCES_JSON (stdio) | resource_server.py RESOURCES_JSON --http PORT
The JSON maps uri -> {"name": ..., "text": ...}; tests edit it between syncs. With --garbage the
server writes junk to stdout instead of speaking MCP.
"""

import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp_runner import run


def build(path: Path) -> Server[Any]:
    def load() -> dict[str, dict[str, str]]:
        return json.loads(path.read_text())

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        items = sorted(load().items())
        # Pages of 2, so the client has to follow cursors.
        start = int(params.cursor) if params and params.cursor else 0
        page = items[start : start + 2]
        next_cursor = str(start + 2) if start + 2 < len(items) else None
        resources = [
            types.Resource(uri=uri, name=spec["name"], mime_type="text/markdown") for uri, spec in page
        ]
        return types.ListResourcesResult(resources=resources, next_cursor=next_cursor)

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        spec = load()[str(params.uri)]
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text=spec["text"])]
        )

    return Server("resource-server", on_list_resources=list_resources, on_read_resource=read_resource)


def main() -> None:
    path = Path(sys.argv[1])
    if "--garbage" in sys.argv:
        # Until the client hangs up: a loop that ignored EOF would spin on after the test.
        while True:
            print("this is not JSON-RPC", flush=True)
            if not sys.stdin.readline():
                return
    server = build(path)
    run(server)


if __name__ == "__main__":
    main()
