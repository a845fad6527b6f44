"""Metergraph's refusals (subclasses of the core kinds with the contract's lower-case ``error.code``)
and the one renderer of its error document, used by the MCP endpoint and the REST doors alike.

    MetergraphError              code                    kind            http
    ├── InvalidArgument          invalid_argument        invalid         422
    │   └── BadBatch             invalid_argument        invalid         400 (an ingest document as a whole)
    ├── NotFoundError            not_found               not_found       404
    ├── ForbiddenError           forbidden               forbidden       403
    ├── ReplayNotEligible        replay_not_eligible     conflict        409
    ├── ResponseTooLarge         response_too_large      invalid         413
    ├── UnsupportedCapability    unsupported_capability  unavailable     501
    ├── RateLimited              rate_limited            unavailable     429
    ├── Unauthenticated          unauthenticated         unauthenticated 401 (HTTP only, not a contract code)
    └── ImportSyncError          (the import-sync doors, ``/v1/import-sync``: not Agent Access codes)
        ├── SyncInvalid              invalid_argument        invalid         400
        ├── InitialSinceRequired     initial_since_required  invalid         400
        ├── LeaseHeld                lease_held              conflict        409 (with ``retry_at``)
        ├── LeaseNotFound            lease_not_found         not_found       404
        ├── LeaseEnded               lease_ended             conflict        409
        └── LeaseExpired             lease_expired           conflict        410

``import_sync_document`` renders the import-sync refusals (``{"error": {"code", "message"}}``, a busy
stream's ``status`` and ``retry_at`` beside it). The HTTP doors answer through ``agent_refusal``,
``ingest_refusal`` and ``import_sync_refusal`` (status, document, headers): besides the kinds above they
render what a door refuses before any service runs (a body too large, a bad gzip body, a missing token) and
a storage failure, which ingest clients retry later (503 with ``Retry-After``). A core kind raised as it is reads as ``BY_KIND`` says; an internal error is never a tool result (the
MCP endpoint answers JSON-RPC -32603, the REST doors HTTP 500).
"""

from __future__ import annotations

from typing import Any

from triptych.core import errors as core
from triptych.core.errors import (
    Conflict,
    Forbidden,
    Invalid,
    Kind,
    NotFound,
    StorageUnavailable,
    TriptychError,
    Unavailable,
    surface_code,
)
from triptych.core.jsonbody import BodyTooLarge
from triptych.metergraph.contract import CONTRACT_VERSION, MAX_RESPONSE_BYTES

BY_KIND: dict[Kind, str] = {
    "invalid": "invalid_argument",
    "not_found": "not_found",
    "forbidden": "forbidden",
    "unauthenticated": "unauthenticated",
}


class MetergraphError(TriptychError, kind="invalid", code="invalid_argument", status=422):
    """A refusal with Metergraph's own (lower-case) code."""


class InvalidArgument(MetergraphError, Invalid, code="invalid_argument", status=422):
    """An argument the contract does not allow."""


class BadBatch(InvalidArgument, status=400):
    """An ingest document refused as a whole."""


class NotFoundError(MetergraphError, NotFound, code="not_found", status=404):
    """No such trace or record in the key's workspace."""


class ForbiddenError(MetergraphError, Forbidden, code="forbidden", status=403):
    """The key's role, scopes or environments do not reach this."""


class ReplayNotEligible(MetergraphError, Conflict, code="replay_not_eligible", status=409):
    """A trace that cannot be replayed."""


class ResponseTooLarge(MetergraphError, Invalid, code="response_too_large", status=413):
    """An answer over 5 MiB."""


def check_response_size(size: int) -> None:
    """Both doors refuse an answer over 5 MiB the same way."""
    if size > MAX_RESPONSE_BYTES:
        raise ResponseTooLarge("the response exceeds 5 MiB: narrow the window or lower the limit")


class UnsupportedCapability(MetergraphError, Unavailable, code="unsupported_capability", status=501):
    """A tool this deployment does not offer."""


class RateLimited(MetergraphError, Unavailable, code="rate_limited", status=429):
    """Too many reads for this key this minute."""


class Unauthenticated(MetergraphError, core.Unauthenticated, code="unauthenticated", status=401):
    """Not a contract code: a missing or invalid token is HTTP 401 before any tool runs."""


class ImportSyncError(MetergraphError, status=400):
    """A refusal of the import-sync API, with its own code and HTTP status."""


class SyncInvalid(ImportSyncError, Invalid, code="invalid_argument", status=400):
    """A request the API does not accept."""


