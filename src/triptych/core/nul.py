"""NUL (U+0000) in text is refused at every door, before any engine sees it.

PostgreSQL cannot hold NUL in text (``psycopg.DataError``); SQLite and ClickHouse can. The same call was a
success on the embedded engine and an internal error on the shared one (31 of 3,560 fuzzed calls). No
contract gives NUL a meaning in a name, an id, a URN, a query or a memory, so every door refuses it as
invalid input naming the field, whatever the engine behind it (decision record 0065):

- MCP tool arguments of every surface, and the Metergraph REST mirrors that call the same tools:
  ``core.mcp.parse_args``;
- every JSON body (REST, OpenAI, ingest, OTLP/JSON): ``core.jsonbody.parse``;
- query and path parameters of the REST doors that call a service directly: ``refuse_in_params``;
- OTLP protobuf, whose text reaches the engines as ingest rows: ``refuse`` on the decoded rows.

The walk is iterative (a hostile body is nested up to the JSON decoder's 200 levels) and in document
order, so the field named is the first one that holds a NUL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from triptych.core.errors import Invalid

NUL = "\x00"
# How NUL can appear in JSON text: raw control characters are not valid JSON, so only as this escape. A
# body without it cannot hold a NUL, and its decoded value need not be walked.
JSON_ESCAPE = "\\u0000"
HINT = "Remove the NUL character (U+0000): no text here may hold one; send binary data base64-encoded"


def json_may_hold_nul(raw: bytes | str) -> bool:
    """Whether JSON text can hold a NUL: only as the escape ``\\u0000``. A body without a backslash
    (memchr: 0.01 ms a 1 MB ingest batch) cannot; else the escape is searched from the end, where
    CPython's search skips on the rare backslash (0.18 ms; forward it skips on the frequent ``0``:
    0.55 ms, 13% of decoding that batch)."""
    if isinstance(raw, bytes):
        return b"\\" in raw and raw.rfind(JSON_ESCAPE.encode()) >= 0
    return "\\" in raw and raw.rfind(JSON_ESCAPE) >= 0


class NulInText(Invalid):
    """A NUL character in a field of a request (``details.field`` names it)."""

    default_hint = HINT


def _children(value: Any, path: str) -> Iterator[tuple[Any, str, bool]]:
    """(child, its path, is it an object key) for each child of a container, in document order."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            yield key, here, True
            yield item, here, False
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield item, f"{path}[{index}]", False


def nul_field(value: Any, path: str = "") -> str | None:
    """The path (``rows[3].metadata.note``) of the first string or object key in ``value`` that holds a
    NUL, or None. A NUL in a key names the key's path with the NUL shown as ``\\x00``."""
    if isinstance(value, str):
        return (path or "value") if NUL in value else None
    stack: list[Iterator[tuple[Any, str, bool]]] = [_children(value, path)]
    while stack:
        for child, here, is_key in stack[-1]:
            if isinstance(child, str):
                if NUL in child:
                    return here.replace(NUL, "\\x00") if is_key else here
            elif isinstance(child, Mapping | list | tuple):
                stack.append(_children(child, here))
                break
        else:
            stack.pop()
    return None


def message(field: str) -> str:
    return f"{field} contains a NUL character (U+0000), which no text here may hold"


def refuse(value: Any, path: str = "") -> None:
    """Raise ``NulInText`` naming the first field of ``value`` that holds a NUL."""
    field = nul_field(value, path)
    if field is not None:
        raise NulInText(message(field), details={"field": field})


def refuse_in_params(query: Iterable[tuple[str, Any]], path: Mapping[str, Any]) -> None:
    """A REST door's query parameters (each pair, repeated names too) and path parameters (Starlette has
    already decoded ``%00`` into NUL)."""
    for where, params in (("query parameter", query), ("path parameter", path.items())):
        for key, value in params:
            if NUL in str(key) or NUL in str(value):
                name = str(key).replace(NUL, "\\x00")
                raise NulInText(message(f"{where} {name!r}"), details={"field": name})
