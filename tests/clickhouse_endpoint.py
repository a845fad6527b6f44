"""A ClickHouse HTTP endpoint over chdb, for tests and benchmarks (never part of the product).

No current ClickHouse server installs from the package registries reachable here, but PyPI's ``chdb`` is
the ClickHouse engine itself (26.x) running in-process. This module serves, on 127.0.0.1, the subset of
ClickHouse's HTTP interface that ``clickhouse-connect`` uses, so the product's real client talks real HTTP
to a real ClickHouse engine:

- ``GET /ping`` and ``GET /`` answer ``Ok.``;
- a query from the ``query`` URL parameter, the request body, or both (the body follows the query, as on a
  real server, which is how an ``INSERT ... FORMAT Native`` carries its data);
- the ``database`` URL parameter (or ``X-ClickHouse-Database`` header) for unqualified names;
- server-side query parameters (``param_<name>=<value>``, bound by the engine for ``{name:Type}``), in
  the URL or, with the query, as the fields of a ``multipart/form-data`` body (what the client sends
  when they are too long for a URL);
- ``FORMAT`` negotiation: a trailing ``FORMAT x`` clause, else ``default_format``, else TabSeparated; the
  answer names it in ``X-ClickHouse-Format``;
- inserts in any input format the engine reads (the data is handed to ``INSERT ... FROM INFILE``);
- asynchronous inserts as a server runs them with ``async_insert=1`` and ``wait_for_async_insert=1``
  (``async_insert`` from the URL, else the engine's default, on in ClickHouse 26.x): Native inserts of the
  same statement that arrive within the buffer's timeout go to the engine as one INSERT, and each request
  is answered once that INSERT is stored (``AsyncInserts``);
- errors as ClickHouse sends them: the engine's ``Code: N. DB::Exception: ...`` text, the
  ``X-ClickHouse-Exception-Code`` header and an HTTP status by code (400 syntax, 404 unknown table, 500).

It does not cover a real server's authentication (credentials are accepted and ignored), HTTP compression
(clients must send and accept plain bodies), ``wait_for_async_insert=0`` (answered only once stored), the
async insert buffer's adaptive timeout (50 ms here, 50-200 ms on a server) and its settings from the URL
(the engine's defaults are used), sessions with temporary tables, other settings sent as URL parameters
(ignored), replication, clusters or concurrency: queries run one at a time on one chdb connection.

Run it by hand: ``python tests/clickhouse_endpoint.py --port 8123 --path /tmp/ch-data``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import email.parser
import email.policy
import importlib.util
import json
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

# Parameters the HTTP interface takes that are not settings of a query.
_TRANSPORT = {"query", "database", "default_format", "query_id", "session_id", "session_timeout", "user",
              "password", "compress", "decompress", "session_check", "quota_key"}  # fmt: skip
_TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
# ``INSERT INTO t [(cols)] [SETTINGS ...] FORMAT x`` followed by the data, on the first line break.
_INSERT_HEAD = re.compile(
    rb"^\s*INSERT\s+INTO\s[^\n]*?\bFORMAT\s+(\w+)[ \t]*\r?\n?", re.IGNORECASE | re.DOTALL
)
_CODE = re.compile(r"Code:\s*(\d+)")
_STATUS_BY_CODE = {62: 400, 27: 400, 36: 400, 43: 400, 47: 400, 53: 400, 60: 404, 81: 404, 516: 401}
# Input formats whose bodies concatenate into one valid body (a Native stream is a sequence of blocks).
_CONCATENABLE = {"native"}


class Engine:
    """One chdb connection on a data directory; one query at a time."""

    def __init__(self, path: Path) -> None:
        import chdb  # the test extra; imported here so collecting tests never needs it

        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = chdb.connect(str(path))
        self.lock = threading.Lock()
        self.database = "default"
        self.version = self.run("SELECT version()", "TabSeparated", {}).decode().strip()
        # The server's defaults for inserts that do not say (async_insert is on in ClickHouse 26.x).
        defaults = self.run(
            "SELECT getSetting('async_insert'), getSetting('async_insert_busy_timeout_min_ms'),"
            " getSetting('async_insert_max_data_size'), getSetting('async_insert_max_query_number')",
            "TabSeparated",
            {},
        )
        on, timeout_ms, max_size, max_queries = defaults.decode().split()
        self.async_insert = on in ("1", "true")
        self.inserts = AsyncInserts(self, int(timeout_ms) / 1000, int(max_size), int(max_queries))

    def insert(self, statement: str, fmt: str, data: bytes, params: dict[str, str], database: str) -> None:
        """``statement FORMAT fmt`` with ``data`` as its input (through a file the engine reads)."""
        with tempfile.NamedTemporaryFile(dir=self.path, suffix=".insert") as tmp:
            tmp.write(data)
            tmp.flush()
            name = tmp.name.replace("\\", "\\\\").replace("'", "\\'")
            self.run(f"{statement} FROM INFILE '{name}' FORMAT {fmt}", "TabSeparated", params, database)

    def run(self, sql: str, fmt: str, params: dict[str, str], database: str = "default") -> bytes:
        with self.lock:
            if database != self.database:
                self.conn.query(f"USE `{database.replace('`', '')}`", "TabSeparated")
                self.database = database
            result = self.conn.query(sql, fmt, params=params or None)
        return bytes(result.bytes()) if result is not None else b""

    def close(self) -> None:
        with self.lock:
            self.conn.close()


class _Waiting:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.done = False
        self.error: Exception | None = None


@dataclasses.dataclass
class _Buffer:
    """The inserts of one statement waiting for a flush, since ``started``."""

    started: float
    items: list[_Waiting] = dataclasses.field(default_factory=list)
    size: int = 0


class AsyncInserts:
    """``async_insert=1, wait_for_async_insert=1``: inserts of one statement that wait together share one
    INSERT into the engine, and each caller returns once that INSERT is stored (or failed).

    As on a server, a buffer is flushed ``busy_timeout`` after its first insert arrived, or sooner once
    it holds ``max_size`` bytes or ``max_queries`` inserts; a buffer that fills while the previous one is
    being written waits for it. The server adapts its timeout between 50 and 200 ms by default
    (``async_insert_use_adaptive_busy_timeout``); this buffer keeps to the lower bound. A real server
    parses each waiting insert's data on its own, so one malformed body fails alone: here a shared INSERT
    the engine refuses is retried insert by insert, with the same outcome.
    """

    def __init__(self, engine: Engine, busy_timeout: float, max_size: int, max_queries: int) -> None:
        self.engine = engine
        self.busy_timeout = busy_timeout
        self.max_size = max_size
        self.max_queries = max_queries
        self._cond = threading.Condition()
        self._buffers: dict[tuple[str, str, str], _Buffer] = {}
        self._busy: set[tuple[str, str, str]] = set()

    def insert(self, statement: str, fmt: str, data: bytes, database: str) -> None:
        key = (database, statement, fmt)
        item = _Waiting(data)
        with self._cond:
            buffer = self._buffers.setdefault(key, _Buffer(time.monotonic()))
            buffer.items.append(item)
            buffer.size += len(data)
            self._cond.notify_all()  # a full buffer goes at once
            while key in self._busy and not item.done:
                self._cond.wait()
            if not item.done:
                self._busy.add(key)  # this thread flushes the buffer, its own data included
                deadline = buffer.started + self.busy_timeout
                while (
                    (wait := deadline - time.monotonic()) > 0
                    and buffer.size < self.max_size
                    and len(buffer.items) < self.max_queries
                ):
                    self._cond.wait(wait)
                group = self._buffers.pop(key).items
        if not item.done:
            try:
                self._flush(statement, fmt, database, group)
            finally:
                with self._cond:
                    for waiting in group:
                        waiting.done = True
                    self._busy.discard(key)
                    self._cond.notify_all()
        if item.error is not None:
            raise item.error

    def _flush(self, statement: str, fmt: str, database: str, group: list[_Waiting]) -> None:
        if os.environ.get("CLICKHOUSE_ENDPOINT_LOG"):
            print(
                f"async insert flush: {len(group)} inserts, {sum(len(w.data) for w in group)} bytes",
                flush=True,
            )
        if len(group) > 1:
            try:
                self.engine.insert(statement, fmt, b"".join(w.data for w in group), {}, database)
                return
            except Exception:  # noqa: S110  (each insert is retried alone below and reports its own error)
                pass
        for waiting in group:
            try:
                self.engine.insert(statement, fmt, waiting.data, {}, database)
            except Exception as exc:
                waiting.error = exc


def _error(exc: Exception) -> tuple[int, int, str]:
    text = str(exc).strip() or type(exc).__name__
    match = _CODE.search(text)
    code = int(match.group(1)) if match else 1001  # STD_EXCEPTION
    if not text.startswith("Code:"):
        text = f"Code: {code}. DB::Exception: {text}"
    return _STATUS_BY_CODE.get(code, 500), code, text


def _form_fields(content_type: str, body: bytes) -> dict[str, str]:
    """The fields of a multipart/form-data body: clickhouse-connect sends a query's parameters so (and the
    query with them) once they are too long for the URL."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload.decode()
    return fields


