"""The Analysis, report, workload, model-comparison, suite-results and evidence pages: each reads through
the report and analysis services with the signed-in principal (the same documents the tools return), so
scope, roles and "no model-authored text" are decided there, once."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request

from triptych.metergraph.errors import NotFoundError
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.links import (
    analysis_path,
    comparison_path,
    evidence_path,
    report_path,
    suite_path,
    workload_path,
)
from triptych.metergraph.service import Metergraph

Page = tuple[str, dict[str, Any]]
ACTIVE = ("queued", "running")
RUNS_SHOWN = 20
REPORTS_SHOWN = 20


def _ids(request: Request) -> tuple[str, str]:
    return request.path_params["analysis_id"], request.path_params["workload_id"]


def _paths(workspace: str, analysis_id: str, workload_id: str) -> dict[str, str]:
    return {
        "analysis": analysis_path(workspace),
        "report": report_path(workspace, analysis_id),
        "workload": workload_path(workspace, analysis_id, workload_id),
        "comparison": comparison_path(workspace, analysis_id, workload_id),
        "suite": suite_path(workspace, analysis_id, workload_id),
    }


def _workload(report: dict[str, Any], workload_id: str) -> dict[str, Any]:
    for workload in report["workloads"]:
        if workload["workload_id"] == workload_id:
            return dict(workload)
    raise NotFoundError("no workload with that workload_id in this report")


def _opportunity_paths(workspace: str, analysis_id: str, workload: dict[str, Any]) -> dict[str, str]:
    return {
        o["opportunity_id"]: evidence_path(
            workspace, analysis_id, workload["workload_id"], o["opportunity_id"]
        )
        for o in workload["opportunities"]
    }


def analysis_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> Page:
    runs = mg.analysis.list_runs(principal, limit=RUNS_SHOWN)
    reports = mg.reports.list_reports(principal, limit=REPORTS_SHOWN)
    latest = None
    if reports["reports"]:
        latest = mg.reports.get_report(principal, reports["reports"][0]["analysis_id"])
    ws = principal.workspace
    return "analysis.html", {
        "runs": runs,
        "reports": reports,
        "latest": latest,
        "active": any(r["status"] in ACTIVE for r in runs["runs"]),
        "report_paths": {
            aid: report_path(ws, aid)
            for aid in [r["analysis_id"] for r in reports["reports"]]
            + [r["report"]["analysis_id"] for r in runs["runs"] if r["report"]["available"]]
        },
        "workload_paths": {}
        if latest is None
        else {
            w["workload_id"]: workload_path(ws, latest["analysis_id"], w["workload_id"])
            for w in latest["workloads"]
        },
    }


def report_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> Page:
    analysis_id = request.path_params["analysis_id"]
    report = mg.reports.get_report(principal, analysis_id)
    ws = principal.workspace
    return "report.html", {
        "report": report,
        "analysis_path": analysis_path(ws),
        "workload_paths": {
            w["workload_id"]: workload_path(ws, analysis_id, w["workload_id"]) for w in report["workloads"]
        },
        "opportunity_paths": {
            w["workload_id"]: _opportunity_paths(ws, analysis_id, w) for w in report["workloads"]
        },
    }


def workload_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> Page:
    analysis_id, workload_id = _ids(request)
    report = mg.reports.get_report(principal, analysis_id)
    workload = _workload(report, workload_id)
    ws = principal.workspace
    return "workload.html", {
        "report": report,
        "workload": workload,
        "paths": _paths(ws, analysis_id, workload_id),
        "opportunity_paths": _opportunity_paths(ws, analysis_id, workload),
        "has_comparison": bool(_candidates(mg, principal, analysis_id, workload_id)),
    }


def _candidates(
    mg: Metergraph, principal: AgentPrincipal, analysis_id: str, workload_id: str
) -> list[dict[str, Any]]:
    """The workload's candidates, metadata only: models, outcomes, case counts, cost and latency figures."""
    _, artifact = mg.reports._find(principal, analysis_id)  # the service's scope check, then its parse cache
    workload = mg.reports._workload_of(artifact, workload_id)
    return [
        c.model_dump(include={"candidate_id", "provider", "model", "outcome", "cases", "mean_cost_per_call_usd",
                              "reference_cost_per_call_usd", "cost_ratio", "mean_latency_ms"})
        for c in workload.candidates
    ]  # fmt: skip


def comparison_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> Page:
    analysis_id, workload_id = _ids(request)
    report = mg.reports.get_report(principal, analysis_id)
    workload = _workload(report, workload_id)
    candidates = _candidates(mg, principal, analysis_id, workload_id)
    if not candidates:
        raise NotFoundError(
            "this report holds no model comparison for the workload: open the workload's page"
        )
    by_candidate: dict[str, dict[str, Any]] = {}
    for o in workload["opportunities"]:
        for cid in o["candidate_ids"]:
            by_candidate[cid] = o
    ws = principal.workspace
    return "comparison.html", {
        "report": report,
        "workload": workload,
        "candidates": candidates,
        "by_candidate": by_candidate,
        "paths": _paths(ws, analysis_id, workload_id),
        "opportunity_paths": _opportunity_paths(ws, analysis_id, workload),
    }


def suite_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> Page:
    analysis_id, workload_id = _ids(request)
    report = mg.reports.get_report(principal, analysis_id)
    workload = _workload(report, workload_id)
    suite = mg.reports.suite_results(principal, analysis_id, workload_id)
    ws = principal.workspace
    withheld = [o for o in workload["opportunities"] if o["recommendation_status"] == "withheld"]
    opportunity_paths = _opportunity_paths(ws, analysis_id, workload)
    # A representative case opens in its candidate's evidence (for keys that may read content).
    case_paths = {
        cid: opportunity_paths[o["opportunity_id"]]
        for o in workload["opportunities"]
        for cid in o["candidate_ids"]
    }
    return "suite.html", {
        "report": report,
        "workload": workload,
        "suite": suite,
        "withheld": withheld,
        "paths": _paths(ws, analysis_id, workload_id),
        "opportunity_paths": opportunity_paths,
        "case_paths": case_paths,
    }


def evidence_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> Page:
    analysis_id, workload_id = _ids(request)
    opportunity_id = request.path_params["opportunity_id"]
    report = mg.reports.get_report(principal, analysis_id)
    workload = _workload(report, workload_id)
    opportunity = next((o for o in workload["opportunities"] if o["opportunity_id"] == opportunity_id), None)
    if opportunity is None:
        raise NotFoundError("no opportunity with that id in this workload")
    cursor = request.query_params.get("cursor") or None
    evidence = mg.reports.evidence(principal, analysis_id, workload_id, cursor=cursor, limit=50)
    wanted = set(opportunity["candidate_ids"])
    cases = [c for c in evidence["evidence"] if c["candidate_id"] in wanted]
    ws = principal.workspace
    here = evidence_path(ws, analysis_id, workload_id, opportunity_id)
    return "evidence.html", {
        "report": report,
        "workload": workload,
        "opportunity": opportunity,
        "evidence": evidence,
        "cases": cases,
        "paths": _paths(ws, analysis_id, workload_id),
        "next_page": f"{here}?cursor={quote(evidence['next_cursor'], safe='')}"
        if evidence["next_cursor"]
        else None,
    }
