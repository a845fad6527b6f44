"""A small valid report artifact, built as a plain document the way another installation would write it."""

from __future__ import annotations

import copy
import json
from typing import Any

NARRATIVE = "MODEL-AUTHORED narrative that the metadata tools must never return"
LONG_TEXT = "é" * 20_000  # 40,000 UTF-8 bytes: past the 16 KiB bound of the evidence tool


def _case(case_id: str, candidate_id: str, grade: str, question: str = "What is 2+2?") -> dict[str, Any]:
    return {
        "case_id": case_id, "source_call_id": "1", "candidate_id": candidate_id, "question": question,
        "reference_model": "gpt-4o", "candidate_model": "gpt-4o-mini", "reference_response": "4",
        "candidate_response": "4" if grade == "pass" else "five", "grade": grade,
        "check_outcomes": {"semantic_similarity": grade}, "scores": {"semantic_similarity": 0.9},
    }  # fmt: skip


def artifact(
    analysis_id: str = "an-test-1", environment: str | None = None, cases: int = 3
) -> dict[str, Any]:
    counts = {"eligible": cases, "scored": cases, "passed": cases - 1, "failed": 1, "errored": 0}
    evidence = [_case(f"c1-{i + 1}", "c1", "pass" if i else "fail") for i in range(cases)]
    evidence[-1]["question"] = LONG_TEXT
    return {
        "format": "triptych.metergraph.report",
        "schema_version": 11,
        "analysis_id": analysis_id,
        "title": "Test analysis",
        "pipeline_name": "elsewhere",
        "generated_at": "2026-11-30T10:00:00+00:00",
        "environment": environment,
        "outcome": "opportunities",
        "settings": {"days": 7},
        "spend_projection": {"basis": "monthly", "current_usd": 100.0, "projected_usd": 40.0, "savings_usd": 60.0},
        "analysis_generation_cost": {"usd": 0.01, "replays": cases, "input_tokens": 10, "output_tokens": 5},
        "narrative": NARRATIVE,
        "workloads": [
            {
                "workload_id": "route:support",
                "workload_name": "support",
                "route": "support",
                "state": "covered",
                "sample_count": cases,
                "reference": {"provider": "openai", "model": "gpt-4o"},
                "usage": {"window_days": 7, "calls": 70, "cost_usd": 23.3, "input_tokens": 7000, "output_tokens": 700},
                "suite": {"suite_id": "triptych-default", "revision": 1, "min_pass_rate": 0.5,
                          "checks": [{"check_id": "semantic_similarity", "kind": "semantic_similarity", "threshold": 0.8}]},
                "candidates": [{
                    "candidate_id": "c1", "provider": "openai", "model": "gpt-4o-mini", "outcome": "accepted",
                    "cases": counts, "cost_ratio": 0.06,
                    "checks": [{"check_id": "semantic_similarity", "kind": "semantic_similarity",
                                "pass_rate": (cases - 1) / cases, "mean_score": 0.9, "scored": cases,
                                "eligible": cases, "counts": {"pass": cases - 1, "fail": 1, "error": 0, "skipped": 0},
                                "representative_case_ids": ["c1-1", "c1-2"]}],
                }],
                "opportunities": [{
                    "opportunity_id": "c1-swap", "candidate_ids": ["c1"], "recommendation_status": "recommended",
                    "savings_usd": 60.0, "quality_vs_reference": 0.9, "safe_switch_rate": 0.66, "cost_ratio": 0.06,
                    "quality_grade_counts": {"pass": cases - 1, "fail": 1},
                    "evaluation_gate": {"suite_id": "triptych-default", "suite_revision": 1, "effect": "allowed",
                                        "reasons": [], "cases": counts},
                }],
                "evidence_coverage": {"evaluated": cases, "published": cases, "omitted": 0},
                "evidence": evidence,
                "narrative": NARRATIVE,
            },
            {
                "workload_id": "route:digest", "workload_name": "digest", "route": "digest", "state": "ineligible",
                "reason": "insufficient_samples", "sample_count": 2,
                "warnings": [{"code": "insufficient_samples", "message": "2 retained calls"}],
            },
        ],
    }  # fmt: skip


def raw(document: dict[str, Any]) -> bytes:
    return json.dumps(document, indent=1).encode()


def variant(document: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(document)
    out.update(changes)
    return out
