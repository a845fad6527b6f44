"""The one MCP tool layer every surface uses: declaring a tool, its JSON Schema, checking its arguments,
running its handler, and the Host/Origin guard in front of every MCP endpoint.

A tool is a ``Tool``: a name, a description, a pydantic argument model (``extra="forbid"``: a
misspelled argument is refused, never silently dropped) and a handler ``(context, args) -> output``.
The output is a JSON object (sent as text and as structured content) or a ``ToolOutput`` (a text for
people plus the structured data). A plain handler runs in a worker thread, so the event loop never
waits on SQLite or the embedding model; a coroutine handler runs on the loop.

What differs per surface is a hook, not a copy of this module:

- the *context* a handler receives (``Bind``): Metronix a ``metronix.access.Caller``; Hadron a caller bound to its MCP
  session and client id (entered in the worker thread, under the session's lock); Metergraph the key's
  principal;
- the *renderer* of refusals (``ErrorRenderer``): each surface's ``errors.py``;
- the *result text* (``ResultRenderer``): Metergraph writes its JSON sorted and compact, and bounds it;
- which tools ``tools/list`` shows a caller (``Visible``): Metergraph hides those its key's role may not call;
- Metergraph's renderer raises ``MCPError`` for ``UnknownTool``, ``ArgumentsInvalid`` and internal errors:
  its contract answers those as JSON-RPC errors (-32602, -32603) rather than as tool results.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast

import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server._otel import OpenTelemetryMiddleware
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict, ValidationError

from triptych import __version__
from triptych.core import nul
from triptych.core.errors import InternalError, Invalid, Kind, TriptychError, surface_code
from triptych.core.metrics import observe_tool
from triptych.core.request_context import REQUEST_ID, SURFACE, TOOL, request_id_of

log = logging.getLogger(__name__)
tool_log = logging.getLogger("triptych.tools")  # a line per call: at debug, or in JSON logs
# The ``_meta`` key of every tool result that carries the server's own time for the call, in ms.
SERVER_TIME_META = "triptych/server_ms"

PRINCIPAL_KEY = "triptych.principal"

M = TypeVar("M", bound=BaseModel)
# What a surface hands its handlers (see the module docstring).
C = TypeVar("C")


class ToolArgs(BaseModel):
    """Base of every tool's argument model: unknown arguments are an error."""

    model_config = ConfigDict(extra="forbid")


class NoArgs(ToolArgs):
    pass


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool result for people (``text``) with the same facts as data (``data``)."""

    text: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Tool(Generic[C]):
    name: str
    description: str
    args: type[BaseModel]
    # Returns a JSON object or a ``ToolOutput``. A plain function runs in a worker thread; a coroutine
    # function runs on the event loop.
    handler: Callable[[C, Any], Any]
    read_only: bool = True
    title: str | None = None
    # The MCP ``openWorldHint``: None leaves it out of the definition.
    open_world: bool | None = None
    # Callable before authentication (the surface's ``Bind`` decides what that means).
    public: bool = False

    def definition(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=input_schema(self.args),
            annotations=types.ToolAnnotations(read_only_hint=self.read_only, open_world_hint=self.open_world),
        )


# What a surface hands its tools when it registers them: the services their handlers call.
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class DeclaredTool(Generic[S, C]):
    """A tool declared at module level, so it can be imported, referenced and walked on its own: a ``Tool``
    whose handler also takes the services it calls, ``(services, context, args)``. A surface registers
    it (``register``) with its services, which makes the ``Tool`` a ``Toolbox`` serves."""

    name: str
    description: str
    args: type[BaseModel]
    handler: Callable[[S, C, Any], Any]
    read_only: bool = True
    title: str | None = None
    open_world: bool | None = None
    public: bool = False

    def bind(self, services: S) -> Tool[C]:
        # partial keeps a coroutine handler a coroutine function (Toolbox runs it on the loop).
        return Tool(self.name, self.description, self.args, functools.partial(self.handler, services),
                    self.read_only, self.title, self.open_world, self.public)  # fmt: skip


def register(declared: Iterable[DeclaredTool[S, C]], services: S) -> list[Tool[C]]:
    """The surface's tools: every declaration bound to the same services."""
    return [tool.bind(services) for tool in declared]


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The argument model's JSON Schema without pydantic's generated titles (noise to a model)."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


