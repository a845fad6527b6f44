"""The MCP Inspector CLI (2.x, the version `python3 tasks.py test` installs with the Node it needs) drives
all three endpoints of a real server with auth on, sending its headers, exactly as the README says."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from harness import ROOT, SECRET, ServerProcess, metergraph_key, token

BIN = ROOT / ".inspector" / "node_modules" / ".bin"


def inspector(url: str, *args: str, home: Path, tool_error: bool = False) -> dict[str, object]:
    """``mcp-inspector --cli`` as the docs show it, with Node 22 first on PATH and a scratch HOME (the
    Inspector keeps a catalog under ~/.mcp-inspector). A tool result with ``isError`` exits 5."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(home)}
    done = subprocess.run(
        ["mcp-inspector", "--cli", url, "--transport", "http", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == (5 if tool_error else 0), done.stdout + done.stderr
    return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    if not (BIN / "mcp-inspector").exists():
        pytest.skip(
            "the MCP Inspector is not installed: `python3 tasks.py test` installs it when npm is on PATH"
        )
    env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET}
    started = ServerProcess(tmp_path_factory.mktemp("inspector") / "data", env).start()
    yield started  # type: ignore[misc]
    started.stop()


def test_the_inspector_cli_calls_all_three_endpoints_with_headers(
    server: ServerProcess, tmp_path: Path
) -> None:
    jwt = token(workspaces=["docs"])
    stored = inspector(
        server.url + "/mcp",
        "--header", f"Authorization: Bearer {jwt}", "--header", "X-Agent-Id: inspector",
        "--method", "tools/call", "--tool-name", "memory_store",
        "--tool-arg", "content=The Inspector reached Metronix.", "--tool-arg", "agent_id=inspector",
        "--tool-arg", "workspace_id=docs",
        home=tmp_path,
    )  # fmt: skip
    assert stored["isError"] is False, stored
    refused = inspector(
        server.url + "/mcp",
        "--header", f"Authorization: Bearer {jwt}", "--header", "X-Agent-Id: inspector",
        "--method", "tools/call", "--tool-name", "memory_store",
        "--tool-arg", "content=Posing.", "--tool-arg", "agent_id=someone-else", "--tool-arg", "workspace_id=docs",
        home=tmp_path, tool_error=True,
    )  # fmt: skip
    assert refused["isError"] is True  # the X-Agent-Id header reached the server and bound the agent

    hadron = inspector(
        server.url + "/hadron/mcp",
        "--header", f"Authorization: Bearer {jwt}", "--header", "X-Hadron-Client-Id: inspector",
        "--method", "tools/call", "--tool-name", "hadron_server_info",
        home=tmp_path,
    )  # fmt: skip
    assert "node-search" in hadron["structuredContent"]["capabilities"]  # type: ignore[index]

    key = metergraph_key(server.data_dir, "docs", "metadata")
    tools = inspector(
        server.url + "/v1/agent/mcp", "--header", f"Authorization: Bearer {key}", "--method", "tools/list",
        home=tmp_path,
    )  # fmt: skip
    names = {tool["name"] for tool in tools["tools"]}  # type: ignore[attr-defined]
    assert "metergraph_get_usage_aggregates" in names
    usage = inspector(
        server.url + "/v1/agent/mcp",
        "--header", f"Authorization: Bearer {key}",
        "--method", "tools/call", "--tool-name", "metergraph_get_workspace_context",
        home=tmp_path,
    )  # fmt: skip
    assert usage["structuredContent"]["provenance"]["workspace_id"] == "docs"  # type: ignore[index]
