"""The one guarded JSON decode path every HTTP door uses: bounded size, depth and number length.

Python's ``json`` raised ``RecursionError`` for a body nested ~1,000 levels deep and ``ValueError``
for an integer over 4,300 digits, and it returned lone surrogates that crashed the response encoder:
each was a bare 500. The parser here is jiter (``pydantic_core.from_json``, already installed with
pydantic, as fast as orjson on a 1 MB batch): it stops at 200 levels of nesting and at 4,300-digit
numbers without recursing in Python, and refuses invalid UTF-8 and lone surrogates. Every refusal is a
``JsonRefused`` with a ``reason`` and a message for people; each door renders it in its contract's
bad-request shape.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json
from starlette.requests import Request

from triptych.core import nul

MAX_DEPTH = 200  # jiter's recursion limit: deeper documents are refused by the parser itself
MAX_NUMBER_DIGITS = 4300  # Python's own int/str conversion limit, which jiter enforces too
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


class JsonRefused(ValueError):
    """A body no door accepts. ``reason``: not_json, too_deep, number_too_long, too_large, not_object,
    nul_character."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class BodyTooLarge(JsonRefused):
    def __init__(self, limit: int) -> None:
        super().__init__("too_large", f"the body is larger than {limit:,} bytes")
        self.limit = limit


def parse(
    raw: bytes | str, *, want_object: bool = False, allow_nan: bool = False, allow_nul: bool = False
) -> Any:
    """Decode one JSON document, or raise ``JsonRefused`` saying what is wrong with it. A NUL in any
    string or key is refused naming its field (``core.nul``), unless ``allow_nul``: a JSON-RPC envelope
    whose tool arguments ``core.mcp.parse_args`` judges, in the tool's own error shape."""
    try:
        value = from_json(raw, allow_inf_nan=allow_nan)
    except ValueError as exc:
        raise _refusal(str(exc)) from None
    # A body without the escape is not walked (an ingest batch of 5,000 rows would be).
    if not allow_nul and nul.json_may_hold_nul(raw):
        field = nul.nul_field(value)
        if field is not None:
            raise JsonRefused("nul_character", nul.message(field))
    if want_object and not isinstance(value, dict):
        raise JsonRefused("not_object", f"the body must be one JSON object, not {_kind(value)}")
    return value


async def read(request: Request, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The request body, refused past ``max_bytes`` without reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_object(request: Request, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """A request body that must be one JSON object (the REST and OpenAI doors)."""
    value: dict[str, Any] = parse(await read(request, max_bytes), want_object=True)
    return value


def _refusal(detail: str) -> JsonRefused:
    if "recursion limit" in detail:
        return JsonRefused("too_deep", f"the JSON is nested more than {MAX_DEPTH} levels deep")
    if "number out of range" in detail:
        return JsonRefused(
            "number_too_long", f"a number in the JSON has more than {MAX_NUMBER_DIGITS:,} digits"
        )
    return JsonRefused("not_json", f"the body is not valid JSON ({detail})")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"
