"""Incidents: detectors swept over the rollups, and ``metergraph_list_incidents``.

Ingest only notes which workspaces received calls (and the newest call time); a background ticker, and a
read of the workspace's incidents, sweep those workspaces. A sweep reads the existing rollups, never the raw
calls: provider/model/environment series hour by hour (``rollup_hourly_coarse``) and route/environment
series day by day (``rollup_daily``), each window against its trailing baseline, plus the newest ingest
batches for failed ingestion. So a detector costs ingest a dictionary update per batch.

Windows follow event time: the newest call seen (never ahead of the clock) anchors the current window,
which is judged as it fills (it may open or update an incident); each complete window is judged once (only
complete windows count towards resolving). An incident opens once per episode, updates while its signal
lasts, and resolves after ``resolve_windows`` complete windows back at baseline (``detectors.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from triptych.metergraph import detectors
from triptych.metergraph.call_model import AggRow, CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.contract import MAX_DAYS, envelope, warning
from triptych.metergraph.detectors import IncidentSettings, Judgement
from triptych.metergraph.incident_store import Incident, IncidentStore
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.metadata_store import MetadataStore

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
DB_FILE = "metergraph-incidents.db"


@dataclass(frozen=True, slots=True)
class Grain:
    name: str
    table: str
    width_ms: int
    dims: tuple[str, ...]
    pricing: bool

    def baseline(self, s: IncidentSettings) -> int:
        return s.baseline_hours if self.width_ms == HOUR_MS else s.baseline_days


GRAINS = (
    Grain("model", "rollup_hourly_coarse", HOUR_MS, ("provider", "model", "environment"), True),
    Grain("route", "rollup_daily", DAY_MS, ("route", "environment"), False),
)
INGEST_GRAIN = "ingest"


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def incident_id(workspace: str, kind: str, grain: str, series: str, opened_bucket: int) -> str:
    """Stable: the same episode gets the same id on every worker."""
    digest = hashlib.sha256(f"{workspace}\x00{kind}\x00{grain}\x00{series}\x00{opened_bucket}".encode())
    return "inc_" + digest.hexdigest()[:24]


def _label(grain: Grain, key: dict[str, str | None]) -> str:
    if grain.name == "model":
        name = f"{key['provider'] or '(unknown)'}/{key['model'] or '(unknown)'}"
    else:
        name = f"route {key['route']}"
    return name + (f" ({key['environment']})" if key["environment"] else "")


# Workspace/grain window sets kept between sweeps (the least recently swept are dropped beyond this).
CACHED_SERIES_SETS = 256


@dataclass
class _Windows:
    """One workspace's series at one grain: window -> rollup sums, and the baselines pooled so far."""

    low: int
    read_from: int
    read_at: float = 0.0  # time.monotonic() of the last read
    series: dict[tuple[Any, ...], dict[int, AggRow]] = field(default_factory=dict)
    baselines: dict[tuple[tuple[Any, ...], int], detectors.Baseline] = field(default_factory=dict)


