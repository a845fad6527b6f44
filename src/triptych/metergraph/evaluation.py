"""The evaluation suite an analysis run scores each candidate with.

A check compares a candidate's replayed output with the reference (the original call's retained
response): exact match, JSON validity (against the route's schema when it declares one), length ratio
and semantic similarity with the bundled embedding model. Each case gets one outcome per check; a
candidate is accepted when every gating check passes on at least ``min_pass_rate`` of its scored cases.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import numpy as np

from triptych.core.embed import Embedder
from triptych.metergraph.report_schema import CaseOutcome, Check, Suite

LENGTH_BAND = (0.5, 2.0)
SIMILARITY_THRESHOLD = 0.8
REPRESENTATIVE_CASES = 3


def build_suite(
    reference_outputs: Sequence[str], json_schema: dict[str, Any] | None, revision: int = 1
) -> Suite:
    """The suite for one workload: JSON checks only where the route declares a schema or the reference
    answers are JSON; exact match is reported but gates only when the route asks for it (LLM outputs
    rarely repeat word for word)."""
    checks = [Check(check_id="exact_match", kind="exact_match")]
    if json_schema is not None:
        checks.append(Check(check_id="json_schema", kind="json_schema", json_schema=json_schema))
    elif reference_outputs and all(_is_json(t) for t in reference_outputs):
        checks.append(Check(check_id="json_valid", kind="json_valid"))
    checks.append(Check(check_id="length_ratio", kind="length_ratio", band=LENGTH_BAND))
    checks.append(
        Check(check_id="semantic_similarity", kind="semantic_similarity", threshold=SIMILARITY_THRESHOLD)
    )
    return Suite(suite_id="triptych-default", revision=revision, checks=checks)


def gating(check: Check, exact_required: bool = False) -> bool:
    return check.kind != "exact_match" or exact_required


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return False
    return True


@dataclass
class CaseScore:
    outcomes: dict[str, CaseOutcome] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)


def score_cases(
    suite: Suite,
    references: Sequence[str],
    candidates: Sequence[str | None],
    embedder: Embedder | None,
    reference_vectors: np.ndarray[Any, Any] | None = None,
) -> list[CaseScore]:
    """One ``CaseScore`` per case; a candidate of None (the replay failed) is an error on every check.
    ``reference_vectors`` (the references embedded once per workload) saves embedding them per candidate."""
    results = [CaseScore() for _ in references]
    similarity = (
        _similarities(references, candidates, embedder, reference_vectors) if embedder is not None else None
    )
    validator = {
        c.check_id: jsonschema.Draft202012Validator(c.json_schema)
        for c in suite.checks
        if c.kind == "json_schema" and c.json_schema is not None
    }
    for i, (reference, candidate) in enumerate(zip(references, candidates, strict=True)):
        for check in suite.checks:
            if candidate is None:
                results[i].outcomes[check.check_id] = "error"
                continue
            outcome, score = _check(check, reference, candidate, validator.get(check.check_id), similarity, i)
            results[i].outcomes[check.check_id] = outcome
            if score is not None:
                results[i].scores[check.check_id] = score
    return results


def _check(
    check: Check,
    reference: str,
    candidate: str,
    validator: Any,
    similarity: np.ndarray[Any, Any] | None,
    i: int,
) -> tuple[CaseOutcome, float | None]:
    if check.kind == "exact_match":
        same = candidate.strip() == reference.strip()
        return ("pass" if same else "fail"), float(same)
    if check.kind == "json_valid":
        ok = _is_json(candidate)
        return ("pass" if ok else "fail"), float(ok)
    if check.kind == "json_schema":
        try:
            document = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            return "fail", 0.0
        ok = validator is not None and validator.is_valid(document)
        return ("pass" if ok else "fail"), float(ok)
    if check.kind == "length_ratio":
        if not reference:
            return "skipped", None
        ratio = len(candidate) / len(reference)
        low, high = check.band or LENGTH_BAND
        return ("pass" if low <= ratio <= high else "fail"), ratio
    if similarity is None:
        return "skipped", None
    value = float(similarity[i])
    return ("pass" if value >= (check.threshold or SIMILARITY_THRESHOLD) else "fail"), value


def _similarities(
    references: Sequence[str],
    candidates: Sequence[str | None],
    embedder: Embedder,
    reference_vectors: np.ndarray[Any, Any] | None,
) -> np.ndarray[Any, Any]:
    """Cosine similarity of each candidate output with its reference (0 where the replay failed)."""
    positions = [i for i, c in enumerate(candidates) if c is not None]
    out = np.zeros(len(references), dtype=np.float32)
    if not positions:
        return out
    if reference_vectors is None:
        reference_vectors = embedder.embed([references[i] for i in positions])
    else:
        reference_vectors = reference_vectors[positions]
    cand = embedder.embed([candidates[i] or "" for i in positions])
    ref = reference_vectors
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1)
    out[positions] = np.einsum("ij,ij->i", ref, cand) / np.where(norms == 0, 1, norms)
    return out
