"""hadron_run_action: load an action node, resolve its dependencies, execute it, record the run.

A run has two phases, so a refusal never leaves half an action done:

1. **Plan.** The node must be an action (``domain.action``) and ``args`` must fit its parameter schema.
   Every outgoing edge is a dependency. Each is loaded and the caller's read access checked on it (a
   dependency that is missing and one the caller may not read are the same refusal). A dependency that
   is itself an action and whose edge is ``isRunnable`` will run first, so its own dependencies are
   planned the same way, transitively; meeting an action again on that path is a cycle. Any other
   dependency contributes its content. An MCP tool action needs write access to its memory (a tool call
   can change the world outside), an operator-enabled source, and that source registered.
2. **Execute**, dependencies first. A dependency that fails refuses the run with
   ACTION_DEPENDENCY_FAILED naming it and carrying its cause.

Every executed action (the one asked for, and each runnable dependency, linked by ``parentRunId``) is
recorded, refusals included, once the node was found.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triptych.core.errors import TriptychError
from triptych.hadron.access import AccessPolicy
from triptych.hadron.action_store import ActionRun, ActionRunStore
from triptych.hadron.domain.action import (
    ACTION_TYPE,
    MCP_TOOL,
    ActionSpec,
    DepView,
    check_args,
    not_runnable,
    parse_spec,
    render,
    render_arguments,
)
from triptych.hadron.domain.loc import node_urn
from triptych.hadron.domain.model import EdgeRecord, Memory, NodeRecord
from triptych.hadron.errors import ActionRefusal
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.mcp_calls import McpToolCaller
from triptych.hadron.services.nodes import NodeService
from triptych.hadron.services.selection import SessionState
from triptych.hadron.store import GraphStore, TenancyStore, new_id, utcnow

MAX_DEPENDENCIES = 64  # nodes in one run's dependency closure
MAX_DEPTH = 8  # runnable actions nested inside one another


@dataclass
class Step:
    """One action to execute, with its dependencies planned: a Step runs first, a DepView is content."""

    node: NodeRecord
    memory: Memory
    urn: str
    spec: ActionSpec
    deps: list[tuple[str, Step | DepView]] = field(default_factory=list)

    @property
    def view(self) -> DepView:
        return DepView(
            self.node.name, self.node.description, self.node.content or "", self.urn, self.node.loc
        )


@dataclass(frozen=True, slots=True)
class RunResult:
    run: ActionRun
    urn: str
    output: str
    dependencies: list[dict[str, Any]]


class ActionService:
    def __init__(
        self,
        tenancy: TenancyStore,
        graph: GraphStore,
        access: AccessPolicy,
        nodes: NodeService,
        runs: ActionRunStore,
        calls: McpToolCaller | None = None,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.graph = graph
        self.access = access
        self.nodes = nodes
        self.runs = runs
        self.calls = calls
        self.clock = clock

    @property
    def mcp_tools_enabled(self) -> bool:
        return self.calls is not None and self.calls.enabled

    def run(self, caller: HadronCaller, state: SessionState, loc: str, args: dict[str, Any]) -> RunResult:
        memory, node = self.nodes.find(caller, state, loc)
        urn = node_urn(memory.root, memory.slug, node.loc)
        attempt = self._attempt(caller, state, node, memory, _declared_kind(node), args, None)
        try:
            spec = parse_spec(node, urn)
            check_args(spec, args, urn)
            step = self._plan(caller, Step(node, memory, urn, spec), ((node.id, urn),), [0])
        except (
            Exception
        ) as exc:  # a refusal, or a failure the server reports as internal: recorded either way
            attempt.failed(exc)
            raise
        run, output = self._execute(caller, state, step, args, None)
        deps = [{"edge": edge, "urn": dep.urn, "ran": isinstance(dep, Step)} for edge, dep in step.deps]
        return RunResult(run, urn, output, deps)

    # ── plan ───────────────────────────────────────────────────────────────

    def _plan(
        self, caller: HadronCaller, step: Step, trail: tuple[tuple[str, str], ...], count: list[int]
    ) -> Step:
        if step.spec.kind == MCP_TOOL:
            self._check_tool(caller, step)
        for edge in self.graph.edges_from([step.node.id]).get(step.node.id, []):
            count[0] += 1
            if count[0] > MAX_DEPENDENCIES:
                raise not_runnable(
                    trail[0][1], "too-many-dependencies", f"its dependencies exceed {MAX_DEPENDENCIES} nodes"
                )
            memory, target = self._dependency(caller, step.urn, edge)
            urn = node_urn(memory.root, memory.slug, target.loc)
            if not (edge.is_runnable and target.node_type == ACTION_TYPE):
                step.deps.append(
                    (
                        edge.loc,
                        DepView(target.name, target.description, target.content or "", urn, target.loc),
                    )
                )
                continue
            if target.id in {node_id for node_id, _ in trail}:
                cycle = [u for _, u in trail] + [urn]
                raise ActionRefusal(
                    "ACTION_DEPENDENCY_CYCLE",
                    f"runnable dependencies form a cycle: {' → '.join(cycle)}",
                    hint="Clear isRunnable on one edge of the cycle, or remove it",
                    details={"urn": trail[0][1], "cycle": cycle, "dependency": edge.loc},
                )
            if len(trail) >= MAX_DEPTH:
                raise not_runnable(trail[0][1], "too-deep", f"runnable actions nest deeper than {MAX_DEPTH}")
            try:
                spec = parse_spec(target, urn)
                check_args(spec, {}, urn)
            except ActionRefusal as exc:
                raise _dependency_failed(step.urn, edge.loc, urn, exc.code, exc.message) from exc
            sub = self._plan(caller, Step(target, memory, urn, spec), (*trail, (target.id, urn)), count)
            step.deps.append((edge.loc, sub))
        return step

    def _dependency(self, caller: HadronCaller, urn: str, edge: EdgeRecord) -> tuple[Memory, NodeRecord]:
        target = self.graph.node_by_id(edge.target_id) if edge.target_id else None
        if target is None and edge.target_memory_id and edge.target_loc:
            target = self.graph.node_by_loc(edge.target_memory_id, edge.target_loc)
        memory = self.tenancy.memory(target.memory_id) if target is not None else None
        if target is None or memory is None or self.access.memory_level(caller, memory) is None:
            # Missing and unreadable read the same: a run must not reveal what the caller may not see.
            raise ActionRefusal(
                "ACTION_DEPENDENCY_FAILED",
                f"dependency {edge.loc!r} of {urn} is missing or not readable",
                hint="hadron_validate lists broken edges; a dependency in another memory must be readable to you",
                details={"urn": urn, "dependency": edge.loc, "reason": "missing-or-unreadable"},
            )
        return memory, target

    def _check_tool(self, caller: HadronCaller, step: Step) -> None:
        spec = step.spec
        self.access.write_memory(caller, step.memory)
        details = {"urn": step.urn, "source": spec.source, "tool": spec.tool}
        if self.calls is None or spec.source is None or not self.calls.allows(spec.source):
            raise ActionRefusal(
                "ACTION_DISABLED",
                f"{step.urn} calls {spec.tool!r} on MCP source {spec.source!r}, and this server does not let "
                "actions reach outside it",
                hint="The operator enables sources with TRIPTYCH_HADRON_ACTION_SOURCES=<name>[,<name>] (or *)",
                details=details,
            )
        if self.calls.source(spec.source) is None:
            raise ActionRefusal(
                "ACTION_TOOL_FAILED",
                f"MCP source {spec.source!r} is not registered",
                hint="Register it with `triptych sources add`",
                details={**details, "reason": "unknown-source"},
            )

    # ── execute ────────────────────────────────────────────────────────────

    def _execute(
        self, caller: HadronCaller, state: SessionState, step: Step, args: dict[str, Any], parent: str | None
    ) -> tuple[ActionRun, str]:
        attempt = self._attempt(caller, state, step.node, step.memory, step.spec.kind, args, parent)
        try:
            deps: dict[str, DepView] = {}
            for edge, dep in step.deps:
                if isinstance(dep, DepView):
                    deps[edge] = dep
                    continue
                try:
                    _, output = self._execute(caller, state, dep, {}, attempt.run_id)
                except TriptychError as exc:
                    raise _dependency_failed(step.urn, edge, dep.urn, exc.code, exc.message) from exc
                deps[edge] = DepView(dep.node.name, dep.node.description, output, dep.urn, dep.node.loc)
            output = self._perform(step, args, deps)
        except (
            Exception
        ) as exc:  # a refusal, or a failure the server reports as internal: recorded either way
            attempt.failed(exc)
            raise
        return attempt.finish("ok", None, output), output

    def _perform(self, step: Step, args: dict[str, Any], deps: dict[str, DepView]) -> str:
        spec = step.spec
        if spec.kind != MCP_TOOL:
            return render(spec.template, args, deps, step.view, step.urn)
        assert self.calls is not None and spec.source is not None and spec.tool is not None
        arguments = render_arguments(spec.arguments, args, deps, step.view, step.urn)
        source = self.calls.source(spec.source)
        if source is None:  # unregistered between plan and execution
            raise ActionRefusal(
                "ACTION_TOOL_FAILED",
                f"MCP source {spec.source!r} is not registered",
                details={
                    "urn": step.urn,
                    "source": spec.source,
                    "tool": spec.tool,
                    "reason": "unknown-source",
                },
            )
        result = self.calls.call(source, spec.tool, arguments)
        if not result.ok:
            raise ActionRefusal(
                "ACTION_TOOL_FAILED",
                f"tool {spec.tool!r} on MCP source {spec.source!r} failed ({result.reason}): {result.text[:500]}",
                hint="Check the source with `triptych sources list`; the run is recorded on the action node",
                details={"urn": step.urn, "source": spec.source, "tool": spec.tool, "reason": result.reason},
            )
        return result.text

    def _attempt(
        self,
        caller: HadronCaller,
        state: SessionState,
        node: NodeRecord,
        memory: Memory,
        kind: str,
        args: dict[str, Any],
        parent: str | None,
    ) -> _Attempt:
        return _Attempt(
            self.runs, new_id(), node, memory, kind, caller.actor, state.work_session_id, parent, args,
            self.clock(), time.perf_counter(),
        )  # fmt: skip

    def history(self, node_id: str, limit: int = 10) -> list[dict[str, Any]]:
        """The latest runs of a node, newest first (shown by hadron_get_node on action nodes)."""
        return [r.view() for r in self.runs.runs(node_id, limit)]


@dataclass
class _Attempt:
    """One execution of one action node, recorded by ``finish`` with its outcome and duration."""

    runs: ActionRunStore
    run_id: str
    node: NodeRecord
    memory: Memory
    kind: str
    actor: str
    work_session_id: str | None
    parent: str | None
    args: dict[str, Any]
    started: str
    t0: float

    def failed(self, exc: Exception) -> None:
        if isinstance(exc, TriptychError):
            self.finish(exc.code, exc.message)
        else:
            self.finish("INTERNAL_ERROR", type(exc).__name__)

    def finish(self, outcome: str, error: str | None, output: str | None = None) -> ActionRun:
        run = ActionRun(
            id=self.run_id, node_id=self.node.id, memory_id=self.memory.id, node_revision=self.node.revision,
            kind=self.kind, actor=self.actor, work_session_id=self.work_session_id, parent_run_id=self.parent,
            started_at=self.started, duration_ms=(time.perf_counter() - self.t0) * 1000, args=self.args,
            outcome=outcome, error=error, output_chars=len(output) if output is not None else None,
            output_sha256=hashlib.sha256(output.encode()).hexdigest() if output is not None else None,
        )  # fmt: skip
        self.runs.add_run(run)
        return run


def _dependency_failed(urn: str, edge: str, dep_urn: str, code: str, message: str) -> ActionRefusal:
    return ActionRefusal(
        "ACTION_DEPENDENCY_FAILED",
        f"dependency {edge!r} ({dep_urn}) of {urn} failed: {code}: {message}",
        details={"urn": urn, "dependency": edge, "dependencyUrn": dep_urn, "cause": code},
    )


def _declared_kind(node: NodeRecord) -> str:
    declared = (node.data or {}).get("action")
    kind = declared.get("kind") if isinstance(declared, dict) else None
    return kind if isinstance(kind, str) else "unknown"
