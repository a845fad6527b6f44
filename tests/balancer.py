"""A small load balancer for the two-machine tests: each new client connection goes to the next live
backend in turn (round robin), and its bytes flow both ways untouched, so streamed responses (SSE) pass
through as they are produced. With ``per_request``, each HTTP request goes to the next backend instead,
even within one kept-alive client connection (an HTTP/1.1 proxy: the request is sent over a connection of
its own that the backend closes after the response, and the response comes back streamed as it is made):
a client that keeps its connection, as the MCP clients do, still alternates between the machines.

A backend is marked dead by the test (``mark_dead``: its open connections are cut, as a health check
would) or found dead by the balancer itself when a connection to it is refused; new connections then go
to the survivors. ``pinned(i)`` sends every new connection of a block to one backend (a test that must
write through one machine and read through the other says so); ``served`` records where each accepted
connection went. asyncio on a thread of its own, so synchronous and asynchronous tests can share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Balancer:
    backends: list[tuple[str, int]]
    per_request: bool = False
    port: int = 0
    served: list[int] = field(default_factory=list)
    dead: set[int] = field(default_factory=set)
    _pin: int | None = None
    _next: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.AbstractServer | None = None
    _thread: threading.Thread | None = None
    _open: dict[int, set[asyncio.StreamWriter]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Balancer:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()

        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writers in self._open.values():
                for writer in writers:
                    writer.close()
            # The connections' tasks end with their sockets: wait for them, so none is left pending.
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()
        self._loop = None

    def mark_dead(self, index: int) -> None:
        """No new connection goes to ``index``; the ones it holds are cut (what clients of a machine
        that died see)."""
        assert self._loop is not None

        async def cut() -> None:
            self.dead.add(index)
            for writer in self._open.get(index, set()):
                writer.close()

        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)

    @contextlib.contextmanager
    def pinned(self, index: int) -> Iterator[None]:
        """New connections of the block go to backend ``index``."""
        self._pin = index
        try:
            yield
        finally:
            self._pin = None

    def _choose(self) -> list[int]:
        """Backends to try for a new connection, in order: the pinned one, or the next in turn first."""
        if self._pin is not None:
            return [self._pin]
        n = len(self.backends)
        order = [(self._next + k) % n for k in range(n)]
        self._next = (self._next + 1) % n
        return [i for i in order if i not in self.dead]

    async def _connect(self) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the next live backend; None when none answers."""
        for index in self._choose():
            host, port = self.backends[index]
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:  # refused: the machine is gone (a passive health check)
                self.dead.add(index)
                continue
            self.served.append(index)
            return index, reader, writer
        return None

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self.per_request:
            await self._requests(client_reader, client_writer)
            return
        backend = await self._connect()
        if backend is None:
            client_writer.close()
            return
        index, reader, writer = backend
        held = self._open.setdefault(index, set())
        held.update((writer, client_writer))
        try:
            await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))
        except asyncio.CancelledError:
            pass  # the balancer is stopping: the connection ends with it
        finally:
            held.discard(writer)
            held.discard(client_writer)
            for w in (writer, client_writer):
                w.close()

    async def _requests(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        """Each request of a client connection to the next backend, until either side closes."""
        try:
            while (request := await _read_request(client_reader)) is not None:
                head, body = request
                backend = await self._connect()
                if backend is None:
                    break
                index, reader, writer = backend
                held = self._open.setdefault(index, set())
                held.update((writer, client_writer))
                try:
                    writer.write(_with_connection(head, b"close") + body)
                    await writer.drain()
                    keep = await _relay_response(reader, client_writer, head)
                finally:
                    held.discard(writer)
                    held.discard(client_writer)
                    writer.close()
                if not keep:
                    break
        except (asyncio.CancelledError, ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            pass  # the balancer is stopping, a machine was cut, or a side closed mid-message
        finally:
            client_writer.close()


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One HTTP/1.1 request from a client: its head and its whole body; None when the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    headers = _headers(head)
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        body = b""
        while True:  # size line, data and CRLF per chunk; a 0 chunk, then trailers up to a blank line
            line = await reader.readuntil(b"\r\n")
            body += line
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                    body += trailer
                return head, body + b"\r\n"
            body += await reader.readexactly(size + 2)
    return head, await reader.readexactly(int(headers.get(b"content-length", b"0")))


async def _relay_response(reader: asyncio.StreamReader, client: asyncio.StreamWriter, request: bytes) -> bool:
    """The backend's response to ``client`` as it comes, up to the backend's close (it was asked to close
    after it); whether the client's connection may carry another request."""
    head = await reader.readuntil(b"\r\n\r\n")
    headers = _headers(head)
    status = int(head.split(b" ", 2)[1])
    # A body delimited by the connection's end, or a client that asked to close: the close goes through.
    framed = b"content-length" in headers or b"transfer-encoding" in headers or status in (204, 304)
    framed = framed or request.startswith(b"HEAD ") or 100 <= status < 200
    keep = framed and _headers(request).get(b"connection", b"").lower() != b"close"
    client.write(_with_connection(head, None) if keep else head)
    while chunk := await reader.read(65536):
        client.write(chunk)
        await client.drain()
    await client.drain()
    return keep


def _headers(head: bytes) -> dict[bytes, bytes]:
    """A message head's header fields, names lowercased (a repeated field keeps its last value)."""
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields


def _with_connection(head: bytes, value: bytes | None) -> bytes:
    """``head`` without its Connection and Keep-Alive fields, and with ``Connection: value`` if given (none:
    HTTP/1.1's default, the connection stays open)."""
    lines = head[:-4].split(b"\r\n")
    kept = [
        lines[0],
        *(
            ln
            for ln in lines[1:]
            if ln.split(b":", 1)[0].strip().lower() not in (b"connection", b"keep-alive")
        ),
    ]
    if value is not None:
        kept.append(b"Connection: " + value)
    return b"\r\n".join(kept) + b"\r\n\r\n"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from ``reader`` to ``writer`` until either side ends; then the other side is closed too."""
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()