class Handler(BaseHTTPRequestHandler):
    server: EndpointServer
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes: without this, Nagle's algorithm and the client's delayed ACK
    # add about 40 ms to every answer.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the stdlib's name)
        if os.environ.get("CLICKHOUSE_ENDPOINT_LOG"):
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        if url.path in ("/ping", "/") and "query" not in dict(parse_qsl(url.query)):
            self._send(200, b"Ok.\n", {"Content-Type": "text/plain; charset=UTF-8"})
            return
        self._query(b"")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._read_chunked()
        self._query(body)

    def _read_chunked(self) -> bytes:
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _query(self, body: bytes) -> None:
        query_id = str(uuid.uuid4())
        headers = {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Timezone": "UTC",
                   "X-ClickHouse-Server-Display-Name": "chdb-endpoint"}  # fmt: skip
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding and encoding != "identity":
            text = f"Code: 1. DB::Exception: this test endpoint takes no compressed bodies ({encoding}). (UNSUPPORTED_METHOD)"
            self._send(400, text.encode(), {**headers, "X-ClickHouse-Exception-Code": "1"})
            return
        args = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        content_type = self.headers.get("Content-Type") or ""
        if content_type.lower().startswith("multipart/form-data"):
            args.update(_form_fields(content_type, body))  # the query and its parameters, as fields
            body = b""
        params = {k[len("param_") :]: v for k, v in args.items() if k.startswith("param_")}
        query = args.get("query", "").encode()
        raw = query + (b"\n" if query and body else b"") + body
        try:
            database = args.get("database") or self.headers.get("X-ClickHouse-Database") or "default"
            settings = {k: v for k, v in args.items() if k not in _TRANSPORT and not k.startswith("param_")}
            result, fmt = self._execute(
                raw, params, args.get("default_format") or "TabSeparated", database, settings
            )
        except Exception as exc:  # every engine error goes back as ClickHouse sends it
            status, code, text = _error(exc)
            self._send(status, (text + "\n").encode(), {**headers, "X-ClickHouse-Exception-Code": str(code),
                       "Content-Type": "text/plain; charset=UTF-8"})  # fmt: skip
            return
        summary = {"read_rows": "0", "read_bytes": "0", "written_rows": "0", "written_bytes": "0",
                   "total_rows_to_read": "0", "result_rows": "0", "result_bytes": str(len(result))}  # fmt: skip
        headers["X-ClickHouse-Summary"] = json.dumps(summary)
        if fmt is not None:
            headers["X-ClickHouse-Format"] = fmt
        headers["Content-Type"] = "application/octet-stream"
        self._send(200, result, headers)

    def _execute(
        self, raw: bytes, params: dict[str, str], default_format: str, database: str, settings: dict[str, str]
    ) -> tuple[bytes, str | None]:
        engine = self.server.engine
        insert = _INSERT_HEAD.match(raw)
        if insert is not None:
            head = raw[: insert.end()].decode()
            data = raw[insert.end() :]
            fmt = insert.group(1).decode()
            statement = head[: head.upper().rindex("FORMAT")].rstrip()
            if not data.strip():
                engine.run(f"{statement} FORMAT {fmt}", "TabSeparated", params, database)
                return b"", None
            grouped = (
                fmt.lower() in _CONCATENABLE
                and not params
                and settings.get("async_insert", "1" if engine.async_insert else "0") in ("1", "true")
            )
            if grouped:
                engine.inserts.insert(statement, fmt, data, database)
            else:
                engine.insert(statement, fmt, data, params, database)
            return b"", None
        sql = raw.decode()
        match = _TRAILING_FORMAT.search(sql)
        fmt = default_format
        if match is not None:
            fmt = match.group(1)
            sql = sql[: match.start()]
        return engine.run(sql, fmt, params, database), fmt


class EndpointServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, engine: Engine, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.engine = engine
        self.connections: set[socket.socket] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Close the kept-alive connections too, as a stopped server's would be."""
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ClickHouseEndpoint:
    """The endpoint serving in a background thread: ``with ClickHouseEndpoint(path) as ch: ch.url``."""

    def __init__(self, path: Path, port: int = 0) -> None:
        self.engine = Engine(path)
        self.server = EndpointServer(self.engine, port)
        self._serve()

    def _serve(self) -> None:
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="clickhouse-endpoint", daemon=True
        )
        self.thread.start()

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """The server stops listening (connections are refused), then comes back on the same port."""
        port = self.server.server_address[1]
        self.server.shutdown()
        self.server.server_close()
        self.server.drop_connections()
        try:
            yield
        finally:
            self.server = EndpointServer(self.engine, port)
            self._serve()

    @property
    def url(self) -> str:
        return self.server.url

    def database_url(self) -> str:
        """A ``TRIPTYCH_METERGRAPH_CLICKHOUSE_URL`` naming a new, empty database (created on first use)."""
        return f"{self.url}/t_{uuid.uuid4().hex[:12]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.engine.close()

    def __enter__(self) -> ClickHouseEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    if importlib.util.find_spec("chdb") is None:  # before --path's default makes a folder
        sys.exit("chdb is not installed (a test dependency): `.venv/bin/pip install -c constraints.txt chdb`")
    parser = argparse.ArgumentParser(description="Serve ClickHouse's HTTP interface over chdb on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--path", type=Path, help="data folder (default: a new temporary folder)")
    args = parser.parse_args()
    # Made only when not given: a default evaluated with the parser left an empty folder behind every run.
    path = args.path or Path(tempfile.mkdtemp(prefix="chdb-endpoint-"))
    engine = Engine(path)
    server = EndpointServer(engine, args.port)

    def stop(signum: int, frame: object) -> None:
        # The engine installs its own handlers when it starts: take SIGINT and SIGTERM back, and stop
        # serving from another thread (shutdown() waits for serve_forever to return).
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(f"ClickHouse {engine.version} (chdb) at {server.url}, data in {path}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        engine.close()


if __name__ == "__main__":
    main()
