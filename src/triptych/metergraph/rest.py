"""HTTP doors: ingest (SDK rows, sessions, route config), OTLP/HTTP traces, the Agent Access REST mirrors
and ``/healthz``. Handlers parse, authenticate and render; the rules live in the services.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from triptych.core import jsonbody, nul
from triptych.core.errors import StorageUnavailable, TriptychError
from triptych.core.mcp import ArgumentsInvalid
from triptych.core.metrics import observe_ingest
from triptych.metergraph import otlp
from triptych.metergraph.errors import (
    BadBatch,
    InvalidArgument,
    NotFoundError,
    Rendered,
    agent_refusal,
    check_response_size,
    ingest_refusal,
)
from triptych.metergraph.ingest import IngestResult, gc_paused
from triptych.metergraph.keys import AgentPrincipal, AppPrincipal
from triptych.metergraph.pricing import CATALOG_VERSION
from triptych.metergraph.service import Metergraph
from triptych.metergraph.tools import principal_bind, toolbox
from triptych.metergraph.web import BadEncoding, BodyTooLarge, bearer, decode_body, json_response, read_body

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


def _respond(rendered: Rendered) -> Response:
    status, document, headers = rendered
    return json_response(document, status, headers)


def _error_response(exc: TriptychError) -> Response:
    if exc.kind == "internal":  # never an error document: HTTP 500, the traceback in the log
        raise exc
    return _respond(agent_refusal(exc))


def agent_principal(mg: Metergraph, request: Request) -> AgentPrincipal:
    # Always a key, auth on or off, as the upstream self-hosted server: telemetry reads name a workspace
    # and a role, which only an agent key (or a configured static token) carries.
    return mg.keys.agent(bearer(request))


# -- ingest ---------------------------------------------------------------------------------------


def ingest_routes(mg: Metergraph) -> list[BaseRoute]:
    settings = mg.settings

    async def read_json(request: Request) -> Any:
        raw = await read_body(request, settings.max_body_bytes)
        return parse_json(request, raw)

    def parse_json(request: Request, raw: bytes) -> Any:
        body = decode_body(request, raw, settings.max_body_bytes)
        try:
            # NaN and Infinity were always read (the rows that hold them are refused one by one).
            return jsonbody.parse(body, allow_nan=True)
        except jsonbody.JsonRefused as exc:
            raise BadBatch(exc.message) from None

    def decode_and_ingest(app: AppPrincipal, request: Request, raw: bytes) -> IngestResult:
        with gc_paused():
            return mg.ingest.ingest_document(app, parse_json(request, raw))

    async def guarded(request: Request, work: Callable[[AppPrincipal], Awaitable[Response]]) -> Response:
        try:
            app = mg.keys.app(bearer(request))
            try:
                return await work(app)
            except BadBatch:
                observe_ingest("refused", 1, 0)
                source = "otlp" if request.url.path == "/v1/traces" else "sdk"
                await anyio.to_thread.run_sync(mg.ingest.refuse, app, source)
                raise
        except (BodyTooLarge, BadEncoding, StorageUnavailable) as exc:
            # A storage failure is a 503 with Retry-After: the SDKs retry the batch later.
            return _respond(ingest_refusal(exc))
        except TriptychError as exc:
            if exc.kind == "internal":
                raise
            return _respond(ingest_refusal(exc))

    async def ingest(request: Request) -> Response:
        async def work(app: AppPrincipal) -> Response:
            raw = await read_body(request, settings.max_body_bytes)
            # Decompressing and parsing a batch takes tens of milliseconds: off the event loop, so the
            # next batch can be received meanwhile.
            result = await anyio.to_thread.run_sync(lambda: decode_and_ingest(app, request, raw))
            observe_ingest("accepted", 1, result.accepted)
            observe_ingest("ignored", 0, result.ignored)
            return json_response({"accepted": result.accepted, "ignored": result.ignored}, 202)

        return await guarded(request, work)

    async def sessions(request: Request) -> Response:
        async def work(app: AppPrincipal) -> Response:
            document = await read_json(request)
            token, expires = await anyio.to_thread.run_sync(
                mg.keys.open_session, app, bearer(request), document
            )
            expires_at = datetime.fromtimestamp(expires, UTC).isoformat()
            return json_response({"session_token": token, "expires_at": expires_at}, 201)

        return await guarded(request, work)

    async def config(request: Request) -> Response:
        async def work(app: AppPrincipal) -> Response:
            routes = await anyio.to_thread.run_sync(mg.metadata.route_config, app.workspace)
            body = json.dumps({"routes": routes}, sort_keys=True, separators=(",", ":"))
            etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"'
            if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
                return Response(status_code=304, headers={"ETag": etag})
            return Response(body, media_type="application/json", headers={"ETag": etag})

        return await guarded(request, work)

    async def traces(request: Request) -> Response:
        async def work(app: AppPrincipal) -> Response:
            raw = await read_body(request, settings.max_body_bytes)
            body = decode_body(request, raw, settings.max_body_bytes)
            content_type = request.headers.get("content-type", "application/x-protobuf").lower()
            try:
                decoded = otlp.to_rows(otlp.parse_request(body, content_type))
                # Protobuf strings may hold NUL, which no JSON body can bring past jsonbody: the rows
                # about to reach the engine are checked instead (core/nul.py).
                nul.refuse(decoded.rows, "rows")
            except otlp.OtlpDecodeError as exc:
                raise BadBatch(str(exc)) from None
            except nul.NulInText as exc:
                raise BadBatch(exc.message) from None
            if decoded.rows:
                result = await anyio.to_thread.run_sync(
                    lambda: mg.ingest.ingest_rows(
                        app, decoded.rows, "otlp", unknown_attributes=decoded.unknown_attributes
                    )
                )
                observe_ingest("accepted", 1, result.accepted)
                observe_ingest("ignored", 0, result.ignored)
            payload, media = otlp.encode_response(content_type)
            return Response(payload, media_type=media)

        return await guarded(request, work)

    return [
        Route("/v1/ingest", ingest, methods=["POST"]),
        Route("/v1/ingest/sessions", sessions, methods=["POST"]),
        Route("/v1/config", config, methods=["GET"]),
        Route("/v1/traces", traces, methods=["POST"]),
    ]


# -- Agent Access REST mirrors --------------------------------------------------------------------

_INT_PARAMS = ("days", "limit")
_INTEGER = re.compile(r"-?[0-9]{1,18}")
_LIST_PARAMS = ("route", "provider", "model", "environment")


def parse_metadata_param(raw: str) -> dict[str, str]:
    """``metadata`` as one URL-encoded JSON object: malformed, duplicated or non-string is 422."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise InvalidArgument("metadata has a duplicate key")
        return dict(pairs)

    try:
        # Bounded depth and number length before the duplicate-key pass; a NUL is named by parse_args.
        jsonbody.parse(raw, allow_nul=True)
        value = json.loads(raw, object_pairs_hook=no_duplicates)
    except (jsonbody.JsonRefused, json.JSONDecodeError):
        raise InvalidArgument("metadata must be one JSON object of string keys and string values") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidArgument("metadata must be one JSON object of string keys and string values")
    return value


