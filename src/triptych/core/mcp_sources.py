"""The registry of MCP sources (``triptych sources``): ``.metronix/mcp_servers.json``, and how to connect.

``metronix_sync`` reads their resources; Hadron's MCP tool actions (``hadron_run_action``) call their
tools. It lives in core because both surfaces use it and surfaces never import each other.

The file has the shape MCP hosts already use::

    {"mcpServers": {"docs": {"command": "python", "args": ["server.py"], "env": {}},
                    "wiki": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ..."}}}}
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from triptych.core.errors import Invalid

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True, slots=True)
class Source:
    name: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def to_json(self) -> dict[str, Any]:
        if self.command:
            return {"command": self.command, "args": self.args, "env": self.env}
        return {"url": self.url, "headers": self.headers}


def sources_path(data_dir: Path, override: str | None = None) -> Path:
    if override:
        return Path(override)
    return data_dir / ".metronix" / "mcp_servers.json"


def parse_source(name: str, spec: Any) -> Source:
    if not _NAME.fullmatch(name):
        raise Invalid(f"source name {name!r} must be 1-64 of A-Z a-z 0-9 . _ -")
    if not isinstance(spec, dict):
        raise Invalid(f"source {name!r} must be an object with 'command' or 'url'")
    if spec.get("command"):
        args = spec.get("args") or []
        env = spec.get("env") or {}
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise Invalid(f"source {name!r}: args must be a list of strings")
        if not isinstance(env, dict):
            raise Invalid(f"source {name!r}: env must be an object")
        return Source(name, command=str(spec["command"]), args=args, env={k: str(v) for k, v in env.items()})
    if spec.get("url"):
        url = str(spec["url"])
        if not url.startswith(("http://", "https://")):
            raise Invalid(f"source {name!r}: url must start with http:// or https://")
        headers = spec.get("headers") or {}
        if not isinstance(headers, dict):
            raise Invalid(f"source {name!r}: headers must be an object")
        return Source(name, url=url, headers={k: str(v) for k, v in headers.items()})
    raise Invalid(f"source {name!r} needs 'command' (stdio) or 'url' (streamable HTTP)")


def load_sources(path: Path) -> dict[str, Source]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise Invalid(
            f"{path} is not valid JSON: {exc}", hint="Fix or recreate it with `triptych sources`"
        ) from exc
    servers = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise Invalid(f"{path} must hold an object with an 'mcpServers' object")
    return {name: parse_source(name, spec) for name, spec in servers.items()}


def save_sources(path: Path, sources: dict[str, Source]) -> None:
    """Write atomically: a crash mid-write never leaves a truncated registry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"mcpServers": {n: s.to_json() for n, s in sorted(sources.items())}}, indent=2)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".mcp_servers.")
    with os.fdopen(fd, "w") as handle:
        handle.write(payload + "\n")
    os.replace(tmp, path)


class HandshakeTimeout(TimeoutError):
    """The source did not finish the MCP handshake (start or connect, discover, initialize) in time."""


@asynccontextmanager
async def connect(source: Source, timeout: float) -> AsyncIterator[Client]:
    """An MCP client session to ``source`` (stdio or streamable HTTP).

    ``timeout`` bounds each request and the whole handshake: the SDK's discover probe waits 10 s whatever
    the read timeout, so a source that printed garbage or never answered held the caller 10 s + timeout.
    """
    # One scope around the whole session, its deadline lifted once the handshake is done: a scope around
    # the entry alone would close while the transport's task group, opened inside it, is still open.
    # On the deadline the SDK's shielded shutdown still runs: a stdio child is killed and reaped.
    with anyio.CancelScope(deadline=anyio.current_time() + timeout) as handshake:
        async with _client(source, timeout) as client:
            handshake.deadline = math.inf
            yield client
    if handshake.cancelled_caught:
        what = "its command: it must start an MCP server that writes only JSON-RPC to stdout"
        if not source.command:
            what = "its url: it must be an MCP streamable HTTP endpoint"
        raise HandshakeTimeout(f"the source did not answer MCP initialize within {timeout:g} s: check {what}")


@asynccontextmanager
async def _client(source: Source, timeout: float) -> AsyncIterator[Client]:
    if source.command:
        params = StdioServerParameters(command=source.command, args=source.args, env=source.env or None)
        async with Client(params, read_timeout_seconds=timeout) as client:
            yield client
        return
    assert source.url is not None
    async with httpx2.AsyncClient(headers=source.headers, timeout=timeout) as http:
        async with Client(
            streamable_http_client(source.url, http_client=http), read_timeout_seconds=timeout
        ) as client:
            yield client
