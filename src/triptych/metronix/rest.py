"""Metronix REST doors: the same services as the MCP tools, for HTTP clients (Control Center, Hermes).

Routes follow the upstream product's shapes so its clients work unchanged: ``workspace_id`` as a query
parameter (or in the body), bearer JWT auth, and errors as HTTP 401/403/404/422 carrying the same
``{"error": {code, message, hint, details}}`` object as the tools.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from triptych.core import jsonbody, nul
from triptych.core.auth import Principal, local_principal
from triptych.core.errors import InternalError, TriptychError
from triptych.core.http import Authenticator
from triptych.core.mcp import argument_message
from triptych.metronix.errors import DocumentNotFound, InvalidParams, error_response
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.memory import MAX_BATCH_DELETE, REST_DEFAULTS, MemoryService

log = logging.getLogger(__name__)

Handler = Callable[[Request, Principal], Awaitable[Response]]


class Body(BaseModel):
    # Upstream clients send fields we do not use (ttl_expires_at, ...): ignore them, as upstream does.
    model_config = ConfigDict(extra="ignore")


class CreateRecordBody(Body):
    content: str
    agent_id: str
    scope: str = "per_agent"
    source_type: str = ""
    tags: list[str] = Field(default_factory=list)
    importance_score: float = 0.5
    session_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    kind: str = "fact"
    workspace_id: str | None = None


class SearchBody(Body):
    query: str
    agent_id: str | None = None  # omitted: the whole workspace, as upstream
    scope: str | None = None
    tags: list[str] | None = None
    session_id: str | None = None
    top_k: int = 5
    status_filter: list[str] | None = None
    kind: str | None = None
    workspace_id: str | None = None


class ResolveBody(Body):
    action: str
    target_record_id: str | None = None
    notes: str | None = None
    workspace_id: str | None = None

    @model_validator(mode="after")
    def _target_only_for_merge(self) -> ResolveBody:
        # Upstream's REST rule: a target names the record to merge into, and nothing else.
        if self.action == "merge_into" and not self.target_record_id:
            raise ValueError("target_record_id is required when action=merge_into")
        if self.action != "merge_into" and self.target_record_id is not None:
            raise ValueError("target_record_id is only valid when action=merge_into")
        return self


class BatchDeleteBody(Body):
    record_ids: list[str] = Field(min_length=1, max_length=MAX_BATCH_DELETE)
    agent_id: str | None = None  # upstream clients send it; deleting is by id within the workspace
    workspace_id: str | None = None


class KnowledgeStoreBody(Body):
    content: str
    title: str | None = None
    doc_label: str | None = None
    source_type: str | None = None
    metadata: dict[str, Any] | None = None
    workspace_id: str | None = None


async def _json(request: Request) -> dict[str, Any]:
    try:
        return await jsonbody.read_object(request)
    except jsonbody.JsonRefused as exc:
        raise InvalidParams(
            exc.message, hint="Send one JSON object", details={"reason": exc.reason}
        ) from None


async def _parse(model: type[Body], request: Request) -> Any:
    try:
        return model.model_validate(await _json(request))
    except ValidationError as exc:
        raise InvalidParams(argument_message(exc)) from exc


def _ws(request: Request, body_value: str | None = None) -> str | None:
    return request.query_params.get("workspace_id") or body_value


def _int(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw) if len(raw) <= 20 else None
    except ValueError:
        value = None
    # SQLite integers are 64-bit: a larger one would fail in the query instead of here.
    if value is None or not -(2**63) <= value < 2**63:
        raise InvalidParams(f"{name} must be a 64-bit integer, got {raw[:30]!r}", details={"field": name})
    return value


def _list(request: Request, name: str) -> list[str] | None:
    values = [v for raw in request.query_params.getlist(name) for v in raw.split(",") if v]
    return values or None


def _rest_statuses(statuses: list[str] | None) -> list[str] | None:
    """REST takes explicit statuses only: ``all`` is the MCP tools' sentinel (upstream refuses it here)."""
    if statuses is not None and "all" in statuses:
        raise InvalidParams(
            "status_filter 'all' is only valid over MCP; list the statuses to include",
            hint='e.g. ["active", "archived"], or omit status_filter for the default',
            details={"field": "status_filter"},
        )
    return statuses


