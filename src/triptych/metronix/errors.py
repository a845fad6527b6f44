"""Metronix's refusals and the one renderer of its contract's error shape (MCP tool results, REST).

code                 class / kind                     http
INVALID_PARAMS       InvalidParams, or kind invalid   422
DOCUMENT_NOT_FOUND   DocumentNotFound, or not_found   404
WORKSPACE_NOT_FOUND  WorkspaceNotFound (forbidden)    403 (never says whether it exists)
WORKSPACE_NOT_FOUND  WriteForbidden, or forbidden     403 (details.reason FORBIDDEN: granted for reading only)
AUTH_REQUIRED        core AuthRequired, or unauthenticated   401
INGESTION_FAILED     core IngestionFailed             500
EMBEDDING_MISMATCH   core EmbeddingMismatch           409 (MCP: INTERNAL_ERROR, reason kept)
INTERNAL_ERROR       kind internal                    500
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from starlette.responses import JSONResponse

from triptych.core.errors import Forbidden, Invalid, Kind, NotFound, TriptychError, surface_code
from triptych.core.http import bearer_challenge

# Codes the Metronix contract documents; anything else is rendered as the closest of them, with the
# precise reason kept in details.reason.
CONTRACT_CODES = {
    "INVALID_PARAMS",
    "DOCUMENT_NOT_FOUND",
    "INGESTION_FAILED",
    "WORKSPACE_NOT_FOUND",
    "QDRANT_UNAVAILABLE",
    "GRAPH_UNAVAILABLE",
    "AUTH_REQUIRED",
    "RATE_LIMITED",
    "INTERNAL_ERROR",
}
# A kind raised as it is (by core, or by a service) reads as this code and hint.
BY_KIND: dict[Kind, str] = {
    "invalid": "INVALID_PARAMS",
    "not_found": "DOCUMENT_NOT_FOUND",
    # The reference's one permission refusal is a workspace the token does not grant (403); AUTH_REQUIRED
    # is failed key validation, so a refused permission is WORKSPACE_NOT_FOUND (decision 0061).
    "forbidden": "WORKSPACE_NOT_FOUND",
    "unauthenticated": "AUTH_REQUIRED",
    "internal": "INTERNAL_ERROR",
}


class InvalidParams(
    Invalid,
    code="INVALID_PARAMS",
    hint="Check the argument names, types and ranges in the tool's input schema",
):
    """An argument or body the contract refuses."""


class DocumentNotFound(
    NotFound, code="DOCUMENT_NOT_FOUND", hint="Check the document label or use search to find documents"
):
    """A document or memory record that is not there (or not in this workspace)."""


class WorkspaceNotFound(
    Forbidden,
    code="WORKSPACE_NOT_FOUND",
    hint="Pass a workspace_id that your token grants (see the workspace_ids claim)",
):
    """A workspace the token does not grant; it never says whether the workspace exists."""


class WriteForbidden(
    Forbidden,
    code="WORKSPACE_NOT_FOUND",
    hint="Your role does not allow this operation; ask an admin for an editor token",
):
    """A viewer's write: the workspace is granted for reading, not for writing (``details.reason``
    FORBIDDEN tells it apart from a workspace not granted at all)."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.details = {"reason": "FORBIDDEN", **self.details}


_HINTS = {cls.code: cls.default_hint for cls in (InvalidParams, DocumentNotFound, WorkspaceNotFound)}


def error_body(exc: TriptychError) -> dict[str, Any]:
    """``{"code", "message", "hint", "details"}`` with Metronix's code for the error."""
    code = surface_code(exc, BY_KIND)
    hint = exc.hint if exc.hint is not None else _HINTS.get(code)
    return {"code": code, "message": exc.message, "hint": hint, "details": exc.details}


def render_error(exc: TriptychError) -> types.CallToolResult:
    """An MCP tool refusal: the contract's codes only, the precise one kept in ``details.reason``."""
    body = error_body(exc)
    if body["code"] not in CONTRACT_CODES:
        body["details"] = {**body["details"], "reason": body["code"]}
        body["code"] = "INTERNAL_ERROR"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps({"error": body}, ensure_ascii=False))],
        structured_content={"error": body},
        is_error=True,
    )


def error_response(exc: TriptychError) -> JSONResponse:
    """A REST refusal: ``{"error": {...}}`` with the error's HTTP status."""
    headers = {"WWW-Authenticate": bearer_challenge(exc)} if exc.http_status == 401 else None
    return JSONResponse({"error": error_body(exc)}, status_code=exc.http_status, headers=headers)
