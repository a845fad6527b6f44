"""Locs and the references tools accept, the client-id rule, the schema rules and the error rendering."""

from __future__ import annotations

import pytest

from triptych.hadron.domain import schema
from triptych.hadron.domain.loc import (
    MemoryKey,
    app_short_form,
    check_loc,
    parse_memory_ref,
    parse_node_ref,
    require_qualified_node,
)
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import (
    BadInput,
    NoActiveApp,
    NotFound,
    SchemaViolation,
    UrnAlreadyExists,
    render_error,
)
from triptych.hadron.services.selection import client_id_from


@pytest.mark.parametrize(
    ("value", "loc", "memory"),
    [
        ("hrn:node:acme.com:specs:a:b", "a:b", MemoryKey("acme.com", "specs")),
        ("urn:node:acme.com:specs:a", "a", MemoryKey("acme.com", "specs")),
        ("hrn:node:acme.com::specs::a:b", "a:b", MemoryKey("acme.com", "specs")),
        ("a:b-c:D_e.f", "a:b-c:D_e.f", None),
        ("loc:a:b", "a:b", None),
    ],
)
def test_node_references(value: str, loc: str, memory: MemoryKey | None) -> None:
    ref = parse_node_ref(value)
    assert (ref.loc, ref.memory) == (loc, memory)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a b", "invalid-charset"),
        ("-a", "invalid-charset"),
        ("a:", "empty-segment"),
        ("x" * 65, "slug-too-long"),
        (":".join(["a"] * 33), "invalid-segment-shape"),
        ("hrn:mem:acme.com:specs", "urn-not-qualified"),
        ("hrn:node:acme.com", "urn-not-qualified"),
    ],
)
def test_bad_node_references_carry_the_corpus_reason(value: str, reason: str) -> None:
    with pytest.raises(UrnError) as refused:
        parse_node_ref(value)
    assert refused.value.reason == reason


def test_a_bare_loc_is_not_a_qualified_node_urn() -> None:
    with pytest.raises(UrnError) as refused:
        require_qualified_node("a:b")
    assert refused.value.reason == "urn-not-qualified"
    assert check_loc("a1.b_c-d") == "a1.b_c-d"


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("hrn:mem:acme.com:specs", MemoryKey("acme.com", "specs")),
        ("hrn:memory:acme.com::specs", MemoryKey("acme.com", "specs")),
        ("urn:mem:alice:journal", MemoryKey("alice", "journal")),
        ("acme.com:specs", MemoryKey("acme.com", "specs")),
        ("0123456789abcdef0123456789abcdef", None),  # an id
    ],
)
def test_memory_references(value: str, key: MemoryKey | None) -> None:
    assert parse_memory_ref(value) == key


@pytest.mark.parametrize("value", ["hrn:node:acme.com:specs:a", "hrn:mem:acme.com", "specs"])
def test_bad_memory_references(value: str) -> None:
    with pytest.raises(UrnError):
        parse_memory_ref(value)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("  desk-1 ", "desk-1"),
        ("x" * 200, "x" * 200),
        ("x" * 201, None),
    ],
)
def test_client_id_is_trimmed_and_at_most_200_characters(header: str | None, expected: str | None) -> None:
    assert client_id_from(header) == expected


def test_schema_rules() -> None:
    good = {
        "collections": {"c": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}
    }
    schema.check_memory_schema(good)
    for bad in ({}, {"collections": []}, {"collections": {"c": {"type": "nope"}}},
                {"collections": {"c": {"properties": {"id": {}}}}}, {"collections": {}, "extra": 1}):  # fmt: skip
        with pytest.raises(BadInput):
            schema.check_memory_schema(bad)
    assert schema.violation(good, None, {"anything": 1}) is None  # no objectType: free-form
    assert schema.violation(None, "c", {"n": "x"}) is None  # unschema'd memory: free-form
    problem = schema.violation(good, "c", {})
    assert problem is not None and problem.details["field"] == "n"
    problem = schema.violation(good, "c", {"n": 1.5})
    assert problem is not None and problem.message.startswith("Schema violation: n:")


def test_refusals_render_with_their_code_first() -> None:
    texts = [
        render_error(error).content[0].text  # type: ignore[union-attr]
        for error in (
            NoActiveApp("no app"),
            NotFound("memory", "hrn:mem:x.com:y"),
            UrnAlreadyExists("taken", details={"collisions": ["a"]}),
            SchemaViolation("price", "'x' is not of type 'number'"),
        )
    ]
    assert texts[0].startswith("[no_active_app] no app\nhint: ")
    assert texts[1].startswith("[memory_not_found] memory not found: hrn:mem:x.com:y")
    assert texts[2].startswith("URN_ALREADY_EXISTS: taken") and 'data: {"collisions": ["a"]}' in texts[2]
    assert texts[3].startswith("Schema violation: price: 'x' is not of type 'number'")


def test_every_urn_the_server_writes_is_composed_in_domain_loc() -> None:
    from triptych.hadron.domain import loc
    from triptych.hadron.domain.urn import parse_urn_v2

    written = [
        loc.org_urn("acme.com"),
        loc.user_urn("alice"),
        loc.app_urn("acme.com", "crm"),
        loc.memory_urn("acme.com", "specs"),
        loc.node_urn("acme.com", "specs", "a:b:c"),
    ]
    # Each is a valid flat v2 URN by the grammar the reference corpus pins.
    assert [parse_urn_v2(u).canonical for u in written] == written
    assert loc.node_urn("acme.com", "specs", "") == "hrn:node:acme.com:specs:"


@pytest.mark.parametrize(
    ("ref", "types", "bare"),
    [
        ("hrn:org:acme.com", ("org",), "acme.com"),
        (" urn:org:acme.com ", ("org",), "acme.com"),
        ("acme.com", ("org",), "acme.com"),
        ("hrn:memory:acme.com::specs", ("mem", "memory"), "acme.com::specs"),
        ("hrn:app:acme.com:crm", ("org",), "hrn:app:acme.com:crm"),  # another type stays whole
    ],
)
def test_references_lose_only_their_own_prefix(ref: str, types: tuple[str, ...], bare: str) -> None:
    from triptych.hadron.domain.loc import strip_urn_prefix

    assert strip_urn_prefix(ref, *types) == bare


def test_a_bare_key_splits_on_its_last_colon() -> None:
    from triptych.hadron.domain.loc import split_bare_key, urn_type

    assert split_bare_key("acme.com::specs") == ("acme.com", "specs")
    assert split_bare_key("0123456789abcdef0123456789abcdef") == ("", "0123456789abcdef0123456789abcdef")
    assert (urn_type("urn:app:a.b:c"), urn_type("a.b:c")) == ("app", None)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("acme.com:ops", ("acme.com", "ops", False)),  # <org-root>:<slug>, as the CLI writes --app
        ("acme.com::ops", ("acme.com", "ops", False)),  # the v1 separator
        ("  acme.com:ops ", ("acme.com", "ops", False)),
        ("@carol:scratch", ("carol", "scratch", True)),  # a personal App, owner written @handle
        ("carol:scratch", ("carol", "scratch", False)),
        ("ops", None),
        ("acme.com:", None),
        (":ops", None),
        ("@:ops", None),
        ("a:b:c", None),
    ],
)
def test_app_short_forms(ref: str, expected: tuple[str, str, bool] | None) -> None:
    assert app_short_form(ref) == expected
