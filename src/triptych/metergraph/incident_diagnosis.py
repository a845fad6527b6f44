"""An incident's diagnosis: what was judged (window, value, baseline, the detector's numbers and
thresholds) and the evidence that reproduces it (the tool calls for the window's usage aggregates and
traces, and for a provider/model series the routes that carried it). Split from ``incidents.py``
(issue 29).
"""

from __future__ import annotations

from typing import Any

from triptych.metergraph import detectors
from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.detectors import IncidentSettings, Judgement
from triptych.metergraph.incident_grains import DAY_MS, Grain, iso


class IncidentDiagnosis:
    def __init__(self, telemetry: CallStore, settings: IncidentSettings) -> None:
        self.telemetry = telemetry
        self.settings = settings

    def diagnosis(
        self,
        workspace: str,
        grain: Grain,
        named: dict[str, Any],
        judgement: Judgement,
        start: int,
        end: int,
        complete: bool,
        now_ms: int,
    ) -> dict[str, Any]:
        s = self.settings
        thresholds: dict[str, float | int] = {  # type: ignore[assignment]
            detectors.COST_SPIKE: {"ratio": s.cost_ratio, "min_usd": s.cost_min_usd},
            detectors.ERROR_SPIKE: {"ratio": s.error_ratio, "min_delta": s.error_rate_delta, "min_calls": s.min_calls},
            detectors.LATENCY_REGRESSION: {"ratio": s.latency_ratio, "min_ms": s.latency_min_ms,
                                           "min_calls": s.min_calls},
            detectors.UNPRICED_MODEL: {"min_unpriced_calls": 1},
        }[judgement.kind]  # fmt: skip
        return {
            "kind": judgement.kind,
            "grain": grain.name,
            "window": {"start": iso(start), "end": iso(end), "complete": complete,
                       "width_seconds": grain.width_ms // 1000},
            "value": judgement.value,
            "baseline": judgement.baseline,
            "baseline_windows": grain.baseline(s),
            "numbers": judgement.numbers,
            "thresholds": {**thresholds, "clear_fraction": s.clear_fraction, "resolve_windows": s.resolve_windows},
            "evidence": self.evidence(grain, named, judgement.kind, start, end, now_ms,
                                       self.routes_of(workspace, grain, named, start)),
        }  # fmt: skip

    def routes_of(
        self, workspace: str, grain: Grain, named: dict[str, Any], start: int
    ) -> list[dict[str, Any]]:
        """For a provider/model series: the routes that carried it on the window's UTC day, busiest first
        (at most five), so the trace evidence can point at them."""
        if grain.name != "model" or named["provider"] is None or named["model"] is None:
            return []
        env = named["environment"]
        f = CallFilter(workspace, 0, 0, providers=[named["provider"]], models=[named["model"]],
                       environments=[env] if env is not None else None)  # fmt: skip
        day = start // DAY_MS
        rows = self.telemetry.aggregate_rollups("rollup_daily", f, day, day + 1, ("route",), 1)
        ranked = sorted(
            ((key[0], row) for key, row in rows.items() if key[0] is not None),
            key=lambda item: (-float(item[1].sums[detectors.CALLS]), item[0]),
        )
        return [
            {
                "route": route,
                "day_calls": int(row.sums[detectors.CALLS]),
                "day_errors": int(row.sums[detectors.ERRORS]),
            }
            for route, row in ranked[:5]
        ]

    @staticmethod
    def evidence(
        grain: Grain,
        named: dict[str, Any],
        kind: str,
        start: int,
        end: int,
        now_ms: int,
        routes: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """Tool calls that reproduce the window's numbers (usage aggregates) and list its traces (on the
        series' busiest route, for a provider/model series: trace queries filter by route, not model)."""
        env = named.get("environment")
        aggregates: dict[str, Any] = {
            "since": iso(start),
            "until": iso(end),
            "group_by": list(grain.dims[:-1]),
        }
        traces: dict[str, Any] = {
            "days": max(1, min(90, now_ms // DAY_MS - start // DAY_MS + 1)),
            "limit": 50,
        }
        for dim in grain.dims[:-1]:
            if named.get(dim) is not None:
                aggregates[dim] = [named[dim]]
        if named.get("route") is not None:
            traces["route"] = named["route"]
        elif routes:
            traces["route"] = routes[0]["route"]
        if env is not None:
            aggregates["environment"] = [env]
            traces["environment"] = [env]
        if kind == detectors.ERROR_SPIKE:
            traces["status"] = "error"
        # The aggregates filters cannot select an untagged environment or an unknown provider/model: the
        # numbers they return then cover more than the series.
        exact = all(named.get(dim) is not None for dim in grain.dims)
        evidence: dict[str, Any] = {
            "usage": {"tool": "metergraph_get_usage_aggregates", "arguments": aggregates, "exact": exact},
            "traces": {"tool": "metergraph_query_traces", "arguments": traces},
        }
        if grain.name == "model":
            evidence["routes"] = routes
        return evidence
