"""Running the product's own relay (``metergraphrelay``, installed from the registry in its own environment)
against a real ``triptych serve``, and reading what landed back through the Agent Access REST mirror."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
from harness import ServerProcess, client_python, open_metergraph

# The relay reads these from the environment (and from --env-file): a test sets only its own.
_RELAY_ENV = (
    "METERGRAPH_APP_TOKEN", "METERGRAPH_INGEST_URL", "PORTKEY_API_KEY", "PORTKEY_WORKSPACE", "PORTKEY_BASE_URL",
    "PHOENIX_API_KEY", "PHOENIX_BASE_URL", "LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "LANGFUSE_BASE_URL",
)  # fmt: skip


def relay_command(
    server: ServerProcess, app_token: str, args: list[str], tmp: Path, **env: str
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``metergraphrelay <args>`` pointed at ``server``, with an empty
    --env-file (no .env is read)."""
    script = client_python("metergraphrelay").parent / "metergraphrelay"
    env_file = tmp / "relay.env"
    env_file.touch()
    environment = {
        k: v for k, v in os.environ.items() if k not in _RELAY_ENV and not k.startswith("TRIPTYCH")
    }
    environment.update(METERGRAPH_APP_TOKEN=app_token, METERGRAPH_INGEST_URL=server.url, **env)
    return [str(script), *args, "--env-file", str(env_file)], environment


def relay(
    server: ServerProcess, app_token: str, args: list[str], tmp: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``metergraphrelay <args>`` against ``server`` to its end."""
    command, environment = relay_command(server, app_token, args, tmp, **env)
    return subprocess.run(command, env=environment, cwd=tmp, capture_output=True, text=True, timeout=120)


def mint(server: ServerProcess, workspace: str, role: str | None = None) -> str:
    """An app token (``role`` None) or an agent key of ``role`` in ``workspace``."""
    mg = open_metergraph(server)
    try:
        if role is None:
            return str(mg.keys.create_app_token(workspace)[1])
        return str(mg.keys.create_agent_key(workspace, role, None)[1])
    finally:
        mg.close()


def stored_calls(server: ServerProcess, workspace: str) -> list[dict[str, Any]]:
    """The workspace's stored call rows, as the engine holds them (what REST does not show: the reported
    cost as stored)."""
    mg = open_metergraph(server)
    try:
        return list(mg.calls.raw_calls(workspace))
    finally:
        mg.close()


def traces(server: ServerProcess, agent_key: str) -> dict[str, dict[str, Any]]:
    """Every trace of the last 7 days through ``GET /v1/agent/traces``, by trace id."""
    out: dict[str, dict[str, Any]] = {}
    params: dict[str, Any] = {"days": 7, "limit": 200}
    while True:
        page = httpx.get(
            server.url + "/v1/agent/traces", params=params, headers={"Authorization": f"Bearer {agent_key}"},
            timeout=60,
        )  # fmt: skip
        assert page.status_code == 200, page.text
        body = page.json()
        out.update({t["trace_id"]: t for t in body["traces"]})
        cursor = body["page"]["next_cursor"]
        if not cursor:
            return out
        params["cursor"] = cursor