class UnknownTool(Invalid):
    """A call to a name the surface does not serve."""


class ArgumentsInvalid(Invalid):
    """Arguments that do not fit the tool's input schema."""

    default_hint = "Check the argument names, types and ranges in the tool's input schema"
    tool: str | None = None  # the tool whose schema refused them, set by ``Toolbox``


def argument_message(exc: ValidationError, private: Collection[str] = ()) -> str:
    """One readable line per schema violation. Below an argument in ``private`` (a free-form mapping
    whose keys are the caller's data) the message names only the argument, never the key."""
    parts = []
    for error in exc.errors():
        loc = [str(p) for p in error["loc"]]
        if loc and loc[0] in private:
            loc = loc[:1]
        where = ".".join(loc) or "arguments"
        if error["type"] == "extra_forbidden":
            parts.append(f"unknown argument {where!r}")
        elif error["type"] == "missing":
            parts.append(f"missing required argument {where!r}")
        else:
            parts.append(f"{where}: {error['msg']}")
    return "; ".join(dict.fromkeys(parts))


def parse_args(model: type[M], arguments: Any, private: Collection[str] = ()) -> M:
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        raise ArgumentsInvalid("arguments must be an object", details={"fields": []})
    field = nul.nul_field(arguments)
    if field is not None:
        # Below a private argument (its keys are the caller's data) only the argument is named.
        top = field.split(".", 1)[0].split("[", 1)[0]
        named = top if top in private else field
        raise ArgumentsInvalid(nul.message(named), hint=nul.HINT, details={"fields": [top], "field": named})
    try:
        return model.model_validate(dict(arguments))
    except ValidationError as exc:
        fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        raise ArgumentsInvalid(argument_message(exc, private), details={"fields": fields}) from exc


# Given the tool about to run, the context its handler receives. Checks that need no I/O (is the
# caller allowed this tool at all?) run when it is called; entering it may block (it runs in the
# worker thread with the handler) and leaving it releases whatever it held.
Bind = Callable[[Tool[C]], AbstractContextManager[C]]


