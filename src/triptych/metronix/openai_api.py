"""OpenAI-compatible ``POST /v1/chat/completions`` and ``GET /v1/models`` over the answer service.

Errors are OpenAI-style objects (``{"error": {message, type, param, code}}``) so the official client
raises its usual exceptions. A client that disconnects cancels the upstream call.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from triptych.core import jsonbody
from triptych.core.auth import Principal, local_principal
from triptych.core.errors import AuthRequired, TriptychError
from triptych.core.http import Authenticator, bearer_challenge
from triptych.metronix.answer import (
    AnswerService,
    Passage,
    UpstreamError,
    cited,
    completion_id,
    empty_workspace_answer,
    extractive_answer,
    now,
    text_of,
)
from triptych.metronix.errors import InvalidParams, error_body

log = logging.getLogger(__name__)

PASS_THROUGH = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
)
_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    422: "invalid_request_error",
}


OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")


def openai_error(
    status: int, message: str, kind: str | None = None, code: str | None = None, param: str | None = None
) -> JSONResponse:
    body = {
        "error": {
            "message": message,
            "type": kind or _TYPES.get(status, "api_error"),
            "param": param,
            "code": code,
        }
    }
    return JSONResponse(body, status_code=status)


def unauthenticated(exc: AuthRequired) -> JSONResponse:
    """A 401 in OpenAI's shape, with the challenge every Metronix door sends (``bearer_challenge``)."""
    response = openai_error(401, exc.message, code="invalid_api_key")
    response.headers["WWW-Authenticate"] = bearer_challenge(exc)
    return response


def openai_internal_error() -> dict[str, Any]:
    """The body of an unexpected 500 on these doors (core/lastresort.py), in OpenAI's error shape."""
    error = {
        "message": "Unexpected server error",
        "type": "api_error",
        "param": None,
        "code": "internal_error",
    }
    return {"error": error}


def from_error(exc: TriptychError) -> JSONResponse:
    if isinstance(exc, UpstreamError):
        return openai_error(
            exc.status,
            exc.message,
            "upstream_error",
            "upstream_timeout" if exc.status == 504 else "upstream_error",
        )
    status = 400 if exc.http_status == 422 else exc.http_status
    field = exc.details.get("field") if isinstance(exc.details.get("field"), str) else None
    code = error_body(exc)["code"].lower()
    return openai_error(status, exc.message, "invalid_request_error" if status == 400 else None, code, field)


def _usage(prompt: str, answer: str) -> dict[str, int]:
    # Word-based estimate: the endpoint does not run the upstream tokenizer.
    p, c = int(len(prompt.split()) * 1.3), int(len(answer.split()) * 1.3)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _validate(body: Any) -> tuple[list[dict[str, Any]], bool, dict[str, Any]]:
    if not isinstance(body, dict):
        raise InvalidParams("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidParams("messages must be a non-empty array", details={"field": "messages"})
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "user",
            "assistant",
            "tool",
            "developer",
        ):
            raise InvalidParams(
                "each message needs a role of system, user, assistant or tool", details={"field": "messages"}
            )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidParams("stream must be a boolean", details={"field": "stream"})
    extra = {k: body[k] for k in PASS_THROUGH if k in body}
    return messages, stream, extra


