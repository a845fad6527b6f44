"""The rollup detectors of Metergraph's incidents: each noted workspace's series read from the rollups
(never the raw calls) window by window, each window judged against its trailing baseline, and the
series' open incident opened, updated or resolved. Complete windows are read once and kept between
sweeps (``Windows``), so a sweep's cost follows the new data, not the baseline's length. Split from
``incidents.py`` (issue 29); ``IncidentService.sweep`` calls ``RollupDetectors.sweep`` per grain.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from triptych.metergraph import detectors
from triptych.metergraph.call_model import AggRow, CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.detectors import IncidentSettings, Judgement
from triptych.metergraph.incident_diagnosis import IncidentDiagnosis
from triptych.metergraph.incident_grains import DAY_MS, Grain, incident_id, label
from triptych.metergraph.incident_store import Incident, IncidentStore

# Workspace/grain window sets kept between sweeps (the least recently swept are dropped beyond this).
CACHED_SERIES_SETS = 256


@dataclass
class Windows:
    """One workspace's series at one grain: window -> rollup sums, and the baselines pooled so far."""

    low: int
    read_from: int
    read_at: float = 0.0  # time.monotonic() of the last read
    series: dict[tuple[Any, ...], dict[int, AggRow]] = field(default_factory=dict)
    baselines: dict[tuple[tuple[Any, ...], int], detectors.Baseline] = field(default_factory=dict)


