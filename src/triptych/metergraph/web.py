"""HTTP helpers for the Metergraph doors: bounded bodies, gzip, JSON responses (the Host/Origin guard
is ``core.mcp.guard``)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from triptych.core.auth import bearer_token
from triptych.core.jsonbody import BodyTooLarge
from triptych.core.jsonbody import read as read_body
from triptych.metergraph.errors import BadEncoding

__all__ = ["BadEncoding", "BodyTooLarge", "read_body"]


def decode_body(request: Request, body: bytes, limit: int) -> bytes:
    """Undo ``Content-Encoding: gzip`` with the decompressed size bounded too (no zip bombs)."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise BadEncoding(f"unsupported Content-Encoding {encoding!r}: send gzip or identity")
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(body, limit + 1)
    except zlib.error:
        raise BadEncoding("the body is not valid gzip") from None
    if len(out) > limit or decompressor.unconsumed_tail:
        raise BodyTooLarge(limit)
    return out


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
    return Response(payload, status_code=status, media_type="application/json", headers=headers)


def bearer(request: Request) -> str | None:
    return bearer_token(request.headers.get("authorization"))
