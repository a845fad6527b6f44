"""One error hierarchy for every surface.

A service raises a ``TriptychError``; each surface renders it in its own contract's shape
(Metronix: an in-band ``{"error": {...}}`` tool result, Hadron: a typed refusal text,
Metergraph: a lower-case ``error.code``). Nothing else reaches a client: an unexpected
exception becomes ``InternalError`` and its traceback stays in the server log.

    TriptychError                  code, message, hint, details, http_status
    ├── InvalidParams              INVALID_PARAMS         400/422
    ├── NotFound                   DOCUMENT_NOT_FOUND     404
    ├── WorkspaceNotFound          WORKSPACE_NOT_FOUND    403 (never says whether it exists)
    ├── AuthRequired               AUTH_REQUIRED          401
    ├── Forbidden                  FORBIDDEN              403
    ├── IngestionFailed            INGESTION_FAILED       500
    ├── EmbeddingMismatch          EMBEDDING_MISMATCH     409
    └── InternalError              INTERNAL_ERROR         500
        └── StorageUnavailable     INTERNAL_ERROR         503 (disk full, read-only or failing data
                                                          directory: details.reason says which)
"""

from __future__ import annotations

from typing import Any, ClassVar


class TriptychError(Exception):
    """A refusal with a stable code, a message for people and a hint saying what to do next."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    http_status: ClassVar[int] = 500
    default_hint: ClassVar[str | None] = None

    def __init__(
        self, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint
        self.details: dict[str, Any] = details or {}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "hint": self.hint, "details": self.details}


class InvalidParams(TriptychError):
    code = "INVALID_PARAMS"
    http_status = 422
    default_hint = "Check the argument names, types and ranges in the tool's input schema"


class NotFound(TriptychError):
    code = "DOCUMENT_NOT_FOUND"
    http_status = 404
    default_hint = "Check the document label or use search to find documents"


class WorkspaceNotFound(TriptychError):
    code = "WORKSPACE_NOT_FOUND"
    http_status = 403
    default_hint = "Pass a workspace_id that your token grants (see the workspace_ids claim)"


class AuthRequired(TriptychError):
    code = "AUTH_REQUIRED"
    http_status = 401
    default_hint = "Send 'Authorization: Bearer <jwt>'; `triptych token --help` mints one"


class Forbidden(TriptychError):
    code = "FORBIDDEN"
    http_status = 403
    default_hint = "Your role does not allow this operation; ask an admin for an editor token"


class IngestionFailed(TriptychError):
    code = "INGESTION_FAILED"
    http_status = 500
    default_hint = "Check the server log; the document was not stored and nothing was changed"


class EmbeddingMismatch(TriptychError):
    code = "EMBEDDING_MISMATCH"
    http_status = 409
    default_hint = "Run `triptych reindex` to re-embed the stored chunks with the configured model"


class InternalError(TriptychError):
    code = "INTERNAL_ERROR"
    http_status = 500
    default_hint = "Unexpected server error; check the server log"


class StorageUnavailable(InternalError):
    """The data directory cannot be written (full, read-only, failing): nothing was written, reads work.

    Still the contracts' ``INTERNAL_ERROR`` code (no contract has a storage code), with a message that
    names the folder and the cause and ``details.reason`` (``disk_full``, ``read_only``, ``io_error``)."""

    http_status = 503
