"""The ``where`` predicate grammar shared by hadron_find_nodes and hadron_find_objects.

    leaf:    {"path": ["a", "b"] | "a.b", "<op>": value, "field": "properties" | "data",
              "as": "text" | "number" | "datetime" | "boolean"}
              op: eq ne in lt lte gt gte between exists contains
    branch:  {"and": [...]} | {"or": [...]} | {"not": {...}}

A path is the list of object keys the real server's ``NodeWhereInput.path`` takes (``["tier"]``; each
item one key, taken as written, so a key may hold a dot) or, as Triptych accepted first, one string of
dot-separated keys (``"a.b"``). Both walk nested objects one key per segment; a segment of digits also
indexes a list, as a JSONB path does. Bounds: depth at most 4, at most 32 leaves, a path of at most 8
segments. ``compile_where`` checks a predicate once and returns a function of a node's (properties,
data). A leaf whose path is missing is false, except ``exists: false`` and ``ne``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from triptych.hadron.errors import BadInput

OPS = ("eq", "ne", "in", "lt", "lte", "gt", "gte", "between", "exists", "contains")
CASTS = ("text", "number", "datetime", "boolean")
FIELDS = ("properties", "data")
MAX_DEPTH = 4
MAX_LEAVES = 32
MAX_PATH = 8

Predicate = Callable[[dict[str, Any], dict[str, Any] | None], bool]
_MISSING = object()


def _refuse(message: str, where: str) -> BadInput:
    return BadInput(f"where{where}: {message}", details={"field": "where", "at": where or "(root)"})


def compile_where(spec: Any) -> Predicate:
    leaves = [0]
    return _compile(spec, 1, "", leaves)


def _compile(spec: Any, depth: int, at: str, leaves: list[int]) -> Predicate:
    if not isinstance(spec, dict) or not spec:
        raise _refuse("a predicate is a non-empty object", at)
    if depth > MAX_DEPTH:
        raise _refuse(f"nested deeper than {MAX_DEPTH}", at)
    branch = [k for k in ("and", "or", "not") if k in spec]
    if branch:
        if len(spec) != 1:
            raise _refuse(f"{branch[0]!r} must be the only key of its object", at)
        key = branch[0]
        if key == "not":
            inner = _compile(spec["not"], depth + 1, f"{at}.not", leaves)
            return lambda p, d: not inner(p, d)
        items = spec[key]
        if not isinstance(items, list) or not items:
            raise _refuse(f"{key!r} takes a non-empty list", at)
        parts = [_compile(item, depth + 1, f"{at}.{key}[{i}]", leaves) for i, item in enumerate(items)]
        if key == "and":
            return lambda p, d: all(part(p, d) for part in parts)
        return lambda p, d: any(part(p, d) for part in parts)
    leaves[0] += 1
    if leaves[0] > MAX_LEAVES:
        raise _refuse(f"more than {MAX_LEAVES} leaves", at)
    return _leaf(spec, at)


def _leaf(spec: dict[str, Any], at: str) -> Predicate:
    unknown = set(spec) - {"path", "field", "as", *OPS}
    if unknown:
        raise _refuse(f"unknown key(s) {sorted(unknown)}", at)
    segments = _segments(spec.get("path"), at)
    field = spec.get("field", "properties")
    if field not in FIELDS:
        raise _refuse(f"field must be one of {', '.join(FIELDS)}", at)
    cast = spec.get("as")
    if cast is not None and cast not in CASTS:
        raise _refuse(f"as must be one of {', '.join(CASTS)}", at)
    ops = [op for op in OPS if op in spec]
    if len(ops) != 1:
        raise _refuse(f"a leaf takes exactly one operator of {', '.join(OPS)}", at)
    op, operand = ops[0], spec[ops[0]]
    if op == "in" and not isinstance(operand, list):
        raise _refuse("in takes a list", at)
    if op == "between" and not (isinstance(operand, list) and len(operand) == 2):
        raise _refuse("between takes [low, high]", at)
    if op == "exists" and not isinstance(operand, bool):
        raise _refuse("exists takes true or false", at)
    conv = _caster(cast)
    try:
        if op == "in":
            expected: Any = [conv(v) for v in operand]
        elif op == "between":
            expected = (conv(operand[0]), conv(operand[1]))
        elif op in ("exists", "contains"):
            expected = operand
        else:
            expected = conv(operand)
    except (TypeError, ValueError) as exc:
        raise _refuse(f"cannot read {operand!r} as {cast}: {exc}", at) from exc

    def test(properties: dict[str, Any], data: dict[str, Any] | None) -> bool:
        value = _lookup(properties if field == "properties" else (data or {}), segments)
        if op == "exists":
            return bool((value is not _MISSING) == expected)
        if value is _MISSING:
            return op == "ne"
        try:
            actual = conv(value)
        except (TypeError, ValueError):
            return op == "ne"
        return _compare(op, actual, expected)

    return test


def _segments(path: Any, at: str) -> list[str]:
    """The keys a leaf's path walks: a list of keys as the server's schema has it, or a dotted string."""
    if isinstance(path, list):
        if not path:
            raise _refuse("a leaf needs a path: a non-empty list of keys", at)
        if not all(isinstance(key, str) and key for key in path):
            raise _refuse(f"path {path!r}: every key is a non-empty string", at)
        segments = list(path)
    elif isinstance(path, str) and path:
        segments = path.split(".")
        if "" in segments:
            raise _refuse(f"path {path!r} has an empty dot-separated segment", at)
    else:
        raise _refuse('a leaf needs a path: a list of keys (["a", "b"]) or a dotted string ("a.b")', at)
    if len(segments) > MAX_PATH:
        raise _refuse(f"path {path!r} has {len(segments)} segments; at most {MAX_PATH}", at)
    return segments


def _lookup(bag: Any, segments: list[str]) -> Any:
    value = bag
    for segment in segments:
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return _MISSING
    return value


def _caster(cast: str | None) -> Callable[[Any], Any]:
    if cast == "number":
        return lambda v: float(v) if not isinstance(v, bool) else float(int(v))
    if cast == "text":
        return lambda v: v if isinstance(v, str) else str(v)
    if cast == "boolean":
        return _boolean
    if cast == "datetime":
        return _datetime
    return lambda v: v


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{value!r} is not a boolean")


def _datetime(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an ISO date-time")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _compare(op: str, actual: Any, expected: Any) -> bool:
    try:
        if op == "eq":
            return bool(actual == expected)
        if op == "ne":
            return bool(actual != expected)
        if op == "in":
            return actual in expected
        if op == "contains":
            if isinstance(actual, list):
                return expected in actual
            return isinstance(actual, str) and isinstance(expected, str) and expected in actual
        if op == "between":
            return bool(expected[0] <= actual <= expected[1])
        if op == "lt":
            return bool(actual < expected)
        if op == "lte":
            return bool(actual <= expected)
        if op == "gt":
            return bool(actual > expected)
        if op == "gte":
            return bool(actual >= expected)
    except TypeError:
        return False
    return False