class Toolbox(Generic[C]):
    """A surface's tools by name, and the one way a call runs: look the tool up, bind its context,
    check its arguments, run its handler. Refusals are raised as ``TriptychError`` for the caller of
    ``call`` to render in its contract's shape."""

    def __init__(
        self,
        tools: Sequence[Tool[C]],
        *,
        surface: str,
        error_codes: Mapping[Kind, str],
        private_arguments: Collection[str] = (),
    ) -> None:
        self.surface = surface  # the label of its calls in /metrics and the logs
        self.error_codes = (
            error_codes  # the surface's codes for the neutral kinds: outcomes as clients see them
        )
        self.tools = list(tools)
        self.by_name = {tool.name: tool for tool in self.tools}
        # Built once: the schemas never change, and tools/list is called often.
        self.definitions = [tool.definition() for tool in self.tools]
        self.private_arguments = frozenset(private_arguments)

    @property
    def names(self) -> list[str]:
        return sorted(self.by_name)

    def get(self, name: str) -> Tool[C]:
        tool = self.by_name.get(name)
        if tool is None:
            raise UnknownTool(f"unknown tool {name!r}", hint=f"Available tools: {', '.join(self.names)}")
        return tool

    async def call(self, name: str, arguments: Any, bind: Bind[C]) -> Any:
        """Run a call; every call, refused or not, is counted for ``/metrics`` and logged at debug (or in
        JSON logs) with its outcome: ``ok`` or the refusal's code."""
        started = time.perf_counter()
        outcome = "ok"
        label = name if name in self.by_name else "unknown"  # a caller's made-up names are not labels
        token = TOOL.set(label)
        try:
            return await self._run(name, arguments, bind)
        except TriptychError as exc:
            outcome = surface_code(exc, self.error_codes)
            raise
        except BaseException:
            outcome = "internal"
            raise
        finally:
            seconds = time.perf_counter() - started
            observe_tool(self.surface, label, seconds, outcome)
            if tool_log.isEnabledFor(logging.INFO):  # off by default: no record built per call
                extra = {"duration_ms": round(seconds * 1000, 2), "outcome": outcome}
                tool_log.info("%s %s", label, outcome, extra=extra)
            TOOL.reset(token)

    async def _run(self, name: str, arguments: Any, bind: Bind[C]) -> Any:
        tool = self.get(name)
        context = bind(tool)
        try:
            args = parse_args(tool.args, arguments, self.private_arguments)
        except ArgumentsInvalid as exc:
            exc.tool = tool.name
            raise
        if inspect.iscoroutinefunction(tool.handler):
            with context as bound:
                return await tool.handler(bound, args)

        def run() -> Any:
            with context as bound:
                return tool.handler(bound, args)

        output = await anyio.to_thread.run_sync(run)
        if inspect.iscoroutine(output):  # a wrapper hid a coroutine handler: say so, not "invalid result"
            output.close()
            raise TypeError(
                f"{tool.name}: a plain handler returned a coroutine (a wrapper that is not async?)"
            )
        return output


# A tool result: the SDK's model, or its wire form (``text_result``), which the SDK validates and dumps
# for the wire just the same.
ToolResult = types.CallToolResult | dict[str, Any]
# May raise ``MCPError`` instead, for a refusal the surface's contract answers as a JSON-RPC error.
ErrorRenderer = Callable[[TriptychError], ToolResult]
# A handler's output as a tool result (``tool_result`` unless the surface writes its own text).
ResultRenderer = Callable[[Any], ToolResult]
# Whether ``tools/list`` shows the tool to the request's caller.
Visible = Callable[[ServerRequestContext[Any, Any], Tool[C]], bool]
# The SDK's request context (``request`` is None on stdio) and the tool: the handler's context.
SessionBind = Callable[[ServerRequestContext[Any, Any], Tool[C]], AbstractContextManager[C]]


def text_result(text: str, data: dict[str, Any] | None = None, *, is_error: bool = False) -> dict[str, Any]:
    """A tool result with one text and, when given, the same facts as structured content, in its wire form:
    what ``CallToolResult(...).model_dump(by_alias=True, mode="json", exclude_none=True)`` gives. The SDK
    validates a handler's result and dumps it for the wire itself, so building the model first only walked
    the whole document twice more on every call (decision 0340)."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if data is not None:
        result["structuredContent"] = data
    result["isError"] = is_error
    result["resultType"] = "complete"
    return result


def json_result(payload: dict[str, Any]) -> dict[str, Any]:
    return text_result(json.dumps(payload, ensure_ascii=False, default=str), payload)


def tool_result(output: dict[str, Any] | ToolOutput) -> dict[str, Any]:
    if isinstance(output, ToolOutput):
        return text_result(output.text, output.data)
    return json_result(output)


def input_schemas(definitions: Sequence[types.Tool]) -> dict[str, dict[str, Any]]:
    """Each tool's input schema by name, as advertised by ``tools/list``."""
    return {d.name: d.input_schema for d in definitions}