class RollupDetectors:
    def __init__(self, telemetry: CallStore, incidents: IncidentStore, settings: IncidentSettings) -> None:
        self.telemetry = telemetry
        self.store = incidents
        self.settings = settings
        self.diagnosis = IncidentDiagnosis(telemetry, settings)
        self._cache: dict[tuple[str, str], Windows] = {}

    def sweep(self, workspace: str, grain: Grain, newest_ms: int, now_ms: int, forced: bool) -> bool:
        """Judge the grain's new windows; False when deferred (a window still filling was read less than
        the grain's refresh interval ago, and no window completed since: a read forces it)."""
        s = self.settings
        width = grain.width_ms
        stored = self.store.cursor(workspace, grain.name)
        anchor = newest_ms // width
        if stored is not None:
            anchor = max(anchor, stored[0])
            first = stored[1] + 1
        else:
            first = anchor - 1
        cached = self._cache.get((workspace, grain.name))
        refresh = s.route_refresh_seconds if grain.width_ms == DAY_MS else 0.0
        if (
            not forced
            and cached is not None
            and cached.read_from == anchor
            and time.monotonic() - cached.read_at < refresh
        ):
            return False
        first = max(first, anchor - s.max_catchup_windows)
        span = grain.baseline(s)
        open_now = {(i.kind, i.series): i for i in self.store.open_incidents(workspace, grain.name)}
        # An open incident's baseline stays the windows before it opened: the anomaly never becomes the norm.
        oldest = min([first, *(i.window_start_ms // width for i in open_now.values())])
        cache = self._windows(workspace, grain, oldest - span, anchor)
        series = cache.series
        for incident in open_now.values():
            series.setdefault(tuple(json.loads(incident.series)), {})
        changed: dict[str, Incident] = {}
        created: set[str] = set()
        for bucket in range(first, anchor + 1):
            complete = bucket < anchor
            open_series = {series_key for _, series_key in open_now}
            for key, windows in series.items():
                series_key = json.dumps(list(key))
                if bucket not in windows and series_key not in open_series:
                    continue  # an empty window opens nothing: most series are quiet in most windows
                named = dict(zip(grain.dims, key, strict=True))
                judged: dict[int, dict[str, Judgement]] = {}  # by the window the baseline ends before
                for kind in detectors.KINDS:
                    current = open_now.get((kind, series_key))
                    before = bucket if current is None else min(bucket, current.window_start_ms // width)
                    if before not in judged:
                        judged[before] = self._judge(cache, key, bucket, before, span, grain.pricing)
                    judgement = judged[before].get(kind)
                    if judgement is None and current is None:
                        continue
                    updated = self._advance(
                        workspace, grain, series_key, named, bucket, complete, judgement, current, now_ms,
                        kind, windows.get(bucket),
                    )  # fmt: skip
                    if updated is None:
                        continue
                    if current is None:
                        created.add(updated.id)
                    changed[updated.id] = updated
                    if updated.status == "open":
                        open_now[(kind, series_key)] = updated
                    else:
                        open_now.pop((kind, series_key), None)
        self.store.save(workspace, grain.name, (anchor, anchor - 1), list(changed.values()), created)
        return True

    def _windows(self, workspace: str, grain: Grain, low: int, anchor: int) -> Windows:
        """The series' windows from ``low`` to ``anchor``. Complete windows are read once and kept; each
        sweep reads only from the previous anchor (then still filling) on, so its cost follows the new
        data, not the baseline's length. Calls arriving late for a window already complete are counted by
        the rollups but not judged again."""
        key = (workspace, grain.name)
        cache = self._cache.pop(key, None)
        if cache is None or cache.low > low:
            cache = Windows(low, low)
        rows = self.telemetry.aggregate_rollups(
            grain.table, CallFilter(workspace, 0, 0), cache.read_from, anchor + 1, ("day", *grain.dims), 1
        )
        for windows in cache.series.values():
            for bucket in [b for b in windows if b >= cache.read_from or b < low]:
                del windows[bucket]
        for row_key, row in rows.items():
            if grain.name == "route" and row_key[1] is None:
                continue  # unrouted calls have no route series
            cache.series.setdefault(tuple(row_key[1:]), {})[int(row_key[0])] = row
        cache.baselines = {
            k: v for k, v in cache.baselines.items() if k[1] - grain.baseline(self.settings) >= low
        }
        cache.low, cache.read_from, cache.read_at = low, max(cache.read_from, anchor), time.monotonic()
        self._cache[key] = cache  # most recently swept last: the oldest go first when over the bound
        while len(self._cache) > CACHED_SERIES_SETS:
            self._cache.pop(next(iter(self._cache)))
        return cache

    def _judge(
        self, cache: Windows, key: tuple[Any, ...], bucket: int, before: int, span: int, pricing: bool
    ) -> dict[str, Judgement]:
        """Every detector's verdict on ``bucket`` against the ``span`` windows with calls before ``before``
        (complete windows: their pooled baseline is computed once per series)."""
        windows = cache.series[key]
        base = cache.baselines.get((key, before))
        if base is None:
            rows = [
                windows[b]
                for b in range(before - span, before)
                if b in windows and windows[b].sums[detectors.CALLS] > 0
            ]
            base = cache.baselines[(key, before)] = detectors.Baseline.of(rows)
        return {j.kind: j for j in detectors.judge(windows.get(bucket), base, self.settings, pricing)}

    def _advance(
        self,
        workspace: str,
        grain: Grain,
        series_key: str,
        named: dict[str, Any],
        bucket: int,
        complete: bool,
        judgement: Judgement | None,
        current: Incident | None,
        now_ms: int,
        kind: str,
        window: AggRow | None,
    ) -> Incident | None:
        """One window's verdict applied to the series' open incident (or none): the changed incident."""
        if judgement is None:
            # The detector had nothing to judge (no baseline left): an empty window still counts as clear.
            empty = window is None or window.sums[detectors.CALLS] == 0
            verdict = "clear" if empty else "hold"
        else:
            verdict = judgement.verdict
        start, end = bucket * grain.width_ms, (bucket + 1) * grain.width_ms
        if current is None:
            if verdict != "trigger" or judgement is None:
                return None
            ident = incident_id(workspace, kind, grain.name, series_key, bucket)
            return Incident(
                ident, workspace, kind, grain.name, series_key, named.get("route"), named.get("provider"),
                named.get("model"), named.get("environment"), "open", judgement.severity,
                f"{judgement.title} on {label(grain, named)}", start, end, now_ms, now_ms, None, 1, 1, 0,
                bucket, self.diagnosis.diagnosis(workspace, grain, named, judgement, start, end, complete, now_ms),
            )  # fmt: skip
        if verdict == "trigger" and judgement is not None:
            current.occurrences += current.last_trigger_bucket != bucket
            current.last_trigger_bucket = bucket
            current.window_end_ms = max(current.window_end_ms, end)
            current.last_seen_ms = now_ms
            current.clear_windows = 0
            if judgement.severity == "critical":
                current.severity = "critical"
            current.diagnosis = self.diagnosis.diagnosis(
                workspace, grain, named, judgement, start, end, complete, now_ms
            )
            current.generation += 1
            return current
        if not complete:
            return None  # a window still filling never counts towards resolving
        if verdict == "hold":
            if current.clear_windows == 0:
                return None
            current.clear_windows = 0
        else:
            current.clear_windows += 1
            if current.clear_windows >= self.settings.resolve_windows:
                current.status = "resolved"
                current.resolved_ms = now_ms
        current.generation += 1
        return current
