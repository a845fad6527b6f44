"""Test helpers: real `triptych serve` processes on 127.0.0.1 and the official MCP clients."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from triptych.core.auth import mint_token

ROOT = Path(__file__).resolve().parent.parent
# Data sets nobody here wrote live beside the repository (a copy of shared/ in CI), never inside it.
SHARED = Path(os.environ.get("TRIPTYCH_SHARED_DIR", ROOT.parent / "shared"))


def shared_file(relative: str, override: str | None = None) -> Path:
    """A file of the shared reference set (contracts, corpora, data sets), or a skip that says where it
    was looked for. Set ``TRIPTYCH_REQUIRE_SHARED=1`` (CI does) to fail instead of skipping."""
    import pytest

    path = Path(os.environ[override]) if override and os.environ.get(override) else SHARED / relative
    if not path.is_file():
        message = (
            f"{relative} not found at {path}: it is reference material kept outside the repository; "
            "set TRIPTYCH_SHARED_DIR to the folder that holds it"
        )
        if os.environ.get("TRIPTYCH_REQUIRE_SHARED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def client_python(name: str) -> Path:
    """The Python of a product's own client package, installed from the registry into an environment of its
    own by ``tasks.py`` (``tests/clients/<name>.txt``); a skip, or a failure where CI requires it, without."""
    import pytest

    python = ROOT / f".venv-client-{name}" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        message = f"{python} not found: `python3 tasks.py test` installs tests/clients/{name}.txt there"
        if os.environ.get("TRIPTYCH_REQUIRE_SHARED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return python


VENV_BIN = Path(sys.executable).parent
TRIPTYCH = str(VENV_BIN / "triptych")
SECRET = "test-secret-that-is-long-enough-for-hs256"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 answering with ``handler`` for the block; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def _record_start(env: dict[str, str]) -> None:
    """With ``TRIPTYCH_TEST_SERVER_LOG`` set, one line per server start (the xdist worker, the test running
    and which engine variables were passed) appended to that file: how the suite's server starts are counted."""
    path = os.environ.get("TRIPTYCH_TEST_SERVER_LOG")
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    engines = sorted(k for k in env if k in ("TRIPTYCH_DATABASE_URL", "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL"))
    with open(path, "a") as log:
        log.write(f"{os.environ.get('PYTEST_XDIST_WORKER', '-')}\t{test}\t{','.join(engines) or 'sqlite'}\n")


@dataclass
class ServerProcess:
    """A real `triptych serve` subprocess; its log is in ``log_path`` for post-mortems."""

    data_dir: Path
    env: dict[str, str]
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # False: leave TRIPTYCH_DATA_DIR alone, so the server uses its default (``data_dir`` then only holds
    # the log); ``cwd`` is the folder it starts in.
    pass_data_dir: bool = True
    cwd: Path | None = None
    # A port chosen beforehand (machines that name each other's URLs need them before they start).
    fixed_port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> ServerProcess:
        # A start imports the whole product and warms the model: seconds on an idle machine, but over a
        # minute where other suites (or the xdist workers of this one) share the cores. The bound only
        # limits how long a server that never answers is waited for.
        self.port = self.fixed_port or free_port()
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        env = {**os.environ, **self.env}
        if self.pass_data_dir:
            env["TRIPTYCH_DATA_DIR"] = str(self.data_dir)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [TRIPTYCH, "serve", "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
            )
        _record_start(self.env)
        deadline = time.monotonic() + timeout
        # One client for every poll, and a bare connect until the port listens: a new client per poll
        # (an SSL context each) cost the test process as much CPU as the start itself on a loaded machine.
        with httpx.Client(timeout=1.0) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"server exited early:\n{self.log()}")
                if _listening(self.port):
                    try:
                        if http.get(self.url + "/health").status_code == 200:
                            return self
                    except httpx.HTTPError:
                        pass
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not become healthy:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def open_metergraph(server: ServerProcess) -> Any:
    """The Metergraph services on a server's data directory and engines (its ClickHouse and PostgreSQL
    URLs, if any)."""
    from triptych.metergraph.service import Metergraph
    from triptych.metergraph.settings import load_metergraph_settings

    url = server.env.get("TRIPTYCH_METERGRAPH_CLICKHOUSE_URL")
    return Metergraph.open(
        server.data_dir,
        load_metergraph_settings(clickhouse_url=url),
        # Server mode: the keys, routes and control data are there.
        database_url=server.env.get("TRIPTYCH_DATABASE_URL"),
    )


def cli_env(server: ServerProcess) -> dict[str, str]:
    """The environment of a `triptych` command run beside ``server``, as an operator on its machine would:
    the server's settings (its engines among them), so the command writes where the server reads."""
    return {**os.environ, **server.env}


def metergraph_key(
    data_dir: Path, workspace: str, role: str = "debug", app: bool = False, database_url: str | None = None
) -> str:
    """A Metergraph agent key (or, with ``app``, an ingest token) minted where a server keeps its keys: its
    data directory, or its PostgreSQL database (``database_url``)."""
    from triptych.metergraph.service import Metergraph
    from triptych.metergraph.settings import load_metergraph_settings

    mg = Metergraph.open(data_dir, load_metergraph_settings(), database_url=database_url)
    try:
        if app:
            return mg.keys.create_app_token(workspace)[1]
        return mg.keys.create_agent_key(workspace, role, None)[1]
    finally:
        mg.close()


def token(
    user: str = "alice", role: str = "editor", workspaces: list[str] | None = None, ttl: int = 6 * 3600
) -> str:
    # Six hours: a token minted at import (module constants) must outlive the whole suite. With ten
    # minutes, the robustness files' module tokens had expired by the time a slow CI run reached them,
    # and every write was refused (the "intermittent" kill -9 and full-disk failures of 2026-12-01).
    return mint_token(SECRET, user, role, workspaces or [], ttl)  # type: ignore[arg-type]


@dataclass
class ToolResult:
    is_error: bool
    data: dict[str, Any]

    @property
    def error_code(self) -> str | None:
        return self.data["error"]["code"] if self.is_error else None


class McpSession:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, **arguments: Any) -> ToolResult:
        result = await self.client.call_tool(tool, arguments)
        text = result.content[0].text  # type: ignore[union-attr]
        return ToolResult(bool(result.is_error), json.loads(text))

    async def tool_names(self) -> list[str]:
        return [tool.name for tool in (await self.client.list_tools()).tools]


@asynccontextmanager
async def mcp_session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[McpSession]:
    """The official 2.x MCP client over streamable HTTP."""
    async with httpx2.AsyncClient(headers=headers or {}, timeout=60.0) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield McpSession(client)


def bearer(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


def count_loads(*caches: Any) -> list[str]:
    """Record every partition load of these caches from now on (the list fills in place): a
    ``PartitionCache``'s ``_load``, or the ``_loader`` of Hadron's ``ExactIndex``."""
    loads: list[str] = []
    for cache in caches:
        name = "_load" if hasattr(cache, "_load") else "_loader"
        original = getattr(cache, name)

        def counted(key: str, *rest: Any, original: Any = original) -> Any:
            loads.append(key)
            return original(key, *rest)

        setattr(cache, name, counted)
    return loads


def run_threads(work: Any, n: int) -> list[BaseException]:
    """``work(i)`` in ``n`` threads at once; whatever they raised."""
    import threading

    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
