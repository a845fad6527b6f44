"""The request middleware (``core.request_context``): request ids and the surface a path belongs to."""

from __future__ import annotations

import uuid

from triptych.core import request_context
from triptych.core.request_context import RequestContext, new_request_id, request_id


def test_a_new_request_id_is_a_random_uuid_in_hex() -> None:
    ids = {new_request_id() for _ in range(200)}
    assert len(ids) == 200
    for rid in ids:
        parsed = uuid.UUID(hex=rid)
        assert parsed.hex == rid and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_a_usable_client_id_is_kept_and_anything_else_replaced() -> None:
    assert request_id({"x-request-id": "abc-123:x.y_z"}) == "abc-123:x.y_z"
    for given in ("", "has space", "x" * 129, "nul\x00"):
        assert uuid.UUID(hex=request_id({"x-request-id": given})).version == 4


async def app(scope: object, receive: object, send: object) -> None:
    return None


def test_the_longest_door_names_the_surface_and_is_remembered_within_a_bound() -> None:
    middleware = RequestContext(app, [("/mcp", "metronix"), ("/hadron/mcp", "hadron"), ("/v1", "metergraph")])
    assert middleware.surface_of("/hadron/mcp") == "hadron"
    assert middleware.surface_of("/v1/agent/mcp") == "metergraph"
    assert middleware.surface_of("/mcpx") == "server"  # a prefix of a name is not its door
    assert middleware.surface_of("/mcp") == "metronix"
    for n in range(request_context._REMEMBERED_PATHS + 10):
        assert middleware.surface_of(f"/v1/items/{n}") == "metergraph"
    assert len(middleware._surfaces) <= request_context._REMEMBERED_PATHS
    assert middleware.surface_of("/hadron/mcp") == "hadron"
