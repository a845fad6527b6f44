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

Each job in its module: the grains and ids (``incident_grains``), the rollup detectors
(``incident_rollups``) and their diagnoses (``incident_diagnosis``), the ingestion-failure detector
(``incident_ingest``); ``IncidentService`` keeps what ingest notes, the ticker, and the tool.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from triptych.metergraph.call_store import CallStore
from triptych.metergraph.contract import MAX_DAYS, envelope, warning
from triptych.metergraph.detectors import IncidentSettings
from triptych.metergraph.incident_grains import DAY_MS, GRAINS, iso
from triptych.metergraph.incident_ingest import IngestDetector
from triptych.metergraph.incident_rollups import RollupDetectors
from triptych.metergraph.incident_store import Incident, IncidentStore
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.metadata_store import MetadataStore

log = logging.getLogger(__name__)

DB_FILE = "metergraph-incidents.db"


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
        self.rollups = RollupDetectors(store, incidents, settings)
        self.ingest = IngestDetector(incidents, metadata, settings)
        self._dirty: dict[str, int | None] = {}  # workspace -> newest call time seen (ms), if any
        self._dirty_lock = threading.Lock()
        self._sweep_lock = threading.Lock()
        self._stop = threading.Event()
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
                            if not self.rollups.sweep(
                                name, grain, min(newest_ms, now_ms), now_ms, workspace is not None
                            ):
                                self.note_batch(name, newest_ms)  # deferred: judged at a later sweep
                    self.ingest.sweep(name, now_ms)
                except Exception:
                    # Noted again for the next sweep; a read still lists what is stored, and ingest never
                    # sees a detector fail.
                    log.exception("metergraph incidents: sweeping %s failed", name)
                    if newest_ms is None:
                        self.note_failure(name)
                    else:
                        self.note_batch(name, newest_ms)

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
        "window_start": iso(i.window_start_ms),
        "window_end": iso(i.window_end_ms),
        "first_seen_at": iso(i.first_seen_ms),
        "last_seen_at": iso(i.last_seen_ms),
        "acknowledged_at": None,
        "resolved_at": iso(i.resolved_ms),
        "occurrences": i.occurrences,
    }


# The webhook body carries the same object the incident tools list.
render_incident = _render
