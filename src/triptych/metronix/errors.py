"""Metronix's refusals and the one renderer of its contract's error shape (MCP tool results, REST).

code                 class / kind                     http
INVALID_PARAMS       InvalidParams, or kind invalid   422
DOCUMENT_NOT_FOUND   DocumentNotFound, or not_found   404
WORKSPACE_NOT_FOUND  WorkspaceNotFound (forbidden)    403 (never says whether it exists)
FORBIDDEN            WriteForbidden, or forbidden     403 (MCP: AUTH_REQUIRED, reason FORBIDDEN)
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
_NEAREST = {"FORBIDDEN": "AUTH_REQUIRED"}
# A kind raised as it is (by core, or by a service) reads as this code and hint.
BY_KIND: dict[Kind, str] = {
    "invalid": "INVALID_PARAMS",
    "not_found": "DOCUMENT_NOT_FOUND",
    "forbidden": "FORBIDDEN",
    "unauthenticated": "AUTH_REQUIRED",
    "internal": "INTERNAL_ERROR",
}


class InvalidParams(Invalid):
    code = "INVALID_PARAMS"
    default_hint = "Check the argument names, types and ranges in the tool's input schema"


class DocumentNotFound(NotFound):
    code = "DOCUMENT_NOT_FOUND"
    default_hint = "Check the document label or use search to find documents"


class WorkspaceNotFound(Forbidden):
    code = "WORKSPACE_NOT_FOUND"
    default_hint = "Pass a workspace_id that your token grants (see the workspace_ids claim)"


class WriteForbidden(Forbidden):
    code = "FORBIDDEN"
    default_hint = "Your role does not allow this operation; ask an admin for an editor token"


_HINTS = {
    cls.code: cls.default_hint for cls in (InvalidParams, DocumentNotFound, WorkspaceNotFound, WriteForbidden)
}


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
        body["code"] = _NEAREST.get(body["code"], "INTERNAL_ERROR")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps({"error": body}, ensure_ascii=False))],
        structured_content={"error": body},
        is_error=True,
    )


def error_response(exc: TriptychError) -> JSONResponse:
    """A REST refusal: ``{"error": {...}}`` with the error's HTTP status."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
    return JSONResponse({"error": error_body(exc)}, status_code=exc.http_status, headers=headers)
