"""Issue 21, item 11: a document over 4 MiB got a bare HTTP 413, shown as "Server returned an error response".

Fixed in metronix/surface.py (/mcp reads up to 32 MiB, so the 5,000,000-character document limit
answers in-band in the contract's shape) and core/http.py (a request over the transport limit gets a
JSON-RPC error naming it).
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import uuid

import pytest
from harness import ROOT, ServerProcess, mcp_session

MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"


def ws() -> str:
    return "ws-" + uuid.uuid4().hex[:8]


MCP1_STORE = """
import asyncio, json, sys
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

async def main(url, workspace, chars):
    async with streamablehttp_client(url) as (r, w, _):
        async with ClientSession(r, w) as session:
            await session.initialize()
            result = await session.call_tool("metronix_store", {"content": "x" * chars, "workspace_id": workspace})
            print(json.dumps({"error": result.isError, "text": result.content[0].text}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_a_document_over_the_size_limit_is_refused_in_the_contract_s_shape_with_the_limit_named(
    open_server: ServerProcess,
) -> None:
    workspace = ws()
    too_long = 5_000_001
    async with mcp_session(open_server.url + "/mcp") as mcp:
        refused = await mcp.call(
            "metronix_store", content="word " * (too_long // 5 + 1), workspace_id=workspace
        )
        status = await mcp.call("metronix_status", workspace_id=workspace)

    assert refused.is_error and refused.error_code == "INVALID_PARAMS"
    error = refused.data["error"]
    assert "the limit of one document is 5,000,000" in error["message"]
    assert error["details"]["limit_chars"] == 5_000_000 and "doc_label" in error["hint"]
    assert status.data["documents"]["total"] == 0  # nothing half-written

    if not MCP1_PYTHON.exists():
        pytest.skip("the 1.x client venv is missing: run `python3 tasks.py test`")
    done = subprocess.run(
        [str(MCP1_PYTHON), "-c", MCP1_STORE, open_server.url + "/mcp", workspace, str(too_long)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown["error"] is True
    assert json.loads(shown["text"])["error"]["code"] == "INVALID_PARAMS"
    assert "the limit of one document is 5,000,000" in shown["text"]


def test_a_request_over_the_transport_limit_gets_a_json_rpc_error_naming_it(
    open_server: ServerProcess,
) -> None:
    declared = 40 * 1024 * 1024  # refused on the declared length: nothing more needs to be sent
    with socket.create_connection(("127.0.0.1", open_server.port), timeout=30) as sock:
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{open_server.port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {declared}\r\n\r\n{{".encode()
        )
        response = http.client.HTTPResponse(sock)
        response.begin()
        body = json.loads(response.read())

    assert response.status == 413 and response.getheader("content-type") == "application/json"
    assert body["error"]["code"] == -32600
    assert "32 MiB (33,554,432 bytes)" in body["error"]["message"]
    assert body["error"]["data"]["error"]["code"] == "INVALID_PARAMS"
    assert body["error"]["data"]["error"]["details"] == {"limit_bytes": 33_554_432, "request_bytes": declared}
