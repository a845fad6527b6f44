"""The NUL rule (core/nul.py) where each door decodes: which field it names, and that a body without the
JSON escape is never walked (an ingest batch pays nothing for the rule)."""

from __future__ import annotations

import pytest

from triptych.core import jsonbody, nul
from triptych.core.mcp import ArgumentsInvalid, ToolArgs, parse_args


class Args(ToolArgs):
    content: str = ""
    metadata: dict[str, str] = {}
    tags: list[str] = []


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("a\x00", "value"),
        ({"content": "x\x00"}, "content"),
        ({"rows": [{"a": "ok"}, {"meta": {"note": "n\x00"}}]}, "rows[1].meta.note"),
        ({"k\x00ey": "v"}, "k\\x00ey"),
        ([["x", ["y", "z\x00"]]], "[0][1][1]"),
        ({"a": "first\x00", "b": "second\x00"}, "a"),
        ({"ok": ["text", 1, None, 2.5, True]}, None),
    ],
)
def test_nul_field_names_the_first_field_holding_a_nul_in_document_order(
    value: object, field: str | None
) -> None:
    assert nul.nul_field(value) == field


def test_nul_field_walks_documents_as_deep_as_the_json_decoder_allows_without_recursing() -> None:
    value: object = "bottom\x00"
    for _ in range(5_000):
        value = {"k": [value]}
    field = nul.nul_field(value)
    assert field is not None and field.endswith("k[0]")


def test_a_tool_argument_with_a_nul_is_refused_naming_it() -> None:
    with pytest.raises(ArgumentsInvalid) as refused:
        parse_args(Args, {"tags": ["ok", "b\x00d"]})
    assert "tags[1]" in refused.value.message and "NUL" in refused.value.message
    assert refused.value.details == {"fields": ["tags"], "field": "tags[1]"}


def test_below_a_private_argument_only_the_argument_is_named() -> None:
    with pytest.raises(ArgumentsInvalid) as refused:
        parse_args(Args, {"metadata": {"customer-secret\x00": "v"}}, private=["metadata"])
    assert "customer-secret" not in refused.value.message and "metadata" in refused.value.message


def test_a_json_body_with_an_escaped_nul_is_refused_naming_the_field() -> None:
    with pytest.raises(jsonbody.JsonRefused) as refused:
        jsonbody.parse(b'{"rows":[{"route":"r\\u0000"}]}')
    assert refused.value.reason == "nul_character" and "rows[0].route" in refused.value.message


def test_an_escaped_backslash_before_u0000_is_not_a_nul() -> None:
    assert jsonbody.parse(b'{"path":"C:\\\\u0000"}') == {"path": "C:\\u0000"}


def test_a_json_rpc_envelope_leaves_its_arguments_to_the_tool() -> None:
    assert jsonbody.parse('{"a":"x\\u0000"}', allow_nul=True) == {"a": "x\x00"}


def test_query_and_path_parameters_with_a_nul_are_refused_naming_them() -> None:
    with pytest.raises(nul.NulInText) as refused:
        nul.refuse_in_params([("limit", "5"), ("agent_id", "b\x00t")], {})
    assert refused.value.details == {"field": "agent_id"} and refused.value.kind == "invalid"
    with pytest.raises(nul.NulInText):
        nul.refuse_in_params([], {"record_id": "a\x00"})
    nul.refuse_in_params([("q", "fine")], {"id": "fine"})


@pytest.mark.parametrize(
    ("raw", "may"),
    [(b'{"a":"plain"}', False), (b'{"a":"caf\\u00e9"}', False), (b'{"a":"x\\u0000"}', True),
     ('{"a":"x\\u0000"}', True), ('{"a":"\\"q\\""}', False)],
)  # fmt: skip
def test_only_a_body_with_the_escape_is_walked(raw: bytes | str, may: bool) -> None:
    assert nul.json_may_hold_nul(raw) is may
