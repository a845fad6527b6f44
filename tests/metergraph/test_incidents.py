"""Incident rules underneath the tool: detector verdicts and their hysteresis band, thresholds from the
environment, failed-ingestion runs, frozen baselines, and workspace isolation, on a real SQLite store with
a movable clock."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mg_support import NOW, agent, app, engine_settings

from triptych.metergraph import histogram
from triptych.metergraph.call_model import SUMS, AggRow
from triptych.metergraph.detectors import (
    COST_SPIKE,
    ERROR_SPIKE,
    Baseline,
    IncidentSettings,
    judge,
    judge_batches,
    load_incident_settings,
)
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

ZERO = NOW - timedelta(hours=40)


def window(calls: int, errors: int = 0, cost: float = 1.0, latency: float = 500.0) -> AggRow:
    sums = np.zeros(len(SUMS))
    for name, value in (("calls", calls), ("errors", errors), ("cost_usd", cost), ("latency_count", calls)):
        sums[SUMS.index(name)] = value
    hist = histogram.empty()
    bucket = histogram.bucket_of(latency)
    assert bucket is not None
    hist[bucket] = calls
    return AggRow((), sums, hist)


def verdicts(current: AggRow, baseline: list[AggRow], s: IncidentSettings) -> dict[str, str]:
    return {j.kind: j.verdict for j in judge(current, Baseline.of(baseline), s, with_pricing=False)}


def test_cost_opens_above_the_ratio_holds_in_the_band_and_clears_below_it() -> None:
    s = load_incident_settings(cost_min_usd=0.5)
    base = [window(30, cost=1.0)] * 5
    assert verdicts(window(30, cost=3.5), base, s)[COST_SPIKE] == "trigger"
    assert verdicts(window(30, cost=2.5), base, s)[COST_SPIKE] == "hold"
    assert verdicts(window(30, cost=1.8), base, s)[COST_SPIKE] == "clear"
    # Too small an absolute excess never opens, however large the ratio.
    assert verdicts(window(30, cost=0.4), [window(30, cost=0.1)] * 5, s)[COST_SPIKE] != "trigger"


def test_detectors_wait_for_enough_baseline_and_calls() -> None:
    s = load_incident_settings()
    assert verdicts(window(30, errors=30), [window(30)] * 2, s) == {}
    few = verdicts(window(5, errors=5), [window(30)] * 5, s)
    assert few[ERROR_SPIKE] == "hold"


def test_failed_ingestion_needs_repeated_refusals_and_a_run_of_good_batches() -> None:
    s = load_incident_settings()
    assert judge_batches(["failed", "processed", "failed", "failed"], s) == "trigger"
    assert judge_batches(["failed", "failed"], s) == "hold"
    assert judge_batches(["processed", "processed", "failed", "failed", "failed"], s) == "hold"
    assert judge_batches(["processed"] * 3 + ["failed"] * 3, s) == "clear"


def test_thresholds_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MG_INCIDENT_COST_RATIO", "5")
    monkeypatch.setenv("MG_INCIDENTS_ENABLED", "false")
    s = load_incident_settings()
    assert (s.cost_ratio, s.enabled) == (5.0, False)
    with pytest.raises(ValueError):
        load_incident_settings(cost_ratio=1.0)


class Clocked:
    def __init__(self, tmp_path: Path, engine: dict[str, Any] | None = None, **settings: Any) -> None:
        self.now = ZERO
        self.mg = Metergraph.open(
            tmp_path, load_metergraph_settings(**(engine or {})), clock=lambda: self.now,
            incident_settings=load_incident_settings(cost_min_usd=0.5, **settings),
        )  # fmt: skip

    def hour(self, h: int, workspace: str = "w1", n: int = 30, **fields: Any) -> None:
        self.hours([h], workspace, n, **fields)

    def hours(self, hours: Sequence[int], workspace: str = "w1", n: int = 30, **fields: Any) -> None:
        """``hour`` for each of ``hours`` in one batch: what a run of hours without a sweep between them
        leaves to judge is the same whichever way it arrived (the noted newest call, the stored calls),
        and a batch per hour cost an insert each (a fifth of a second on ClickHouse)."""
        rows = []
        for h in hours:
            start = ZERO + timedelta(hours=h)
            rows += [{"ts": (start + timedelta(minutes=i)).isoformat(), "route": "support", "provider": "openai",
                      "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 100, "latency_ms": 500,
                      "environment": "prod", **fields} for i in range(n)]  # fmt: skip
            self.now = max(self.now, start + timedelta(minutes=n + 1))
        self.mg.ingest.ingest_document(app(workspace), {"rows": rows})

    def incidents(self, workspace: str = "w1", **kw: Any) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = self.mg.incidents.list(agent(workspace, **kw), 200)["incidents"]
        return listed


@pytest.fixture
def clocked(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[Clocked]:
    world = Clocked(tmp_path, engine_settings(request, engine))
    yield world
    world.mg.close()


def test_an_open_incident_keeps_its_baseline_so_a_long_episode_does_not_resolve_itself(
    clocked: Clocked,
) -> None:
    clocked.hours(range(24))
    for h in range(24, 40):  # sixteen expensive hours, swept as they arrive: two thirds of a baseline day
        clocked.hour(h, input_tokens=60_000)
        clocked.mg.incidents.sweep()
    [incident] = [i for i in clocked.incidents() if i["detector_key"] == COST_SPIKE and i["grain"] == "model"]
    assert (incident["status"], incident["occurrences"]) == ("open", 16)


def test_the_ticker_sweeps_in_the_background_and_workspaces_stay_apart(tmp_path: Path) -> None:
    world = Clocked(tmp_path, tick_seconds=0.05)
    try:
        world.hours(range(24))
        world.hour(24, input_tokens=60_000)
        world.mg.incidents.start()
        deadline = datetime.now() + timedelta(seconds=10)
        while world.mg.incidents.store.for_workspace("w1") == [] and datetime.now() < deadline:
            world.mg.incidents._stop.wait(0.05)
        assert [i.kind for i in world.mg.incidents.store.for_workspace("w1")]
        assert world.incidents("w2") == []
        assert world.incidents("w1", environments=("staging",)) == []
        assert {i["environment"] for i in world.incidents("w1", environments=("prod",))} == {"prod"}
    finally:
        world.mg.close()


def test_disabled_detectors_note_nothing(tmp_path: Path) -> None:
    world = Clocked(tmp_path, enabled=False)
    try:
        world.hours(range(24))
        world.hour(24, input_tokens=60_000)
        assert world.incidents() == []
    finally:
        world.mg.close()


def test_background_sweeps_defer_a_filling_day_window_until_its_refresh_but_reads_never_wait(
    clocked: Clocked,
) -> None:
    clocked.hour(0)
    clocked.mg.incidents.sweep()  # background: reads the route/day window still filling
    clocked.hour(1)
    clocked.mg.incidents.sweep()  # same day, read a moment ago: deferred, the workspace stays noted
    assert "w1" in clocked.mg.incidents._dirty
    clocked.incidents()  # a read sweeps everything now
    assert "w1" not in clocked.mg.incidents._dirty


def test_resolved_incidents_are_pruned_after_the_longest_window_and_open_ones_stay(clocked: Clocked) -> None:
    for h in range(24):
        clocked.hour(h)
        clocked.mg.incidents.sweep()
    for h, tokens in ((24, 60_000), (25, 1000), (26, 1000), (27, 1000), (28, 60_000)):
        clocked.hour(h, input_tokens=tokens)
        clocked.mg.incidents.sweep()
    costs = [i for i in clocked.incidents() if i["detector_key"] == COST_SPIKE and i["grain"] == "model"]
    assert [i["status"] for i in costs] == ["open", "resolved"]
    store = clocked.mg.incidents.store
    assert store.counts("w1", None)[1] >= 1
    store.prune(int((clocked.now + timedelta(days=1)).timestamp() * 1000))
    assert [i.status for i in store.for_workspace("w1")] == ["open"] * len(store.for_workspace("w1"))
    assert store.for_workspace("w1", ["staging"]) == []
