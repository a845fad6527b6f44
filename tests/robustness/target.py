"""One real `triptych serve` with every surface populated, the callers that attack it, and secrets
planted where those callers must never see them (another organization, workspace or tenant)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from harness import SECRET, ServerProcess, token
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

# Markers stored where the attacking callers have no access: no answer they get may contain one.
SECRETS = ("GLOBEX-SECRET-7f3a", "OTHER-WS-SECRET-91c2", "MG-OTHER-SECRET-55d0")


@dataclass
class Target:
    server: ServerProcess
    metronix_token: str  # alice, editor of ws-a only
    other_token: str  # bob, editor of ws-b (holds a secret)
    agent_key: str  # Metergraph agent of workspace mg-a
    app_token: str  # Metergraph ingest into mg-a
    other_app_token: str  # Metergraph ingest into mg-b (holds a secret)
    hadron_headers: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url


def start_target(tmp: Path, engines: dict[str, str] | None = None) -> Target:
    """The Hadron world of the contract tests plus Metronix and Metergraph tenants, auth on. ``engines``:
    the server-mode environment (``TRIPTYCH_DATABASE_URL``, ``TRIPTYCH_METERGRAPH_CLICKHOUSE_URL``), or
    None for the embedded engine."""
    from hadron.world import build_world

    engines = engines or {}
    data_dir = tmp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    build_world(data_dir, engines.get("TRIPTYCH_DATABASE_URL"))
    # Keys where the server looks for them: PostgreSQL in server mode.
    mg = Metergraph.open(
        data_dir, load_metergraph_settings(), database_url=engines.get("TRIPTYCH_DATABASE_URL")
    )
    try:
        agent_key = mg.keys.create_agent_key("mg-a", "debug", None)[1]
        app_token = mg.keys.create_app_token("mg-a")[1]
        other_app_token = mg.keys.create_app_token("mg-b")[1]
    finally:
        mg.close()
    env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET, **engines}
    server = ServerProcess(data_dir, env).start()
    return Target(
        server,
        token(user="alice", workspaces=["ws-a"]),
        token(user="bob", workspaces=["ws-b"]),
        agent_key,
        app_token,
        other_app_token,
        {"Authorization": f"Bearer {token(user='alice')}"},
    )


class ClientThread:
    """The official MCP client, held open in its own event loop thread so that synchronous code
    (Hypothesis tests) can call tools one after another on one session."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self._loop = asyncio.new_event_loop()
        self._requests: asyncio.Queue[
            tuple[Callable[[Client], Awaitable[Any]], concurrent.futures.Future[Any]]
        ]
        self._ready = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(120):
            # Stop the half-open session and close its loop: a loop left for the garbage collector
            # raises ResourceWarnings inside whichever test runs next (seen in CI), hiding this failure.
            if self._task is not None:
                self._loop.call_soon_threadsafe(self._task.cancel)
            self._thread.join(30)
            if not self._thread.is_alive():
                self._loop.close()
            raise RuntimeError(f"no MCP session with {url} within 120 s")

    def _serve(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        except BaseException:  # cancelled by close() after the server died: nothing left to report
            pass

    async def _main(self) -> None:
        self._task = asyncio.current_task()
        self._requests = asyncio.Queue()
        async with httpx2.AsyncClient(headers=self.headers, timeout=120.0) as http:
            async with Client(streamable_http_client(self.url, http_client=http)) as client:
                self._ready.set()
                while True:
                    work, future = await self._requests.get()
                    if future is None:
                        return
                    try:
                        future.set_result(await work(client))
                    except BaseException as exc:  # handed to the caller, who decides
                        future.set_exception(exc)

    def run(self, work: Callable[[Client], Awaitable[Any]], timeout: float = 120.0) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._requests.put_nowait, (work, future))
        return future.result(timeout)

    def list_tools(self) -> list[Any]:
        async def work(client: Client) -> list[Any]:
            return list((await client.list_tools()).tools)

        tools: list[Any] = self.run(work)
        return tools

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        async def work(client: Client) -> Any:
            return await client.call_tool(name, arguments)

        return self.run(work)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._requests.put_nowait, (None, None))  # type: ignore[arg-type]
        self._thread.join(10)
        if self._thread.is_alive() and self._task is not None:  # the server is gone: stop waiting for it
            self._loop.call_soon_threadsafe(self._task.cancel)
            self._thread.join(30)
        self._loop.close()


def result_text(result: Any) -> str:
    parts = [getattr(c, "text", "") for c in result.content]
    if result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


def error_code(result: Any) -> str | None:
    """The refusal code of a tool result in any of the three shapes, None for a success."""
    if not result.is_error:
        return None
    for source in (result.structured_content, *(_json(getattr(c, "text", "")) for c in result.content)):
        if isinstance(source, dict) and isinstance(source.get("error"), dict):
            return str(source["error"].get("code"))
    text = getattr(result.content[0], "text", "") if result.content else ""
    return text.split(":", 1)[0].strip("[] ") or "?"


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
