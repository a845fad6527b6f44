"""The where predicate grammar: every operator, casts, branches and the bounds."""

from __future__ import annotations

from typing import Any

import pytest

from triptych.hadron.domain.where import compile_where
from triptych.hadron.errors import BadInput

PROPS = {
    "price": 12,
    "name": "Widget",
    "tags": ["a", "b"],
    "when": "2026-03-01T10:00:00Z",
    "live": "true",
    "nested": {"x": [5, 6]},
}
DATA = {"owner": "sam"}


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"path": "price", "eq": 12}, True),
        ({"path": "price", "ne": 12}, False),
        ({"path": "absent", "ne": 1}, True),
        ({"path": "price", "in": [1, 12]}, True),
        ({"path": "price", "lt": 12}, False),
        ({"path": "price", "lte": 12}, True),
        ({"path": "price", "gt": 11}, True),
        ({"path": "price", "gte": 13}, False),
        ({"path": "price", "between": [10, 12]}, True),
        ({"path": "price", "exists": True}, True),
        ({"path": "absent", "exists": False}, True),
        ({"path": "absent", "eq": None}, False),
        ({"path": "name", "contains": "idg"}, True),
        ({"path": "tags", "contains": "b"}, True),
        ({"path": "price", "eq": "12", "as": "number"}, True),
        ({"path": "price", "eq": "12", "as": "text"}, True),
        ({"path": "live", "eq": True, "as": "boolean"}, True),
        ({"path": "when", "gt": "2026-01-01T00:00:00Z", "as": "datetime"}, True),
        ({"path": "when", "lt": "2026-01-01", "as": "datetime"}, False),
        ({"path": "nested.x.1", "eq": 6}, True),
        ({"path": "owner", "eq": "sam", "field": "data"}, True),
        ({"path": "owner", "eq": "sam"}, False),
        ({"path": "name", "lt": 3}, False),  # incomparable types are simply false
        ({"and": [{"path": "price", "gt": 1}, {"path": "name", "eq": "Widget"}]}, True),
        ({"or": [{"path": "price", "gt": 100}, {"path": "name", "eq": "Widget"}]}, True),
        ({"not": {"path": "price", "gt": 100}}, True),
    ],
)
def test_operators(where: dict[str, Any], expected: bool) -> None:
    assert compile_where(where)(PROPS, DATA) is expected


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({}, "non-empty"),
        ({"path": "a"}, "exactly one operator"),
        ({"path": "a", "eq": 1, "gt": 2}, "exactly one operator"),
        ({"path": "a", "near": 1}, "unknown key"),
        ({"path": "a", "eq": 1, "field": "content"}, "field must be"),
        ({"path": "a", "eq": 1, "as": "money"}, "as must be"),
        ({"path": "a", "in": 1}, "in takes a list"),
        ({"path": "a", "between": [1]}, "between takes"),
        ({"path": "a", "exists": "yes"}, "exists takes"),
        ({"path": "a", "eq": "x", "as": "number"}, "cannot read"),
        ({"path": "a.b.c.d.e.f.g.h.i", "eq": 1}, "path"),
        ({"path": "a..b", "eq": 1}, "path"),
        ({"and": []}, "non-empty list"),
        ({"and": [{"path": "a", "eq": 1}], "or": []}, "only key"),
        ({"not": {"not": {"not": {"not": {"path": "a", "eq": 1}}}}}, "deeper than 4"),
        ({"or": [{"path": "a", "eq": i} for i in range(33)]}, "more than 32 leaves"),
    ],
)
def test_refusals_name_the_problem(where: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInput) as refused:
        compile_where(where)
    assert message in refused.value.message


def test_the_bounds_themselves_are_allowed() -> None:
    assert compile_where({"not": {"not": {"not": {"path": "a.b.c.d.e.f.g.h", "exists": True}}}})({}, None)
    assert compile_where({"or": [{"path": "a", "eq": i} for i in range(32)]})({"a": 31}, None)


