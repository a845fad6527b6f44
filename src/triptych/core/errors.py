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
    ├── Conflict           conflict         CONFLICT           409
    │   └── EmbeddingMismatch   EMBEDDING_MISMATCH: the embedder (core.embed) both surfaces share
    ├── Unavailable        unavailable      UNAVAILABLE        503
    └── InternalError      internal         INTERNAL_ERROR     500
        └── IngestionFailed     INGESTION_FAILED: the shared embedder could not embed; nothing stored
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

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "hint": self.hint, "details": self.details}


class Invalid(TriptychError):
    kind = "invalid"
    code = "INVALID"
    http_status = 422


class NotFound(TriptychError):
    kind = "not_found"
    code = "NOT_FOUND"
    http_status = 404


class Forbidden(TriptychError):
    kind = "forbidden"
    code = "FORBIDDEN"
    http_status = 403


class Unauthenticated(TriptychError):
    kind = "unauthenticated"
    code = "UNAUTHENTICATED"
    http_status = 401


class Conflict(TriptychError):
    kind = "conflict"
    code = "CONFLICT"
    http_status = 409


class Unavailable(TriptychError):
    kind = "unavailable"
    code = "UNAVAILABLE"
    http_status = 503


class InternalError(TriptychError):
    kind = "internal"
    code = "INTERNAL_ERROR"
    http_status = 500
    default_hint = "Unexpected server error; check the server log"


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


class AuthRequired(Unauthenticated):
    """The bearer token (``core.auth``, one format for Metronix and Hadron) is missing or refused."""

    code = "AUTH_REQUIRED"
    default_hint = "Send 'Authorization: Bearer <jwt>'; `triptych token --help` mints one"


class EmbeddingMismatch(Conflict):
    """The stored vectors were made by another model than the configured one (``core.embed``)."""

    code = "EMBEDDING_MISMATCH"
    default_hint = "Run `triptych reindex` to re-embed the stored chunks with the configured model"


class IngestionFailed(InternalError):
    """Text could not be embedded or stored; nothing was changed."""

    code = "INGESTION_FAILED"
    default_hint = "Check the server log; the document was not stored and nothing was changed"