def query_arguments(request: Request, list_params: tuple[str, ...], split_group_by: bool) -> dict[str, Any]:
    args: dict[str, Any] = {}
    params = request.query_params
    for key in params.keys():
        values = params.getlist(key)
        if key == "metadata":
            if len(values) != 1:
                raise InvalidArgument("send metadata once, as one JSON object")
            args["metadata"] = parse_metadata_param(values[0])
        elif key in _INT_PARAMS:
            # ASCII digits only, at most 18 of them: int() would take "²" or 5,000 digits and fail later.
            if len(values) != 1 or not _INTEGER.fullmatch(values[0]):
                raise InvalidArgument(f"{key} must be one integer")
            args[key] = int(values[0])
        elif key == "group_by" and split_group_by:
            entries: list[str] = []
            for value in values:
                # Only built-in dimensions are split on commas; a metadata.<key> entry is taken whole.
                entries.extend(
                    [value] if value.startswith("metadata.") else [v for v in value.split(",") if v]
                )
            args["group_by"] = entries
        elif key in list_params:
            args[key] = [v for value in values for v in value.split(",") if v]
        else:
            if len(values) != 1:
                raise InvalidArgument(f"send {key} once")
            args[key] = values[0]
    return args


def agent_routes(mg: Metergraph) -> list[BaseRoute]:
    tools = toolbox(mg.tools)

    def mirror(
        tool_name: str, list_params: tuple[str, ...] = (), path_args: tuple[str, ...] = ()
    ) -> Endpoint:
        tools.get(tool_name)  # a mirror of a tool that does not exist fails here, at startup

        async def endpoint(request: Request) -> Response:
            try:
                principal = agent_principal(mg, request)
                arguments = query_arguments(request, list_params, split_group_by=True)
                for name in path_args:
                    arguments[name] = request.path_params[name]
                try:
                    document = await tools.call(tool_name, arguments, principal_bind(principal))
                except ArgumentsInvalid as exc:
                    raise InvalidArgument(exc.message) from None
                response = json_response(document, headers={"Cache-Control": "no-store"})
                check_response_size(len(response.body))
            except TriptychError as exc:
                return _error_response(exc)
            return response

        return endpoint

    return [
        Route("/v1/agent/workspace", mirror("metergraph_get_workspace_context"), methods=["GET"]),
        Route("/v1/agent/capabilities", mirror("metergraph_get_capabilities"), methods=["GET"]),
        Route("/v1/agent/routes", mirror("metergraph_list_routes"), methods=["GET"]),
        Route("/v1/agent/usage", mirror("metergraph_get_usage"), methods=["GET"]),
        Route("/v1/agent/usage/aggregates", mirror("metergraph_get_usage_aggregates", _LIST_PARAMS), methods=["GET"]),
        Route("/v1/agent/ingestion-health", mirror("metergraph_get_ingestion_health"), methods=["GET"]),
        Route("/v1/agent/incidents", mirror("metergraph_list_incidents"), methods=["GET"]),
        Route("/v1/agent/traces", mirror("metergraph_query_traces", ("environment",)), methods=["GET"]),
        Route("/v1/agent/analysis-runs", mirror("metergraph_list_analysis_runs"), methods=["GET"]),
        Route("/v1/agent/analysis-runs/{run_id}", mirror("metergraph_get_analysis_run", (), ("run_id",)),
              methods=["GET"]),
        Route("/v1/agent/reports", mirror("metergraph_list_reports"), methods=["GET"]),
        Route("/v1/agent/reports/{analysis_id}", mirror("metergraph_get_report", (), ("analysis_id",)),
              methods=["GET"]),
        Route("/v1/agent/debug/traces/{trace_id}", mirror("metergraph_get_trace", (), ("trace_id",)),
              methods=["GET"]),
    ]  # fmt: skip


def unknown_agent_path() -> BaseRoute:
    """Any other ``/v1/agent/...`` path (``/v1/agent/routes/`` included): the contract's ``not_found``
    document. Mounted after every agent route, it also stops the router's trailing-slash 307."""

    async def missing(request: Request) -> Response:
        return _error_response(NotFoundError("no such Agent Access endpoint: see GET /v1/agent/capabilities"))

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    return Route("/v1/agent/{path:path}", missing, methods=methods)


def health_route() -> BaseRoute:
    async def healthz(request: Request) -> Response:
        # As upstream: liveness plus the price catalogue costs are computed with.
        return json_response({"ok": True, "catalog_version": CATALOG_VERSION})

    return Route("/healthz", healthz, methods=["GET"])
