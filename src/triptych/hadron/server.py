"""Hadron's MCP wiring: a stateful streamable-HTTP endpoint that knows its callers and sessions.

Tools run through ``core.mcp``; what Hadron adds is its context hook (``session_bind``: Hadron keys its
selections on the MCP session id and the client id) and its endpoint:

- authenticates the bearer (user JWT or app key) into a ``HadronCaller``;
- keeps clients on the session-bearing (handshake) protocol revisions: a request at a revision
  without sessions gets JSON-RPC -32022 naming the supported ones, and the client falls back to
  ``initialize``;
- notices requests for a session this process does not know (a restart), so the replacement
  session can report ``connection: re-established``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from triptych.core import jsonbody
from triptych.core.config import Settings
from triptych.core.http import McpEndpoint, send_json
from triptych.core.mcp import SessionBind, Tool
from triptych.core.mcp import build_server as build_mcp_server
from triptych.hadron import resources
from triptych.hadron.errors import BY_KIND, Unauthenticated, render_error
from triptych.hadron.identity import ANONYMOUS, Authenticate, HadronCaller
from triptych.hadron.resources import Identify
from triptych.hadron.services.push import PushService
from triptych.hadron.services.selection import SelectionService, SessionState, client_id_from
from triptych.hadron.tools.base import Ctx

CALLER_KEY = "triptych.hadron.caller"
CLIENT_ID_HEADER = "x-hadron-client-id"
SESSION_HEADER = "mcp-session-id"
UNSUPPORTED_PROTOCOL_VERSION = -32022
MAX_REFUSED_BODY = 64 * 1024  # a refused request's body is read only for its id


def session_bind(selections: SelectionService) -> SessionBind[Ctx]:
    """Hadron's context hook: the caller, bound to its MCP session and client id. The session state is
    looked up in the worker thread and its lock held while the tool runs."""

    def bind(ctx: ServerRequestContext[Any, Any], tool: Tool[Ctx]) -> AbstractContextManager[Ctx]:
        caller, session_id, client_id = _caller_of(ctx)
        if caller.kind == "anonymous" and not tool.public:
            raise Unauthenticated(
                f"{tool.name} needs an authenticated caller; only hadron_server_info does not"
            )
        request = ctx.request
        server_url = str(request.base_url).rstrip("/") if request is not None else None
        return _in_session(selections, caller, session_id, client_id, server_url)

    return bind


def _caller_of(ctx: ServerRequestContext[Any, Any]) -> tuple[HadronCaller, str, str | None]:
    """The caller, the MCP session id and the client id of a request."""
    request = ctx.request
    headers: Mapping[str, str] = request.headers if request is not None else {}
    caller: HadronCaller = request.scope.get(CALLER_KEY, ANONYMOUS) if request is not None else ANONYMOUS
    return caller, headers.get(SESSION_HEADER) or "stdio", client_id_from(headers.get(CLIENT_ID_HEADER))


def session_identify(selections: SelectionService) -> Identify:
    """For requests other than tool calls (the chat resources): the caller, its MCP session id and the
    session's state (read at push time for the worker it drives)."""

    def identify(ctx: ServerRequestContext[Any, Any]) -> tuple[HadronCaller, str, SessionState]:
        caller, session_id, client_id = _caller_of(ctx)
        return caller, session_id, selections.session(caller, session_id, client_id)

    return identify


@contextmanager
def _in_session(
    selections: SelectionService,
    caller: HadronCaller,
    session_id: str,
    client_id: str | None,
    server_url: str | None,
) -> Iterator[Ctx]:
    state = selections.session(caller, session_id, client_id)
    with state.lock:
        yield Ctx(caller, state, server_url)


def build_server(
    tools: Sequence[Tool[Ctx]],
    selections: SelectionService,
    instructions: str,
    push: PushService | None = None,
) -> Server[Any]:
    server = build_mcp_server(
        "hadron",
        tools,
        bind=session_bind(selections),
        render_error=render_error,
        error_codes=BY_KIND,
        instructions=instructions,
    )
    if push is not None:
        resources.register(server, push, session_identify(selections))
    return server


class HadronEndpoint(McpEndpoint):
    """Stateful streamable HTTP at ``/hadron/mcp`` with Hadron's own authentication."""

    def __init__(
        self,
        server: Server[Any],
        settings: Settings,
        authenticate: Authenticate,
        selections: SelectionService,
        push: PushService | None = None,
    ) -> None:
        # Inline, like core's endpoint: a JWT check and one indexed read (WAL readers never wait).
        super().__init__(server, settings, authenticate, caller_key=CALLER_KEY)
        self._selections = selections
        self._push = push

    async def refuse(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> bool:
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._refuse_revision(scope, receive, send, version)
            return True
        return False

    async def forward(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], caller: Any
    ) -> None:
        if headers.get(SESSION_HEADER) is None:
            await self.handle(scope, receive, send)
            return

        session_id = headers[SESSION_HEADER]
        ended = scope.get("method") == "DELETE"

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                if message["status"] == 404:
                    self._selections.note_lost_session(caller)
                if self._push is not None and (
                    message["status"] == 404 or (ended and message["status"] < 300)
                ):
                    self._push.end_session(session_id)  # its subscriptions end with it
            await send(message)

        await self.handle(scope, receive, watch)

    async def _refuse_revision(self, scope: Scope, receive: Receive, send: Send, version: str) -> None:
        body = b""
        while scope["type"] == "http":
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body") or len(body) > MAX_REFUSED_BODY:
                break  # only the id is wanted: past the bound the rest is not read
        try:
            decoded = jsonbody.parse(body, allow_nul=True) if body else None
        except jsonbody.JsonRefused:
            decoded = None
        request_id = decoded.get("id") if isinstance(decoded, dict) else None
        error = {
            "code": UNSUPPORTED_PROTOCOL_VERSION,
            "message": f"protocol revision {version} is not served here: Hadron needs MCP sessions",
            "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version},
        }
        await send_json(send, 400, {"jsonrpc": "2.0", "id": request_id, "error": error})
