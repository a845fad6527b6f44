"""One error tree: each surface's renderer maps a core kind raised as it is to its contract's code,
and keeps a surface's (or a shared) specific code as it is."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from triptych.core.config import Settings
from triptych.core.errors import (
    AuthRequired,
    Conflict,
    EmbeddingMismatch,
    Forbidden,
    InternalError,
    Invalid,
    NotFound,
    TriptychError,
)
from triptych.core.mcp import ArgumentsInvalid, NoArgs, Tool
from triptych.hadron import errors as hadron
from triptych.metergraph.errors import NotFoundError, error_document
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.mcp_http import StatelessEndpoint, build_mcp_server
from triptych.metronix import errors as metronix


def metronix_mcp(exc: TriptychError) -> dict[str, Any]:
    result = metronix.render_error(exc)
    body: dict[str, Any] = json.loads(result.content[0].text)["error"]  # type: ignore[union-attr]
    assert result.is_error and result.structured_content == {"error": body}
    return body


@pytest.mark.parametrize(
    ("exc", "code", "reason"),
    [
        (Invalid("bad"), "INVALID_PARAMS", None),
        (ArgumentsInvalid("bad"), "INVALID_PARAMS", None),
        (NotFound("gone"), "DOCUMENT_NOT_FOUND", None),
        (metronix.WorkspaceNotFound("no"), "WORKSPACE_NOT_FOUND", None),
        (AuthRequired("who"), "AUTH_REQUIRED", None),
        (metronix.WriteForbidden("ro"), "WORKSPACE_NOT_FOUND", "FORBIDDEN"),
        (Forbidden("no"), "WORKSPACE_NOT_FOUND", None),
        (EmbeddingMismatch("model"), "INTERNAL_ERROR", "EMBEDDING_MISMATCH"),
        (Conflict("clash"), "INTERNAL_ERROR", "CONFLICT"),
        (InternalError("boom"), "INTERNAL_ERROR", None),
    ],
)
def test_metronix_shows_only_its_contract_codes(exc: TriptychError, code: str, reason: str | None) -> None:
    body = metronix_mcp(exc)
    assert body["code"] == code
    assert body["details"].get("reason") == reason


def test_metronix_gives_a_kind_raised_as_it_is_its_hint() -> None:
    assert metronix_mcp(Invalid("bad"))["hint"] == metronix.InvalidParams.default_hint
    assert metronix_mcp(NotFound("gone"))["hint"] == metronix.DocumentNotFound.default_hint


@pytest.mark.parametrize(
    ("exc", "head"),
    [
        (ArgumentsInvalid("missing required argument 'x'"), "BAD_USER_INPUT: missing required argument 'x'"),
        (hadron.NotFound("node", "a/b"), "[node_not_found] node not found: a/b"),
        (hadron.SchemaViolation("title", "required"), "Schema violation: title: required"),
        (Forbidden("no"), "FORBIDDEN: no"),
        (EmbeddingMismatch("model"), "EMBEDDING_MISMATCH: model"),
        (InternalError("boom"), "INTERNAL_ERROR: boom"),
    ],
)
def test_hadron_renders_kinds_with_its_codes(exc: TriptychError, head: str) -> None:
    text = hadron.render_error(exc).content[0].text  # type: ignore[union-attr]
    assert text.splitlines()[0] == head


def test_a_hadron_code_made_per_refusal_needs_no_type_ignore() -> None:
    assert hadron.NotFound("memory", "x").code == "memory_not_found"
    assert hadron.NotFound("memory", "x").kind == "not_found"
    assert hadron.NotFound.code != "memory_not_found"  # the class is untouched


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (NotFoundError("no trace"), "not_found"),
        (NotFound("no trace"), "not_found"),
        (Invalid("bad"), "invalid_argument"),
        (Forbidden("scope"), "forbidden"),
        (Conflict("clash"), "invalid_argument"),
    ],
)
def test_metergraph_error_document(exc: TriptychError, code: str) -> None:
    assert error_document(exc)["error"] == {"code": code, "message": exc.message}


async def test_metergraph_renders_any_refusal_as_a_tool_result_and_only_internal_errors_as_32603() -> None:
    def refuse(principal: AgentPrincipal, args: NoArgs) -> dict[str, Any]:
        raise NotFound("nothing here")

    def fail(principal: AgentPrincipal, args: NoArgs) -> dict[str, Any]:
        raise InternalError("disk on fire")

    server = build_mcp_server([Tool("refuse", "", NoArgs, refuse), Tool("fail", "", NoArgs, fail)])
    endpoint = StatelessEndpoint(server, Settings(), lambda request: AgentPrincipal("ws", "debug", "key"))

    async def call(name: str) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=endpoint), base_url="http://127.0.0.1:8000"
        ) as http:
            response = await http.post("/v1/agent/mcp", json=message)
        return dict(response.json())

    async with endpoint.manager.run():
        refused = await call("refuse")
        failed = await call("fail")
        unknown = await call("nothing")
    assert refused["result"]["isError"] is True
    assert refused["result"]["structuredContent"]["error"] == {"code": "not_found", "message": "nothing here"}
    assert failed["error"] == {"code": -32603, "message": "Internal error"}
    assert unknown["error"]["code"] == -32602 and unknown["error"]["data"] == {"tools": ["fail", "refuse"]}
