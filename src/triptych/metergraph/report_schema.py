"""The report artifact: a versioned JSON document an analysis run writes (or another installation made)
and a workspace imports. Documented field by field in docs/metergraph.md ("Report artifact").

The artifact is the source of truth; the report tools read projections of it. Model-authored text
(``narrative`` fields, candidate and reference responses) lives only in the artifact and in the
content-class evidence tool, never in the metadata projections.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from triptych.metergraph.contract import WARNING_CODES

FORMAT = "triptych.metergraph.report"
# Numbered inside the range the Agent Access contract accepts for a pipeline schema (11 to 15):
# 11 is Triptych's first artifact format.
SCHEMA_VERSION = 11
SUPPORTED_VERSIONS = frozenset({11})
MAX_ARTIFACT_BYTES = 32 * 1024 * 1024

Id = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
Name = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Count = Annotated[int, Field(ge=0)]
Money = Annotated[float, Field(ge=0)]
Rate = Annotated[float, Field(ge=0, le=1)]

Outcome = Literal["opportunities", "no_opportunities", "partial_coverage", "no_eligible_workloads"]
WorkloadState = Literal["covered", "partial", "failed", "ineligible"]
CheckKind = Literal["exact_match", "json_valid", "json_schema", "length_ratio", "semantic_similarity"]
CaseOutcome = Literal["pass", "fail", "error", "skipped"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Warning_(Strict):
    code: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    message: Annotated[str, StringConstraints(max_length=2000)]


class ModelRef(Strict):
    provider: Name | None = None
    model: Name


class Usage(Strict):
    """The workload's real traffic over the source window: what the monthly projection scales."""

    window_days: Annotated[float, Field(gt=0, le=90)]
    calls: Count
    cost_usd: Money
    input_tokens: Count
    output_tokens: Count


class Check(Strict):
    check_id: Id
    kind: CheckKind
    # length_ratio: accepted band of candidate/reference length; semantic_similarity: minimum cosine.
    threshold: float | None = None
    band: tuple[float, float] | None = None
    json_schema: dict[str, Any] | None = None


class Suite(Strict):
    suite_id: Id
    revision: Annotated[int, Field(ge=1)]
    checks: Annotated[list[Check], Field(min_length=1)]
    # A candidate is accepted when every check passes on at least this share of its scored cases.
    min_pass_rate: Rate = 0.9


class CheckResult(Strict):
    check_id: Id
    kind: CheckKind
    pass_rate: Rate | None
    mean_score: float | None
    scored: Count
    eligible: Count
    counts: dict[CaseOutcome, Count]
    representative_case_ids: Annotated[list[Id], Field(max_length=10)]


class Reason(Strict):
    code: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    message: Annotated[str, StringConstraints(max_length=2000)]
    checks: list[Id] = []


class CaseCounts(Strict):
    eligible: Count
    scored: Count
    passed: Count
    failed: Count
    errored: Count


class Candidate(Strict):
    candidate_id: Id
    provider: Name | None = None
    model: Name
    outcome: Literal["accepted", "rejected", "failed"]
    reasons: list[Reason] = []
    cases: CaseCounts
    checks: list[CheckResult] = []
    mean_cost_per_call_usd: Money | None = None
    reference_cost_per_call_usd: Money | None = None
    cost_ratio: Annotated[float, Field(ge=0)] | None = None
    mean_latency_ms: Annotated[float, Field(ge=0)] | None = None


class EvaluationGate(Strict):
    suite_id: Id
    suite_revision: Annotated[int, Field(ge=1)]
    effect: Literal["allowed", "withheld"]
    reasons: list[Reason] = []
    cases: CaseCounts


class Opportunity(Strict):
    opportunity_id: Id
    kind: Literal["model_swap"] = "model_swap"
    candidate_ids: Annotated[list[Id], Field(min_length=1)]
    recommendation_status: Literal["recommended", "withheld", "not_recommended"]
    savings_usd: float | None = None  # projected per month
    quality_vs_reference: float | None = None
    safe_switch_rate: Rate | None = None
    cost_ratio: Annotated[float, Field(ge=0)] | None = None
    quality_grade_counts: dict[str, Count] = {}
    evaluation_gate: EvaluationGate | None = None


