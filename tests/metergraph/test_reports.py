"""Report artifacts: import (validation, idempotence, immutability) and the four reads, on a real store."""

from __future__ import annotations

import hashlib
import json

import pytest
from mg_support import agent, embedded_only
from report_support import LONG_TEXT, NARRATIVE, artifact, raw, variant

from triptych.metergraph.errors import ForbiddenError, InvalidArgument, NotFoundError
from triptych.metergraph.service import Metergraph

# Reports live in their own store, the same on both engines: no read here touches the calls.
pytestmark = embedded_only


def test_import_stores_the_bytes_with_their_sha256_and_size(mg: Metergraph) -> None:
    data = raw(artifact())
    result = mg.reports.import_artifact("w1", data)
    assert result["created"] is True
    summary = result["report"]
    assert summary["artifact"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert summary["artifact"]["bytes"] == len(data)
    assert summary["workloads"] == {"covered": 1, "partial": 0, "failed": 0, "ineligible": 1}
    assert summary["opportunities"] == 1
    body, digest = mg.reports.artifact(agent("w1"), "an-test-1")
    assert body == data and digest == hashlib.sha256(data).hexdigest()


def test_reimporting_the_same_bytes_changes_nothing(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    assert mg.reports.import_artifact("w1", raw(artifact()))["created"] is False
    assert len(mg.reports.list_reports(agent("w1"))["reports"]) == 1


def test_a_different_report_under_an_existing_id_is_refused_and_the_first_kept(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    with pytest.raises(InvalidArgument, match="immutable"):
        mg.reports.import_artifact("w1", raw(variant(artifact(), title="Other")))
    assert mg.reports.get_report(agent("w1"), "an-test-1")["title"] == "Test analysis"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not JSON"),
        (json.dumps({"format": "other"}).encode(), "not a report"),
        (raw(variant(artifact(), schema_version=99)), "not supported"),
        (raw(variant(artifact(), outcome="great")), "outcome"),
        (raw(variant(artifact(), analysis_id="bad id/with slash")), "analysis_id"),
        (
            raw(variant(artifact(), warnings=[{"code": "made_up", "message": "x"}])),
            "does not define: made_up",
        ),
    ],
)
def test_an_invalid_artifact_is_refused_saying_where(mg: Metergraph, data: bytes, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        mg.reports.import_artifact("w1", data)
    assert mg.reports.list_reports(agent("w1"))["reports"] == []


def test_an_opportunity_naming_an_unknown_candidate_is_refused(mg: Metergraph) -> None:
    document = artifact()
    document["workloads"][0]["opportunities"][0]["candidate_ids"] = ["nobody"]
    with pytest.raises(InvalidArgument, match="unknown candidates"):
        mg.reports.import_artifact("w1", raw(document))


def test_list_is_newest_first_and_pages_with_a_cursor(mg: Metergraph) -> None:
    for i in range(3):
        mg.reports.import_artifact("w1", raw(artifact(f"an-{i}")))
    first = mg.reports.list_reports(agent("w1"), limit=2)
    assert [r["analysis_id"] for r in first["reports"]] == ["an-2", "an-1"]
    assert first["page"]["truncated"] is True
    assert first["content_included"] is False
    second = mg.reports.list_reports(agent("w1"), limit=2, cursor=first["page"]["next_cursor"])
    assert [r["analysis_id"] for r in second["reports"]] == ["an-0"]
    assert second["page"]["next_cursor"] is None


def test_get_report_never_carries_model_authored_or_case_text(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    document = mg.reports.get_report(agent("w1"), "an-test-1")
    text = json.dumps(document)
    assert NARRATIVE not in text and "What is 2+2?" not in text and "five" not in text
    assert document["schema_version"] == 11 and document["content_included"] is False
    workload = document["workloads"][0]
    opportunity = workload["opportunities"][0]
    assert opportunity["evaluation_gate"]["suite_revision"] == 1
    assert opportunity["evaluation_gate"]["case_counts"]["eligible"] == 3
    assert opportunity["savings_usd"] == 60.0
    assert document["spend_projection"]["savings_usd"] == 60.0


def test_suite_results_list_checks_without_case_text(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    suite = mg.reports.suite_results(agent("w1", role="metadata"), "an-test-1", "route:support")
    assert suite["available"] is True
    check = suite["candidates"][0]["checks"][0]
    assert check["kind"] == "semantic_similarity" and check["representative_case_ids"] == ["c1-1", "c1-2"]
    assert "What is 2+2?" not in json.dumps(suite)
    ungated = mg.reports.suite_results(agent("w1"), "an-test-1", "route:digest")
    assert ungated["available"] is False and ungated["unavailable_reason"] == "no_suite_gate"
    assert ungated["app_url"] is None


def test_evidence_pages_and_bounds_each_text_field_to_16_kib(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    first = mg.reports.evidence(agent("w1"), "an-test-1", "route:support", limit=2)
    assert first["content_included"] is True
    assert [c["case_id"] for c in first["evidence"]] == ["c1-1", "c1-2"]
    assert first["evidence"][0]["suite_examples"] == ["semantic_similarity"]
    rest = mg.reports.evidence(
        agent("w1"), "an-test-1", "route:support", cursor=first["next_cursor"], limit=2
    )
    [last] = rest["evidence"]
    assert last["question"]["truncated"] is True
    assert len(last["question"]["text"].encode()) <= 16 * 1024
    assert LONG_TEXT.startswith(last["question"]["text"])
    assert rest["next_cursor"] is None


def test_an_evidence_cursor_of_another_workload_is_refused(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    mg.reports.import_artifact("w1", raw(artifact("an-other")))
    page = mg.reports.evidence(agent("w1"), "an-test-1", "route:support", limit=1)
    with pytest.raises(InvalidArgument, match="different query"):
        mg.reports.evidence(agent("w1"), "an-other", "route:support", cursor=page["next_cursor"])


def test_evidence_and_the_artifact_need_the_debug_role(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    with pytest.raises(ForbiddenError):
        mg.reports.evidence(agent("w1", role="metadata"), "an-test-1", "route:support")
    with pytest.raises(ForbiddenError):
        mg.reports.artifact(agent("w1", role="metadata"), "an-test-1")


def test_reports_of_one_workspace_are_invisible_to_another(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    other = agent("w2")
    assert mg.reports.list_reports(other)["reports"] == []
    for read in (
        lambda: mg.reports.get_report(other, "an-test-1"),
        lambda: mg.reports.suite_results(other, "an-test-1", "route:support"),
        lambda: mg.reports.evidence(other, "an-test-1", "route:support"),
        lambda: mg.reports.artifact(other, "an-test-1"),
    ):
        with pytest.raises(NotFoundError):
            read()


def test_a_key_limited_to_environments_sees_only_their_reports(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact("an-prod", environment="prod")))
    mg.reports.import_artifact("w1", raw(artifact("an-any")))
    staging = agent("w1", environments=("staging",))
    assert mg.reports.list_reports(staging)["reports"] == []
    with pytest.raises(NotFoundError):
        mg.reports.get_report(staging, "an-prod")
    prod = agent("w1", environments=("prod",))
    assert [r["analysis_id"] for r in mg.reports.list_reports(prod)["reports"]] == ["an-prod"]


def test_an_unknown_workload_is_not_found(mg: Metergraph) -> None:
    mg.reports.import_artifact("w1", raw(artifact()))
    with pytest.raises(NotFoundError, match="workload"):
        mg.reports.suite_results(agent("w1"), "an-test-1", "route:nope")
