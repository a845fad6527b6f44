"""A memory's structured schema: named collections, each a JSON Schema for its records' fields.

    {"collections": {"competitor": {"type": "object", "properties": {...}, "required": [...]}}}

A node with ``objectType: competitor`` in such a memory has its ``properties`` validated against
that collection (JSON Schema 2020-12, via the ``jsonschema`` library). ``id`` and ``type`` are the
object envelope and can never be field names.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jsonschema  # type: ignore[import-untyped]
from jsonschema.exceptions import (  # type: ignore[import-untyped]
    SchemaError,
    ValidationError,
    best_match,
)
from jsonschema.validators import Draft202012Validator  # type: ignore[import-untyped]

from triptych.hadron.errors import BadInput, SchemaViolation

RESERVED_FIELDS = frozenset(("id", "type"))


def check_memory_schema(schema: Any) -> None:
    """Refuse a schema that is not ``{"collections": {name: <JSON Schema>}}`` or names a reserved field."""
    if (
        not isinstance(schema, dict)
        or set(schema) != {"collections"}
        or not isinstance(schema["collections"], dict)
    ):
        raise BadInput('a memory schema is {"collections": {"<objectType>": <JSON Schema>, ...}}')
    for name, collection in schema["collections"].items():
        if not isinstance(collection, dict):
            raise BadInput(f"collection {name!r}: a JSON Schema object is required")
        try:
            Draft202012Validator.check_schema(collection)
        except SchemaError as exc:
            raise BadInput(f"collection {name!r} is not a valid JSON Schema: {exc.message}") from exc
        reserved = RESERVED_FIELDS & set(collection.get("properties", {}))
        if reserved:
            raise BadInput(f"collection {name!r} declares reserved field(s) {sorted(reserved)}: id and type")


def collections(schema: dict[str, Any] | None) -> dict[str, Any]:
    if not schema:
        return {}
    value = schema.get("collections", {})
    return value if isinstance(value, dict) else {}


@lru_cache(maxsize=256)
def _validator(collection_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(collection_json), format_checker=jsonschema.FormatChecker())


def _field_of(error: ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        if missing:
            path = ".".join(filter(None, [path, str(missing[0])]))
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        if extra:
            path = ".".join(filter(None, [path, extra[0]]))
    return path or "(record)"


def violation(
    schema: dict[str, Any] | None, object_type: str | None, fields: dict[str, Any]
) -> SchemaViolation | None:
    """The first violation of ``fields`` against the memory's schema, or None. An unschema'd memory,
    and a node without ``objectType`` on a schema'd one, are free-form."""
    declared = collections(schema)
    if not declared or object_type is None:
        return None
    reserved = RESERVED_FIELDS & set(fields)
    if reserved:
        name = sorted(reserved)[0]
        return SchemaViolation(name, f"{name!r} is reserved (the object envelope's id and type)")
    if object_type not in declared:
        return SchemaViolation(
            "objectType",
            f"{object_type!r} is not a collection of this memory (declared: {', '.join(sorted(declared))})",
        )
    validator = _validator(json.dumps(declared[object_type], sort_keys=True))
    error = best_match(validator.iter_errors(fields))
    if error is None:
        return None
    field = _field_of(error)
    return SchemaViolation(field, error.message, details={"objectType": object_type})


def validate(schema: dict[str, Any] | None, object_type: str | None, fields: dict[str, Any]) -> None:
    problem = violation(schema, object_type, fields)
    if problem is not None:
        raise problem
