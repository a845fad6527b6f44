"""A real webhook receiver for the tests and the benchmark: an HTTP server on 127.0.0.1 that records every
request (headers, raw body, arrival time) and answers with the status the test sets; it can be stopped
(connections refused) and started again on the same port."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    arrived: float  # time.time()
    answered: int

    @property
    def delivery_id(self) -> str:
        return self.headers["x-metergraph-delivery"]

    def json(self) -> Any:
        return json.loads(self.body)

    def verifies(self, secret: str, tolerance_s: float = 300) -> bool:
        """The check a receiver makes (docs/metergraph.md, "Incident webhooks")."""
        timestamp = self.headers["x-metergraph-timestamp"]
        expected = hmac.new(
            secret.encode(), timestamp.encode() + b"." + self.body, hashlib.sha256
        ).hexdigest()
        fresh = abs(time.time() - int(timestamp)) <= tolerance_s
        return fresh and hmac.compare_digest("sha256=" + expected, self.headers["x-metergraph-signature"])


class _Server(ThreadingHTTPServer):
    # The standard backlog of 5 drops connections of a burst (the client retries a second later).
    request_queue_size = 128
    daemon_threads = True


class Receiver:
    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.status = 200
        self.received: list[Received] = []
        self.arrived: list[str] = []  # delivery ids as requests arrive, before any answer
        self.hold: threading.Event | None = None  # set: requests wait for it before answering
        self._cond = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                arrived = time.time()
                with receiver._cond:
                    receiver.arrived.append(self.headers.get("x-metergraph-delivery", ""))
                    receiver._cond.notify_all()
                if receiver.hold is not None:
                    receiver.hold.wait(60)
                status = receiver.status
                answer = json.dumps({"ok": status < 300}).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass  # the sender is gone (killed mid-delivery): the answer is lost, as in real life
                with receiver._cond:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.received.append(Received(headers, body, arrived, status))
                    receiver._cond.notify_all()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the socket: connections are refused until ``start`` again."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join()
            self._server = None

    def accepted(self) -> list[Received]:
        with self._cond:
            return [r for r in self.received if 200 <= r.answered < 300]

    def wait_for(self, done: Callable[[Receiver], bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not done(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def wait_accepted(self, n: int, timeout: float = 30.0) -> list[Received]:
        assert self.wait_for(lambda r: len(r.accepted()) >= n, timeout), (
            f"{len(self.accepted())} of {n} deliveries accepted; {len(self.received)} requests"
        )
        return self.accepted()
