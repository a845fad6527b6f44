"""Hadron's MCP wiring: a stateful streamable-HTTP endpoint that knows its callers and sessions.

``core.mcp.build_server`` does not hand a tool its MCP session id or client id, and Hadron keys its
selections on both, so this module wires the low-level SDK server itself. The endpoint:

- authenticates the bearer (user JWT or app key) into a ``HadronCaller``;
- keeps clients on the session-bearing (handshake) protocol revisions: a request at a revision
  without sessions gets JSON-RPC -32022 naming the supported ones, and the client falls back to
  ``initialize``;
- notices requests for a session this process does not know (a restart), so the replacement
  session can report ``connection: re-established``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from triptych import __version__
from triptych.config import Settings
from triptych.core.errors import AuthRequired, InternalError, InvalidParams, TriptychError
from triptych.core.http import McpEndpoint, error_body, send_json
from triptych.core.mcp import input_schemas, parse_args
from triptych.hadron.errors import BadInput, Unauthenticated
from triptych.hadron.identity import ANONYMOUS, Authenticate, HadronCaller
from triptych.hadron.services.selection import SelectionService, client_id_from
from triptych.hadron.tools.base import Ctx, HadronTool

log = logging.getLogger(__name__)

CALLER_KEY = "triptych.hadron.caller"
CLIENT_ID_HEADER = "x-hadron-client-id"
SESSION_HEADER = "mcp-session-id"
UNSUPPORTED_PROTOCOL_VERSION = -32022


def render_error(exc: TriptychError) -> types.CallToolResult:
    """A refusal: text that starts with the typed code, then the message, hint and data."""
    code = exc.code
    if code == "SCHEMA_VIOLATION":
        head = exc.message
    elif code.islower():
        head = f"[{code}] {exc.message}"
    else:
        head = f"{code}: {exc.message}"
    lines = [head]
    if exc.hint:
        lines.append(f"hint: {exc.hint}")
    if exc.details:
        lines.append("data: " + json.dumps(exc.details, ensure_ascii=False, default=str))
    body = {"code": code, "message": exc.message, "hint": exc.hint, "data": exc.details}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="\n".join(lines))],
        structured_content={"error": body},
        is_error=True,
    )


def build_server(tools: Sequence[HadronTool], selections: SelectionService, instructions: str) -> Server[Any]:
    by_name = {tool.name: tool for tool in tools}
    definitions = [_definition(tool) for tool in tools]

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=definitions)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = by_name.get(params.name)
        try:
            if tool is None:
                raise BadInput(
                    f"unknown tool {params.name!r}", hint=f"Available: {', '.join(sorted(by_name))}"
                )
            request = ctx.request
            headers: Mapping[str, str] = request.headers if request is not None else {}
            caller: HadronCaller = (
                request.scope.get(CALLER_KEY, ANONYMOUS) if request is not None else ANONYMOUS
            )
            if caller.kind == "anonymous" and not tool.public:
                raise Unauthenticated(
                    f"{tool.name} needs an authenticated caller; only hadron_server_info does not"
                )
            try:
                args = parse_args(tool.args, params.arguments)
            except InvalidParams as exc:
                raise BadInput(exc.message, details=exc.details, hint=exc.hint) from exc
            session_id = headers.get(SESSION_HEADER) or "stdio"
            client_id = client_id_from(headers.get(CLIENT_ID_HEADER))
            server_url = str(request.base_url).rstrip("/") if request is not None else None

            def run() -> types.CallToolResult:
                state = selections.session(caller, session_id, client_id)
                with state.lock:
                    output = tool.handler(Ctx(caller, state, server_url), args)
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=output.text)],
                    structured_content=output.data,
                )

            return await anyio.to_thread.run_sync(run)
        except TriptychError as exc:
            return render_error(exc)
        except Exception:
            log.exception("tool %s failed", params.name)
            return render_error(InternalError("Unexpected server error while running " + params.name))

    return Server(
        "hadron",
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        # The SDK checks a call's Mcp-Param-* headers against the tool's schema; without this lookup it
        # runs the whole tools/list handler and serializes every definition on every call (a third of
        # the event loop's time under a memory_store load, py-spy).
        get_tool_input_schema=input_schemas(definitions).get,
    )


def _definition(tool: HadronTool) -> types.Tool:
    schema = tool.args.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=schema,
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only),
    )


class HadronEndpoint(McpEndpoint):
    """Stateful streamable HTTP at ``/hadron/mcp`` with Hadron's own authentication."""

    def __init__(
        self,
        server: Server[Any],
        settings: Settings,
        authenticate: Authenticate,
        selections: SelectionService,
    ) -> None:
        super().__init__(server, settings, lambda _header: None)
        self._hadron_authenticate = authenticate
        self._selections = selections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._refuse_revision(scope, receive, send, version)
            return
        try:
            # Inline, like core's endpoint: a JWT check and one indexed read (WAL readers never wait).
            caller = self._hadron_authenticate(headers.get("authorization"))
        except AuthRequired as exc:
            await send_json(send, 401, error_body(exc), {"WWW-Authenticate": 'Bearer error="invalid_token"'})
            return
        scope[CALLER_KEY] = caller
        if headers.get(SESSION_HEADER) is None:
            await self.forward(scope, receive, send)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 404:
                self._selections.note_lost_session(caller)
            await send(message)

        await self.forward(scope, receive, watch)

    async def _refuse_revision(self, scope: Scope, receive: Receive, send: Send, version: str) -> None:
        body = b""
        while scope["type"] == "http":
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request_id = json.loads(body).get("id") if body else None
        except (json.JSONDecodeError, AttributeError):
            request_id = None
        error = {
            "code": UNSUPPORTED_PROTOCOL_VERSION,
            "message": f"protocol revision {version} is not served here: Hadron needs MCP sessions",
            "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version},
        }
        await send_json(send, 400, {"jsonrpc": "2.0", "id": request_id, "error": error})
