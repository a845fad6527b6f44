"""What every Hadron tool is: a name, a description, a pydantic argument model (``extra="forbid"``:
the contract as data) and a handler that calls a service and returns text plus structured data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from triptych.core.mcp import ToolArgs
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.selection import SessionState

__all__ = ["Ctx", "HadronTool", "NoArgs", "ToolArgs", "ToolOutput"]


@dataclass(frozen=True, slots=True)
class Ctx:
    caller: HadronCaller
    session: SessionState
    server_url: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    text: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class HadronTool:
    name: str
    description: str
    args: type[BaseModel]
    handler: Callable[[Ctx, Any], ToolOutput]
    read_only: bool = True
    # Callable before authentication (hadron_server_info only).
    public: bool = False


class NoArgs(ToolArgs):
    pass
