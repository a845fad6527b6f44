"""The one way a Hadron action reaches outside the server: a tool call on a registered MCP source.

Off unless the operator lists the sources actions may call (``TRIPTYCH_HADRON_ACTION_SOURCES``, ``*`` for
every registered one). Sources are the ``triptych sources`` registry ``metronix_sync`` reads, with the
same timeouts: each request to the source gets ``timeout`` seconds, connecting and calling together
twice that. Nothing here runs a shell: a stdio source is the command the operator registered.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError

from triptych.core.errors import TriptychError
from triptych.core.mcp_sources import Source, connect, load_sources

log = logging.getLogger(__name__)
MAX_RESULT_CHARS = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    ok: bool
    text: str
    reason: str | None = None  # why it failed: unknown-source, unreachable, timeout, tool-error


class McpToolCaller:
    def __init__(self, sources_file: Path, allowed: Sequence[str], timeout: float = 30.0) -> None:
        self.sources_file = sources_file
        self.allowed = frozenset(a.strip() for a in allowed if a.strip())
        self.timeout = timeout

    @property
    def enabled(self) -> bool:
        return bool(self.allowed)

    def allows(self, source: str) -> bool:
        return "*" in self.allowed or source in self.allowed

    def source(self, name: str) -> Source | None:
        try:
            return load_sources(self.sources_file).get(name)
        except TriptychError as exc:
            log.warning("the MCP source registry %s is unreadable: %s", self.sources_file, exc.message)
            return None

    def call(self, source: Source, tool: str, arguments: dict[str, Any]) -> ToolCallResult:
        """Call ``tool`` on ``source``; runs its own event loop, so call it from a worker thread."""

        # Set once the MCP handshake is done: an error before it means the source is not an MCP server
        # we can talk to (an HTTP error page, a 501 to the POST), not a tool that answered an error.
        connected = False

        async def go() -> types.CallToolResult:
            nonlocal connected
            with anyio.fail_after(2 * self.timeout):
                async with connect(source, self.timeout) as client:
                    connected = True
                    return await client.call_tool(tool, arguments)

        try:
            result = anyio.run(go)
        except (
            Exception
        ) as caught:  # a source that cannot be reached or speaks garbage fails the action alone
            exc = _innermost(caught)
            if isinstance(exc, TimeoutError | httpx2.TimeoutException) or (
                isinstance(exc, MCPError) and exc.code == types.REQUEST_TIMEOUT
            ):
                return ToolCallResult(False, f"no answer within {self.timeout:g} s", "timeout")
            if isinstance(exc, MCPError):
                if connected:  # the source refused the call (an unknown tool, bad arguments)
                    return ToolCallResult(False, exc.message, "tool-error")
                return ToolCallResult(False, f"not an MCP server: {exc.message}", "unreachable")
            log.warning("action tool call %s/%s failed: %s", source.name, tool, exc, exc_info=True)
            return ToolCallResult(False, _describe(exc), "unreachable")
        text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
        if not text and result.structured_content is not None:
            text = json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True)
        text = text[:MAX_RESULT_CHARS]
        if result.is_error:
            return ToolCallResult(False, text or "the tool reported an error", "tool-error")
        return ToolCallResult(True, text)


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
