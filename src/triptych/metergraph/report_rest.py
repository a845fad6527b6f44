"""``GET /v1/agent/reports/{analysis_id}/artifact``: the stored report artifact, for HTTP clients with a
Debug-role key (no MCP tool serves it). Capped at 32 MiB, never cached, the body's SHA-256 as the ETag.
"""

from __future__ import annotations

import base64

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from triptych.core import nul
from triptych.core.errors import TriptychError
from triptych.metergraph.errors import InvalidArgument
from triptych.metergraph.rest import _error_response, agent_principal
from triptych.metergraph.service import Metergraph

MAX_ID = 200


def report_routes(mg: Metergraph) -> list[BaseRoute]:
    async def artifact(request: Request) -> Response:
        try:
            principal = agent_principal(mg, request)
            analysis_id = request.path_params["analysis_id"]
            nul.refuse_in_params(request.query_params.multi_items(), request.path_params)
            if not 1 <= len(analysis_id) <= MAX_ID:
                raise InvalidArgument(f"analysis_id must be 1 to {MAX_ID} characters")
            raw, digest = await anyio.to_thread.run_sync(mg.reports.artifact, principal, analysis_id)
        except TriptychError as exc:
            return _error_response(exc)
        headers = {
            "Cache-Control": "no-store",
            "ETag": f'"{digest}"',
            "Content-Digest": f"sha-256=:{base64.b64encode(bytes.fromhex(digest)).decode()}:",
            "Content-Disposition": f'attachment; filename="{analysis_id}.json"',
        }
        return Response(raw, media_type="application/json", headers=headers)

    return [Route("/v1/agent/reports/{analysis_id}/artifact", artifact, methods=["GET"])]
