"""What a Hadron tool's handler receives (``Ctx``); tools themselves are ``core.mcp.Tool[Ctx]``."""

from __future__ import annotations

from dataclasses import dataclass

from triptych.core.mcp import NoArgs, Tool, ToolArgs, ToolOutput
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.selection import SessionState

__all__ = ["Ctx", "NoArgs", "Tool", "ToolArgs", "ToolOutput"]


@dataclass(frozen=True, slots=True)
class Ctx:
    caller: HadronCaller
    session: SessionState
    server_url: str | None = None
