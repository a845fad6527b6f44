"""Who is calling Metronix and what it may touch: the caller its tools receive, the workspace rules
(grants from the token's ``workspace_ids``, writes for editors and admins) and the ``X-Agent-Id`` rule.

The token itself is ``core.auth``'s (shared with Hadron); these rules are Metronix's contract.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from mcp.server import ServerRequestContext

from triptych.core.auth import Principal, TokenVerifier, bearer_token, local_principal
from triptych.core.config import Settings
from triptych.core.errors import CredentialsMissing
from triptych.core.http import Authenticator
from triptych.core.mcp import PRINCIPAL_KEY, SessionBind, Tool
from triptych.metronix.errors import InvalidParams, WorkspaceNotFound, WriteForbidden

_AGENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_WORKSPACE_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


@dataclass(frozen=True, slots=True)
class Caller:
    """What a Metronix tool's handler receives."""

    principal: Principal
    agent_id: str | None
    headers: Mapping[str, str]


def caller_from(ctx: ServerRequestContext[Any, Any], stdio_agent_id: str | None = None) -> Caller:
    request = ctx.request
    if request is None:  # stdio: the local configuration applies
        return Caller(local_principal(), valid_agent_id(stdio_agent_id), {})
    principal = request.scope.get(PRINCIPAL_KEY) or local_principal()
    headers = request.headers
    return Caller(principal, valid_agent_id(headers.get("x-agent-id")), headers)


def caller_bind(stdio_agent_id: str | None = None) -> SessionBind[Caller]:
    """Metronix's context hook: the authenticated principal and the ``X-Agent-Id`` header."""

    def bind(ctx: ServerRequestContext[Any, Any], tool: Tool[Caller]) -> AbstractContextManager[Caller]:
        return nullcontext(caller_from(ctx, stdio_agent_id))

    return bind


def jwt_authenticator(settings: Settings) -> Authenticator:
    """Auth off: every caller is the local principal. Auth on: a valid bearer JWT is required."""
    if not settings.auth_enabled:
        return lambda _header: None
    verifier = TokenVerifier(settings)

    def authenticate(header: str | None) -> Principal:
        token = bearer_token(header)
        if token is None:
            raise CredentialsMissing("missing bearer token: send 'Authorization: Bearer <jwt>'")
        return verifier.verify(token)

    return authenticate


def valid_agent_id(value: str | None) -> str | None:
    """The ``X-Agent-Id`` rule: 1-64 of A-Z a-z 0-9 . _ -; anything else is dropped (None)."""
    if value is None:
        return None
    value = value.strip()
    return value if _AGENT_ID.fullmatch(value) else None


def acting_agent(caller: Caller, argument: str) -> str:
    """The call's agent: the ``agent_id`` argument, which the contract keeps required. A connection that
    names its agent (``X-Agent-Id``, or ``TRIPTYCH_AGENT_ID`` over stdio) may act only as that agent, so
    what it writes and reads is attributed to the agent the header names."""
    if caller.agent_id is not None and argument != caller.agent_id:
        raise InvalidParams(
            f"agent_id {argument!r} differs from this connection's agent {caller.agent_id!r}",
            hint="Send the same value as agent_id and in X-Agent-Id (TRIPTYCH_AGENT_ID over stdio)",
            details={"field": "agent_id", "connection_agent_id": caller.agent_id},
        )
    return argument


def review_actor(caller: Caller) -> str:
    """Who a review audit event names: the connection's agent when it says which, else the MCP caller."""
    return f"agent:{caller.agent_id}" if caller.agent_id else "mcp_caller"


def resolve_workspace(principal: Principal, requested: str | None, default: str) -> str:
    """The workspace a call acts on, refused before any data access when it is not granted.

    An omitted workspace selects the first granted one (hosted) or the configured default (local).
    The refusal never says whether the workspace exists.
    """
    if requested is None or requested == "":
        if principal.workspace_ids and not principal.local:
            return principal.workspace_ids[0]
        requested = default
    if not _WORKSPACE_ID.fullmatch(requested):
        raise InvalidParams(
            f"workspace_id {requested!r} is not valid: use 1-128 characters from A-Z a-z 0-9 . _ : @ -",
            details={"field": "workspace_id"},
        )
    if not principal.can_access(requested):
        raise WorkspaceNotFound(
            f"Workspace not found or not granted: {requested}",
            details={"workspace_id": requested},
        )
    return requested


def require_write(principal: Principal) -> None:
    if not principal.can_write:
        raise WriteForbidden(
            f"Role {principal.role!r} may read but not write",
            hint="Use a token with role editor or admin (`triptych token --role editor ...`)",
            details={"role": principal.role},
        )
