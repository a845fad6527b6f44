"""The Metronix contract's own Python example, run with the 1.x MCP client API (in .venv-mcp1).

Usage: python mcp1_example.py URL TOKEN WORKSPACE; prints the search result's JSON text.
"""

import asyncio
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def main(url: str, jwt: str, workspace: str) -> None:
    headers = {"Authorization": f"Bearer {jwt}"}
    async with streamablehttp_client(url, headers=headers) as (r, w, _):
        async with ClientSession(r, w) as session:
            await session.initialize()
            await session.call_tool(
                "metronix_store",
                {
                    "content": "Agent memory architecture: records, scopes and a review queue.",
                    "workspace_id": workspace,
                },
            )
            result = await session.call_tool(
                "metronix_search_fast",
                {"query": "agent memory architecture", "workspace_id": workspace, "top_k": 5},
            )
            print(result.content[0].text)


asyncio.run(main(*sys.argv[1:4]))
