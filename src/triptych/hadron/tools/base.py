"""What a Hadron tool's handler receives: the services it calls (``Services``, handed over once when the
surface registers its tools) and the call's context (``Ctx``). Tools are ``core.mcp.DeclaredTool``s
declared at module level, one module per family."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from triptych.core.mcp import DeclaredTool, NoArgs, Tool, ToolArgs, ToolOutput
from triptych.hadron.domain.model import NodeRecord
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.actions import ActionService
from triptych.hadron.services.channels import ChannelService
from triptych.hadron.services.edges import EdgeService
from triptych.hadron.services.gitsync import GitSyncService
from triptych.hadron.services.locks import LockService
from triptych.hadron.services.node_reads import NodeReadService
from triptych.hadron.services.nodes import NodeService
from triptych.hadron.services.objects import ObjectService
from triptych.hadron.services.registers import RegisterService
from triptych.hadron.services.replace import ReplaceService
from triptych.hadron.services.scopes import ScopeService
from triptych.hadron.services.search import SearchService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.services.sessions import SessionService
from triptych.hadron.services.validate import ValidateService
from triptych.hadron.services.workers import WorkerService
from triptych.hadron.services.worklog import WorklogService

__all__ = ["Ctx", "DeclaredTool", "HadronTool", "NoArgs", "Services", "Tool", "ToolArgs", "ToolOutput"]


@dataclass(frozen=True, slots=True)
class Ctx:
    caller: HadronCaller
    session: SessionState
    server_url: str | None = None


@dataclass(frozen=True, slots=True)
class Services:
    """Every service a Hadron tool calls; the surface builds one and registers every tool with it."""

    selections: SelectionService
    nodes: NodeService
    edges: EdgeService
    reads: NodeReadService
    replace: ReplaceService
    locks: LockService
    objects: ObjectService
    validator: ValidateService
    search: SearchService
    scopes: ScopeService
    sessions: SessionService
    workers: WorkerService
    channels: ChannelService
    registers: RegisterService
    worklog: WorklogService
    actions: ActionService
    gitsync: GitSyncService
    # Renders search hits' abstracts (issue 18), when node abstracts are on.
    abstracts: Callable[[Sequence[NodeRecord]], dict[str, Any]] | None = None
    # Capability tokens of features that depend on this deployment (a git binary, a server key).
    capabilities: Sequence[str] = ()


HadronTool = DeclaredTool[Services, Ctx]
