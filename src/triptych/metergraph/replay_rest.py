"""``POST /v1/agent/debug/replay``: the REST door of ``metergraph_replay_trace``, as the upstream
bridge calls it (body ``{"trace_id", "overrides", "timeout_seconds"}``), through the same tool."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from triptych.core import jsonbody
from triptych.core.errors import TriptychError
from triptych.core.mcp import ArgumentsInvalid
from triptych.metergraph.errors import InvalidArgument, check_response_size
from triptych.metergraph.rest import _error_response, agent_principal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.tools import principal_bind, toolbox
from triptych.metergraph.web import json_response


def replay_routes(mg: Metergraph) -> list[BaseRoute]:
    tools = toolbox(mg.tools)

    async def replay(request: Request) -> Response:
        try:
            principal = agent_principal(mg, request)
            try:
                arguments = await jsonbody.read_object(request, mg.settings.mcp_max_body_bytes)
            except jsonbody.JsonRefused as exc:
                raise InvalidArgument(f"{exc.message}: send one JSON object with trace_id") from None
            try:
                document = await tools.call("metergraph_replay_trace", arguments, principal_bind(principal))
            except ArgumentsInvalid as exc:
                raise InvalidArgument(exc.message) from None
            response = json_response(document, headers={"Cache-Control": "no-store"})
            check_response_size(len(response.body))
        except TriptychError as exc:
            return _error_response(exc)
        return response

    return [Route("/v1/agent/debug/replay", replay, methods=["POST"])]
