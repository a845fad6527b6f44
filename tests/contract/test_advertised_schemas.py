"""Every default, range and enum the references state is advertised in ``tools/list`` (issue 28).

An agent reads the schema, not the prose. Metronix's stated values are read from the reference itself
(its parameter tables and its "Valid status values" lines, through ``harness.shared_file``), so a row
the reference adds is checked without editing this file; Hadron's reference states its few values in
prose, copied below with the sentence they come from. Each stated value is checked against the
advertised schema with a JSON Schema validator: a default must be the schema's ``default``, a range's
ends must validate and the values just outside must not, every listed value must validate and an
unlisted one must not. Metergraph is left out on purpose: its product's schemas advertise no defaults.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from harness import ServerProcess, mcp_session, shared_file
from jsonschema import Draft202012Validator

# -- the Metronix reference, parsed ---------------------------------------------------------------------

_TOOL_HEADING = re.compile(r"^`((?:metronix|memory)_\w+)`\s*$")
_ROW = re.compile(r"^\| `(\w+)` \| ([^|]+?) \| (yes|no) \| ([^|]+?) \| (.+) \|\s*$")
_RANGE = re.compile(r"\((\d+(?:\.\d+)?)–(\d+(?:\.\d+)?)\)")
_MAX_ITEMS = re.compile(r"\(max (\d+)\)")
# A listed value: a plain lower-case word, or a template such as merge_into:<record_id>.
_LISTED = re.compile(r"`([a-z_]+(?::<\w+>)?)`")
_STATUS_VALUES = re.compile(r"^Valid status values: (.+), plus the sentinel (\w+)\.")


@dataclass
class Stated:
    """What the reference states about one argument of one tool."""

    tool: str
    argument: str
    default: Any = None
    has_default: bool = False
    bounds: tuple[float, float] | None = None
    integral: bool = True  # the bounds are integers ("1–50"), not numbers ("0.0–1.0")
    max_items: int | None = None
    max_length: int | None = None
    values: list[str] = field(default_factory=list)  # each one accepted, and nothing else
    item_values: list[str] = field(default_factory=list)  # the same, for each item of an array
    valid: list[Any] = field(default_factory=list)  # further instances the schema must accept
    invalid: list[Any] = field(default_factory=list)  # ... and must refuse


def metronix_stated() -> list[Stated]:
    text = shared_file("spec/metronix.md").read_text(encoding="utf-8")
    stated: list[Stated] = []
    tool: str | None = None
    for line in text.splitlines():
        if heading := _TOOL_HEADING.match(line):
            tool = heading.group(1)
            continue
        if tool is None:
            continue
        if status := _STATUS_VALUES.match(line):
            values = [v.strip() for v in status.group(1).split(",")] + [status.group(2)]
            next(s for s in stated if (s.tool, s.argument) == (tool, "status")).item_values = values
            continue
        row = _ROW.match(line)
        if row is None:
            continue
        argument, _type, required, default, description = (part.strip() for part in row.groups())
        item = Stated(tool, argument)
        default = default.strip("`")
        if required == "no" and default != "auto-generated":  # "auto-generated": no value to advertise
            item.default, item.has_default = json.loads(default), True
        if bounds := _RANGE.search(description):
            item.bounds = (float(bounds.group(1)), float(bounds.group(2)))
            item.integral = "." not in bounds.group(0)
        if most := _MAX_ITEMS.search(description):
            item.max_items = int(most.group(1))
        item.values = _LISTED.findall(description)
        stated.append(item)
    # A scope filter's description names the scopes once per table; every scope argument takes them.
    scopes = next(s.values for s in stated if s.argument == "scope" and len(s.values) == 3)
    for item in stated:
        if item.argument == "scope":
            item.values = scopes
    return stated


# -- the Hadron reference, copied (its arguments are prose, not tables) -----------------------------------

KINDS = ["pr", "issue", "commit", "branch", "repo"]
HADRON_STATED = [
    # "Optional limit (default 10, cap 50)"
    Stated("hadron_whoami", "limit", 10, True, bounds=(1, 50)),
    # "limit (default 50, cap 200)"
    Stated("hadron_team_work_items", "limit", 50, True, bounds=(1, 200)),
    # "kind (required: pr | issue | commit | branch | repo)"; the work-items filter takes the same kinds
    Stated("hadron_record_work", "kind", values=KINDS),
    Stated("hadron_team_work_items", "kind", values=KINDS),
    # "body (required, max 65 536 chars)"; a Channel post is "the same contract addressed by Channel"
    Stated("hadron_team_chat_post", "body", max_length=65_536),
    Stated("hadron_channel_post", "body", max_length=65_536),
    # "optional type (DEVELOPER/CHATBOT/AUTOMATION/EDGE)"
    Stated("hadron_start_session", "type", values=["DEVELOPER", "CHATBOT", "AUTOMATION", "EDGE"]),
    # "mode: keyword (default, stemmed full-text), vector/hybrid (semantic, ...), or regex"
    Stated("hadron_find_nodes", "mode", "keyword", True, values=["keyword", "vector", "hybrid", "regex"]),
    # "fields (urn, name, description, pk, or content ...)"
    Stated("hadron_search", "fields", item_values=["urn", "name", "description", "pk", "content"]),
    # "The node type defaults to info"
    Stated("hadron_create_node", "nodeType", "info", True),
    # "renameToLeaf (default false ...)"
    Stated("hadron_move_node", "renameToLeaf", False, True),
    # "Soft-delete by default ...; pass hard: true ... unless recursive: true ... unless
    # cascadeCrossMemoryEdges: true"
    Stated("hadron_delete_node", "hard", False, True),
    Stated("hadron_delete_node", "recursive", False, True),
    Stated("hadron_delete_node", "cascadeCrossMemoryEdges", False, True),
    # "Delete an object — soft by default; hard: true removes the row"
    Stated("hadron_delete_object", "hard", False, True),
    # "Names are 1–64 characters of [a-z0-9_-]"
    *(
        Stated(tool, "name", valid=["a", "x" * 64, "ops_2-b"], invalid=["", "x" * 65, "Ops", "a b", "a.b"])
        for tool in ("hadron_create_scope", "hadron_update_scope")
    ),
    # "memoryUrns (ordered, at least one)"
    Stated("hadron_create_scope", "memoryUrns", valid=[["hrn:mem:acme.com:specs"]], invalid=[[]]),
    # "sort ({field: "asc"|"desc"})"
    Stated("hadron_find_objects", "sort", valid=[{"name": "asc"}, {"n": "desc"}], invalid=[{"name": "up"}]),
]


# -- the check ------------------------------------------------------------------------------------------


def sample(schema: dict[str, Any]) -> Any:
    """A small instance of a simple schema (what an item of a bounded list is filled with)."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return sample(schema[key][0])
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {name: sample(schema["properties"][name]) for name in schema.get("required", [])}
    if kind == "array":
        return []
    return {"integer": 1, "number": 0.5, "boolean": False}.get(str(kind), "x")


