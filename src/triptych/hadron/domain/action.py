"""Action nodes: what an action declares (its kind, parameters and, through its edges, dependencies) and
the template language its text is rendered with. Pure rules, no I/O.

An action node has ``nodeType: action`` and declares itself in ``data.action``::

    {"kind": "template", "parameters": {<JSON Schema of args>}}
    {"kind": "mcp-tool", "parameters": {...}, "source": "<registered source>", "tool": "<tool name>",
     "arguments": {"query": "{{ args.topic }}", "limit": 5}}

A template action renders its node's ``content`` (or ``data.action.template``). Templates are
substitution only: ``{{ args.<name>[.<key>...] }}``, ``{{ deps.<edge loc> }}`` (the dependency's
content, or its output when it ran), ``{{ deps.<edge loc>.<field> }}`` (name, description, content,
urn, loc) and ``{{ node.<name|urn|loc> }}``. There are no loops, calls or expressions, so rendering is
deterministic, linear in the template's size and cannot execute anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from jsonschema.exceptions import SchemaError, best_match  # type: ignore[import-untyped]
from jsonschema.validators import Draft202012Validator  # type: ignore[import-untyped]

from triptych.hadron.domain.model import NodeRecord
from triptych.hadron.errors import ActionRefusal

ACTION_TYPE = "action"
TEMPLATE, MCP_TOOL = "template", "mcp-tool"
KINDS = (TEMPLATE, MCP_TOOL)
MAX_TEMPLATE_CHARS = 64 * 1024
MAX_OUTPUT_CHARS = 1024 * 1024
MAX_ARGS_BYTES = 64 * 1024
DEP_FIELDS = ("name", "description", "content", "urn", "loc")
NODE_FIELDS = ("name", "urn", "loc")
_PLACEHOLDER = re.compile(r"\{\{\s*(.*?)\s*\}\}", re.S)


@dataclass(frozen=True, slots=True)
class ActionSpec:
    kind: str
    parameters: dict[str, Any]
    template: str = ""
    source: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DepView:
    """What a template sees of one dependency."""

    name: str
    description: str | None
    content: str
    urn: str
    loc: str

    def get(self, name: str) -> str:
        value = getattr(self, name)
        return "" if value is None else str(value)


def not_runnable(urn: str, reason: str, message: str) -> ActionRefusal:
    return ActionRefusal(
        "ACTION_NOT_RUNNABLE",
        f"{urn} is not a runnable action: {message}",
        hint='An action node has nodeType "action" and data.action = {"kind": "template" | "mcp-tool", ...}',
        details={"urn": urn, "reason": reason},
    )


def parse_spec(node: NodeRecord, urn: str) -> ActionSpec:
    """The action ``node`` declares; ACTION_NOT_RUNNABLE when it is not one or declares it wrongly."""
    if node.node_type != ACTION_TYPE:
        raise not_runnable(urn, "not-an-action", f'its nodeType is {node.node_type!r}, not "action"')
    raw = (node.data or {}).get("action")
    if not isinstance(raw, dict):
        raise not_runnable(urn, "no-declaration", "data.action must be an object")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise not_runnable(urn, "unknown-kind", f"data.action.kind must be one of {', '.join(KINDS)}")
    parameters = raw.get("parameters", {"type": "object"})
    if not isinstance(parameters, dict):
        raise not_runnable(urn, "bad-parameters", "data.action.parameters must be a JSON Schema object")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        raise not_runnable(
            urn, "bad-parameters", f"parameters is not a valid JSON Schema: {exc.message}"
        ) from exc
    if kind == TEMPLATE:
        template = raw.get("template", node.content or "")
        if not isinstance(template, str):
            raise not_runnable(urn, "bad-template", "data.action.template must be a string")
        if len(template) > MAX_TEMPLATE_CHARS:
            raise not_runnable(urn, "bad-template", f"the template exceeds {MAX_TEMPLATE_CHARS} characters")
        check_template(template, urn)
        return ActionSpec(TEMPLATE, parameters, template=template)
    source, tool, arguments = raw.get("source"), raw.get("tool"), raw.get("arguments", {})
    if not isinstance(source, str) or not source or not isinstance(tool, str) or not tool:
        raise not_runnable(urn, "bad-tool", "an mcp-tool action names its source and tool (strings)")
    if not isinstance(arguments, dict):
        raise not_runnable(urn, "bad-arguments", "data.action.arguments must be an object")
    for value in _strings(arguments):
        check_template(value, urn)
    return ActionSpec(MCP_TOOL, parameters, source=source, tool=tool, arguments=arguments)


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json))


def check_args(spec: ActionSpec, args: dict[str, Any], urn: str) -> None:
    """ACTION_ARGS_INVALID unless ``args`` fits the action's parameter schema."""
    if len(json.dumps(args, ensure_ascii=False)) > MAX_ARGS_BYTES:
        raise ActionRefusal(
            "ACTION_ARGS_INVALID", f"args exceed {MAX_ARGS_BYTES} bytes", details={"urn": urn, "path": ""}
        )
    error = best_match(_validator(json.dumps(spec.parameters, sort_keys=True)).iter_errors(args))
    if error is not None:
        path = ".".join(str(p) for p in error.absolute_path)
        raise ActionRefusal(
            "ACTION_ARGS_INVALID",
            f"args{'.' + path if path else ''}: {error.message}",
            hint="Read the action's parameters (data.action.parameters) with hadron_get_node",
            details={"urn": urn, "path": path, "reason": error.validator},
        )