def memory_routes(
    memory: MemoryService, knowledge: KnowledgeService, authenticate: Authenticator, auth_enabled: bool
) -> list[Route]:
    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                principal = authenticate(request.headers.get("authorization")) or local_principal()
                nul.refuse_in_params(request.query_params.multi_items(), request.path_params)
                return await handler(request, principal)
            except TriptychError as exc:
                return error_response(exc)
            except Exception:
                log.exception("REST %s %s failed", request.method, request.url.path)
                return error_response(InternalError("Unexpected server error"))

        return endpoint

    async def run(fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    async def create_record(request: Request, principal: Principal) -> Response:
        b: CreateRecordBody = await _parse(CreateRecordBody, request)
        workspace = _ws(request, b.workspace_id)

        def work() -> dict[str, Any]:
            stored = memory.store_record(
                principal, workspace_id=workspace, content=b.content, agent_id=b.agent_id, scope=b.scope,
                tags=b.tags, importance_score=b.importance_score, source_type=b.source_type,
                session_id=b.session_id, kind=b.kind, metadata=b.metadata,
            )  # fmt: skip
            record = memory.get_record(principal, workspace, stored["id"])
            return {**record, "deduped": stored["deduped"]}

        return JSONResponse(await run(work), status_code=201)

    async def list_records(request: Request, principal: Principal) -> Response:
        q = request.query_params
        limit, offset = _int(request, "limit", 50), _int(request, "offset", 0)
        statuses = _rest_statuses(_list(request, "status_filter") or _list(request, "status"))
        kinds = _list(request, "kind_filter") or _list(request, "kind")
        result = await run(
            lambda: memory.list_records(
                principal, workspace_id=_ws(request), agent_id=q.get("agent_id"), scope=q.get("scope"),
                tags=_list(request, "tags"), limit=limit, offset=offset, status=statuses,
                kind=kinds[0] if kinds else None, defaults=REST_DEFAULTS, session_id=q.get("session_id"),
                source_types=_list(request, "source_type_filter"),
            )
        )  # fmt: skip
        return JSONResponse({**result, "has_more": result["offset"] + result["count"] < result["total"]})

    async def get_record(request: Request, principal: Principal) -> Response:
        record_id = request.path_params["record_id"]
        return JSONResponse(await run(memory.get_record, principal, _ws(request), record_id))

    async def delete_record(request: Request, principal: Principal) -> Response:
        record_id = request.path_params["record_id"]
        result = await run(memory.delete, principal, _ws(request), record_id)
        if not result["found"]:
            raise DocumentNotFound(f"Memory record not found: {record_id}", details={"record_id": record_id})
        return Response(status_code=204)

    async def facets(request: Request, principal: Principal) -> Response:
        return JSONResponse(await run(memory.facets, principal, _ws(request)))

    async def batch_delete(request: Request, principal: Principal) -> Response:
        b: BatchDeleteBody = await _parse(BatchDeleteBody, request)
        return JSONResponse(
            await run(memory.delete_many, principal, _ws(request, b.workspace_id), b.record_ids)
        )

    async def search(request: Request, principal: Principal) -> Response:
        b: SearchBody = await _parse(SearchBody, request)
        result = await run(
            lambda: memory.search(
                principal, workspace_id=_ws(request, b.workspace_id), query=b.query, agent_id=b.agent_id,
                scope=b.scope, tags=b.tags, session_id=b.session_id, top_k=b.top_k,
                status=_rest_statuses(b.status_filter), kind=b.kind, defaults=REST_DEFAULTS,
            )
        )  # fmt: skip
        for item in result["results"]:
            item["sparse_score"] = item["keyword_score"]  # the upstream REST name of the keyword component
        return JSONResponse(result)

    async def review_list(request: Request, principal: Principal) -> Response:
        q = request.query_params
        limit, offset = _int(request, "limit", 20), _int(request, "offset", 0)
        result = await run(
            memory.review_list, principal, _ws(request), q.get("reason"), q.get("record_id"), limit, offset
        )
        return JSONResponse({**result, "has_more": result["offset"] + result["count"] < result["total"]})

    async def review_resolve(request: Request, principal: Principal) -> Response:
        b: ResolveBody = await _parse(ResolveBody, request)
        action = f"merge_into:{b.target_record_id}" if b.action == "merge_into" else b.action
        await run(
            lambda: memory.review_resolve(
                principal, _ws(request, b.workspace_id), request.path_params["review_id"], action, b.notes,
                f"user:{principal.user}",
            )
        )  # fmt: skip
        return Response(status_code=204)

    async def knowledge_store(request: Request, principal: Principal) -> Response:
        b: KnowledgeStoreBody = await _parse(KnowledgeStoreBody, request)
        result = await run(
            lambda: knowledge.store_document(
                principal,
                _ws(request, b.workspace_id),
                b.content,
                b.title,
                b.doc_label,
                b.metadata,
                b.source_type,
            )
        )
        body = {"success": True, "doc_label": result.doc_label, "chunks_stored": result.chunks_stored}
        return JSONResponse(body, status_code=201)

    async def me(request: Request, principal: Principal) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "user_id": principal.user,
                "role": principal.role,
                "workspace_ids": list(principal.workspace_ids),
                "all_workspaces": principal.all_workspaces,
                "auth_enabled": auth_enabled,
            }
        )

    prefix = "/api/v1"
    return [
        Route(f"{prefix}/memory/records", guarded(create_record), methods=["POST"]),
        Route(f"{prefix}/memory/records", guarded(list_records), methods=["GET"]),
        Route(f"{prefix}/memory/records/batch-delete", guarded(batch_delete), methods=["POST"]),
        Route(f"{prefix}/memory/facets", guarded(facets), methods=["GET"]),
        Route(f"{prefix}/memory/records/{{record_id}}", guarded(get_record), methods=["GET"]),
        Route(f"{prefix}/memory/records/{{record_id}}", guarded(delete_record), methods=["DELETE"]),
        Route(f"{prefix}/memory/search", guarded(search), methods=["POST"]),
        Route(f"{prefix}/memory/review", guarded(review_list), methods=["GET"]),
        Route(f"{prefix}/memory/review/{{review_id}}", guarded(review_resolve), methods=["POST"]),
        Route(f"{prefix}/knowledge/store", guarded(knowledge_store), methods=["POST"]),
        Route(f"{prefix}/auth/me", guarded(me), methods=["GET"]),
    ]
