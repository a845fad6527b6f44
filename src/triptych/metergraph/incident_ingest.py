"""The ingestion-failure detector of Metergraph's incidents: the workspace's newest ingest batches (from
the metadata store's batch records) judged by how many failed; one incident per episode, updated while
batches keep failing, resolved once they succeed again. Split from ``incidents.py`` (issue 29).
"""

from __future__ import annotations

from triptych.metergraph import detectors
from triptych.metergraph.detectors import IncidentSettings
from triptych.metergraph.incident_grains import INGEST_GRAIN, incident_id, iso
from triptych.metergraph.incident_store import Incident, IncidentStore
from triptych.metergraph.metadata_store import MetadataStore


class IngestDetector:
    def __init__(self, incidents: IncidentStore, metadata: MetadataStore, settings: IncidentSettings) -> None:
        self.store = incidents
        self.metadata = metadata  # the ingest batch records
        self.settings = settings

    def sweep(self, workspace: str, now_ms: int) -> None:
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
                "window": {"start": iso(min(failed)), "end": iso(max(failed)), "complete": True},
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
