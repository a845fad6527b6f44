"""Logging on stderr, as text for people or as one JSON object per line for a log system.

``TRIPTYCH_LOG_FORMAT=json`` writes each record as ``{"time", "level", "logger", "message", ...}`` with the
request's ``request_id``, ``surface`` and ``tool`` (from ``core/request_context.py``) and, on the lines the
server writes per request and per tool call, ``duration_ms`` and ``outcome``. Libraries that log a line per
request at INFO (the MCP SDK's "Terminating session: None" after every stateless call, httpx per relayed
Hadron request), and the server's own per-request lines, show only at ``debug`` in text, so a terminal stays
quiet; in JSON the server's per-request lines are kept, since a log system is where they belong.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

from triptych.core.request_context import REQUEST_ID, SURFACE, TOOL

LogFormat = Literal["text", "json"]

_CHATTY = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager", "httpx", "httpcore")
_PER_REQUEST = ("triptych.requests", "triptych.tools")
_EXTRA = ("duration_ms", "outcome")


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ``time`` in UTC with milliseconds."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, var in (("request_id", REQUEST_ID), ("surface", SURFACE), ("tool", TOOL)):
            value = var.get()
            if value is not None:
                line[key] = value
        for key in _EXTRA:
            if hasattr(record, key):
                line[key] = getattr(record, key)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str, fmt: LogFormat = "text") -> None:
    """The root logger on stderr at ``level`` in ``fmt``; quiet per-request lines unless asked for."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    debug = level.lower() == "debug"
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if debug else max(logging.WARNING, root.level))
    for name in _PER_REQUEST:
        keep = debug or fmt == "json"
        logging.getLogger(name).setLevel(logging.NOTSET if keep else max(logging.WARNING, root.level))
    # uvicorn's own loggers write through the root handler, in the same format.
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
