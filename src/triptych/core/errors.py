"""One error tree for every surface: a root, a few neutral kinds, and the two refusals shared by
surfaces for a reason.

A service raises a ``TriptychError``; each surface's ``errors.py`` renders it in its own contract's
shape (Metronix: an in-band ``{"error": {...}}``, Hadron: a typed refusal text, Metergraph: a
lower-case ``error.code``). A surface's own refusals subclass a kind and carry the surface's code; a
kind raised as it is carries a neutral code, which the renderer replaces with the surface's code for
that kind (``surface_code``). Nothing else reaches a client: an unexpected exception becomes
``InternalError`` and its traceback stays in the server log.

    TriptychError          kind             neutral code       http
    ├── Invalid            invalid          INVALID            422
    ├── NotFound           not_found        NOT_FOUND          404
    ├── Forbidden          forbidden        FORBIDDEN          403
    ├── Unauthenticated    unauthenticated  UNAUTHENTICATED    401
    │   └── AuthRequired   AUTH_REQUIRED: the bearer JWT (core.auth) Metronix and Hadron both accept
    │       └── CredentialsMissing   no bearer token sent at all (its 401 challenge names no error)
    ├── Conflict           conflict         CONFLICT           409
    │   └── EmbeddingMismatch   EMBEDDING_MISMATCH: the embedder (core.embed) both surfaces share
    ├── Unavailable        unavailable      UNAVAILABLE        503
    └── InternalError      internal         INTERNAL_ERROR     500
        ├── IngestionFailed     INGESTION_FAILED: the shared embedder could not embed; nothing stored
        └── StorageUnavailable  INTERNAL_ERROR, HTTP 503: the data directory is full, read-only or
                                failing (details.reason says which); nothing was written, reads work
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

Kind = Literal["invalid", "not_found", "forbidden", "unauthenticated", "conflict", "unavailable", "internal"]


class TriptychError(Exception):
    """A refusal with a code, a message for people and a hint saying what to do next."""

    kind: ClassVar[Kind] = "internal"
    code: str = "INTERNAL_ERROR"
    http_status: int = 500
    default_hint: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        details: dict[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint
        self.details: dict[str, Any] = details or {}
        if code is not None:  # a code made per refusal (Hadron's ``<kind>_not_found``)
            self.code = code

    def __init_subclass__(
        cls,
        *,
        kind: Kind | None = None,
        code: str | None = None,
        status: int | None = None,
        hint: str | None = None,
        **kwargs: Any,
    ) -> None:
        """A refusal is declared by its class line: ``class X(Kind, code=..., status=..., hint=...)``."""
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind
        if code is not None:
            cls.code = code
        if status is not None:
            cls.http_status = status
        if hint is not None:
            cls.default_hint = hint

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "hint": self.hint, "details": self.details}


class Invalid(TriptychError, kind="invalid", code="INVALID", status=422):
    """A request that breaks a rule: a bad argument, a value out of range."""


class NotFound(TriptychError, kind="not_found", code="NOT_FOUND", status=404):
    """What was asked for is not there (or may not be seen: the two read the same)."""


class Forbidden(TriptychError, kind="forbidden", code="FORBIDDEN", status=403):
    """The caller is known but may not do this."""


class Unauthenticated(TriptychError, kind="unauthenticated", code="UNAUTHENTICATED", status=401):
    """The caller is not known: no credential, or one that was refused."""


class Conflict(TriptychError, kind="conflict", code="CONFLICT", status=409):
    """The request clashes with what is stored."""


class Unavailable(TriptychError, kind="unavailable", code="UNAVAILABLE", status=503):
    """Something the request needs is not available now."""


class InternalError(
    TriptychError,
    kind="internal",
    code="INTERNAL_ERROR",
    status=500,
    hint="Unexpected server error; check the server log",
):
    """A failure of the server's own; its traceback stays in the server log."""


# Each kind's neutral code, by kind.
NEUTRAL_CODES: dict[Kind, str] = {
    k.kind: k.code
    for k in (Invalid, NotFound, Forbidden, Unauthenticated, Conflict, Unavailable, InternalError)
}


def surface_code(exc: TriptychError, by_kind: Mapping[Kind, str]) -> str:
    """The code a surface shows: its own code for a kind raised as it is, else the error's code."""
    if exc.code == NEUTRAL_CODES[exc.kind]:
        return by_kind.get(exc.kind, exc.code)
    return exc.code


class AuthRequired(
    Unauthenticated,
    code="AUTH_REQUIRED",
    hint="Send 'Authorization: Bearer <jwt>'; `triptych token --help` mints one",
):
    """The bearer token (``core.auth``, one format for Metronix and Hadron) is missing or refused."""


class CredentialsMissing(AuthRequired):
    """No bearer token was sent at all (no Authorization header, or another scheme): the 401's
    ``WWW-Authenticate`` is a plain ``Bearer`` challenge, with no error code (RFC 6750 section 3.1)."""


class EmbeddingMismatch(
    Conflict,
    code="EMBEDDING_MISMATCH",
    hint="Run `triptych reindex` to re-embed the stored chunks with the configured model",
):
    """The stored vectors were made by another model than the configured one (``core.embed``)."""


class IngestionFailed(
    InternalError,
    code="INGESTION_FAILED",
    hint="Check the server log; the document was not stored and nothing was changed",
):
    """Text could not be embedded or stored; nothing was changed."""


class StorageUnavailable(InternalError, status=503):
    """The data directory cannot be written (full, read-only, failing): nothing was written, reads work.

    Still the contracts' ``INTERNAL_ERROR`` code (no contract has a storage code), with a message that
    names the folder and the cause and ``details.reason`` (``disk_full``, ``read_only``, ``io_error``)."""
