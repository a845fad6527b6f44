"""The stdio bridge (``triptych metergraph-mcp``): newline-delimited JSON-RPC on stdin/stdout, each
message forwarded to the remote ``/v1/agent/mcp`` endpoint. Standard library only.

``METERGRAPH_URL`` must be an absolute http(s) URL with only a scheme, host and path (no query,
fragment or embedded credentials), else exit code 2. ``METERGRAPH_AGENT_TOKEN`` is read from the
environment, sent only to that origin and never written to stdout or stderr. Redirects are refused,
messages are capped at 1 MiB and responses at 5 MiB.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Any

MAX_MESSAGE_BYTES = 1024 * 1024
MAX_RESPONSE_BYTES = 5 * 1024 * 1024
MCP_PATH = "/v1/agent/mcp"
TIMEOUT_SECONDS = 60.0


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None  # the bearer token is never walked to another URL


def endpoint_url(raw: str) -> str:
    """The MCP endpoint for ``METERGRAPH_URL``; ValueError when the URL is not acceptable."""
    parts = urllib.parse.urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("METERGRAPH_URL must be an absolute http:// or https:// URL")
    if parts.query or parts.fragment or "?" in raw or "#" in raw:
        raise ValueError("METERGRAPH_URL must not carry a query string or a fragment")
    if parts.username is not None or parts.password is not None:
        raise ValueError("METERGRAPH_URL must not embed credentials")
    path = parts.path.rstrip("/")
    if not path.endswith(MCP_PATH):
        path += MCP_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


class Bridge:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self._token = token
        self._opener = urllib.request.build_opener(_RefuseRedirects())

    def forward(self, raw: bytes) -> dict[str, Any] | None:
        """One message in, at most one message out (None for a notification)."""
        if len(raw) > MAX_MESSAGE_BYTES:
            return _error(None, -32700, "Message exceeds 1 MiB")
        try:
            message = json.loads(raw)
        # ValueError covers bad JSON, bad UTF-8 and a number past Python's 4,300 digits; the
        # standard library recurses, so a deeply nested message raises RecursionError.
        except (ValueError, RecursionError):
            return _error(None, -32700, "Parse error")
        msg_id = message.get("id") if isinstance(message, dict) else None
        expects_answer = isinstance(message, dict) and "id" in message and "method" in message
        request = urllib.request.Request(
            self.url,
            data=json.dumps(message, separators=(",", ":")).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "User-Agent": "triptych-metergraph-mcp",
            },
        )
        try:
            with self._opener.open(request, timeout=TIMEOUT_SECONDS) as response:
                status = response.status
                body = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            status = exc.code
            body = exc.read(MAX_RESPONSE_BYTES + 1)
            if 300 <= status < 400:
                return _error(
                    msg_id, -32603, f"Metergraph refused: HTTP {status} redirect (redirects are not followed)"
                )
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return _error(msg_id, -32603, f"Metergraph request failed: {reason}") if expects_answer else None
        if len(body) > MAX_RESPONSE_BYTES:
            return _error(msg_id, -32603, "Metergraph response exceeded 5 MiB")
        if status == 202 or not body:
            return None
        try:
            document = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(msg_id, -32603, f"Metergraph returned HTTP {status} without JSON")
        if isinstance(document, dict) and document.get("jsonrpc") == "2.0":
            return document
        if not expects_answer:
            return None
        detail = document.get("error", {}).get("message") if isinstance(document, dict) else None
        return _error(
            msg_id, -32603, f"Metergraph returned HTTP {status}" + (f": {detail}" if detail else "")
        )

    def serve(self, stdin: IO[bytes], stdout: IO[str]) -> None:
        for line in stdin:
            if not line.strip():
                continue
            answer = self.forward(line.rstrip(b"\r\n"))
            if answer is not None:
                stdout.write(json.dumps(answer, ensure_ascii=False, separators=(",", ":")) + "\n")
                stdout.flush()


def main() -> int:
    try:
        url = endpoint_url(os.environ.get("METERGRAPH_URL", ""))
    except ValueError as exc:
        print(f"metergraph-mcp: {exc}", file=sys.stderr)
        return 2
    token = os.environ.get("METERGRAPH_AGENT_TOKEN", "")
    if not token.strip():
        print("metergraph-mcp: METERGRAPH_AGENT_TOKEN is required", file=sys.stderr)
        return 2
    try:
        Bridge(url, token.strip()).serve(sys.stdin.buffer, sys.stdout)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
