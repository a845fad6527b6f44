"""A saved workload as a call predicate: route, the set of metadata keys and token-shape classes.

Classification (``workloads.py``) groups calls by exactly these features, computed by the same SQL
expressions, so a workload matches the calls it was made of (and new calls of the same kind).
Content-free by construction: no expression reads prompt or response text, nor metadata values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Upper bounds of the input-token classes (the last class is open) and of the output-token classes.
INPUT_BOUNDS = (512, 4096, 32768)
OUTPUT_BOUNDS = (64, 1024)
_SEP = "\x1f"  # between the sorted metadata keys of a signature


def _class_sql(column: str, bounds: Sequence[int]) -> str:
    arms = " ".join(f"WHEN {column} < {b} THEN {i}" for i, b in enumerate(bounds))
    return f"CASE WHEN {column} IS NULL THEN -1 {arms} ELSE {len(bounds)} END"


# The sorted metadata keys of a call, joined (the empty string for none).
KEYS_SQL = (
    "COALESCE((SELECT group_concat(key, char(31)) FROM "
    "(SELECT key FROM json_each(calls.tags) ORDER BY key)), '')"
)
# One integer per (input class, output class): (in + 1) * 8 + (out + 1), classes from -1 (unknown).
SHAPE_SQL = (
    f"(({_class_sql('input_tokens', INPUT_BOUNDS)}) + 1) * 8 + "
    f"(({_class_sql('output_tokens', OUTPUT_BOUNDS)}) + 1)"
)


def _class(value: int | None, bounds: Sequence[int]) -> int:
    if value is None:
        return -1
    return next((i for i, b in enumerate(bounds) if value < b), len(bounds))


def shape_code(input_tokens: int | None, output_tokens: int | None) -> int:
    """``SHAPE_SQL`` of one call, computed in Python."""
    return (_class(input_tokens, INPUT_BOUNDS) + 1) * 8 + (_class(output_tokens, OUTPUT_BOUNDS) + 1)


def matches(match: WorkloadMatch, call: dict[str, Any]) -> bool:
    """``call_filters.workload_clause`` of one call row (route, tags, input_tokens, output_tokens), in Python."""
    return (
        call.get("route") == match.route
        and tags_signature(call.get("tags")) == key_signature(match.tag_keys)
        and shape_code(call.get("input_tokens"), call.get("output_tokens")) in match.shapes
    )


def _range(cls: int, bounds: Sequence[int]) -> str:
    if cls < 0:
        return "unknown"

    def short(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)

    low = 0 if cls == 0 else bounds[cls - 1]
    return f"{short(low)}+" if cls >= len(bounds) else f"{short(low)}-{short(bounds[cls])}"


def shape_label(shape: int) -> str:
    """``in 512-4k / out 64-1k`` for a shape code."""
    return f"in {_range(shape // 8 - 1, INPUT_BOUNDS)} / out {_range(shape % 8 - 1, OUTPUT_BOUNDS)}"


def key_signature(keys: Sequence[str]) -> str:
    return _SEP.join(sorted(keys))


def tags_signature(tags: str | None) -> str:
    """``KEYS_SQL`` of a stored metadata text, computed in Python (SQLite orders keys by their UTF-8
    bytes, which is code point order, as ``sorted`` is)."""
    if not tags:
        return ""
    try:
        document = json.loads(tags)
    except ValueError:
        return ""
    return key_signature(list(document)) if isinstance(document, dict) else ""


def signature_keys(signature: str) -> list[str]:
    return signature.split(_SEP) if signature else []


@dataclass(frozen=True, slots=True)
class WorkloadMatch:
    """The calls of one saved workload."""

    route: str | None
    tag_keys: tuple[str, ...]
    shapes: tuple[int, ...]
