"""Reports: import a report artifact into a workspace, and the four report reads plus the artifact
download, as the tools, the REST door and the app pages use them.

The metadata reads (list, get, suite results) are projections of the artifact that never carry
model-authored text (``narrative``) or case text; the evidence read is content class and bounds each
text field to 16 KiB.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from triptych.metergraph.contract import SCOPE_READ, envelope, warning
from triptych.metergraph.errors import ForbiddenError, InvalidArgument, NotFoundError, ResponseTooLarge
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.links import AppLinks
from triptych.metergraph.report_schema import (
    MAX_ARTIFACT_BYTES,
    ArtifactRefused,
    Coverage,
    ReportArtifact,
    Workload,
    parse_artifact,
    sha256,
)
from triptych.metergraph.report_store import ReportExists, ReportStore, StoredReport
from triptych.metergraph.traces import decode_cursor, encode_cursor

MAX_TEXT_BYTES = 16 * 1024
_CACHED_ARTIFACTS = 16


def bounded_text(text: str, limit: int = MAX_TEXT_BYTES) -> dict[str, Any]:
    """``{"text", "truncated"}`` with the text cut to ``limit`` UTF-8 bytes on a character boundary."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return {"text": text, "truncated": False}
    return {"text": raw[:limit].decode("utf-8", "ignore"), "truncated": True}


def _coverage(value: Coverage | None) -> dict[str, int] | None:
    return None if value is None else value.model_dump()