def problems(item: Stated, schema: dict[str, Any]) -> list[str]:
    """What the advertised input schema fails to say of ``item``; empty when it says all of it."""
    where = f"{item.tool}.{item.argument}"
    prop = schema.get("properties", {}).get(item.argument)
    if prop is None:
        return [f"{where}: not in the schema"]
    accepts = Draft202012Validator({**prop, "$defs": schema.get("$defs", {})}).is_valid
    found: list[str] = []

    def expect(instance: Any, valid: bool) -> None:
        if accepts(instance) != valid:
            shown = (
                repr(instance)
                if len(repr(instance)) < 60
                else f"{type(instance).__name__} of {len(instance)}"
            )
            found.append(f"{where}: {shown} should be {'accepted' if valid else 'refused'}")

    if item.has_default and ("default" not in prop or prop["default"] != item.default):
        found.append(
            f"{where}: default {prop.get('default', '(none)')!r}, the reference says {item.default!r}"
        )
    if item.bounds is not None:
        lo, hi = item.bounds
        step = 1 if item.integral else 0.1
        cast = int if item.integral else float
        for value, valid in ((lo, True), (hi, True), (lo - step, False), (hi + step, False)):
            expect(cast(value), valid)
    if item.max_items is not None:
        one = sample(prop.get("items", {}))
        expect([one] * item.max_items, True)
        expect([one] * (item.max_items + 1), False)
    if item.max_length is not None:
        expect("x" * item.max_length, True)
        expect("x" * (item.max_length + 1), False)
    if item.values:
        for value in item.values:
            expect(re.sub(r"<\w+>", "r-1", value), True)
        expect("not-a-listed-value", False)
    if item.item_values:
        for value in item.item_values:
            expect([value], True)
        expect(["not-a-listed-value"], False)
    for instance in item.valid:
        expect(instance, True)
    for instance in item.invalid:
        expect(instance, False)
    return found


