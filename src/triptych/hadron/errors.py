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
    ├── AmbiguousNodeLoc         AMBIGUOUS_NODE_LOC         invalid (hadron_read_node: a bare loc in several memories)
    ├── SchemaViolation          SCHEMA_VIOLATION           invalid ("Schema violation: ...")
    ├── Conflict                 CONFLICT                   conflict (e.g. descendants without recursive)
    ├── MemoryLocked             MEMORY_LOCKED              conflict (a write to a memory another holder locked)
    ├── LocProtected             [loc_protected]            conflict (a generic node write on a Channel's address)
    ├── EncryptionKeyMissing     ENCRYPTION_KEY_MISSING     unavailable (an encrypted memory, no server key)
    ├── EncryptionKeyMismatch    ENCRYPTION_KEY_MISMATCH    unavailable (sealed under another key; never garbage)
    ├── NoGitSource              NO_GIT_SOURCE              invalid (hadron_sync_graph on a memory without one)
    ├── GitSyncFailed            GIT_SYNC_FAILED            unavailable (clone/fetch/parse failed; nothing changed)
    └── TeamRefusal              WORKER_TAKEN, WORKER_HELD, conflict (the team tools' typed refusals)
                                 WORKER_NAME_REQUIRED, WORKER_NAME_TAKEN, WORKER_RETIRED, SESSION_NOT_FOUND,
                                 SESSION_ENDED, SESSION_NOT_IN_APP, SESSION_NOT_WORKER_BOUND,
                                 SESSION_WORKER_NOT_IN_APP, WORK_REF_INVALID, CHANNEL_HOST_NOT_WRITABLE,
                                 TEAM_AGENT_NOT_FOUND, TEAM_AGENT_AMBIGUOUS
    └── ActionRefusal            ACTION_NOT_RUNNABLE,       invalid (hadron_run_action's typed refusals,
                                 ACTION_ARGS_INVALID, ACTION_DEPENDENCY_CYCLE, ACTION_DEPENDENCY_FAILED,
                                 ACTION_TEMPLATE_INVALID, ACTION_DISABLED, ACTION_TOOL_FAILED; data names
                                 the dependency, source or tool at fault)

A refusal whose ``verbatim`` is set is rendered as its message alone: the contract spells the whole
line (``Forbidden: session "<id>" belongs to a different App or user``).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

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


class HadronError(TriptychError, status=400):
    """A refusal with Hadron's own code."""

    verbatim: ClassVar[bool] = False


class BadInput(HadronError, core.Invalid, code="BAD_USER_INPUT"):
    """An argument the contract refuses."""


class Unauthenticated(
    HadronError,
    core.Unauthenticated,
    code="UNAUTHENTICATED",
    status=401,
    hint="Send 'Authorization: Bearer <token>' (a user JWT or an app key)",
):
    """A tool other than hadron_server_info called before authentication."""


class Forbidden(HadronError, core.Forbidden, code="FORBIDDEN", status=403):
    """Readable but not writable, or a role too low."""


class NotFound(HadronError, core.NotFound, status=404):
    """What a missing thing and a thing the caller may not read both look like."""

    def __init__(self, kind: str, ref: str, *, hint: str | None = None) -> None:
        super().__init__(
            f"{kind} not found: {ref}",
            hint=hint,
            details={"kind": kind, "ref": ref},
            code=f"{kind}_not_found",
        )


class NoActiveApp(
    HadronError,
    core.Invalid,
    code="no_active_app",
    hint="Pick an App with hadron_set_active_app (hadron_list_apps lists them)",
):
    """A call that needs an active App before one is chosen."""


class NoActiveMemory(
    HadronError,
    core.Invalid,
    code="no_active_memory",
    hint="Pass memoryUrn (or a full URN), or bind one with hadron_set_active_memory",
):
    """A call that needs a memory when none is named or bound."""


class AppAmbiguous(
    HadronError,
    core.Invalid,
    code="app_identifier_ambiguous",
    hint="Pass the App's canonical URN (hadron_list_apps prints it)",
):
    """A display name that several Apps share."""


class ScopeAmbiguous(
    HadronError,
    core.Invalid,
    code="scope_identifier_ambiguous",
    hint="Pass the scope's id (hadron_list_scopes prints it)",
):
    """A scope name that several scopes share."""


class OrgRequired(HadronError, core.Invalid, code="ORG_REQUIRED", hint="Pick one with hadron_set_active_org"):
    """A call that needs an organization when the caller has several."""


class UrnNotQualified(HadronError, core.Invalid, code="URN_NOT_QUALIFIED"):
    """A bare loc or partial URN where a fully qualified URN is required."""


class UrnAlreadyExists(HadronError, core.Conflict, code="URN_ALREADY_EXISTS", status=409):
    """A create whose URN is taken."""


class AmbiguousNodeLoc(
    HadronError,
    core.Invalid,
    code="AMBIGUOUS_NODE_LOC",
    hint="Pass memoryRef, or the node's full URN (the candidates are in data)",
):
    """A bare loc that names a live node in more than one readable memory."""


class Conflict(HadronError, core.Conflict, code="CONFLICT", status=409):
    """A change the stored graph does not allow (e.g. deleting descendants without ``recursive``)."""


class MemoryLocked(
    HadronError,
    core.Conflict,
    code="MEMORY_LOCKED",
    status=409,
    hint="Wait until the lock expires or its holder calls hadron_unlock_memory; reads are not affected",
):
    """A write to a memory that another principal holds the lock of (hadron_lock_memory)."""


class SchemaViolation(HadronError, core.Invalid, code="SCHEMA_VIOLATION"):
    """A node or object that breaks its memory's schema."""

    def __init__(self, field: str, reason: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(
            f"Schema violation: {field}: {reason}",
            details={"field": field, "reason": reason, **(details or {})},
            hint="Fix the field, or read the memory's schema with hadron_validate",
        )


class LocProtected(
    HadronError,
    core.Conflict,
    code="loc_protected",
    status=409,
    hint="A Channel's address is written through the channel tools (hadron_channel_post)",
):
    """A generic node write aimed at a Channel's protected subtree."""


class EncryptionKeyMissing(
    HadronError,
    core.Unavailable,
    code="ENCRYPTION_KEY_MISSING",
    hint="The operator sets TRIPTYCH_HADRON_KEY_FILE (see docs/hadron.md, encryption at rest)",
):
    """A read or write of an encrypted memory on a server that holds no key."""


class EncryptionKeyMismatch(
    HadronError,
    core.Unavailable,
    code="ENCRYPTION_KEY_MISMATCH",
    hint="The server's key is not the one this memory was sealed with; nothing was returned or changed",
):
    """A sealed value that does not open under the server's key (never returned as garbage)."""


class NoGitSource(
    HadronError,
    core.Invalid,
    code="NO_GIT_SOURCE",
    hint="An operator attaches one with `triptych hadron source attach <memory> <url>`",
):
    """hadron_sync_graph on a memory that no Git repository backs."""


class GitSyncFailed(
    HadronError,
    core.Unavailable,
    code="GIT_SYNC_FAILED",
    hint="Fix the repository or its URL and sync again; the memory was left as it was",
):
    """The repository could not be read, or a file in it could not be mapped; nothing was changed."""


class TeamRefusal(HadronError, core.Conflict, status=409):
    """A typed refusal of the team tools; ``code`` names which (the contract's upper-case codes)."""

    def __init__(
        self, code: str, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, hint=hint, details=details, code=code)


class ActionRefusal(HadronError, core.Invalid):
    """A typed refusal of hadron_run_action; ``code`` names which (ACTION_*), ``details`` what failed."""

    def __init__(
        self, code: str, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message, hint=hint, details=details, code=code)


class SessionForbidden(Forbidden):
    """The end gate's refusal, worded exactly as the contract words it."""

    verbatim = True

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f'Forbidden: session "{session_id}" belongs to a different App or user',
            details={"sessionId": session_id},
        )


def render_error(exc: TriptychError) -> types.CallToolResult:
    """A refusal: text that starts with the typed code, then the message, hint and data."""
    code = surface_code(exc, BY_KIND)
    if code == "SCHEMA_VIOLATION" or getattr(exc, "verbatim", False):
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
