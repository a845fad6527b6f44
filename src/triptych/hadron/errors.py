"""Hadron's typed refusals and the one renderer of its contract's refusal shape.

Each refusal subclasses a core kind (``core.errors``) and carries Hadron's code. A refusal's text
starts with its code: lower-case codes are bracketed (``[no_active_app] ...``), upper-case codes end
in a colon (``URN_ALREADY_EXISTS: ...``), and a schema violation reads
``Schema violation: <field>: <reason>`` as the contract says. ``details`` is the refusal's data. A
core kind raised as it is (an argument that does not fit a tool's schema, an unexpected failure)
reads as Hadron's code for that kind (``BY_KIND``).

    HadronError                  code                       kind
    ├── BadInput                 BAD_USER_INPUT             invalid
    ├── Unauthenticated          UNAUTHENTICATED            unauthenticated
    ├── Forbidden                FORBIDDEN                  forbidden (readable, not writable)
    ├── NotFound                 [<kind>_not_found]         not_found (also what an unreadable thing reads as)
    ├── NoActiveApp              [no_active_app]            invalid
    ├── NoActiveMemory           [no_active_memory]         invalid
    ├── AppAmbiguous             [app_identifier_ambiguous] invalid
    ├── ScopeAmbiguous           [scope_identifier_ambiguous] invalid
    ├── OrgRequired              ORG_REQUIRED               invalid
    ├── UrnNotQualified          URN_NOT_QUALIFIED          invalid
    ├── UrnAlreadyExists         URN_ALREADY_EXISTS         conflict
    ├── SchemaViolation          SCHEMA_VIOLATION           invalid ("Schema violation: ...")
    └── Conflict                 CONFLICT                   conflict (e.g. descendants without recursive)
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from triptych.core import errors as core
from triptych.core.errors import Kind, TriptychError, surface_code

BY_KIND: dict[Kind, str] = {
    "invalid": "BAD_USER_INPUT",
    "unauthenticated": "UNAUTHENTICATED",
    "forbidden": "FORBIDDEN",
    "conflict": "CONFLICT",
    "internal": "INTERNAL_ERROR",
}


class HadronError(TriptychError):
    """A refusal with Hadron's own code."""

    http_status = 400


class BadInput(HadronError, core.Invalid):
    code = "BAD_USER_INPUT"


class Unauthenticated(HadronError, core.Unauthenticated):
    code = "UNAUTHENTICATED"
    http_status = 401
    default_hint = "Send 'Authorization: Bearer <token>' (a user JWT or an app key)"


class Forbidden(HadronError, core.Forbidden):
    code = "FORBIDDEN"
    http_status = 403


class NotFound(HadronError, core.NotFound):
    """What a missing thing and a thing the caller may not read both look like."""

    http_status = 404

    def __init__(self, kind: str, ref: str, *, hint: str | None = None) -> None:
        super().__init__(
            f"{kind} not found: {ref}",
            hint=hint,
            details={"kind": kind, "ref": ref},
            code=f"{kind}_not_found",
        )


class NoActiveApp(HadronError, core.Invalid):
    code = "no_active_app"
    default_hint = "Pick an App with hadron_set_active_app (hadron_list_apps lists them)"


class NoActiveMemory(HadronError, core.Invalid):
    code = "no_active_memory"
    default_hint = "Pass memoryUrn (or a full URN), or bind one with hadron_set_active_memory"


class AppAmbiguous(HadronError, core.Invalid):
    code = "app_identifier_ambiguous"
    default_hint = "Pass the App's canonical URN (hadron_list_apps prints it)"


class ScopeAmbiguous(HadronError, core.Invalid):
    code = "scope_identifier_ambiguous"
    default_hint = "Pass the scope's id (hadron_list_scopes prints it)"


class OrgRequired(HadronError, core.Invalid):
    code = "ORG_REQUIRED"
    default_hint = "Pick one with hadron_set_active_org"


class UrnNotQualified(HadronError, core.Invalid):
    code = "URN_NOT_QUALIFIED"


class UrnAlreadyExists(HadronError, core.Conflict):
    code = "URN_ALREADY_EXISTS"
    http_status = 409


class Conflict(HadronError, core.Conflict):
    code = "CONFLICT"
    http_status = 409


class SchemaViolation(HadronError, core.Invalid):
    code = "SCHEMA_VIOLATION"

    def __init__(self, field: str, reason: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(
            f"Schema violation: {field}: {reason}",
            details={"field": field, "reason": reason, **(details or {})},
            hint="Fix the field, or read the memory's schema with hadron_validate",
        )


def render_error(exc: TriptychError) -> types.CallToolResult:
    """A refusal: text that starts with the typed code, then the message, hint and data."""
    code = surface_code(exc, BY_KIND)
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
