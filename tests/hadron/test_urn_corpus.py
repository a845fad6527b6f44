"""Runs the language-neutral Hadron URN conformance corpus against triptych.hadron.domain.urn.

Each corpus case is ``{fn, in: [args], out | throws | throwsQualified | throwsAny}``; a case with
none of the four is a void call that must not raise. ``fn`` is the reference (camelCase) name;
DISPATCH maps it to the Python function. Results are compared as JSON values, so dataclass
fields are renamed to camelCase and absent optional fields (None) are left out, as the corpus
does.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import SHARED, shared_file

from triptych.hadron.domain import urn

CORPUS_PATH = Path(os.environ.get("HADRON_URN_CORPUS", SHARED / "data" / "hadron" / "urn-corpus.json"))

DISPATCH: dict[str, Callable[[list[str]], object]] = {
    "hasSchemePrefix": lambda a: urn.has_scheme_prefix(a[0]),
    "normalizeScheme": lambda a: urn.normalize_scheme(a[0]),
    "normalizeUrnForLookup": lambda a: urn.normalize_urn_for_lookup(a[0]),
    "legacyMemoryUrnToCanonical": lambda a: urn.legacy_memory_urn_to_canonical(a[0]),
    "agentSlugFromUrn": lambda a: urn.agent_slug_from_urn(a[0]),
    "validateUserSlug": lambda a: urn.validate_user_slug(a[0]),
    "validateOrgSlug": lambda a: urn.validate_org_slug(a[0]),
    "validateUserHandle": lambda a: urn.validate_user_handle(a[0]),
    "deriveSlugFromName": lambda a: urn.derive_slug_from_name(a[0]),
    "isValidSlug": lambda a: urn.is_valid_slug(a[0]),
    "formatUrn": lambda a: urn.format_urn(a[0], a[1]),
    "parseUrnInput": lambda a: urn.parse_urn_input(a[0]),
    "validateUrnTypeFromInput": lambda a: urn.validate_urn_type_from_input(a[0], a[1]),
    "parseUrn": lambda a: urn.parse_urn(a[0]),
    "isParserCanonical": lambda a: urn.is_parser_canonical(a[0]),
    "toParserCanonical": lambda a: urn.to_parser_canonical(a[0]),
    "formatCanonicalUrn": lambda a: urn.format_canonical_urn(a[0], a[1]),
    "composeNodeUrn": lambda a: urn.compose_node_urn(a[0], a[1]),
    "composeEdgeUrn": lambda a: urn.compose_edge_urn(a[0], a[1]),
    "assertFullyQualifiedUrn": lambda a: urn.assert_fully_qualified_urn(a[0], a[1]),
    "splitNodeUrn": lambda a: urn.split_node_urn(a[0]),
    "composeInstalledAgentUrn": lambda a: urn.compose_installed_agent_urn(a[0], a[1]),
    # The second argument stands for the row's urnNormalizedAt: "1" set, "" null.
    "parseForRow": lambda a: urn.parse_for_row(a[0], normalized=a[1] == "1"),
    "parseDisplayUrn": lambda a: urn.parse_display_urn(a[0], a[1] if len(a) > 1 else None),
    "parseUrnV2": lambda a: urn.parse_urn_v2(a[0]),
    "composeUrnV2": lambda a: urn.compose_urn_v2(a[0], a[1], *a[2:]),
    "isFlatV2": lambda a: urn.is_flat_v2(a[0]),
    "composeSecretUrnV2": lambda a: urn.compose_secret_urn_v2(a[0], a[1]),
    "composeAppRunUrnV2": lambda a: urn.compose_app_run_urn_v2(a[0], a[1], a[2]),
    "composeNodeRevUrnV2": lambda a: urn.compose_node_rev_urn_v2(a[0], a[1], a[2], a[3]),
    "composeDataFragmentV2": lambda a: urn.compose_data_fragment_v2(a[0]),
    "parseNodeRevUrnV2": lambda a: urn.parse_node_rev_urn_v2(a[0]),
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def as_json(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            _camel(field.name): as_json(getattr(value, field.name))
            for field in dataclasses.fields(value)
            if getattr(value, field.name) is not None
        }
    if isinstance(value, tuple | list):
        return [as_json(item) for item in value]
    return value


def _load_cases() -> list[dict[str, Any]]:
    if not CORPUS_PATH.is_file():
        return []
    cases: list[dict[str, Any]] = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))["cases"]
    return cases


def _case_id(index: int, case: dict[str, Any]) -> str:
    args = ", ".join(json.dumps(arg, ensure_ascii=False) for arg in case["in"])
    if len(args) > 70:
        args = args[:67] + "..."
    return f"{index:03d} {case['fn']}({args})"


CASES = _load_cases()


def test_the_corpus_is_present() -> None:
    # Without the corpus the conformance cases below are not collected: this one test says so (a skip
    # with the path on a clone; a failure where TRIPTYCH_REQUIRE_SHARED=1, as in CI).
    shared_file("data/hadron/urn-corpus.json", "HADRON_URN_CORPUS")
    assert CASES, f"URN corpus at {CORPUS_PATH} has no cases"


def test_every_corpus_function_is_dispatched() -> None:
    shared_file("data/hadron/urn-corpus.json", "HADRON_URN_CORPUS")
    assert {case["fn"] for case in CASES} <= DISPATCH.keys()


def test_every_dispatched_function_is_exercised() -> None:
    shared_file("data/hadron/urn-corpus.json", "HADRON_URN_CORPUS")
    assert DISPATCH.keys() <= {case["fn"] for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[_case_id(i, c) for i, c in enumerate(CASES)])
def test_corpus_case(case: dict[str, Any]) -> None:
    call = DISPATCH[case["fn"]]
    args: list[str] = case["in"]

    if case.get("throwsQualified"):
        with pytest.raises(urn.UrnError) as refused:
            call(args)
        assert refused.value.reason == "urn-not-qualified"
    elif case.get("throwsAny"):
        with pytest.raises(urn.UrnError):
            call(args)
    elif "throws" in case:
        with pytest.raises(urn.UrnError) as refused:
            call(args)
        assert refused.value.reason == case["throws"]
        if "offendingSegment" in case:
            assert refused.value.offending_segment == case["offendingSegment"]
    elif "out" in case:
        assert as_json(call(args)) == case["out"]
    else:
        assert call(args) is None


def test_parsed_urns_are_frozen() -> None:
    parsed = urn.parse_urn("hrn:memory:acme.com::specs")
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.type = "node"  # type: ignore[misc]


def test_error_survives_pickling() -> None:
    import pickle

    with pytest.raises(urn.UrnError) as refused:
        urn.parse_urn("hrn:memory:acme.com::foo bar")
    copy = pickle.loads(pickle.dumps(refused.value))
    assert (copy.reason, copy.offending_segment, str(copy)) == (
        "invalid-charset",
        "foo bar",
        str(refused.value),
    )