def build_server(
    name: str,
    tools: Sequence[Tool[C]],
    *,
    bind: SessionBind[C],
    render_error: ErrorRenderer,
    error_codes: Mapping[Kind, str],
    instructions: str | None = None,
    render_result: ResultRenderer = tool_result,
    visible: Visible[C] | None = None,
    private_arguments: Collection[str] = (),
) -> Server[Any]:
    """An SDK server (streamable HTTP or stdio) over ``tools``; refusals come out as ``render_error``
    shapes them, and an unexpected exception as ``InternalError`` (its traceback stays in the log)."""
    toolbox = Toolbox(tools, surface=name, error_codes=error_codes, private_arguments=private_arguments)
    listed = list(zip(toolbox.tools, toolbox.definitions, strict=True))

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if visible is None:
            return types.ListToolsResult(tools=toolbox.definitions)
        return types.ListToolsResult(tools=[d for tool, d in listed if visible(ctx, tool)])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> ToolResult:
        started = time.perf_counter()
        # The session's task group runs this call, outside the HTTP request's context: its log lines get
        # the request's id from the request itself.
        rid = request_id_of(ctx.request.scope if ctx.request is not None else None)
        request_token = REQUEST_ID.set(rid) if rid is not None else None
        surface_token = SURFACE.set(name)
        try:
            result = render_result(await toolbox.call(params.name, params.arguments, lambda t: bind(ctx, t)))
        except TriptychError as exc:
            result = render_error(exc)
        except Exception:
            log.exception("tool %s failed", params.name)
            result = render_error(InternalError("Unexpected server error while running " + params.name))
        finally:
            SURFACE.reset(surface_token)
            if request_token is not None:
                REQUEST_ID.reset(request_token)
        # How long the server spent on the call, in the result's protocol metadata (not the payload,
        # whose shape the contracts fix): clients that time only round trips can subtract transport.
        meta = {SERVER_TIME_META: round((time.perf_counter() - started) * 1000, 2)}
        if isinstance(result, dict):
            result["_meta"] = meta
        else:
            result.meta = meta
        return result

    server: Server[Any] = Server(
        name,
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        # The SDK takes a result's wire form as well as its model (``HandlerResult``); its signature names
        # only the model.
        on_call_tool=cast(Callable[..., Awaitable[types.CallToolResult]], call_tool),
        # The SDK checks a call's Mcp-Param-* headers against the tool's schema; without this lookup it
        # runs the whole tools/list handler and serializes every definition on every call (a third of
        # the event loop's time under a memory_store load, py-spy).
        get_tool_input_schema=input_schemas(toolbox.definitions).get,
    )
    if not tracing_configured():
        # The SDK wraps every message in an OpenTelemetry span, a no-op without a tracer provider that
        # still costs each request a span, a context attach and a trace-context lookup (decision 0340).
        server.middleware = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
    return server


def tracing_configured() -> bool:
    """Whether an OpenTelemetry tracer provider is installed (``opentelemetry-instrument``, or one set
    before the app is built): only then are the SDK's per-message spans recorded anywhere."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _pattern_matches(value: str, allowed: Sequence[str]) -> bool:
    # An exact value, or ``base:*`` for any port of ``base``. Not fnmatch: ``[::1]:*`` would read as a
    # character class and refuse the IPv6 loopback.
    return value in allowed or any(p.endswith(":*") and value.startswith(p[:-1]) for p in allowed)


def host_allowed(host: str | None, allowed: Sequence[str]) -> bool:
    return bool(host) and _pattern_matches(host or "", allowed)


def origin_allowed(origin: str | None, allowed: Sequence[str]) -> bool:
    # Same-origin requests (and clients that are not browsers) send no Origin.
    return not origin or _pattern_matches(origin, allowed)


def guard(
    headers: Mapping[str, str], allowed_hosts: Sequence[str] | None, allowed_origins: Sequence[str]
) -> Literal["host", "origin"] | None:
    """The DNS-rebinding guard in front of every MCP endpoint: which header is refused, if any.
    ``allowed_hosts`` None skips the Host check."""
    if allowed_hosts is not None and not host_allowed(headers.get("host"), allowed_hosts):
        return "host"
    if not origin_allowed(headers.get("origin"), allowed_origins):
        return "origin"
    return None