def check_template(template: str, urn: str) -> None:
    """Refuse a placeholder outside the grammar before anything runs."""
    for match in _PLACEHOLDER.finditer(template):
        expr = match.group(1)
        head = expr.split(".", 1)[0]
        if head not in ("args", "deps", "node") or "." not in expr:
            raise _bad_placeholder(urn, expr)
        if head == "node" and expr[5:] not in NODE_FIELDS:
            raise _bad_placeholder(urn, expr)


def _bad_placeholder(urn: str, expr: str) -> ActionRefusal:
    return ActionRefusal(
        "ACTION_TEMPLATE_INVALID",
        f"placeholder {{{{ {expr} }}}} is not args.<name>, deps.<edge loc>[.<field>] or node.<field>",
        details={"urn": urn, "placeholder": expr},
    )


def render(
    template: str, args: Mapping[str, Any], deps: Mapping[str, DepView], node: DepView, urn: str
) -> str:
    """Substitute every placeholder; an argument or dependency that is not there refuses."""
    size = 0

    def value(match: re.Match[str]) -> str:
        nonlocal size
        expr = match.group(1)
        text = _lookup(expr, args, deps, node, urn)
        size += len(text)
        if size > MAX_OUTPUT_CHARS:
            raise ActionRefusal(
                "ACTION_TEMPLATE_INVALID",
                f"the rendered text exceeds {MAX_OUTPUT_CHARS} characters",
                details={"urn": urn, "placeholder": expr},
            )
        return text

    return _PLACEHOLDER.sub(value, template)


def render_arguments(
    arguments: dict[str, Any], args: Mapping[str, Any], deps: Mapping[str, DepView], node: DepView, urn: str
) -> dict[str, Any]:
    """The tool arguments: declared ``arguments`` with their strings rendered, then ``args`` over them."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return render(value, args, deps, node, urn)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    rendered = walk(arguments)
    return {**rendered, **args}


def _lookup(expr: str, args: Mapping[str, Any], deps: Mapping[str, DepView], node: DepView, urn: str) -> str:
    head, _, rest = expr.partition(".")
    if head == "node":
        return node.get(rest)
    if head == "deps":
        if rest in deps:
            return deps[rest].content
        edge, _, name = rest.rpartition(".")
        if edge in deps and name in DEP_FIELDS:
            return deps[edge].get(name)
        raise ActionRefusal(
            "ACTION_TEMPLATE_INVALID",
            f"placeholder {{{{ {expr} }}}} names no dependency of this action (edge locs: "
            f"{', '.join(sorted(deps)) or 'none'})",
            details={"urn": urn, "placeholder": expr},
        )
    current: Any = args
    for key in rest.split("."):
        if isinstance(current, dict) and key in current:
            current = current[key]
        elif isinstance(current, list) and key.isdigit() and int(key) < len(current):
            current = current[int(key)]
        else:
            raise ActionRefusal(
                "ACTION_TEMPLATE_INVALID",
                f"placeholder {{{{ {expr} }}}}: no such argument (declare a default in the parameters or pass it)",
                details={"urn": urn, "placeholder": expr},
            )
    return current if isinstance(current, str) else json.dumps(current, ensure_ascii=False, sort_keys=True)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