async def advertised(url: str) -> dict[str, dict[str, Any]]:
    async with mcp_session(url) as mcp:
        return {tool.name: tool.input_schema for tool in (await mcp.client.list_tools()).tools}


def test_the_metronix_reference_parses_into_every_tool_and_its_stated_values() -> None:
    # Guards the parser: a reference reformatted out of its grasp would make the check below vacuous.
    stated = metronix_stated()
    assert len({s.tool for s in stated}) == 13
    by_name = {(s.tool, s.argument): s for s in stated}
    assert by_name["memory_batch_store", "records"].max_items == 100
    assert by_name["memory_search", "status"].default == ["active"]
    assert "all" in by_name["memory_list", "status"].item_values
    assert by_name["memory_list", "scope"].values == ["global", "per_agent", "session"]
    assert by_name["memory_store", "importance_score"].bounds == (0.0, 1.0)
    assert sum(s.has_default for s in stated) >= 40


@pytest.mark.engines("sqlite", "two-machines")
async def test_every_default_and_limit_the_metronix_reference_states_is_advertised(
    open_server: ServerProcess,
) -> None:
    tools = await advertised(open_server.url + "/mcp")
    stated = metronix_stated()
    found = [p for item in stated for p in problems(item, tools.get(item.tool, {"properties": {}}))]
    # The metronix_memory_* aliases advertise the same schemas as the plain names.
    found += [
        f"metronix_{name}: schema differs from {name}"
        for name in {s.tool for s in stated if s.tool.startswith("memory_")}
        if tools.get("metronix_" + name) != tools[name]
    ]
    assert found == []


@pytest.mark.engines("sqlite", "two-machines")
async def test_every_default_and_limit_the_hadron_reference_states_is_advertised(
    open_server: ServerProcess,
) -> None:
    tools = await advertised(open_server.url + "/hadron/mcp")
    found = [p for item in HADRON_STATED for p in problems(item, tools.get(item.tool, {"properties": {}}))]
    assert found == []


@pytest.mark.parametrize(
    ("prop", "item", "expected"),
    [
        (
            {"type": "integer", "default": 5, "minimum": 1, "maximum": 50},
            Stated("t", "a", 5, True, (1, 50)),
            [],
        ),
        ({"type": "integer"}, Stated("t", "a", 5, True), ["t.a: default '(none)', the reference says 5"]),
        (
            {"type": "string"},
            Stated("t", "a", values=["x_y"]),
            ["t.a: 'not-a-listed-value' should be refused"],
        ),
        (
            {"type": "array", "items": {"type": "object"}},
            Stated("t", "a", max_items=2),
            ["t.a: [{}, {}, {}] should be refused"],
        ),
    ],
)
def test_the_check_reports_a_schema_that_does_not_say_what_the_reference_states(
    prop: dict[str, Any], item: Stated, expected: list[str]
) -> None:
    assert problems(item, {"properties": {"a": prop}}) == expected
