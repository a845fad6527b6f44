"""Hadron's typed refusals, as ``TriptychError`` subclasses rendered by ``hadron.server``.

A refusal's text starts with its code: lower-case codes are bracketed (``[no_active_app] ...``),
upper-case codes end in a colon (``URN_ALREADY_EXISTS: ...``), and a schema violation reads
``Schema violation: <field>: <reason>`` as the contract says. ``details`` is the refusal's data.

    HadronError (BAD_USER_INPUT)
    ├── Unauthenticated          UNAUTHENTICATED
    ├── Forbidden                FORBIDDEN              (readable, not writable; role too low)
    ├── NotFound                 [<kind>_not_found]     (also what an unreadable thing reads as)
    ├── NoActiveApp              [no_active_app]
    ├── NoActiveMemory           [no_active_memory]
    ├── AppAmbiguous             [app_identifier_ambiguous]
    ├── OrgRequired              ORG_REQUIRED
    ├── UrnNotQualified          URN_NOT_QUALIFIED
    ├── UrnAlreadyExists         URN_ALREADY_EXISTS
    ├── SchemaViolation          SCHEMA_VIOLATION       ("Schema violation: ...")
    ├── Conflict                 CONFLICT               (e.g. descendants without recursive)
    ├── LocProtected             [loc_protected]        (a generic node write on a Channel's address)
    └── TeamRefusal              WORKER_TAKEN, WORKER_HELD, WORKER_NAME_REQUIRED, WORKER_NAME_TAKEN,
                                 WORKER_RETIRED, SESSION_NOT_FOUND, SESSION_ENDED, SESSION_NOT_IN_APP,
                                 SESSION_NOT_WORKER_BOUND, SESSION_WORKER_NOT_IN_APP, WORK_REF_INVALID,
                                 CHANNEL_HOST_NOT_WRITABLE, TEAM_AGENT_NOT_FOUND, TEAM_AGENT_AMBIGUOUS

A refusal whose ``verbatim`` is set is rendered as its message alone (the contract spells the whole
line, e.g. ``Forbidden: session "<id>" belongs to a different App or user``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from triptych.core.errors import TriptychError


class HadronError(TriptychError):
    code: ClassVar[str] = "BAD_USER_INPUT"
    http_status = 400
    verbatim: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        details: dict[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint, details=details)
        if code is not None:
            self.code = code  # type: ignore[misc]


class BadInput(HadronError):
    code = "BAD_USER_INPUT"


class Unauthenticated(HadronError):
    code = "UNAUTHENTICATED"
    http_status = 401
    default_hint = "Send 'Authorization: Bearer <token>' (a user JWT or an app key)"


class Forbidden(HadronError):
    code = "FORBIDDEN"
    http_status = 403


class NotFound(HadronError):
    """What a missing thing and a thing the caller may not read both look like."""

    http_status = 404

    def __init__(self, kind: str, ref: str, *, hint: str | None = None) -> None:
        super().__init__(
            f"{kind} not found: {ref}",
            hint=hint,
            details={"kind": kind, "ref": ref},
            code=f"{kind}_not_found",
        )


class NoActiveApp(HadronError):
    code = "no_active_app"
    default_hint = "Pick an App with hadron_set_active_app (hadron_list_apps lists them)"


class NoActiveMemory(HadronError):
    code = "no_active_memory"
    default_hint = "Pass memoryUrn (or a full URN), or bind one with hadron_set_active_memory"


class AppAmbiguous(HadronError):
    code = "app_identifier_ambiguous"
    default_hint = "Pass the App's canonical URN (hadron_list_apps prints it)"


class OrgRequired(HadronError):
    code = "ORG_REQUIRED"
    default_hint = "Pick one with hadron_set_active_org"


class UrnNotQualified(HadronError):
    code = "URN_NOT_QUALIFIED"


class UrnAlreadyExists(HadronError):
    code = "URN_ALREADY_EXISTS"
    http_status = 409


class Conflict(HadronError):
    code = "CONFLICT"
    http_status = 409


class SchemaViolation(HadronError):
    code = "SCHEMA_VIOLATION"

    def __init__(self, field: str, reason: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(
            f"Schema violation: {field}: {reason}",
            details={"field": field, "reason": reason, **(details or {})},
            hint="Fix the field, or read the memory's schema with hadron_validate",
        )


class LocProtected(HadronError):
    code = "loc_protected"
    http_status = 409
    default_hint = "A Channel's address is written through the channel tools (hadron_channel_post)"


class TeamRefusal(HadronError):
    """A typed refusal of the team tools; ``code`` names which (the contract's upper-case codes)."""

    http_status = 409

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