class ReportService:
    def __init__(self, store: ReportStore, clock: Callable[[], datetime], links: AppLinks) -> None:
        self.store = store
        self.clock = clock
        self.links = links
        self._parsed: OrderedDict[str, ReportArtifact] = OrderedDict()
        self._lock = threading.Lock()

    # -- writing ---------------------------------------------------------------------------------

    def import_artifact(self, workspace: str, raw: bytes, source: str = "cli_import") -> dict[str, Any]:
        """Validate and store one artifact; importing the same bytes again changes nothing."""
        try:
            artifact = parse_artifact(raw)
        except ArtifactRefused as exc:
            raise InvalidArgument(str(exc)) from None
        stored = self.stored_report(artifact, raw, source)
        try:
            created = self.store.insert_report(workspace, stored, raw)
        except ReportExists:
            raise InvalidArgument(
                f"workspace {workspace!r} already holds a different report {artifact.analysis_id!r}: reports "
                "are immutable, give the new one another analysis_id"
            ) from None
        summary = self._summary(
            workspace, self.store.report(workspace, artifact.analysis_id) or stored, artifact
        )
        return {"created": created, "report": summary}

    def stored_report(self, artifact: ReportArtifact, raw: bytes, source: str) -> StoredReport:
        return StoredReport(
            analysis_id=artifact.analysis_id,
            schema_version=artifact.schema_version,
            generated_at=artifact.generated_at,
            imported_at=self.clock().isoformat(),
            import_source=source,
            outcome=artifact.outcome,
            environment=artifact.environment,
            sha256=sha256(raw),
            bytes=len(raw),
            seq=0,
        )

    # -- reading ---------------------------------------------------------------------------------

    def _find(self, principal: AgentPrincipal, analysis_id: str) -> tuple[StoredReport, ReportArtifact]:
        stored = self.store.report(principal.workspace, analysis_id)
        if stored is None or not self._in_scope(principal, stored):
            raise NotFoundError("no report with that analysis_id in this workspace")
        return stored, self._artifact(principal.workspace, stored)

    @staticmethod
    def _in_scope(principal: AgentPrincipal, stored: StoredReport) -> bool:
        return principal.environments is None or stored.environment in principal.environments

    def _artifact(self, workspace: str, stored: StoredReport) -> ReportArtifact:
        with self._lock:
            cached = self._parsed.get(stored.sha256)
            if cached is not None:
                self._parsed.move_to_end(stored.sha256)
                return cached
        raw = self.store.artifact(workspace, stored.analysis_id)
        if raw is None:
            raise NotFoundError("no report with that analysis_id in this workspace")
        artifact = parse_artifact(raw)
        with self._lock:
            self._parsed[stored.sha256] = artifact
            while len(self._parsed) > _CACHED_ARTIFACTS:
                self._parsed.popitem(last=False)
        return artifact

    def _summary(self, workspace: str, stored: StoredReport, artifact: ReportArtifact) -> dict[str, Any]:
        states = {"covered": 0, "partial": 0, "failed": 0, "ineligible": 0}
        for w in artifact.workloads:
            states[w.state] += 1
        coverages = [w.evidence_coverage for w in artifact.workloads if w.evidence_coverage is not None]
        coverage = (
            {k: sum(getattr(c, k) for c in coverages) for k in ("evaluated", "published", "omitted")}
            if coverages
            else None
        )
        return {
            "analysis_id": stored.analysis_id,
            "title": artifact.title,
            "schema_version": stored.schema_version,
            "pipeline_name": artifact.pipeline_name,
            "generated_at": stored.generated_at,
            "imported_at": stored.imported_at,
            "import_source": stored.import_source,
            "environment": stored.environment,
            "outcome": stored.outcome,
            "workloads": states,
            "opportunities": sum(len(w.opportunities) for w in artifact.workloads),
            "evidence_coverage": coverage,
            "artifact": {
                "sha256": stored.sha256,
                "bytes": stored.bytes,
                "download": f"/v1/agent/reports/{stored.analysis_id}/artifact",
            },
            "warnings": [w.model_dump() for w in artifact.warnings],
        }

    def list_reports(
        self, principal: AgentPrincipal, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        fingerprint = f"reports:{principal.workspace}"
        before = decode_cursor(cursor, fingerprint)[0] if cursor is not None else None
        rows = self.store.list_reports(principal.workspace, limit + 1, before, principal.environments)
        truncated = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1].seq, 0, fingerprint) if truncated else None
        reports = [
            self._summary(principal.workspace, r, self._artifact(principal.workspace, r)) for r in rows
        ]
        document = envelope(
            principal.workspace,
            self.clock(),
            page={"limit": limit, "truncated": truncated, "next_cursor": next_cursor},
            content_included=False,
            reports=reports,
            app_url=self.links.analysis(principal.workspace),
        )
        if truncated:
            document["warnings"].append(warning("truncated", "more reports exist: pass page.next_cursor"))
        return document

    def latest(self, principal: AgentPrincipal) -> dict[str, Any] | None:
        """The newest report's summary (the Analysis page's "latest report"), or None."""
        rows = self.store.list_reports(principal.workspace, 1, None, principal.environments)
        return (
            self._summary(principal.workspace, rows[0], self._artifact(principal.workspace, rows[0]))
            if rows
            else None
        )

    def get_report(self, principal: AgentPrincipal, analysis_id: str) -> dict[str, Any]:
        stored, artifact = self._find(principal, analysis_id)
        summary = self._summary(principal.workspace, stored, artifact)
        report_warnings = summary.pop("warnings")
        document = envelope(principal.workspace, self.clock(), content_included=False)
        document.update(summary)
        document["warnings"] = report_warnings
        document["app_url"] = self.links.analysis(principal.workspace)
        document.update(
            settings=artifact.settings,
            spend_projection=None
            if artifact.spend_projection is None
            else artifact.spend_projection.model_dump(),
            analysis_generation_cost=(
                None
                if artifact.analysis_generation_cost is None
                else artifact.analysis_generation_cost.model_dump()
            ),
            workloads=[self._workload(principal.workspace, analysis_id, w) for w in artifact.workloads],
        )
        return document

    def _workload(self, workspace: str, analysis_id: str, w: Workload) -> dict[str, Any]:
        suite_link = self.links.suite(workspace, analysis_id, w.workload_id) if w.suite is not None else None
        opportunities = []
        for o in w.opportunities:
            entry = o.model_dump(exclude={"evaluation_gate"})
            gate = o.evaluation_gate
            entry["evaluation_gate"] = None if gate is None else {
                "suite_id": gate.suite_id,
                "suite_revision": gate.suite_revision,
                "effect": gate.effect,
                "reasons": [r.model_dump() for r in gate.reasons],
                "case_counts": gate.cases.model_dump(),
            }  # fmt: skip
            withheld = o.recommendation_status == "withheld" and suite_link is not None
            entry["app_url"] = (
                suite_link
                if withheld
                else self.links.evidence(workspace, analysis_id, w.workload_id, o.opportunity_id)
            )
            opportunities.append(entry)
        return {
            "workload_id": w.workload_id,
            "workload_name": w.workload_name,
            "route": w.route,
            "sample_count": w.sample_count,
            "state": w.state,
            "reason": w.reason,
            "reference": None if w.reference is None else w.reference.model_dump(),
            "reference_readiness": None,
            "usage": None if w.usage is None else w.usage.model_dump(),
            "suite": None
            if w.suite is None
            else {"suite_id": w.suite.suite_id, "revision": w.suite.revision},
            "warnings": [x.model_dump() for x in w.warnings],
            "opportunities": opportunities,
            "evidence_coverage": _coverage(w.evidence_coverage),
            "app_url": (
                self.links.comparison(workspace, analysis_id, w.workload_id)
                if w.candidates
                else self.links.workload(workspace, analysis_id, w.workload_id)
            ),
        }

    @staticmethod
    def _workload_of(artifact: ReportArtifact, workload_id: str) -> Workload:
        for w in artifact.workloads:
            if w.workload_id == workload_id:
                return w
        raise NotFoundError("no workload with that workload_id in this report")

    def suite_results(self, principal: AgentPrincipal, analysis_id: str, workload_id: str) -> dict[str, Any]:
        _, artifact = self._find(principal, analysis_id)
        w = self._workload_of(artifact, workload_id)
        base = envelope(
            principal.workspace,
            self.clock(),
            content_included=False,
            analysis_id=analysis_id,
            workload_id=workload_id,
        )
        if w.suite is None:
            return {**base, "available": False, "unavailable_reason": "no_suite_gate", "suite": None,
                    "candidates": [], "app_url": None}  # fmt: skip
        candidates = [
            {
                "candidate_id": c.candidate_id,
                "provider": c.provider,
                "model": c.model,
                "outcome": c.outcome,
                "reasons": [r.model_dump() for r in c.reasons],
                "cases": c.cases.model_dump(),
                "checks": [k.model_dump() for k in c.checks],
            }
            for c in w.candidates
        ]
        suite = {
            "suite_id": w.suite.suite_id,
            "revision": w.suite.revision,
            "min_pass_rate": w.suite.min_pass_rate,
            "checks": [{"check_id": k.check_id, "kind": k.kind} for k in w.suite.checks],
        }
        return {**base, "available": True, "unavailable_reason": None, "suite": suite, "candidates": candidates,
                "app_url": self.links.suite(principal.workspace, analysis_id, workload_id)}  # fmt: skip

    def evidence(
        self,
        principal: AgentPrincipal,
        analysis_id: str,
        workload_id: str,
        cursor: str | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        if not principal.has(SCOPE_READ):
            raise ForbiddenError("metergraph_get_report_evidence needs the Debug role (agent:read)")
        _, artifact = self._find(principal, analysis_id)
        w = self._workload_of(artifact, workload_id)
        fingerprint = f"evidence:{principal.workspace}:{analysis_id}:{workload_id}"
        start = decode_cursor(cursor, fingerprint)[0] if cursor is not None else 0
        cited: dict[str, list[str]] = {}
        for c in w.candidates:
            for check in c.checks:
                for case_id in check.representative_case_ids:
                    cited.setdefault(case_id, []).append(check.check_id)
        page = w.evidence[start : start + limit]
        end = start + len(page)
        truncated = end < len(w.evidence)
        next_cursor = encode_cursor(end, 0, fingerprint) if truncated else None
        cases = [
            {
                "case_id": c.case_id,
                "candidate_id": c.candidate_id,
                "question": bounded_text(c.question),
                "reference_model": c.reference_model,
                "candidate_model": c.candidate_model,
                "reference_response": bounded_text(c.reference_response),
                "candidate_response": bounded_text(c.candidate_response),
                "grade": c.grade,
                "check_outcomes": c.check_outcomes,
                "suite_examples": sorted(set(cited.get(c.case_id, []))),
            }
            for c in page
        ]
        document = envelope(
            principal.workspace,
            self.clock(),
            page={"limit": limit, "truncated": truncated, "next_cursor": next_cursor},
            content_included=True,
            analysis_id=analysis_id,
            workload_id=workload_id,
            evidence=cases,
            evidence_coverage=_coverage(w.evidence_coverage),
            next_cursor=next_cursor,
            metergraph_links={"workload": self.links.workload(principal.workspace, analysis_id, workload_id)},
        )
        if truncated:
            document["warnings"].append(warning("truncated", "more cases exist: pass next_cursor"))
        return document

    def artifact(self, principal: AgentPrincipal, analysis_id: str) -> tuple[bytes, str]:
        """The stored artifact's bytes and their SHA-256 (Debug role; capped at 32 MiB)."""
        if not principal.has(SCOPE_READ):
            raise ForbiddenError("downloading a report artifact needs the Debug role (agent:read)")
        stored = self.store.report(principal.workspace, analysis_id)
        if stored is None or not self._in_scope(principal, stored):
            raise NotFoundError("no report with that analysis_id in this workspace")
        if stored.bytes > MAX_ARTIFACT_BYTES:
            raise ResponseTooLarge("the artifact exceeds 32 MiB and cannot be downloaded")
        raw = self.store.artifact(principal.workspace, analysis_id) or b""
        return raw, sha256(raw)