class Case(Strict):
    """One replayed call: content class. Texts are stored whole; readers bound them."""

    case_id: Id
    source_call_id: Annotated[str, StringConstraints(max_length=200)] | None = None
    candidate_id: Id
    question: str
    reference_model: Name | None
    candidate_model: Name | None
    reference_response: str
    candidate_response: str
    grade: CaseOutcome | None
    check_outcomes: dict[Id, CaseOutcome] = {}
    scores: dict[Id, float] = {}


class Coverage(Strict):
    evaluated: Count
    published: Count
    omitted: Count


class Workload(Strict):
    workload_id: Id
    workload_name: Name
    route: Name | None = None
    state: WorkloadState
    reason: Annotated[str, StringConstraints(max_length=64)] | None = None
    sample_count: Count | None
    reference: ModelRef | None = None
    usage: Usage | None = None
    warnings: list[Warning_] = []
    suite: Suite | None = None
    candidates: list[Candidate] = []
    opportunities: list[Opportunity] = []
    evidence_coverage: Coverage | None = None
    evidence: list[Case] = []
    narrative: str | None = None  # model-authored: never projected by the metadata tools

    @model_validator(mode="after")
    def _ids_resolve(self) -> Workload:
        candidate_ids = {c.candidate_id for c in self.candidates}
        case_ids = [c.case_id for c in self.evidence]
        if len(case_ids) != len(set(case_ids)):
            raise ValueError(f"workload {self.workload_id}: case ids repeat")
        for opportunity in self.opportunities:
            missing = set(opportunity.candidate_ids) - candidate_ids
            if missing:
                raise ValueError(f"opportunity {opportunity.opportunity_id} names unknown candidates")
        known = set(case_ids)
        for candidate in self.candidates:
            for check in candidate.checks:
                if not set(check.representative_case_ids) <= known:
                    raise ValueError(f"check {check.check_id} cites cases the evidence does not hold")
        return self


class SpendProjection(Strict):
    basis: Literal["monthly"] = "monthly"
    current_usd: Money
    projected_usd: Money
    savings_usd: float


class GenerationCost(Strict):
    usd: Money
    replays: Count
    input_tokens: Count
    output_tokens: Count


class ReportArtifact(Strict):
    format: Literal["triptych.metergraph.report"]
    schema_version: int
    analysis_id: Id
    title: Name
    pipeline_name: Name | None = None
    generated_at: Annotated[str, StringConstraints(min_length=10, max_length=64)]
    environment: Name | None = None
    outcome: Outcome
    settings: dict[str, Any] | None = None
    spend_projection: SpendProjection | None = None
    analysis_generation_cost: GenerationCost | None = None
    warnings: list[Warning_] = []
    workloads: list[Workload]
    narrative: str | None = None  # model-authored: never projected by the metadata tools

    @model_validator(mode="after")
    def _consistent(self) -> ReportArtifact:
        if self.schema_version not in SUPPORTED_VERSIONS:
            raise ValueError(f"schema_version {self.schema_version} is not supported (supported: 11)")
        # Report-level warnings reach agents as the response's warnings: only the contract's codes.
        unknown = sorted({w.code for w in self.warnings} - WARNING_CODES)
        if unknown:
            raise ValueError(f"report warnings use codes the contract does not define: {', '.join(unknown)}")
        ids = [w.workload_id for w in self.workloads]
        if len(ids) != len(set(ids)):
            raise ValueError("workload ids repeat")
        return self


class ArtifactRefused(ValueError):
    """An artifact that is not a valid report: the message says where."""


def parse_artifact(raw: bytes) -> ReportArtifact:
    """Validate raw bytes as a report artifact (size, JSON, schema)."""
    if len(raw) > MAX_ARTIFACT_BYTES:
        raise ArtifactRefused(f"the artifact is {len(raw)} bytes; the limit is {MAX_ARTIFACT_BYTES} (32 MiB)")
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactRefused(f"the artifact is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ArtifactRefused(f'the artifact is not a report: "format" must be "{FORMAT}"')
    try:
        return ReportArtifact.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(document)"
        raise ArtifactRefused(f"invalid report artifact at {where}: {first['msg']}") from None


def serialize(artifact: ReportArtifact) -> bytes:
    """Canonical bytes (sorted keys, compact): the same report always has the same SHA-256."""
    document = artifact.model_dump(mode="json")
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()
