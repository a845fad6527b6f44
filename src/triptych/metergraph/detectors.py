"""Incident detectors: thresholds (``MG_INCIDENT_*``) and the pure rules that judge one window of a series
against its trailing baseline.

A detector answers ``trigger`` (the window is anomalous), ``clear`` (back at baseline) or ``hold`` (in the
hysteresis band between the two, or too little data to tell). ``incidents.py`` turns those verdicts into
incidents that open once, update while they last and resolve after enough clear windows in a row.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from triptych.metergraph import histogram
from triptych.metergraph.call_model import SUMS, AggRow

Verdict = Literal["trigger", "clear", "hold"]
# Positions of the measures the detectors read in a rollup row's sums (``AggRow.get`` looks them up).
CALLS, COST, ERRORS, TIMED, UNPRICED = (
    SUMS.index(name) for name in ("calls", "cost_usd", "errors", "latency_count", "unpriced")
)

COST_SPIKE = "cost_spike"
ERROR_SPIKE = "error_rate_spike"
LATENCY_REGRESSION = "latency_p95_regression"
UNPRICED_MODEL = "unpriced_model"
INGESTION_FAILURE = "ingestion_failure"
KINDS = (COST_SPIKE, ERROR_SPIKE, LATENCY_REGRESSION, UNPRICED_MODEL, INGESTION_FAILURE)


def _env(name: str) -> AliasChoices:
    return AliasChoices(f"MG_INCIDENT_{name.upper()}", name)


class IncidentSettings(BaseSettings):
    """Detector thresholds; each is documented in docs/metergraph.md ("Incidents")."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    enabled: bool = Field(True, validation_alias=AliasChoices("MG_INCIDENTS_ENABLED", "enabled"))
    # Seconds between background sweeps of the workspaces that received calls.
    tick_seconds: float = Field(5.0, gt=0, validation_alias=_env("tick_seconds"))
    # Trailing baseline, in windows of the grain (hours for provider/model series, days for routes).
    baseline_hours: int = Field(24, ge=2, le=168, validation_alias=_env("baseline_hours"))
    baseline_days: int = Field(7, ge=2, le=28, validation_alias=_env("baseline_days"))
    # A baseline needs this many windows with calls before cost is judged against it.
    min_baseline_windows: int = Field(3, ge=1, validation_alias=_env("min_baseline_windows"))
    # Calls a window (and its baseline) needs before its error rate or p95 is judged.
    min_calls: int = Field(20, ge=1, validation_alias=_env("min_calls"))
    cost_ratio: float = Field(3.0, gt=1, validation_alias=_env("cost_ratio"))
    cost_min_usd: float = Field(1.0, ge=0, validation_alias=_env("cost_min_usd"))
    error_rate_delta: float = Field(0.2, gt=0, le=1, validation_alias=_env("error_rate_delta"))
    error_ratio: float = Field(2.0, gt=1, validation_alias=_env("error_ratio"))
    latency_ratio: float = Field(1.5, gt=1, validation_alias=_env("latency_ratio"))
    latency_min_ms: float = Field(100.0, ge=0, validation_alias=_env("latency_min_ms"))
    # Hysteresis: a signal clears once its excess over baseline falls below this share of the excess that
    # opens an incident, and the incident resolves after ``resolve_windows`` complete clear windows in a row.
    clear_fraction: float = Field(0.5, ge=0, lt=1, validation_alias=_env("clear_fraction"))
    resolve_windows: int = Field(2, ge=1, validation_alias=_env("resolve_windows"))
    # Failed ingestion: at least ``ingest_failures`` of the last ``ingest_batches`` batches refused; resolved
    # after ``ingest_resolve_batches`` accepted batches in a row.
    ingest_batches: int = Field(20, ge=2, le=1000, validation_alias=_env("ingest_batches"))
    ingest_failures: int = Field(3, ge=1, validation_alias=_env("ingest_failures"))
    ingest_resolve_batches: int = Field(3, ge=1, validation_alias=_env("ingest_resolve_batches"))
    # A route/day window still filling is re-read by background sweeps at most this often (a day's
    # route rollup is the largest read a sweep makes); a read of the incidents always re-reads it.
    route_refresh_seconds: float = Field(60.0, ge=0, validation_alias=_env("route_refresh_seconds"))
    # Windows a sweep catches up on after a gap (older ones are skipped, never reopened).
    max_catchup_windows: int = Field(48, ge=1, validation_alias=_env("max_catchup_windows"))