class InitialSinceRequired(ImportSyncError, Invalid, code="initial_since_required", status=400):
    """The first window of a stream needs initial_since."""


class LeaseHeld(ImportSyncError, Conflict, code="lease_held", status=409):
    """Another run holds the stream's lease; ``retry_at`` says when it runs out."""

    def __init__(self, message: str, retry_at: str) -> None:
        super().__init__(message, details={"retry_at": retry_at})
        self.retry_at = retry_at


class LeaseNotFound(ImportSyncError, NotFound, code="lease_not_found", status=404):
    """No such lease in this workspace."""


class LeaseEnded(ImportSyncError, Conflict, code="lease_ended", status=409):
    """The lease was completed or abandoned."""


class LeaseExpired(ImportSyncError, Conflict, code="lease_expired", status=410):
    """The lease ran out (and may have been taken over)."""


def import_sync_document(exc: ImportSyncError) -> dict[str, Any]:
    """An import-sync refusal as the relay reads it: a busy stream says so at the top level."""
    document: dict[str, Any] = {"error": {"code": exc.code, "message": exc.message}}
    if isinstance(exc, LeaseHeld):
        document = {"status": "busy", "retry_at": exc.retry_at, **document}
    return document


ERROR_CODES = frozenset(
    c.code
    for c in (
        InvalidArgument,
        NotFoundError,
        ForbiddenError,
        ReplayNotEligible,
        ResponseTooLarge,
        UnsupportedCapability,
        RateLimited,
    )
)


def error_document(exc: TriptychError) -> dict[str, Any]:
    """The contract's error document: a contract code (a kind raised as it is reads as Metergraph's
    code for that kind; anything else as ``invalid_argument``) and the message."""
    code = surface_code(exc, BY_KIND)
    code = code if code in ERROR_CODES else "invalid_argument"
    return {"schema_version": CONTRACT_VERSION, "error": {"code": code, "message": exc.message}}


def internal_error_document() -> dict[str, Any]:
    """An unexpected failure (core/lastresort.py): not a contract code, but the contract's shape."""
    message = "unexpected server error; see the server log"
    return {"schema_version": CONTRACT_VERSION, "error": {"code": "internal", "message": message}}


class BadEncoding(Exception):
    """A body whose ``Content-Encoding`` cannot be undone (not valid gzip)."""


# What an HTTP door answers: status, JSON document, extra headers.
Rendered = tuple[int, dict[str, Any], dict[str, str] | None]
_BEARER = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
# Ingest and import-sync clients retry a batch or a window later instead of dropping it.
_RETRY_LATER = {"Retry-After": "60"}


def refusal_document(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """A door's refusal outside the Agent Access contract: ``{"error": {"code", "message", ...}}``."""
    return {"error": {"code": code, "message": message, **extra}}


def door_refusal(exc: Exception) -> Rendered | None:
    """What every HTTP door refuses the same way before a service runs, or None for anything else."""
    if isinstance(exc, Unauthenticated):
        return 401, refusal_document("unauthenticated", exc.message), _BEARER
    if isinstance(exc, BodyTooLarge):
        return 413, refusal_document("payload_too_large", exc.message), None
    if isinstance(exc, BadEncoding):
        return 400, refusal_document("invalid_argument", str(exc)), None
    return None


def agent_refusal(exc: TriptychError) -> Rendered:
    """An Agent Access REST refusal: the contract's error document at the error's HTTP status."""
    door = door_refusal(exc)
    if door is not None:
        return door
    return exc.http_status, error_document(exc), _BEARER if exc.http_status == 401 else None


def ingest_refusal(exc: Exception) -> Rendered:
    """An ingest door's refusal (``/v1/ingest``, ``/v1/traces``, sessions, config)."""
    door = door_refusal(exc)
    if door is not None:
        return door
    if isinstance(exc, StorageUnavailable):
        document = refusal_document("storage_unavailable", exc.message, hint=exc.hint, **exc.details)
        return 503, document, _RETRY_LATER
    assert isinstance(exc, TriptychError)
    return agent_refusal(exc)


def import_sync_refusal(exc: Exception) -> Rendered:
    """An import-sync door's refusal, in the relay's shape."""
    door = door_refusal(exc)
    if door is not None:
        return door
    if isinstance(exc, ImportSyncError):
        return exc.http_status, import_sync_document(exc), None
    assert isinstance(exc, StorageUnavailable)
    return (
        503,
        refusal_document("storage_unavailable", f"{exc.message} {exc.hint or ''}".strip()),
        _RETRY_LATER,
    )
