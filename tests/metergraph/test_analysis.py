"""Analysis runs on a real store, replaying through the real OpenAI client against the local provider
server and scoring with the bundled embedding model: the report they write, the catalogue's candidates,
idempotent starts, one active run per workspace, cancellation and failure without a report, isolation."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mg_support import NOW, agent, app, engine_settings, row
from provider_server import ProviderServer

from triptych.core.embed import LocalEmbedder
from triptych.metergraph.analysis_runner import RunSettings, catalogue_candidates
from triptych.metergraph.analysis_sources import WorkloadSpec
from triptych.metergraph.errors import ForbiddenError, InvalidArgument, NotFoundError, UnsupportedCapability
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.providers import load_provider_settings
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

JSON_SCHEMA = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}


@pytest.fixture(scope="module")
def provider() -> Iterator[ProviderServer]:
    with ProviderServer(slow_seconds=3) as server:
        yield server


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def open_mg(path: Path, provider: ProviderServer | None, embedder: Any, **engine: Any) -> Metergraph:
    providers = (
        load_provider_settings(openai_base_url=provider.openai_url, openai_api_key="sk-test")
        if provider is not None
        else load_provider_settings(openai_base_url="", anthropic_base_url="")
    )
    return Metergraph.open(
        path, load_metergraph_settings(max_rows=500, **engine), clock=lambda: NOW, provider_settings=providers,
        embedder=lambda: embedder,
    )  # fmt: skip


@pytest.fixture
def mg(
    request: pytest.FixtureRequest,
    engine: str,
    tmp_path: Path,
    provider: ProviderServer,
    embedder: LocalEmbedder,
) -> Iterator[Metergraph]:
    service = open_mg(tmp_path, provider, embedder, **engine_settings(request, engine))
    yield service
    service.close()


def traffic(mg: Metergraph, route: str, n: int, answer: Callable[[str], str], workspace: str = "w1") -> None:
    """``n`` retained gpt-4o calls of ``route``; the provider server replies "replayed: <question>"."""
    mg.metadata.set_retain_content(workspace, True, NOW.isoformat())
    rows = []
    for i in range(n):
        question = f"{route} question number {i}: where is the office?"
        rows.append(row(minutes_ago=10 + i, route=route, trace_id=f"{workspace}-{route}-{i}",
                        request_json={"messages": [{"role": "user", "content": question}]},
                        response_text=answer(question)))  # fmt: skip
    mg.ingest.ingest_rows(app(workspace), rows, "sdk")


def finished(mg: Metergraph, run_id: str, workspace: str = "w1") -> dict[str, Any]:
    mg.analysis.wait(60)
    run: dict[str, Any] = mg.analysis.get_run(agent(workspace), run_id)["run"]
    return run


def start(mg: Metergraph, workspace: str = "w1", key: str | None = None, **settings: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "samples_per_workload": 8,
        "min_samples": 5,
        "candidates": ((None, "gpt-4o-mini"),),
    }
    return mg.analysis.start(agent(workspace), RunSettings(**{**base, **settings}), key)


def test_a_run_replays_scores_projects_and_writes_one_report(
    mg: Metergraph, provider: ProviderServer
) -> None:
    traffic(mg, "support", 10, lambda q: f"replayed: {q}")
    traffic(mg, "extract", 10, lambda q: json.dumps({"city": "Paris"}))
    traffic(mg, "tiny", 3, lambda q: "ok")
    mg.metadata.set_route(
        "w1", "extract", None, {"evaluation_contract": {"json_schema": JSON_SCHEMA}}, NOW.isoformat()
    )
    before = len(provider.requests)
    started = start(mg)
    assert started["started"] is True and started["mutates"] is True
    assert started["run"]["status"] in ("queued", "running", "succeeded")
    run = finished(mg, started["run"]["run_id"])
    assert run["status"] == "succeeded", run
    assert run["progress"]["replays_done"] == 16 and run["progress"]["workloads_done"] == 3
    assert len(provider.requests) - before == 16
    assert {r["json"]["model"] for r in provider.requests[before:]} == {"gpt-4o-mini"}
    assert run["report"]["available"] is True

    report = mg.reports.get_report(agent("w1"), run["analysis_id"])
    assert report["outcome"] == "opportunities" and report["import_source"] == "analysis_run"
    by_id = {w["workload_id"]: w for w in report["workloads"]}
    support, extract, tiny = by_id["route:support"], by_id["route:extract"], by_id["route:tiny"]
    assert tiny["state"] == "ineligible" and tiny["reason"] == "insufficient_samples"
    assert support["state"] == "covered" and support["sample_count"] == 8
    [swap] = support["opportunities"]
    assert swap["recommendation_status"] == "recommended"
    assert swap["cost_ratio"] is not None and 0 < swap["cost_ratio"] < 1
    assert swap["quality_vs_reference"] == pytest.approx(1.0, abs=0.02)
    monthly = support["usage"]["cost_usd"] / 7 * 30
    assert swap["savings_usd"] == pytest.approx(monthly * (1 - swap["cost_ratio"]), rel=1e-6)
    [withheld] = extract["opportunities"]
    assert withheld["recommendation_status"] == "withheld"
    assert {c for r in withheld["evaluation_gate"]["reasons"] for c in r["checks"]} >= {"json_schema"}
    assert report["spend_projection"]["savings_usd"] == pytest.approx(swap["savings_usd"], rel=1e-6)
    assert report["analysis_generation_cost"]["replays"] == 16

    suite = mg.reports.suite_results(agent("w1"), run["analysis_id"], "route:extract")
    checks = {c["check_id"]: c for c in suite["candidates"][0]["checks"]}
    assert checks["json_schema"]["pass_rate"] == 0.0 and checks["json_schema"]["scored"] == 8
    evidence = mg.reports.evidence(agent("w1"), run["analysis_id"], "route:support", limit=50)
    case = evidence["evidence"][0]
    assert case["candidate_response"]["text"].startswith("replayed: support question")
    assert case["grade"] == "pass"


def test_the_catalogue_offers_cheaper_chat_models_of_the_same_provider_closest_first() -> None:
    pricer = Pricer()
    spec = WorkloadSpec("route:a", "a", "a", 100, 1.0, 100_000, 10_000, "openai", "gpt-4o")
    picked = catalogue_candidates(pricer, spec, NOW, 2)
    assert len(picked) == 2
    reference = pricer.price("openai", "gpt-4o", NOW, 1000, 100).cost_usd
    costs = [pricer.price("openai", m, NOW, 1000, 100).cost_usd for _, m in picked]
    assert all(c is not None and reference is not None and c < reference for c in costs)
    assert costs == sorted(costs, reverse=True)  # type: ignore[type-var]
    assert all(p == "openai" for p, _ in picked)


def test_a_run_without_candidates_uses_the_catalogue(mg: Metergraph, provider: ProviderServer) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    before = len(provider.requests)
    run = finished(mg, start(mg, candidates=(), samples_per_workload=6)["run"]["run_id"])
    assert run["status"] == "succeeded"
    models = {r["json"]["model"] for r in provider.requests[before:]}
    assert len(models) == 2 and "gpt-4o" not in models


def test_the_same_request_key_returns_the_same_run_and_other_arguments_are_refused(mg: Metergraph) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    first = start(mg, key="nightly-1")
    again = start(mg, key="nightly-1")
    assert again["run"]["run_id"] == first["run"]["run_id"]
    assert again["run"]["request"] == {"request_key": "nightly-1", "replayed": True}
    assert again["mutates"] is False and again["started"] is False
    with pytest.raises(InvalidArgument, match="idempotency_conflict"):
        start(mg, key="nightly-1", days=3)
    finished(mg, first["run"]["run_id"])
    assert len(mg.analysis.list_runs(agent("w1"))["runs"]) == 1


def test_one_run_at_a_time_and_a_cancelled_run_writes_no_report(mg: Metergraph) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    traffic(mg, "other", 6, lambda q: f"replayed: {q}")
    slow = start(mg, candidates=((None, "slow-model"),), samples_per_workload=6)
    run_id = slow["run"]["run_id"]
    busy = start(mg, key="second")
    assert busy["started"] is False and busy["reason"] == "analysis_active"
    assert busy["run"]["run_id"] == run_id
    assert mg.analysis.cancel("w1", run_id) is True
    run = finished(mg, run_id)
    assert run["status"] == "cancelled" and run["error_code"] == "cancelled"
    assert run["report"]["available"] is False
    assert mg.reports.list_reports(agent("w1"))["reports"] == []


class BrokenEmbedder:
    """An embedding backend whose model cannot load (a real failure a run must survive cleanly)."""

    name = "broken"
    dim = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        raise RuntimeError("the embedding model file is missing")


def test_a_failed_run_writes_no_report_and_says_so(tmp_path: Path, provider: ProviderServer) -> None:
    mg = open_mg(tmp_path, provider, BrokenEmbedder())
    try:
        traffic(mg, "support", 6, lambda q: f"replayed: {q}")
        run = finished(mg, start(mg)["run"]["run_id"])
        assert run["status"] == "failed" and run["error_code"] == "internal"
        assert run["finished_at"] is not None and run["report"]["available"] is False
        assert mg.reports.list_reports(agent("w1"))["reports"] == []
    finally:
        mg.close()


def test_only_runs_whose_heartbeat_stopped_are_failed_at_server_start(mg: Metergraph) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    run_id = start(mg, candidates=((None, "slow-model"),))["run"]["run_id"]
    assert mg.analysis.fail_abandoned() == 0  # alive: its heartbeat is fresh (another worker's, say)
    # As if its process died long ago: every heartbeat is older than the cut.
    far = int((NOW + timedelta(days=3650)).timestamp() * 1000)
    assert mg.report_store.fail_abandoned_runs(NOW.isoformat(), far) == 1
    assert mg.analysis.get_run(agent("w1"), run_id)["run"]["error_code"] == "server_restarted"
    mg.analysis.wait(60)  # the live thread sees the run ended and stops without a report
    run = mg.analysis.get_run(agent("w1"), run_id)["run"]
    assert (run["status"], run["error_code"]) == ("failed", "server_restarted")
    assert mg.reports.list_reports(agent("w1"))["reports"] == []


def test_starting_needs_the_debug_role_a_provider_and_sane_arguments(
    mg: Metergraph, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    with pytest.raises(ForbiddenError):
        mg.analysis.start(agent("w1", role="metadata"), RunSettings())
    with pytest.raises(InvalidArgument, match="min_samples"):
        mg.analysis.start(agent("w1"), RunSettings(samples_per_workload=5, min_samples=10))
    with pytest.raises(NotFoundError, match="rerun_of_run_id"):
        mg.analysis.start(agent("w1"), RunSettings(), None, "00000000-0000-0000-0000-000000000000")
    bare = open_mg(tmp_path / "bare", None, embedder)
    try:
        caps = bare.workspace.capabilities(agent("w1"))
        assert caps["agent"]["analysis_start"]["available"] is False
        with pytest.raises(UnsupportedCapability):
            bare.analysis.start(agent("w1"), RunSettings())
    finally:
        bare.close()
    assert mg.workspace.capabilities(agent("w1"))["agent"]["analysis_start"]["available"] is True


def test_runs_of_one_workspace_are_invisible_to_another(mg: Metergraph) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    run = finished(mg, start(mg)["run"]["run_id"])
    assert mg.analysis.list_runs(agent("w2"))["runs"] == []
    with pytest.raises(NotFoundError):
        mg.analysis.get_run(agent("w2"), run["run_id"])
    with pytest.raises(NotFoundError):
        mg.reports.get_report(agent("w2"), run["analysis_id"])
    assert mg.analysis.cancel("w2", run["run_id"]) is False


def test_runs_list_newest_first_with_a_cursor(mg: Metergraph) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    ids = []
    for _ in range(3):
        ids.append(finished(mg, start(mg)["run"]["run_id"])["run_id"])
        time.sleep(0.01)
    page = mg.analysis.list_runs(agent("w1"), limit=2)
    assert [r["run_id"] for r in page["runs"]] == ids[::-1][:2]
    rest = mg.analysis.list_runs(agent("w1"), limit=2, cursor=page["page"]["next_cursor"])
    assert [r["run_id"] for r in rest["runs"]] == ids[:1]


def test_a_saved_classification_gives_the_run_its_workloads(mg: Metergraph) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    classified = mg.workloads.start_classification(agent("w1"), days=30)
    saved = {w["workload_id"] for w in classified["workloads"]}
    assert saved and not any(w.startswith("route:") for w in saved)
    run = finished(mg, start(mg)["run"]["run_id"])
    report = mg.reports.get_report(agent("w1"), run["analysis_id"])
    assert {w["workload_id"] for w in report["workloads"]} == saved
    assert report["workloads"][0]["sample_count"] == 6


def test_the_routes_evaluation_contract_declares_candidates_and_checks(
    mg: Metergraph, provider: ProviderServer
) -> None:
    traffic(mg, "extract", 6, lambda q: json.dumps({"city": "Paris"}))
    contract = {
        "version": 1,
        "candidates": ["gpt-4.1-mini"],
        "checks": [{"kind": "json_schema", "schema": JSON_SCHEMA}],
    }
    mg.metadata.set_route("w1", "extract", None, {"evaluation_contract": contract}, NOW.isoformat())
    before = len(provider.requests)
    run = finished(mg, start(mg, candidates=())["run"]["run_id"])
    assert {r["json"]["model"] for r in provider.requests[before:]} == {"gpt-4.1-mini"}
    suite = mg.reports.suite_results(agent("w1"), run["analysis_id"], "route:extract")
    assert "json_schema" in {c["check_id"] for c in suite["suite"]["checks"]}


def test_classification_runs_are_listed_and_read_beside_analysis_runs(mg: Metergraph) -> None:
    traffic(mg, "support", 6, lambda q: f"replayed: {q}")
    classification = mg.workloads.start_classification(agent("w1"), days=30)["run"]["run_id"]
    first = finished(mg, start(mg)["run"]["run_id"])["run_id"]
    second = finished(mg, start(mg)["run"]["run_id"])["run_id"]
    page = mg.analysis.list_runs(agent("w1"), limit=2)
    # The clock is fixed: at the same instant analysis runs come first, newest first.
    assert [r["run_id"] for r in page["runs"]] == [second, first]
    rest = mg.analysis.list_runs(agent("w1"), limit=2, cursor=page["page"]["next_cursor"])
    assert [(r["run_id"], r["kind"]) for r in rest["runs"]] == [(classification, "classification")]
    assert rest["page"]["next_cursor"] is None
    assert mg.analysis.get_run(agent("w1"), classification)["run"]["kind"] == "classification"
    with pytest.raises(NotFoundError):
        mg.analysis.get_run(agent("w2"), classification)
    assert mg.analysis.list_runs(agent("w2"))["runs"] == []
