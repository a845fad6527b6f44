"""Transports and endpoints: the 1.x client example, stdio, the three MCP endpoints, health and host checks."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from harness import ROOT, TRIPTYCH, ServerProcess, bearer, mcp_session, metergraph_key, token
from mcp import Client, StdioServerParameters

MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"
SCRIPTS = Path(__file__).parent / "scripts"


@pytest.mark.engines("sqlite", "two-machines")
def test_the_contracts_python_example_works_with_the_1x_client(auth_server: ServerProcess) -> None:
    assert MCP1_PYTHON.exists(), "the 1.x client venv is missing: run `python3 tasks.py test`"
    workspace = "mcp1-" + uuid.uuid4().hex[:6]
    out = subprocess.run(
        [
            str(MCP1_PYTHON),
            str(SCRIPTS / "mcp1_example.py"),
            auth_server.url + "/mcp",
            token(workspaces=[workspace]),
            workspace,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["count"] == 1
    assert result["results"][0]["content"].startswith("Agent memory architecture")


async def test_stdio_serves_the_same_tools_with_logs_on_stderr(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=TRIPTYCH,
        args=["mcp", "metronix", "--data-dir", str(tmp_path / "data")],
        env={**os.environ, "TRIPTYCH_LOG_LEVEL": "info"},
    )
    async with Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        stored = await client.call_tool("metronix_store", {"content": "Over stdio.", "doc_label": "s"})
        got = await client.call_tool("metronix_get", {"doc_label": "s"})
    assert {
        "metronix_search_fast",
        "metronix_get",
        "metronix_store",
        "metronix_status",
        "memory_store",
    } <= names
    assert json.loads(stored.content[0].text)["success"] is True  # type: ignore[union-attr]
    assert json.loads(got.content[0].text)["content"] == "Over stdio."  # type: ignore[union-attr]


@pytest.mark.engines("sqlite", "two-machines")
async def test_hadron_and_metergraph_endpoints_answer_initialize_and_tools_list(
    open_server: ServerProcess,
) -> None:
    from triptych.hadron.tools import TOOLS

    async with mcp_session(open_server.url + "/hadron/mcp") as mcp:
        assert sorted(await mcp.tool_names()) == sorted(TOOLS)
    # Metergraph's agent surface needs an agent key even with auth off; a Debug key sees every
    # contract tool but replay.
    db = open_server.env.get("TRIPTYCH_DATABASE_URL")  # server mode: the keys are there
    key = metergraph_key(open_server.data_dir, "default", "debug", database_url=db)
    async with mcp_session(open_server.url + "/v1/agent/mcp", bearer(key)) as mcp:
        names = await mcp.tool_names()
    assert "metergraph_get_usage_aggregates" in names and "metergraph_replay_trace" not in names


@pytest.mark.engines("sqlite", "two-machines")
def test_legacy_initialize_over_plain_http_on_every_endpoint(open_server: ServerProcess) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "curl", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    db = open_server.env.get("TRIPTYCH_DATABASE_URL")  # server mode: the keys are there
    agent = bearer(metergraph_key(open_server.data_dir, "default", "metadata", database_url=db))
    for path, name in (("/mcp", "metronix"), ("/hadron/mcp", "hadron"), ("/v1/agent/mcp", "metergraph")):
        extra = agent if path == "/v1/agent/mcp" else {}
        response = httpx.post(open_server.url + path, json=body, headers={**headers, **extra})
        assert response.status_code == 200, path
        text = response.text
        payload = json.loads(text.split("data: ", 1)[1]) if text.startswith("event") else response.json()
        assert payload["result"]["serverInfo"]["name"] == name


@pytest.mark.engines("sqlite", "two-machines")
def test_health_answers_200_once_ready(open_server: ServerProcess) -> None:
    response = httpx.get(open_server.url + "/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_a_foreign_host_header_is_refused_unless_configured(tmp_path: Path) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    server = ServerProcess(
        tmp_path / "data", {"TRIPTYCH_ALLOWED_HOSTS": "127.0.0.1:*,metronix-core:*"}
    ).start()
    try:
        refused = httpx.post(server.url + "/mcp", json=body, headers={**headers, "Host": "evil.example:8000"})
        allowed = httpx.post(
            server.url + "/mcp", json=body, headers={**headers, "Host": "metronix-core:8000"}
        )
    finally:
        server.stop()
    assert refused.status_code == 421
    assert allowed.status_code != 421


def test_the_cli_token_command_prints_a_verifiable_jwt(auth_server: ServerProcess) -> None:
    env = {**os.environ, "TRIPTYCH_JWT_SECRET": "cli-secret-cli-secret-cli-secret-32"}
    out = subprocess.run(
        [
            TRIPTYCH,
            "token",
            "--user",
            "u1",
            "--role",
            "viewer",
            "--workspace",
            "W1",
            "--workspace",
            "W2",
            "--ttl",
            "60",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    import jwt

    claims = jwt.decode(out.stdout.strip(), "cli-secret-cli-secret-cli-secret-32", algorithms=["HS256"])
    assert claims["sub"] == "u1" and claims["role"] == "viewer" and claims["workspace_ids"] == ["W1", "W2"]
    assert claims["exp"] - claims["iat"] == 60
    assert "minted viewer token for u1" in out.stderr


def test_the_cli_token_command_says_what_to_set_without_a_secret() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TRIPTYCH_JWT_SECRET", "METRONIX_SECRET_KEY")}
    out = subprocess.run([TRIPTYCH, "token", "--user", "u"], env=env, capture_output=True, text=True)
    assert out.returncode == 2
    assert "TRIPTYCH_JWT_SECRET" in out.stderr