class IncidentService:
    def __init__(
        self,
        store: CallStore,
        incidents: IncidentStore,
        settings: IncidentSettings,
        clock: Callable[[], datetime],
        metadata: MetadataStore,
    ) -> None:
        self.telemetry = store
        self.metadata = metadata  # the ingest batch records
        self.store = incidents
        self.settings = settings
        self.clock = clock
        self._dirty: dict[str, int | None] = {}  # workspace -> newest call time seen (ms), if any
        self._dirty_lock = threading.Lock()
        self._sweep_lock = threading.Lock()
        self._stop = threading.Event()
        self._cache: dict[tuple[str, str], _Windows] = {}
        self._pruned_at = float("-inf")
        self._thread: threading.Thread | None = None

    # -- what ingest tells us --------------------------------------------------------------------

    def note_batch(self, workspace: str, newest_ms: int | None) -> None:
        if not self.settings.enabled:
            return
        with self._dirty_lock:
            seen = self._dirty.get(workspace)
            self._dirty[workspace] = newest_ms if seen is None else max(seen, newest_ms or seen)

    def note_failure(self, workspace: str) -> None:
        if not self.settings.enabled:
            return
        with self._dirty_lock:
            self._dirty.setdefault(workspace, None)

    # -- sweeping ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Sweep the noted workspaces every ``tick_seconds`` in a background thread (the server)."""
        if self._thread is None and self.settings.enabled:
            self._thread = threading.Thread(target=self._run, name="metergraph-incidents", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.tick_seconds):
            self.sweep()
            if time.monotonic() - self._pruned_at > 3600:
                self._pruned_at = time.monotonic()
                self.store.prune(int(self.clock().timestamp() * 1000) - MAX_DAYS * DAY_MS)

    def close(self) -> None:
        """Stops the ticker; the store is closed by its owner (``ControlStores``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def sweep(self, workspace: str | None = None) -> None:
        """Judge the noted workspaces (or just ``workspace``, when it is noted)."""
        with self._dirty_lock:
            if workspace is None:
                todo, self._dirty = self._dirty, {}
            elif workspace in self._dirty:
                todo = {workspace: self._dirty.pop(workspace)}
            else:
                return
        with self._sweep_lock:
            for name, newest_ms in todo.items():
                now_ms = int(self.clock().timestamp() * 1000)
                try:
                    if newest_ms is not None:
                        for grain in GRAINS:
                            if not self._sweep_grain(
                                name, grain, min(newest_ms, now_ms), now_ms, workspace is not None
                            ):
                                self.note_batch(name, newest_ms)  # deferred: judged at a later sweep
                    self._sweep_ingest(name, now_ms)
                except Exception:
                    # Noted again for the next sweep; a read still lists what is stored, and ingest never
                    # sees a detector fail.
                    log.exception("metergraph incidents: sweeping %s failed", name)
                    if newest_ms is None:
                        self.note_failure(name)
                    else:
                        self.note_batch(name, newest_ms)

    def _sweep_grain(self, workspace: str, grain: Grain, newest_ms: int, now_ms: int, forced: bool) -> bool:
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

    def _windows(self, workspace: str, grain: Grain, low: int, anchor: int) -> _Windows:
        """The series' windows from ``low`` to ``anchor``. Complete windows are read once and kept; each
        sweep reads only from the previous anchor (then still filling) on, so its cost follows the new
        data, not the baseline's length. Calls arriving late for a window already complete are counted by
        the rollups but not judged again."""
        key = (workspace, grain.name)
        cache = self._cache.pop(key, None)
        if cache is None or cache.low > low:
            cache = _Windows(low, low)
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
        self, cache: _Windows, key: tuple[Any, ...], bucket: int, before: int, span: int, pricing: bool
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
                f"{judgement.title} on {_label(grain, named)}", start, end, now_ms, now_ms, None, 1, 1, 0,
                bucket, self._diagnosis(workspace, grain, named, judgement, start, end, complete, now_ms),
            )  # fmt: skip
        if verdict == "trigger" and judgement is not None:
            current.occurrences += current.last_trigger_bucket != bucket
            current.last_trigger_bucket = bucket
            current.window_end_ms = max(current.window_end_ms, end)
            current.last_seen_ms = now_ms
            current.clear_windows = 0
            if judgement.severity == "critical":
                current.severity = "critical"
            current.diagnosis = self._diagnosis(
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

    def _diagnosis(
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
            "window": {"start": _iso(start), "end": _iso(end), "complete": complete,
                       "width_seconds": grain.width_ms // 1000},
            "value": judgement.value,
            "baseline": judgement.baseline,
            "baseline_windows": grain.baseline(s),
            "numbers": judgement.numbers,
            "thresholds": {**thresholds, "clear_fraction": s.clear_fraction, "resolve_windows": s.resolve_windows},
            "evidence": self._evidence(grain, named, judgement.kind, start, end, now_ms,
                                       self._routes_of(workspace, grain, named, start)),
        }  # fmt: skip

    def _routes_of(
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
    def _evidence(
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
            "since": _iso(start),
            "until": _iso(end),
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

    def _sweep_ingest(self, workspace: str, now_ms: int) -> None:
        s = self.settings
        batches = self.metadata.recent_batches(workspace, s.ingest_batches)
        if not batches:
            return
        verdict = detectors.judge_batches([status for status, _ in batches], s)
        current = next(iter(self.store.open_incidents(workspace, INGEST_GRAIN)), None)
        failed = [ms for status, ms in batches if status == "failed"]
        numbers = {"failed_batches": len(failed), "recent_batches": len(batches)}
        incident: Incident | None = None
        if verdict == "trigger":
            diagnosis = {
                "kind": detectors.INGESTION_FAILURE,
                "grain": INGEST_GRAIN,
                "window": {"start": _iso(min(failed)), "end": _iso(max(failed)), "complete": True},
                "value": len(failed),
                "baseline": 0,
                "numbers": numbers,
                "thresholds": {"failures": s.ingest_failures, "of_batches": s.ingest_batches,
                               "resolve_batches": s.ingest_resolve_batches},
                "evidence": {"ingestion_health": {"tool": "metergraph_get_ingestion_health",
                                                  "arguments": {"days": 1}}},
            }  # fmt: skip
            severity = "critical" if all(status == "failed" for status, _ in batches) else "warning"
            if current is None:
                ident = incident_id(workspace, detectors.INGESTION_FAILURE, INGEST_GRAIN, "[]", min(failed))
                incident = Incident(
                    ident, workspace, detectors.INGESTION_FAILURE, INGEST_GRAIN, "[]", None, None, None, None,
                    "open", severity, "Failed ingestion", min(failed), max(failed), now_ms, now_ms, None, 1, 1,
                    0, None, diagnosis,
                )  # fmt: skip
                self.store.save(workspace, INGEST_GRAIN, None, [incident], {ident})
                return
            if max(failed) > current.window_end_ms:
                current.occurrences += 1
                current.window_end_ms = max(failed)
                current.last_seen_ms = now_ms
                current.severity = "critical" if severity == "critical" else current.severity
                current.diagnosis = diagnosis
                current.generation += 1
                incident = current
        elif verdict == "clear" and current is not None:
            current.status = "resolved"
            current.resolved_ms = now_ms
            current.generation += 1
            incident = current
        if incident is not None:
            self.store.save(workspace, INGEST_GRAIN, None, [incident], set())

    # -- the tool ----------------------------------------------------------------------------------

    def list(self, principal: AgentPrincipal, limit: int) -> dict[str, Any]:
        """``metergraph_list_incidents``: open incidents first, then the most recently seen, bounded."""
        self.sweep(principal.workspace)  # calls this process ingested are judged before they are read
        # A key with an allowlist sees its environments' incidents (never untagged telemetry's); failed
        # ingestion belongs to no environment and shows to every key, as ingestion health does.
        allowed = principal.environments
        total, opened, critical = self.store.counts(principal.workspace, allowed)
        listed = self.store.for_workspace(principal.workspace, allowed, limit)
        truncated = total > limit
        warnings = []
        if truncated:
            warnings.append(warning("truncated", f"{total - limit} more incidents than the limit of {limit}"))
        document = envelope(
            principal.workspace,
            self.clock(),
            page={"limit": limit, "truncated": truncated, "next_cursor": None},
            evidence={"sources": ["incidents"], "rows": len(listed), "complete": not truncated},
            content_included=False,
            open=opened,
            critical=critical,
            truncated=truncated,
            incidents=[_render(i) for i in listed],
        )
        document["warnings"] = warnings
        return document


def _render(i: Incident) -> dict[str, Any]:
    return {
        "id": i.id,
        "detector_key": i.kind,
        "kind": i.kind,
        "grain": i.grain,
        "route": i.route,
        "provider": i.provider,
        "model": i.model,
        "environment": i.environment,
        "severity": i.severity,
        "status": i.status,
        "generation": i.generation,
        "title": i.title,
        "diagnosis": i.diagnosis,
        "window_start": _iso(i.window_start_ms),
        "window_end": _iso(i.window_end_ms),
        "first_seen_at": _iso(i.first_seen_ms),
        "last_seen_at": _iso(i.last_seen_ms),
        "acknowledged_at": None,
        "resolved_at": _iso(i.resolved_ms),
        "occurrences": i.occurrences,
    }


# The webhook body carries the same object the incident tools list.
render_incident = _render