# ── paths as lists of keys (issue 28) ───────────────────────────────────────
# The real server's NodeWhereInput takes ``path`` as a list of object keys; the official CLI's help and
# tests write every predicate that way. Its examples, as (predicate, a record it keeps, one it drops):
INSIGHT = {"source": "substack", "capturedAt": "2026-07-10T08:00:00Z", "rank": 3}
OLD_INSIGHT = {"source": "substack", "capturedAt": "2026-06-01T08:00:00Z"}
CLI_EXAMPLES: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ({"path": ["source"], "eq": "substack"}, INSIGHT, {"source": "rss"}),
    (
        {
            "and": [
                {"path": ["source"], "eq": "substack"},
                {"path": ["capturedAt"], "as": "datetime", "gte": "2026-07-04"},
            ]
        },
        INSIGHT,
        OLD_INSIGHT,
    ),  # fmt: skip
    ({"path": ["tier"], "eq": "enterprise"}, {"tier": "enterprise"}, {"tier": "team"}),
    ({"path": ["fundingUsd"], "as": "number", "gt": 10000000}, {"fundingUsd": 25e6}, {"fundingUsd": 9e6}),
    ({"path": ["archivedAt"], "eq": None}, {"archivedAt": None}, {"archivedAt": "2026-01-01"}),
    ({"path": ["x"], "exists": False}, {}, {"x": 1}),
    ({"and": [{"path": ["a"], "eq": "x"}, {"path": ["b"], "exists": False}]}, {"a": "x"}, {"a": "x", "b": 2}),
]


@pytest.mark.parametrize(("where", "kept", "dropped"), CLI_EXAMPLES)
def test_the_official_cli_s_example_predicates_filter_as_written(
    where: dict[str, Any], kept: dict[str, Any], dropped: dict[str, Any]
) -> None:
    test = compile_where(where)
    assert test(kept, None) is True
    assert test(dropped, None) is False


@pytest.mark.parametrize(
    ("list_form", "string_form"),
    [
        ({"path": ["price"], "eq": 12}, {"path": "price", "eq": 12}),
        ({"path": ["nested", "x", "1"], "eq": 6}, {"path": "nested.x.1", "eq": 6}),
        ({"path": ["owner"], "eq": "sam", "field": "data"}, {"path": "owner", "eq": "sam", "field": "data"}),
        ({"not": {"path": ["tags"], "contains": "z"}}, {"not": {"path": "tags", "contains": "z"}}),
        (
            {"or": [{"path": ["absent"], "eq": 1}, {"path": ["name"], "eq": "Widget"}]},
            {"or": [{"path": "absent", "eq": 1}, {"path": "name", "eq": "Widget"}]},
        ),
    ],  # fmt: skip
)
def test_a_list_of_keys_walks_the_same_nested_keys_as_the_dotted_string(
    list_form: dict[str, Any], string_form: dict[str, Any]
) -> None:
    assert compile_where(list_form)(PROPS, DATA) is compile_where(string_form)(PROPS, DATA) is True


def test_a_key_of_a_list_path_is_one_key_even_with_a_dot_in_it() -> None:
    props = {"a.b": 1, "a": {"b": 2}}
    assert compile_where({"path": ["a.b"], "eq": 1})(props, None)
    assert compile_where({"path": ["a", "b"], "eq": 2})(props, None)
    assert compile_where({"path": "a.b", "eq": 2})(props, None)  # the string form splits on dots


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"path": [], "eq": 1}, "non-empty list of keys"),
        ({"path": ["a", ""], "eq": 1}, "non-empty string"),
        ({"path": ["a", 1], "eq": 1}, "non-empty string"),
        ({"path": list("abcdefghi"), "eq": 1}, "at most 8"),
        ({"path": {"a": 1}, "eq": 1}, "a leaf needs a path"),
        ({"path": ["x"], "nope": 1}, "unknown key"),
        ({"and": [{"path": ["a"], "eq": 1}, {"path": [], "eq": 1}]}, "and[1]"),
    ],
)
def test_a_bad_list_path_is_refused_with_where_it_is(where: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInput) as refused:
        compile_where(where)
    assert message in refused.value.message
