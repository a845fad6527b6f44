"""The evaluation suite's checks, with the bundled embedding model for semantic similarity."""

from __future__ import annotations

import json

import pytest

from triptych.core.embed import LocalEmbedder
from triptych.metergraph.evaluation import build_suite, gating, score_cases

SCHEMA = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def test_json_checks_appear_only_where_json_is_expected() -> None:
    kinds = lambda suite: [c.kind for c in suite.checks]  # noqa: E731
    assert kinds(build_suite(["plain text"], None)) == ["exact_match", "length_ratio", "semantic_similarity"]
    assert "json_valid" in kinds(build_suite(['{"a": 1}', "[1, 2]"], None))
    assert "json_schema" in kinds(build_suite(["anything"], SCHEMA))


def test_exact_match_gates_only_when_the_route_asks_for_it() -> None:
    exact = build_suite(["x"], None).checks[0]
    assert exact.kind == "exact_match"
    assert gating(exact) is False and gating(exact, exact_required=True) is True


def test_each_check_scores_its_case(embedder: LocalEmbedder) -> None:
    suite = build_suite([json.dumps({"city": "Paris"})] * 3, SCHEMA)
    references = [json.dumps({"city": "Paris"})] * 3
    candidates = [json.dumps({"city": "Paris"}), json.dumps({"town": "Paris, France, Europe, Earth"}), None]
    good, wrong, failed = score_cases(suite, references, candidates, embedder)
    assert good.outcomes == {"exact_match": "pass", "json_schema": "pass", "length_ratio": "pass",
                             "semantic_similarity": "pass"}  # fmt: skip
    # Batches are padded to their longest text, so the same text embeds within about 1% of itself.
    assert good.scores["semantic_similarity"] == pytest.approx(1.0, abs=0.02)
    assert wrong.outcomes["exact_match"] == "fail" and wrong.outcomes["json_schema"] == "fail"
    assert wrong.outcomes["length_ratio"] == "fail"  # more than twice as long
    assert set(failed.outcomes.values()) == {"error"}


def test_semantic_similarity_tells_a_paraphrase_from_an_unrelated_answer(embedder: LocalEmbedder) -> None:
    suite = build_suite(["x"], None)
    reference = "The store opens at nine in the morning on weekdays."
    close, far = score_cases(
        suite,
        [reference, reference],
        ["On weekdays the shop opens at 9 am.", "Photosynthesis converts light into chemical energy."],
        embedder,
    )
    assert close.scores["semantic_similarity"] > far.scores["semantic_similarity"] + 0.2
    assert far.outcomes["semantic_similarity"] == "fail"


def test_without_an_embedder_similarity_is_skipped_not_guessed() -> None:
    [case] = score_cases(build_suite(["a b"], None), ["a b"], ["a b"], None)
    assert case.outcomes["semantic_similarity"] == "skipped"
    assert "semantic_similarity" not in case.scores
