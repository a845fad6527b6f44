"""Hypothesis strategies for tool arguments, built from each tool's own ``inputSchema``: mostly values
of the declared shape (so calls get past validation into the services), mixed with hostile ones: wrong
types, huge and deeply nested values, NUL/control/bidi characters, SQL, FTS5 and regex syntax, path
tricks and foreign URNs."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

FOREIGN = [
    "hrn:mem:globex.com:plans",
    "hrn:node:globex.com:plans:secret",
    "hrn:org:globex.com",
    "hrn:app:globex.com:helper",
    "hrn:mem:erin:notes",
    "ws-b",
    "mg-b",
]
NASTY_TEXT = [
    "", " ", "\x00", "a\x00b", "\x1b[2J", "\u202eevil", "\ufeff", "\u200b", "🙂" * 50,
    "' OR 1=1 --", "\"; DROP TABLE nodes; --", "%' UNION SELECT * FROM sqlite_master --",
    "NEAR(a b)", "\"unterminated", "a AND OR NOT", "col:val", "^term*", "*", "-", "(", ")",
    "(a+)+$", "((a|a)*)*b", "(a)\\1", "(?=x)", "[", "\\", "{1000000}",
    "../../etc/passwd", "%s%n%x", "{{7*7}}", "${jndi:x}", "<script>alert(1)</script>",
    "hrn:", "hrn:mem:", "hrn:node::::", ":", "x" * 5000, "NaN", "-1", "1e309",
]  # fmt: skip
# Values the attacking callers really hold, by argument name: mixed in so that calls get past "no such
# workspace / memory / node" into the services' deeper paths.
KNOWN: dict[str, list[Any]] = {
    "workspace_id": ["ws-a"],
    "agent_id": ["bot", "agent-1"],
    "memoryUrn": ["hrn:mem:acme.com:specs", "hrn:mem:acme.com:team", "hrn:mem:alice:journal"],
    "memoryId": ["hrn:mem:acme.com:specs"],
    "loc": [
        "hrn:node:acme.com:specs:fuzz",
        "hrn:node:acme.com:specs:bomb0",
        "hrn:node:acme.com:specs:fuzz:child",
    ],
    "parentRel": ["hrn:node:acme.com:specs:fuzz"],
    "app": ["hrn:app:acme.com:bot"],
    "doc_label": ["big", "fuzz-doc"],
    "query": ["graph memory", "*", "deploy"],
    "content": ["a note about graphs and memory", "fuzz content"],
    "name": ["fuzz", "Plan"],
}
HUGE_INTS = [2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30, -1, 0]


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def hostile() -> st.SearchStrategy[Any]:
    """A value nobody should send: every type the schema does not ask for, and worse."""
    return st.one_of(
        st.sampled_from(NASTY_TEXT + FOREIGN),
        st.text(st.characters(codec="utf-8", categories=["Cc", "Cf", "Zs", "L", "N", "P", "S"]), max_size=50),
        st.sampled_from(HUGE_INTS),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
        st.sampled_from(
            [deep(40), deep(150), [[]] * 2000, {"k" * 300: "v"}, {str(i): i for i in range(500)}]
        ),
        st.lists(st.sampled_from(NASTY_TEXT), max_size=5),
        st.dictionaries(st.sampled_from(NASTY_TEXT), st.sampled_from(NASTY_TEXT), max_size=3),
    )


def arguments(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments for one tool: each required property, a subset of the optional ones, sometimes an
    undeclared one; each value of its declared shape seven times in eight, else hostile."""
    defs = schema.get("$defs", {})
    props: dict[str, Any] = schema.get("properties", {})
    required = [p for p in schema.get("required", []) if p in props]
    optional = [p for p in props if p not in required]

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        chosen = [p for p in required if draw(st.integers(0, 19))] + draw(
            st.lists(st.sampled_from(optional), unique=True, max_size=len(optional))
            if optional
            else st.just([])
        )
        args = {name: draw(_known_or(name, value(props[name], defs))) for name in chosen}
        if draw(st.integers(0, 9)) == 0:
            args[draw(st.sampled_from(["extra", "__proto__", "workspaceId", ""]))] = draw(hostile())
        return args

    return build()


def _known_or(name: str, other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    if name not in KNOWN:
        return other
    known = st.sampled_from(KNOWN[name])
    return st.one_of(known, known, other)


def value(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    shape = shaped(schema, defs, depth)
    return st.one_of(shape, shape, shape, shape, shape, shape, shape, hostile())


def shaped(schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A value of the declared shape, at and around its bounds, with nasty text in its strings."""
    if "$ref" in schema:
        return shaped(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return st.one_of([shaped(s, defs, depth) for s in schema[key]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([shaped({**schema, "type": k}, defs, depth) for k in kind])
    if kind == "string":
        lo, hi = schema.get("minLength", 0), schema.get("maxLength", 200)
        edges = [t for t in NASTY_TEXT + FOREIGN if lo <= len(t) <= hi]
        return st.one_of(st.text(min_size=lo, max_size=min(hi, 60)), st.sampled_from(edges or ["x" * lo]))
    if kind == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        edges = [v for v in (lo, hi, 0, 1, -1) if v is not None]
        return st.one_of(st.integers(lo, hi), st.sampled_from(edges + HUGE_INTS))
    if kind == "number":
        return st.one_of(
            st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False),
            st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324]),
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = schema.get("items", {})
        inner = shaped(items, defs, depth + 1) if depth < 3 else st.just("x")
        return st.lists(inner, max_size=min(schema.get("maxItems", 5), 5))
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if props and depth < 3:
            return st.fixed_dictionaries(
                {}, optional={k: shaped(v, defs, depth + 1) for k, v in props.items()}
            )
        return st.dictionaries(
            st.text(max_size=10), st.one_of(st.text(max_size=20), st.integers(), st.none()), max_size=4
        )
    return hostile()
