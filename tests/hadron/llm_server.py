"""A small OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1, run in a thread of the test.

Its answer is deterministic (``Summary: <the first five words>.``) so a test can tell an LLM abstract
from an extractive one; ``failing`` makes it answer HTTP 500; every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class LlmServer:
    port: int = 0
    failing: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def answer(body: dict[str, Any]) -> str:
    words = str(body["messages"][-1]["content"]).split()[:5]
    return "Summary: " + " ".join(words) + "."


@contextmanager
def llm_server() -> Iterator[LlmServer]:
    state = LlmServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append({"path": self.path, **body})
            if state.failing or not self.path.endswith("/chat/completions"):
                self._send(500, {"error": {"message": "the model is unavailable"}})
                return
            message = {"role": "assistant", "content": answer(body)}
            self._send(200, {"id": "c1", "object": "chat.completion", "model": body["model"],
                             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})  # fmt: skip

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
