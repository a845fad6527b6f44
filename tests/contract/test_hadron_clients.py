"""Hadron through the 1.x MCP client API (streamablehttp_client(url, headers=...)), as hosts in the wild
still use it: selections within a session and restored by X-Hadron-Client-Id on the next one."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from hadron.world import World, user_headers
from harness import ROOT

MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"

# Run inside .venv-mcp1 (mcp 1.x cannot share a venv with 2.x); prints one JSON line per call.
SCRIPT = """
import asyncio, json, sys
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

async def main(url, headers, calls):
    async with streamablehttp_client(url, headers=headers) as (r, w, _):
        async with ClientSession(r, w) as session:
            await session.initialize()
            for name, args in calls:
                result = await session.call_tool(name, args)
                print(json.dumps({"error": result.isError, "text": result.content[0].text}))

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])))
"""


# The contract holds on both storage engines: each runs this module against its engine's shared world.
pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")


@pytest.fixture(scope="module")
def world(shared_hadron_world: World) -> World:
    """The session's shared world (tests/conftest.py): every test here works under locations of its own."""
    return shared_hadron_world


def run_1x(
    world: World, headers: dict[str, str], calls: list[tuple[str, dict[str, object]]]
) -> list[dict[str, object]]:
    done = subprocess.run(
        [str(MCP1_PYTHON), "-c", SCRIPT, world.url, json.dumps(headers), json.dumps(calls)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.skipif(
    not MCP1_PYTHON.exists(), reason="the 1.x client venv is missing: run `python3 tasks.py test`"
)
def test_the_1x_client_keeps_and_restores_selections(world: World) -> None:
    headers = user_headers("alice", "mcp1-" + uuid.uuid4().hex[:6])
    first = run_1x(
        world,
        headers,
        [
            ("hadron_set_active_memory", {"memoryUrn": "hrn:mem:acme.com:specs"}),
            ("hadron_create_node", {"loc": "from-1x", "name": "From 1.x"}),
            ("hadron_get_node", {"loc": "from-1x"}),
            ("hadron_get_node", {"loc": "from-1x", "extra": True}),
        ],
    )
    assert [r["error"] for r in first] == [False, False, False, True]
    assert "name: From 1.x" in str(first[2]["text"])
    assert str(first[3]["text"]).startswith("BAD_USER_INPUT: unknown argument 'extra'")
    second = run_1x(world, headers, [("hadron_server_info", {}), ("hadron_get_node", {"loc": "from-1x"})])
    assert "connection: re-established" in str(second[0]["text"])
    assert second[1]["error"] is False
