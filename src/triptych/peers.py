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

Several machines behind one load balancer have the same problem one level up, and no shared folder for
sockets: ``TRIPTYCH_PEERS`` names the other machines' base URLs, and a request of a session held by no
worker here is relayed to them over HTTP too (after this machine's own workers), marked as coming from a
machine, so the machine that takes it only looks among its own workers (decision record 0200).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import anyio
import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

RUN_DIR = "TRIPTYCH_WORKER_RUN_DIR"
SESSION = b"mcp-session-id"
RELAYED = b"x-triptych-relayed"
WORKER_HOP = b"1"  # relayed by a worker of this machine: answered here, never relayed again
MACHINE_HOP = b"machine"  # relayed by another machine: relayed only to this machine's own workers
MACHINE_CONNECT = 2.0  # seconds to reach another machine: a machine that is down is skipped quickly
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
    """ASGI middleware: requests of sessions held by another worker, or another machine, go there."""

    def __init__(
        self, app: ASGIApp, run_dir: Path | None, index: str | None, machines: Sequence[str] = ()
    ) -> None:
        self.app = app
        self.run_dir = run_dir
        self.own = None if run_dir is None or index is None else peer_socket(run_dir, index)
        self.machines = [m.rstrip("/") for m in machines]
        self.issued: OrderedDict[str, None] = OrderedDict()

    def peers(self) -> list[Path]:
        if self.run_dir is None:
            return []
        return sorted(p for p in self.run_dir.glob("worker-*.sock") if p != self.own)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        session = headers.get(SESSION, b"").decode("latin-1")
        hop = headers.get(RELAYED)
        if session and session not in self.issued and hop != WORKER_HOP:
            body, receive = await _buffered(receive)
            if body is not None:
                targets: list[Path | str] = [*self.peers(), *(self.machines if hop is None else [])]
                for target in targets:
                    if await self._relay(target, scope, body, receive, send):
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

    async def _relay(
        self, target: Path | str, scope: Scope, body: bytes, receive: Receive, send: Send
    ) -> bool:
        """Send the request to ``target`` (a worker's socket, or another machine's base URL); True when it
        held the session and its answer went to the client."""
        machine = isinstance(target, str)
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in SKIPPED and k != RELAYED]
        headers.append((RELAYED, MACHINE_HOP if machine else WORKER_HOP))
        path = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            path += b"?" + scope["query_string"]
        if isinstance(target, str):
            transport = httpx.AsyncHTTPTransport()
            base = target
        else:
            transport = httpx.AsyncHTTPTransport(uds=str(target))
            base = "http://worker"
        started = False
        try:
            async with httpx.AsyncClient(
                transport=transport,
                timeout=httpx.Timeout(30.0, read=None, connect=MACHINE_CONNECT if machine else 30.0),
            ) as client:
                request = client.build_request(
                    scope["method"], base + path.decode("latin-1"), headers=headers, content=body
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
            log.debug("%s did not answer", target)  # a worker being replaced, a machine down
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


def relayed(app: ASGIApp, machines: Sequence[str] = ()) -> tuple[ASGIApp, socket.socket | None]:
    """The app behind the relay, and this worker's own socket: in a worker of ``serve --workers N``, and
    (``machines``: the other machines' base URLs) on a machine of several."""
    run_dir = os.environ.get(RUN_DIR)
    index = os.environ.get("TRIPTYCH_WORKER_INDEX")
    if run_dir is None or index is None:
        return (SessionRelay(app, None, None, machines) if machines else app), None
    sock = listen_unix(peer_socket(Path(run_dir), index))
    return SessionRelay(app, Path(run_dir), index, machines), sock


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