def answer_routes(service: AnswerService, authenticate: Authenticator) -> list[Route]:
    def principal_of(request: Request) -> Principal:
        return authenticate(request.headers.get("authorization")) or local_principal()

    async def models(request: Request) -> Response:
        try:
            principal_of(request)
        except AuthRequired as exc:
            return unauthenticated(exc)
        created = now()
        data = [
            {"id": m, "object": "model", "created": created, "owned_by": "triptych"} for m in service.models()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def completions(request: Request) -> Response:
        started = time.perf_counter()
        try:
            principal = principal_of(request)
        except AuthRequired as exc:
            return unauthenticated(exc)
        try:
            try:
                body = await jsonbody.read_object(request)
            except jsonbody.JsonRefused as exc:
                raise InvalidParams(exc.message, details={"reason": exc.reason}) from None
            messages, stream, extra = _validate(body)
            requested = body.get("model") if isinstance(body.get("model"), str) else None
            found = await service.retrieve(principal, request.headers.get("x-workspace-id"), messages)
        except TriptychError as exc:
            return from_error(exc)
        query, passages = found.query, found.passages
        model = service.model_name(requested)
        retrieval = {
            "query": query,
            "workspace_id": found.workspace_id,
            "passages": len(passages),
            "retrieval_ms": round((time.perf_counter() - started) * 1000, 1),
        }
        # An empty workspace gets a hint, never an LLM's guess or "nothing found".
        fixed = empty_workspace_answer(found.workspace_id) if found.empty_workspace else None
        if fixed is not None:
            retrieval["empty_workspace"] = True
        if stream:
            return StreamingResponse(
                _stream(service, requested, model, messages, passages, extra, retrieval, fixed),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        try:
            answer = fixed or await _complete_or_cancel(
                request, service, requested, messages, passages, extra
            )
        except TriptychError as exc:
            return from_error(exc)
        if answer is None:  # the client went away; nobody is listening
            return Response(status_code=499)
        return JSONResponse(
            {
                "id": completion_id(),
                "object": "chat.completion",
                "created": now(),
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
                ],
                "usage": _usage(query, answer),
                "citations": cited(answer, passages),
                "retrieval": retrieval,
            }
        )

    return [
        Route(OPENAI_PATHS[0], completions, methods=["POST"]),
        Route(OPENAI_PATHS[1], models, methods=["GET"]),
    ]


async def _complete_or_cancel(
    request: Request,
    service: AnswerService,
    requested: str | None,
    messages: list[dict[str, Any]],
    passages: list[Passage],
    extra: dict[str, Any],
) -> str | None:
    question = text_of([m for m in messages if m.get("role") == "user"][-1].get("content"))
    if not service.uses_llm(requested):
        return extractive_answer(question, passages)
    assert service.llm is not None
    result: list[str] = []
    failure: list[TriptychError] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            log.info("client disconnected: cancelling the upstream call")
            group.cancel_scope.cancel()

        async def call() -> None:
            assert service.llm is not None
            try:
                result.append(await service.llm.complete(service.prompt(messages, passages), extra))
            except TriptychError as exc:
                failure.append(exc)  # raised below, outside the task group's exception group
            group.cancel_scope.cancel()

        group.start_soon(watch)
        group.start_soon(call)
    if failure:
        raise failure[0]
    return result[0] if result else None


async def _stream(
    service: AnswerService,
    requested: str | None,
    model: str,
    messages: list[dict[str, Any]],
    passages: list[Passage],
    extra: dict[str, Any],
    retrieval: dict[str, Any],
    fixed: str | None = None,
) -> AsyncIterator[str]:
    ident, created = completion_id(), now()

    def chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> str:
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **more,
        }
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    parts: list[str] = []
    try:
        if fixed is not None:
            parts.append(fixed)
            yield chunk({"content": fixed})
        elif service.uses_llm(requested):
            assert service.llm is not None
            # Starlette cancels this generator when the client disconnects, closing the upstream stream.
            async for piece in service.llm.stream(service.prompt(messages, passages), extra):
                parts.append(piece)
                yield chunk({"content": piece})
        else:
            question = text_of([m for m in messages if m.get("role") == "user"][-1].get("content"))
            answer = extractive_answer(question, passages)
            parts.append(answer)
            yield chunk({"content": answer})
    except TriptychError as exc:
        yield f"data: {bytes(from_error(exc).body).decode()}\n\n"
        yield "data: [DONE]\n\n"
        return
    yield chunk({}, "stop", citations=cited("".join(parts), passages), retrieval=retrieval)
    yield "data: [DONE]\n\n"