def load_incident_settings(**overrides: Any) -> IncidentSettings:
    return IncidentSettings(**{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True, slots=True)
class Judgement:
    kind: str
    verdict: Verdict
    severity: str  # warning | critical
    value: float | None
    baseline: float | None
    numbers: dict[str, float | int | None]
    title: str


def _band(value: float, base: float, ratio: float, floor: float, clear_fraction: float) -> Verdict:
    """Trigger at ``ratio`` times the baseline and ``floor`` above it; clear once the excess is below
    ``clear_fraction`` of that; hold in between."""
    if value >= base * ratio and value - base >= floor:
        return "trigger"
    if value <= base * (1 + (ratio - 1) * clear_fraction) or value - base < floor * clear_fraction:
        return "clear"
    return "hold"


def _calls(row: AggRow | None) -> int:
    return int(row.sums[CALLS]) if row is not None else 0


@dataclass(frozen=True, slots=True)
class Baseline:
    """A series' trailing windows with calls, pooled: how many, the median spend, the summed measures and
    the merged latency histogram."""

    windows: int
    median_cost: float
    pooled: AggRow

    @classmethod
    def of(cls, rows: Sequence[AggRow]) -> Baseline:
        pooled = AggRow(())
        if rows:
            pooled.sums = np.sum([r.sums for r in rows], axis=0)
            pooled.hist = np.sum([r.hist for r in rows], axis=0, dtype=histogram.DTYPE)
        median = statistics.median(float(r.sums[COST]) for r in rows) if rows else 0.0
        return cls(len(rows), median, pooled)


def judge(window: AggRow | None, base: Baseline, s: IncidentSettings, with_pricing: bool) -> list[Judgement]:
    """Every detector's verdict on one window of a series, given its baseline."""
    out: list[Judgement] = []
    calls = _calls(window)
    pooled = base.pooled
    base_calls = _calls(pooled)

    # Cost: the window's spend against the median spend of the baseline windows that had calls.
    cost = float(window.sums[COST]) if window is not None else 0.0
    if base.windows >= s.min_baseline_windows:
        base_cost = base.median_cost
        verdict = _band(cost, base_cost, s.cost_ratio, s.cost_min_usd, s.clear_fraction)
        severe = cost >= base_cost * s.cost_ratio * 3 and cost - base_cost >= s.cost_min_usd * 3
        out.append(Judgement(
            COST_SPIKE, verdict, "critical" if severe else "warning", round(cost, 6), round(base_cost, 6),
            {"window_cost_usd": round(cost, 6), "baseline_cost_usd": round(base_cost, 6), "window_calls": calls,
             "baseline_windows": base.windows},
            "Cost spike",
        ))  # fmt: skip

    enough = base.windows >= s.min_baseline_windows
    # Error rate: pooled over the baseline, judged only with enough calls on both sides.
    if enough and base_calls >= s.min_calls:
        base_rate = float(pooled.sums[ERRORS]) / base_calls
        if calls >= s.min_calls and window is not None:
            rate = float(window.sums[ERRORS]) / calls
            verdict = _band(rate, base_rate, s.error_ratio, s.error_rate_delta, s.clear_fraction)
            numbers: dict[str, float | int | None] = {
                "window_error_rate": round(rate, 4), "baseline_error_rate": round(base_rate, 4),
                "window_errors": int(window.sums[ERRORS]), "window_calls": calls, "baseline_calls": base_calls,
            }  # fmt: skip
            severity = "critical" if rate >= 0.5 else "warning"
            out.append(Judgement(ERROR_SPIKE, verdict, severity, round(rate, 4), round(base_rate, 4), numbers,
                                 "Error-rate spike"))  # fmt: skip
        else:
            out.append(Judgement(ERROR_SPIKE, "clear" if calls == 0 else "hold", "warning", None,
                                 round(base_rate, 4), {"window_calls": calls}, "Error-rate spike"))  # fmt: skip

    # p95 latency from the merged histograms (never a maximum of per-window values).
    timed = int(pooled.sums[TIMED])
    if enough and timed >= s.min_calls:
        base_p95 = histogram.quantile(pooled.hist, 0.95)
        window_timed = int(window.sums[TIMED]) if window is not None else 0
        if window is not None and window_timed >= s.min_calls and base_p95 is not None:
            p95 = histogram.quantile(window.hist, 0.95) or 0
            verdict = _band(p95, base_p95, s.latency_ratio, s.latency_min_ms, s.clear_fraction)
            severe = p95 >= base_p95 * max(3.0, s.latency_ratio)
            out.append(Judgement(
                LATENCY_REGRESSION, verdict, "critical" if severe else "warning", p95, base_p95,
                {"window_p95_latency_ms": p95, "baseline_p95_latency_ms": base_p95, "window_calls": window_timed,
                 "baseline_calls": timed},
                "p95 latency regression",
            ))  # fmt: skip
        else:
            out.append(Judgement(LATENCY_REGRESSION, "clear" if window_timed == 0 else "hold", "warning", None,
                                 base_p95, {"window_calls": window_timed}, "p95 latency regression"))  # fmt: skip

    # A model without a price: any unpriced call in the window.
    if with_pricing:
        unpriced = int(window.sums[UNPRICED]) if window is not None else 0
        out.append(Judgement(
            UNPRICED_MODEL, "trigger" if unpriced else "clear", "warning", unpriced,
            int(pooled.sums[UNPRICED]),
            {"window_unpriced_calls": unpriced, "window_calls": calls,
             "baseline_unpriced_calls": int(pooled.sums[UNPRICED])},
            "Model without a price",
        ))  # fmt: skip
    return out


def judge_batches(statuses: Sequence[str], s: IncidentSettings) -> Verdict:
    """Failed ingestion over the newest batches first: enough refusals open, a run of successes clears."""
    recent = list(statuses[: s.ingest_batches])
    if sum(status == "failed" for status in recent) >= s.ingest_failures and recent[0] == "failed":
        return "trigger"
    head = recent[: s.ingest_resolve_batches]
    if len(head) >= s.ingest_resolve_batches and all(status == "processed" for status in head):
        return "clear"
    return "hold"
