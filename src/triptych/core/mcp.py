"""Declaring MCP tools once (name, description, pydantic argument model, handler) and serving them.

The argument models use ``extra="forbid"``: a misspelled argument is refused, never silently dropped.
Each surface passes its own ``ErrorRenderer`` so refusals come out in its contract's shape. Handlers
are synchronous service calls and run in worker threads, so the event loop never waits on SQLite or
the embedding model.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from pydantic import BaseModel, ConfigDict, ValidationError

from triptych import __version__
from triptych.core.auth import Principal, local_principal, valid_agent_id
from triptych.core.errors import InternalError, InvalidParams, TriptychError

log = logging.getLogger(__name__)
# The ``_meta`` key of every tool result that carries the server's own time for the call, in ms.
SERVER_TIME_META = "triptych/server_ms"

PRINCIPAL_KEY = "triptych.principal"

M = TypeVar("M", bound=BaseModel)


class ToolArgs(BaseModel):
    """Base of every tool's argument model: unknown arguments are an error."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class Caller:
    principal: Principal
    agent_id: str | None
    headers: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    args: type[BaseModel]
    # A plain function runs in a worker thread; a coroutine function runs on the event loop.
    handler: Callable[[Caller, Any], Any]
    read_only: bool = True

    def definition(self) -> types.Tool:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=schema,
            annotations=types.ToolAnnotations(read_only_hint=self.read_only),
        )


ErrorRenderer = Callable[[TriptychError], types.CallToolResult]


def json_result(payload: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False, default=str))],
        structured_content=payload,
    )


def validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            parts.append(f"unknown argument {where!r}")
        elif error["type"] == "missing":
            parts.append(f"missing required argument {where!r}")
        else:
            parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def parse_args(model: type[M], arguments: Mapping[str, Any] | None) -> M:
    try:
        return model.model_validate(dict(arguments or {}))
    except ValidationError as exc:
        fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
        raise InvalidParams(validation_message(exc), details={"fields": fields}) from exc


def caller_from(ctx: ServerRequestContext[Any, Any], stdio_agent_id: str | None = None) -> Caller:
    request = ctx.request
    if request is None:  # stdio: the local configuration applies
        return Caller(local_principal(), valid_agent_id(stdio_agent_id), {})
    principal = request.scope.get(PRINCIPAL_KEY) or local_principal()
    headers = request.headers
    return Caller(principal, valid_agent_id(headers.get("x-agent-id")), headers)


def input_schemas(definitions: Sequence[types.Tool]) -> dict[str, dict[str, Any]]:
    """Each tool's input schema by name, as advertised by ``tools/list``."""
    return {d.name: d.input_schema for d in definitions}


def build_server(
    name: str,
    tools: Sequence[Tool],
    render_error: ErrorRenderer,
    instructions: str | None = None,
    stdio_agent_id: str | None = None,
) -> Server[Any]:
    by_name = {tool.name: tool for tool in tools}
    definitions = [tool.definition() for tool in tools]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=definitions)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        started = time.perf_counter()
        result = await _run_tool(ctx, params)
        # How long the server spent on the call, in the result's protocol metadata (not the payload,
        # whose shape the contracts fix): clients that time only round trips can subtract transport.
        result.meta = {SERVER_TIME_META: round((time.perf_counter() - started) * 1000, 2)}
        return result

    async def _run_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = by_name.get(params.name)
        try:
            if tool is None:
                raise InvalidParams(
                    f"unknown tool {params.name!r}", hint=f"Available tools: {', '.join(sorted(by_name))}"
                )
            caller = caller_from(ctx, stdio_agent_id)
            args = parse_args(tool.args, params.arguments)
            if inspect.iscoroutinefunction(tool.handler):
                payload = await tool.handler(caller, args)
            else:
                payload = await anyio.to_thread.run_sync(tool.handler, caller, args)
            return json_result(payload)
        except TriptychError as exc:
            return render_error(exc)
        except Exception:
            log.exception("tool %s failed", params.name)
            return render_error(InternalError("Unexpected server error while running " + params.name))

    return Server(
        name,
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        # The SDK checks a call's Mcp-Param-* headers against the tool's schema; without this lookup it
        # runs the whole tools/list handler and serializes every definition on every call (a third of
        # the event loop's time under a memory_store load, py-spy).
        get_tool_input_schema=input_schemas(definitions).get,
    )
