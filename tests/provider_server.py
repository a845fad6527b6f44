"""A local LLM provider on 127.0.0.1 that answers like OpenAI (``POST /v1/chat/completions``) and
Anthropic (``POST /v1/messages``), for replay tests that run the real client libraries over HTTP.

The model name picks the behaviour, so a test chooses it through the stored call or a candidate model:

    ...slow...       answers after ``slow_seconds`` (a timeout)
    ...dribble...    sends the headers, then one body byte every half second (a stalled stream)
    ...ratelimit...  HTTP 429 with ``retry-after``
    ...broken...     HTTP 500
    ...badauth...    HTTP 401
    anything else    a completion: "replayed: " + the last user message, word counts as token usage

It also serves Portkey's Logs Export API (create, start, status, signed download of a JSONL export over
``portkey_rows`` in the requested window; every export is done at once) for the relay's scheduled
``sync portkey``, and Arize Phoenix's spans API (``GET /v1/projects/{project}/spans``, cursor-paged, filtered by
``start_time`` inclusive and ``end_time`` exclusive), over the spans a test puts in ``spans[project]``,
for the relay's scheduled ``sync phoenix``. While ``span_gate`` is set to an unset event, a spans request
waits on it (after setting ``span_waiting``): a test holds a sync run inside its lease that way.

Every request is recorded (path, headers, JSON body) in ``requests``.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import uuid
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PORTKEY_EXPORTS = (
    "/v1/logs/exports"  # under ``portkey_url``, as Portkey's API base is https://api.portkey.ai/v1
)


def _words(text: str) -> int:
    return max(1, len(text.split()))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class ProviderServer:
    def __init__(self, slow_seconds: float = 5.0) -> None:
        self.slow_seconds = slow_seconds
        self.requests: list[dict[str, Any]] = []
        self.aborted = 0  # trickled answers the client hung up on
        self.stopping = threading.Event()
        self.spans: dict[str, list[dict[str, Any]]] = {}
        self.span_gate: threading.Event | None = None
        self.span_waiting = threading.Event()
        self.page_size = 2
        self.portkey_rows: list[dict[str, Any]] = []  # a Portkey workspace's logs, as its export writes them
        self._exports: dict[str, list[dict[str, Any]]] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append({"path": self.path, "headers": headers, "json": body})
                if self.path.startswith(PORTKEY_EXPORTS):
                    return server.answer_portkey(self, body)
                server.answer(self, body)

            def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append({"path": self.path, "headers": headers, "json": None})
                if self.path.startswith((PORTKEY_EXPORTS, "/signed/")):
                    return server.answer_portkey(self, None)
                server.answer_spans(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    @property
    def portkey_url(self) -> str:
        return self.url + "/v1"

    def __enter__(self) -> ProviderServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _sleep(self, seconds: float) -> None:
        self.stopping.wait(seconds)

    def answer_spans(self, handler: BaseHTTPRequestHandler) -> None:
        """Phoenix's ``GET /v1/projects/{project}/spans``: LLM spans in [start_time, end_time), paged."""
        url = urllib.parse.urlsplit(handler.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[:2] != ["v1", "projects"] or parts[3] != "spans":
            return self._json(handler, 404, {"detail": "Not Found"})
        project = urllib.parse.unquote(parts[2])
        if project not in self.spans:
            return self._json(handler, 404, {"detail": f"project {project} not found"})
        if self.span_gate is not None:
            self.span_waiting.set()
            self.span_gate.wait(60)
        query = dict(urllib.parse.parse_qsl(url.query))
        start, end = (
            datetime.fromisoformat(query[k]) if k in query else None for k in ("start_time", "end_time")
        )
        chosen = [
            s for s in self.spans[project]
            if (start is None or datetime.fromisoformat(s["start_time"]) >= start)
            and (end is None or datetime.fromisoformat(s["start_time"]) < end)
            and query.get("span_kind") in (None, s["span_kind"])
        ]  # fmt: skip
        offset = int(query.get("cursor", "0"))
        size = min(self.page_size, int(query.get("limit", "100")))
        page = chosen[offset : offset + size]
        more = offset + size < len(chosen)
        self._json(handler, 200, {"data": page, "next_cursor": str(offset + size) if more else None})

    def answer_portkey(self, handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        """Portkey's Logs Export API: create a draft over ``[time_of_generation_min, max)`` (its ``total``),
        start it, read its status (done at once), the signed URL, and the JSONL behind it."""
        path = urllib.parse.urlsplit(handler.path).path
        if handler.path.startswith("/signed/"):
            rows = self._exports[path.rsplit("/", 1)[1]]
            raw = "".join(json.dumps(r) + "\n" for r in rows).encode()
            handler.send_response(200)
            handler.send_header("content-type", "application/x-ndjson")
            handler.send_header("content-length", str(len(raw)))
            handler.end_headers()
            handler.wfile.write(raw)
            return None
        if not handler.headers.get("x-portkey-api-key"):
            return self._json(handler, 401, {"error": "missing x-portkey-api-key"})
        rest = path[len(PORTKEY_EXPORTS) :].strip("/").split("/")
        if rest == [""] and body is not None:  # create the draft
            bounds = body["filters"]
            low, high = (datetime.fromisoformat(bounds[k].replace("Z", "+00:00"))
                         for k in ("time_of_generation_min", "time_of_generation_max"))  # fmt: skip
            rows = [r for r in self.portkey_rows
                    if low <= datetime.fromisoformat(r["created_at"].replace("Z", "+00:00")) < high]  # fmt: skip
            export_id = "exp_" + uuid.uuid4().hex[:12]
            self._exports[export_id] = rows
            return self._json(handler, 200, {"id": export_id, "total": len(rows), "object": "export"})
        export_id = rest[0]
        if export_id not in self._exports:
            return self._json(handler, 404, {"error": "no such export"})
        if rest[1:] in (["start"], ["cancel"]):
            return self._json(handler, 200, {"success": True})
        if rest[1:] == []:
            return self._json(handler, 200, {"id": export_id, "status": "success"})
        if rest[1:] == ["download"]:
            return self._json(handler, 200, {"signed_url": f"{self.url}/signed/{export_id}"})
        return self._json(handler, 404, {"error": "Not Found"})

    @staticmethod
    def _json(
        handler: BaseHTTPRequestHandler, status: int, document: Any, headers: dict[str, str] | None = None
    ) -> None:
        raw = json.dumps(document).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(raw)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        try:
            handler.wfile.write(raw)
        except OSError:
            pass  # the client gave up waiting

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        model = str(body.get("model", ""))
        anthropic = handler.path.rstrip("/").endswith("/v1/messages")
        if "slow" in model:
            self._sleep(self.slow_seconds)
        if "ratelimit" in model:
            return self._error(handler, 429, "rate_limit_error", "slow down", anthropic, {"retry-after": "7"})
        if "broken" in model:
            return self._error(handler, 500, "api_error", "the model crashed", anthropic)
        if "badauth" in model:
            return self._error(handler, 401, "authentication_error", "invalid x-api-key", anthropic)
        messages = body.get("messages") or []
        last_user = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        output = f"replayed: {last_user}"
        prompt_words = sum(_words(_text(m.get("content"))) for m in messages)
        if isinstance(body.get("system"), str):
            prompt_words += _words(body["system"])
        cap = body.get("max_tokens") or body.get("max_completion_tokens") or 1024
        words = output.split()[: int(cap)]
        output = " ".join(words)
        if anthropic:
            document: dict[str, Any] = {
                "id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": output}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": prompt_words, "output_tokens": len(words)},
            }  # fmt: skip
        else:
            document = {
                "id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": output}}],
                "usage": {"prompt_tokens": prompt_words, "completion_tokens": len(words),
                          "total_tokens": prompt_words + len(words)},
            }  # fmt: skip
        raw = json.dumps(document).encode()
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(raw)))
        handler.end_headers()
        if "dribble" in model:
            for byte in raw:
                if self.stopping.is_set():
                    return
                try:
                    handler.wfile.write(bytes([byte]))
                    handler.wfile.flush()
                except OSError:
                    self.aborted += 1  # the client gave up
                    return
                self._sleep(0.5)
            return
        try:
            handler.wfile.write(raw)
        except OSError:
            pass  # the client gave up waiting

    @staticmethod
    def _error(
        handler: BaseHTTPRequestHandler,
        status: int,
        kind: str,
        message: str,
        anthropic: bool,
        headers: dict[str, str] | None = None,
    ) -> None:
        if anthropic:
            document: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
        else:
            document = {"error": {"message": message, "type": kind, "code": kind}}
        ProviderServer._json(handler, status, document, headers)
