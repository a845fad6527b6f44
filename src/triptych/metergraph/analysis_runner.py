"""One analysis run, from workloads to a report artifact: sample each workload's retained calls, replay
them on candidate models, score the replies with the evaluation suite, project the monthly saving from
the workload's real usage and genai-prices, and build the artifact. Nothing is written here: the
service commits the artifact and the run's end in one transaction.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from genai_prices import data_snapshot

from triptych.core.embed import Embedder
from triptych.metergraph.analysis_sources import (
    Replayer,
    ReplayResult,
    RetainedCall,
    WorkloadSource,
    WorkloadSpec,
)
from triptych.metergraph.evaluation import REPRESENTATIVE_CASES, CaseScore, build_suite, gating, score_cases
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.report_schema import (
    SCHEMA_VERSION,
    Candidate,
    Case,
    CaseCounts,
    CheckResult,
    Coverage,
    EvaluationGate,
    GenerationCost,
    ModelRef,
    Opportunity,
    Outcome,
    Reason,
    ReportArtifact,
    SpendProjection,
    Suite,
    Usage,
    Warning_,
    Workload,
    WorkloadState,
)

DAYS_PER_MONTH = 30
_NOT_CHAT = ("embed", "tts", "whisper", "image", "dall-e", "moderation", "audio", "realtime", "transcribe",
             "search", "rerank", "video", "sora")  # fmt: skip


class Cancelled(Exception):
    """The run was asked to stop; nothing is written."""


@dataclass(frozen=True, slots=True)
class RunSettings:
    days: int = 7
    samples_per_workload: int = 20
    min_samples: int = 10
    candidates: tuple[tuple[str | None, str], ...] = ()  # given to the run: replaces the catalogue's pick
    candidates_per_workload: int = 2
    workload_ids: tuple[str, ...] = ()  # empty: every workload
    concurrency: int = 8

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "samples_per_workload": self.samples_per_workload,
            "min_samples": self.min_samples,
            "candidates": [{"provider": p, "model": m} for p, m in self.candidates],
            "candidates_per_workload": self.candidates_per_workload,
            "workload_ids": list(self.workload_ids),
        }


@dataclass
class Progress:
    phase: str = "queued"
    workloads_total: int = 0
    workloads_done: int = 0
    replays_total: int = 0
    replays_done: int = 0
    replays_failed: int = 0
    # Seconds spent replaying and scoring so far: where a slow run's time goes.
    replay_seconds: float = 0.0
    scoring_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["replay_seconds"] = round(self.replay_seconds, 3)
        out["scoring_seconds"] = round(self.scoring_seconds, 3)
        return out


@dataclass
class RunContext:
    workspace: str
    analysis_id: str
    settings: RunSettings
    now: datetime
    report_progress: Callable[[Progress], None]
    should_stop: Callable[[], bool]
    progress: Progress = field(default_factory=Progress)
    # What the run itself spent on replays (the report's analysis_generation_cost).
    spent_usd: float = 0.0
    spent_input_tokens: int = 0
    spent_output_tokens: int = 0
    replays: int = 0


def catalogue_candidates(
    pricer: Pricer, spec: WorkloadSpec, when: datetime, k: int
) -> list[tuple[str | None, str]]:
    """Up to ``k`` cheaper chat models of the reference's provider in genai-prices, the closest in price
    first (a much cheaper model is a bigger step down in quality)."""
    if spec.model is None or spec.calls == 0:
        return []
    mean_in, mean_out = spec.input_tokens // spec.calls, spec.output_tokens // spec.calls
    reference = pricer.price(spec.provider, spec.model, when, mean_in, mean_out)
    resolved = pricer.resolve(spec.provider, spec.model, when)
    if reference.cost_usd is None or not resolved.found or resolved.provider_id is None:
        return []
    provider = data_snapshot.get_snapshot().find_provider(None, resolved.provider_id, None)
    if provider is None:
        return []
    priced: list[tuple[float, str]] = []
    for model in provider.models:
        name = model.id
        if (
            name == resolved.model_id
            or getattr(model, "deprecated", False)
            or any(w in name for w in _NOT_CHAT)
        ):
            continue
        cost = pricer.price(resolved.provider_id, name, when, mean_in, mean_out).cost_usd
        if cost is not None and 0 < cost < reference.cost_usd:
            priced.append((cost, name))
    priced.sort(reverse=True)
    return [(spec.provider, name) for _, name in priced[:k]]


class AnalysisRunner:
    def __init__(
        self,
        source: WorkloadSource,
        replayer: Replayer,
        pricer: Pricer,
        embedder: Callable[[], Embedder | None],
    ) -> None:
        self.source = source
        self.replayer = replayer
        self.pricer = pricer
        self.embedder = embedder

    def run(self, ctx: RunContext) -> ReportArtifact:
        s = ctx.settings
        until_ms = int(ctx.now.timestamp() * 1000) + 1
        since_ms = until_ms - s.days * 86_400_000
        specs = self.source.workloads(ctx.workspace, since_ms, until_ms)
        if s.workload_ids:
            specs = [w for w in specs if w.workload_id in s.workload_ids]
        plans: list[tuple[WorkloadSpec, list[RetainedCall], list[tuple[str | None, str]]]] = []
        for spec in specs:
            sample = self.source.sample(ctx.workspace, spec, since_ms, until_ms, s.samples_per_workload)
            candidates = list(s.candidates or spec.candidates) or catalogue_candidates(
                self.pricer, spec, ctx.now, s.candidates_per_workload
            )
            candidates = [
                (p if p is not None else spec.provider, m) for p, m in candidates if m != spec.model
            ]
            plans.append((spec, sample, candidates))
        ctx.progress.phase = "replaying"
        ctx.progress.workloads_total = len(plans)
        ctx.progress.replays_total = sum(
            len(sample) * len(cands) for _, sample, cands in plans if len(sample) >= s.min_samples
        )
        ctx.report_progress(ctx.progress)
        workloads = []
        with ThreadPoolExecutor(max_workers=max(1, s.concurrency), thread_name_prefix="analysis") as pool:
            for spec, sample, candidates in plans:
                workloads.append(self._workload(ctx, pool, spec, sample, candidates))
                ctx.progress.workloads_done += 1
                ctx.report_progress(ctx.progress)
        ctx.progress.phase = "writing_report"
        ctx.report_progress(ctx.progress)
        return self._artifact(ctx, workloads)

    # -- one workload ----------------------------------------------------------------------------

    def _workload(
        self,
        ctx: RunContext,
        pool: ThreadPoolExecutor,
        spec: WorkloadSpec,
        sample: list[RetainedCall],
        candidates: list[tuple[str | None, str]],
    ) -> Workload:
        s = ctx.settings
        usage = Usage(
            window_days=s.days, calls=spec.calls, cost_usd=spec.cost_usd,
            input_tokens=spec.input_tokens, output_tokens=spec.output_tokens,
        )  # fmt: skip
        base: dict[str, Any] = {
            "workload_id": spec.workload_id,
            "workload_name": spec.name,
            "route": spec.route,
            "sample_count": len(sample),
            "reference": None if spec.model is None else ModelRef(provider=spec.provider, model=spec.model),
            "usage": usage,
        }
        if len(sample) < s.min_samples:
            message = (
                f"{len(sample)} retained calls in the window; an analysis needs at least {s.min_samples}"
            )
            return Workload(**base, state="ineligible", reason="insufficient_samples",
                            warnings=[Warning_(code="insufficient_samples", message=message)])  # fmt: skip
        if not candidates:
            message = "no cheaper candidate model: declare candidates on the route or pass them to the run"
            return Workload(**base, state="ineligible", reason="no_candidates",
                            warnings=[Warning_(code="no_candidates", message=message)])  # fmt: skip
        references = [c.response_text for c in sample]
        suite = build_suite(references, spec.json_schema)
        embedder = self.embedder()
        began = time.perf_counter()
        reference_vectors = embedder.embed(references) if embedder is not None else None
        ctx.progress.scoring_seconds += time.perf_counter() - began
        results: list[Candidate] = []
        opportunities: list[Opportunity] = []
        cases: list[Case] = []
        for index, (provider, model) in enumerate(candidates):
            candidate_id = f"c{index + 1}"
            began = time.perf_counter()
            replies = self._replay_all(ctx, pool, sample, provider, model)
            ctx.progress.replay_seconds += time.perf_counter() - began
            ctx.replays += len(replies)
            began = time.perf_counter()
            scores = score_cases(suite, references, [r.text for r in replies], embedder, reference_vectors)
            ctx.progress.scoring_seconds += time.perf_counter() - began
            candidate, opportunity, candidate_cases = self._score(
                ctx, spec, suite, sample, replies, scores, candidate_id, provider, model
            )
            results.append(candidate)
            cases.extend(candidate_cases)
            if opportunity is not None:
                opportunities.append(opportunity)
        failed = [c for c in results if c.outcome == "failed"]
        state: WorkloadState = "failed" if len(failed) == len(results) else "partial" if failed else "covered"
        return Workload(
            **base,
            state=state,
            reason="replays_failed" if failed else None,
            suite=suite,
            candidates=results,
            opportunities=opportunities,
            evidence_coverage=Coverage(evaluated=len(cases), published=len(cases), omitted=0),
            evidence=cases,
        )

    def _replay_all(
        self,
        ctx: RunContext,
        pool: ThreadPoolExecutor,
        sample: list[RetainedCall],
        provider: str | None,
        model: str,
    ) -> list[ReplayResult]:
        def one(call: RetainedCall) -> ReplayResult:
            if ctx.should_stop():
                raise Cancelled
            try:
                result = self.replayer.replay(ctx.workspace, call, provider, model)
            except Exception as exc:  # a provider failure is a failed case, never a failed run
                result = ReplayResult(None, 0, 0, 0.0, error_code=type(exc).__name__)
            ctx.progress.replays_done += 1
            if result.text is None:
                ctx.progress.replays_failed += 1
            if ctx.progress.replays_done % 10 == 0:
                ctx.report_progress(ctx.progress)
            return result

        return list(pool.map(one, sample))

    def _score(
        self,
        ctx: RunContext,
        spec: WorkloadSpec,
        suite: Suite,
        sample: list[RetainedCall],
        replies: list[ReplayResult],
        scored_cases: list[CaseScore],
        candidate_id: str,
        provider: str | None,
        model: str,
    ) -> tuple[Candidate, Opportunity | None, list[Case]]:
        gates = {c.check_id for c in suite.checks if gating(c, spec.exact_match)}
        grades = []
        cases = []
        for i, (call, reply, score) in enumerate(zip(sample, replies, scored_cases, strict=True)):
            gated = [score.outcomes[g] for g in gates]
            grade = "error" if reply.text is None else "fail" if "fail" in gated else "pass"
            grades.append(grade)
            cases.append(
                Case(
                    case_id=f"{candidate_id}-{i + 1}",
                    source_call_id=str(call.call_id),
                    candidate_id=candidate_id,
                    question=call.request_text,
                    reference_model=call.model,
                    candidate_model=model,
                    reference_response=call.response_text,
                    candidate_response=reply.text or "",
                    grade=grade,  # type: ignore[arg-type]
                    check_outcomes=score.outcomes,
                    scores=score.scores,
                )
            )
        check_results = []
        for check in suite.checks:
            outcomes = [s.outcomes[check.check_id] for s in scored_cases]
            counts = {k: outcomes.count(k) for k in ("pass", "fail", "error", "skipped")}
            scored = counts["pass"] + counts["fail"]
            values = [s.scores[check.check_id] for s in scored_cases if check.check_id in s.scores]
            failing = [c.case_id for c, o in zip(cases, outcomes, strict=True) if o == "fail"]
            passing = [c.case_id for c, o in zip(cases, outcomes, strict=True) if o == "pass"]
            check_results.append(
                CheckResult(
                    check_id=check.check_id, kind=check.kind,
                    pass_rate=counts["pass"] / scored if scored else None,
                    mean_score=statistics.fmean(values) if values else None,
                    scored=scored, eligible=len(outcomes), counts=counts,  # type: ignore[arg-type]
                    representative_case_ids=(failing + passing)[:REPRESENTATIVE_CASES],
                )
            )  # fmt: skip
        case_counts = CaseCounts(
            eligible=len(sample), scored=sum(g != "error" for g in grades),
            passed=grades.count("pass"), failed=grades.count("fail"), errored=grades.count("error"),
        )  # fmt: skip
        ok = [r for r in replies if r.text is not None]
        if not ok:
            reason = Reason(code="replays_failed", message="every replay on this candidate failed")
            return (
                Candidate(candidate_id=candidate_id, provider=provider, model=model, outcome="failed",
                          reasons=[reason], cases=case_counts, checks=check_results),
                None,
                cases,
            )  # fmt: skip
        reasons = [
            Reason(
                code="check_below_bar",
                message=f"{r.check_id} passed {r.pass_rate:.0%} of scored cases; the bar is {suite.min_pass_rate:.0%}",
                checks=[r.check_id],
            )
            for r in check_results
            if r.check_id in gates and r.pass_rate is not None and r.pass_rate < suite.min_pass_rate
        ]
        accepted = not reasons
        candidate_cost = [
            self.pricer.price(provider, model, ctx.now, r.input_tokens, r.output_tokens).cost_usd for r in ok
        ]
        reference_cost = [
            self.pricer.price(c.provider, c.model, ctx.now, c.input_tokens, c.output_tokens).cost_usd
            for c in sample
        ]
        ctx.spent_usd += sum(c for c in candidate_cost if c is not None)
        ctx.spent_input_tokens += sum(r.input_tokens for r in ok)
        ctx.spent_output_tokens += sum(r.output_tokens for r in ok)
        mean_candidate = _mean(candidate_cost)
        mean_reference = _mean(reference_cost)
        cost_ratio = (
            mean_candidate / mean_reference if mean_candidate is not None and mean_reference else None
        )
        candidate = Candidate(
            candidate_id=candidate_id, provider=provider, model=model,
            outcome="accepted" if accepted else "rejected", reasons=reasons, cases=case_counts, checks=check_results,
            mean_cost_per_call_usd=mean_candidate, reference_cost_per_call_usd=mean_reference,
            cost_ratio=cost_ratio, mean_latency_ms=statistics.fmean(r.latency_ms for r in ok),
        )  # fmt: skip
        if cost_ratio is None or cost_ratio >= 1:
            return candidate, None, cases
        monthly = spec.cost_usd / ctx.settings.days * DAYS_PER_MONTH
        similarity = next((r.mean_score for r in check_results if r.kind == "semantic_similarity"), None)
        opportunity = Opportunity(
            opportunity_id=f"{candidate_id}-swap",
            candidate_ids=[candidate_id],
            recommendation_status="recommended" if accepted else "withheld",
            savings_usd=round(monthly * (1 - cost_ratio), 6),
            quality_vs_reference=similarity,
            safe_switch_rate=case_counts.passed / case_counts.eligible if case_counts.eligible else None,
            cost_ratio=cost_ratio,
            quality_grade_counts={"pass": case_counts.passed, "fail": case_counts.failed, "error": case_counts.errored},
            evaluation_gate=EvaluationGate(
                suite_id=suite.suite_id, suite_revision=suite.revision,
                effect="allowed" if accepted else "withheld", reasons=reasons, cases=case_counts,
            ),
        )  # fmt: skip
        return candidate, opportunity, cases

    # -- the report ------------------------------------------------------------------------------

    def _artifact(self, ctx: RunContext, workloads: list[Workload]) -> ReportArtifact:
        s = ctx.settings
        evaluated = [w for w in workloads if w.state in ("covered", "partial")]
        recommended = [
            o for w in workloads for o in w.opportunities if o.recommendation_status == "recommended"
        ]
        if not evaluated:
            outcome: Outcome = "no_eligible_workloads"
        elif recommended:
            outcome = "opportunities"
        elif len(evaluated) < len(workloads) or any(w.state == "partial" for w in workloads):
            outcome = "partial_coverage"
        else:
            outcome = "no_opportunities"
        current = sum((w.usage.cost_usd if w.usage else 0.0) for w in workloads) / s.days * DAYS_PER_MONTH
        savings = sum(
            max((o.savings_usd or 0.0 for o in w.opportunities if o.recommendation_status == "recommended"),
                default=0.0)
            for w in workloads
        )  # fmt: skip
        return ReportArtifact(
            format="triptych.metergraph.report",
            schema_version=SCHEMA_VERSION,
            analysis_id=ctx.analysis_id,
            title=f"Model-swap analysis of {len(workloads)} workload(s), last {s.days} day(s)",
            pipeline_name="triptych-analysis",
            generated_at=ctx.now.astimezone(UTC).isoformat(),
            outcome=outcome,
            settings=s.as_dict(),
            spend_projection=SpendProjection(
                current_usd=round(current, 6), projected_usd=round(max(current - savings, 0.0), 6),
                savings_usd=round(savings, 6),
            ),
            analysis_generation_cost=GenerationCost(
                usd=round(ctx.spent_usd, 6), replays=ctx.replays, input_tokens=ctx.spent_input_tokens,
                output_tokens=ctx.spent_output_tokens,
            ),
            workloads=workloads,
        )  # fmt: skip


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None
