"""MCP sessions across the workers of ``serve --workers N``: a request reaches the worker holding its session.

An MCP session (Hadron's, by contract) lives in the memory of the worker that opened it, while the kernel
hands each new connection to any worker. An MCP client uses several connections for one session (the 2.x
client opens its GET stream beside its POSTs, and an idle keep-alive connection is closed after 5 s), so
without help a request of a live session reaches another worker and gets 404 ``Session not found``.

So each worker also listens on a Unix socket of its own in the supervisor's run folder, and remembers the
session ids its responses issued. A request naming a session this worker did not issue is relayed to the
other workers' sockets in turn, marked as relayed so it is never relayed again, and the first answer that
is not 404 goes back to the client (streamed: an SSE stream stays open as long as the client keeps it).
When no worker holds the session, the request is answered here, and the MCP transport says 404 as it
would in one process: the client opens a new session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
from collections import OrderedDict
from pathlib import Path

import anyio
import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

RUN_DIR = "TRIPTYCH_WORKER_RUN_DIR"
SESSION = b"mcp-session-id"
RELAYED = b"x-triptych-relayed"
# Hop-by-hop headers, and the length the relay recomputes: never copied across. (Host is kept: the
# endpoints' Host guard judges the client's.)
SKIPPED = {b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"upgrade"}
REMEMBERED = 100_000  # session ids a worker remembers issuing (the oldest are forgotten first)
MAX_BODY = 8 * 1024 * 1024  # above every MCP endpoint's own limit: the owner refuses, in its words


def peer_socket(run_dir: Path, index: str) -> Path:
    return run_dir / f"worker-{index}.sock"


def listen_unix(path: Path) -> socket.socket:
    """This worker's own socket, for requests relayed by the other workers."""
    path.unlink(missing_ok=True)  # a previous worker of this number died without removing it
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(256)
    return sock


class SessionRelay:
    """ASGI middleware: requests of sessions held by another worker go to that worker."""

    def __init__(self, app: ASGIApp, run_dir: Path, index: str) -> None:
        self.app = app
        self.run_dir = run_dir
        self.own = peer_socket(run_dir, index)
        self.issued: OrderedDict[str, None] = OrderedDict()

    def peers(self) -> list[Path]:
        return sorted(p for p in self.run_dir.glob("worker-*.sock") if p != self.own)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        session = headers.get(SESSION, b"").decode("latin-1")
        if session and session not in self.issued and RELAYED not in headers:
            body, receive = await _buffered(receive)
            if body is not None:
                for peer in self.peers():
                    if await self._relay(peer, scope, body, receive, send):
                        return

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == SESSION:
                        self.issued[value.decode("latin-1")] = None
                        while len(self.issued) > REMEMBERED:
                            self.issued.popitem(last=False)
            await send(message)

        await self.app(scope, receive, noting)

    async def _relay(self, peer: Path, scope: Scope, body: bytes, receive: Receive, send: Send) -> bool:
        """Send the request to ``peer``; True when it held the session and its answer went to the client."""
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in SKIPPED] + [
            (RELAYED, b"1")
        ]
        path = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            path += b"?" + scope["query_string"]
        transport = httpx.AsyncHTTPTransport(uds=str(peer))
        started = False
        try:
            async with httpx.AsyncClient(
                transport=transport, timeout=httpx.Timeout(30.0, read=None)
            ) as client:
                request = client.build_request(
                    scope["method"], "http://worker" + path.decode("latin-1"), headers=headers, content=body
                )
                response = await client.send(request, stream=True)
                try:
                    if response.status_code == 404:
                        return False
                    kept = [(k, v) for k, v in response.headers.raw if k.lower() not in SKIPPED]
                    await send(
                        {"type": "http.response.start", "status": response.status_code, "headers": kept}
                    )
                    started = True
                    await _stream(response, receive, send)
                    return True
                finally:
                    await response.aclose()
        except (httpx.TransportError, OSError):
            if started:  # the peer went away mid-answer: the client sees the stream end
                return True
            log.debug("worker socket %s did not answer", peer)  # a worker being replaced
            return False


async def _stream(response: httpx.Response, receive: Receive, send: Send) -> None:
    """The peer's body to the client until either side ends (a GET stream ends when the client leaves)."""
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(watch)
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        group.cancel_scope.cancel()


async def _buffered(receive: Receive) -> tuple[bytes | None, Receive]:
    """The request body read in full, and a ``receive`` that replays it (None: too big to relay)."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        more = bool(message.get("more_body"))
        if size > MAX_BODY:
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return (None if more else body), replay


def relayed(app: ASGIApp) -> tuple[ASGIApp, socket.socket | None]:
    """In a worker of ``serve --workers N``: the app behind the relay, and this worker's own socket."""
    run_dir = os.environ.get(RUN_DIR)
    index = os.environ.get("TRIPTYCH_WORKER_INDEX")
    if run_dir is None or index is None:
        return app, None
    sock = listen_unix(peer_socket(Path(run_dir), index))
    return SessionRelay(app, Path(run_dir), index), sock


def forget_socket(path: Path) -> None:
    """At a worker's exit: remove its socket file, and the run folder when the supervisor is gone (it
    was killed, so it cannot)."""
    path.unlink(missing_ok=True)
    supervisor = os.environ.get("TRIPTYCH_SUPERVISOR_PID")
    if supervisor is not None and os.getppid() != int(supervisor):
        if any(p.suffix == ".sock" for p in path.parent.iterdir()):
            return  # another worker still has its socket there: the last one out tidies up
        # The workers' /metrics files (core/metrics.py) go with the last worker.
        shutil.rmtree(path.parent / "metrics", ignore_errors=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()
