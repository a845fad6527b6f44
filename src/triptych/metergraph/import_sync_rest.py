"""HTTP doors of import sync (``import_sync.py``): acquire, renew, complete, abandon and state under
``/v1/import-sync``, authenticated by the same app tokens (and SDK session tokens) as ``/v1/ingest``.

    POST   /v1/import-sync/acquire                  201 acquired | 200 caught up | 409 busy (retry_at)
    POST   /v1/import-sync/leases/{lease_id}/renew  200 {lease_id, lease_expires_at}
    POST   /v1/import-sync/leases/{lease_id}/complete   200 {lease_id, status, checkpoint, checkpoint_version}
    DELETE /v1/import-sync/leases/{lease_id}        200 {lease_id, status: abandoned}
    GET    /v1/import-sync/state?source=&source_scope=  200 the stream's checkpoint and current lease

A refusal is ``errors.import_sync_document`` with the status ``errors.py`` lists; a busy acquire also
carries ``status: busy`` and ``retry_at`` at the top level, where the relay reads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from triptych.core import jsonbody
from triptych.core.errors import StorageUnavailable
from triptych.metergraph.errors import ImportSyncError, SyncInvalid, Unauthenticated, import_sync_refusal
from triptych.metergraph.import_sync import Acquired, iso
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.web import BadEncoding, BodyTooLarge, bearer, decode_body, json_response, read_body

MAX_BODY = 64 * 1024  # an acquire is a few hundred bytes
_STATE_PARAMS = frozenset({"source", "source_scope"})


def _refusal(exc: Exception) -> Response:
    """A refusal of the import-sync service or before it runs (auth, body, storage): a cron run retries a
    storage failure later."""
    status, document, headers = import_sync_refusal(exc)
    return json_response(document, status, headers)


def _acquired(result: Acquired) -> Response:
    stream, source, scope = result.stream, result.source, result.scope
    if result.lease is None:
        checkpoint = None if stream is None or stream.checkpoint_ms is None else iso(stream.checkpoint_ms)
        version = 0 if stream is None else stream.checkpoint_version
        body = {"status": "caught_up", "source": source, "source_scope": scope, "checkpoint": checkpoint,
                "checkpoint_version": version}  # fmt: skip
        return json_response(body, 200)
    lease = result.lease
    body = {
        "status": "acquired",
        "lease_id": lease.lease_id,
        "source": lease.source,
        "source_scope": lease.scope,
        "checkpoint_version": lease.checkpoint_version,
        "window_start": iso(lease.window_start_ms),
        "window_end": iso(lease.window_end_ms),
        "lease_expires_at": iso(lease.expires_ms),
    }
    return json_response(body, 201)


def import_sync_routes(mg: Metergraph) -> list[BaseRoute]:
    service = mg.import_sync

    async def guarded(request: Request, work: Callable[[AppPrincipal], Awaitable[Response]]) -> Response:
        try:
            app = mg.keys.app(bearer(request))
            return await work(app)
        except (Unauthenticated, BodyTooLarge, BadEncoding, ImportSyncError, StorageUnavailable) as exc:
            return _refusal(exc)

    async def acquire(request: Request) -> Response:
        async def work(app: AppPrincipal) -> Response:
            raw = await read_body(request, MAX_BODY)
            try:
                body = jsonbody.parse(decode_body(request, raw, MAX_BODY))
            except jsonbody.JsonRefused as exc:
                raise SyncInvalid(exc.message) from None
            return _acquired(await anyio.to_thread.run_sync(service.acquire, app.workspace, body))

        return await guarded(request, work)

    def lease_call(
        run: Callable[[str, str], dict[str, Any]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            async def work(app: AppPrincipal) -> Response:
                lease_id = request.path_params["lease_id"]
                return json_response(await anyio.to_thread.run_sync(run, app.workspace, lease_id))

            return await guarded(request, work)

        return endpoint

    def renew(workspace: str, lease_id: str) -> dict[str, Any]:
        lease = service.renew(workspace, lease_id)
        return {"lease_id": lease.lease_id, "status": "active", "lease_expires_at": iso(lease.expires_ms)}

    def complete(workspace: str, lease_id: str) -> dict[str, Any]:
        lease, version = service.complete(workspace, lease_id)
        return {"lease_id": lease.lease_id, "status": "completed", "checkpoint": iso(lease.window_end_ms),
                "checkpoint_version": version}  # fmt: skip

    def abandon(workspace: str, lease_id: str) -> dict[str, Any]:
        lease = service.abandon(workspace, lease_id)
        return {"lease_id": lease.lease_id, "status": "abandoned"}

    async def state(request: Request) -> Response:
        async def work(app: AppPrincipal) -> Response:
            unknown = sorted(set(request.query_params) - _STATE_PARAMS)
            if unknown:
                raise SyncInvalid(f"unknown parameter {unknown[0]!r}: state takes source and source_scope")
            params = request.query_params
            document = await anyio.to_thread.run_sync(
                service.state, app.workspace, params.get("source"), params.get("source_scope")
            )
            return json_response(document)

        return await guarded(request, work)

    return [
        Route("/v1/import-sync/acquire", acquire, methods=["POST"]),
        Route("/v1/import-sync/leases/{lease_id}/renew", lease_call(renew), methods=["POST"]),
        Route("/v1/import-sync/leases/{lease_id}/complete", lease_call(complete), methods=["POST"]),
        Route("/v1/import-sync/leases/{lease_id}", lease_call(abandon), methods=["DELETE"]),
        Route("/v1/import-sync/state", state, methods=["GET"]),
    ]
