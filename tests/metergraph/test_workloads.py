"""Classification into workloads from content-free features, saved with stable ids and matched by
``metergraph_query_traces``; routes' evaluation contract and replay-eligible counts."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from mg_support import NOW, agent, app, row

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.errors import ForbiddenError
from triptych.metergraph.service import Metergraph
from triptych.metergraph.workload_match import KEYS_SQL, SHAPE_SQL, shape_code, shape_label, tags_signature


def calls(n: int, **fields: Any) -> list[dict[str, Any]]:
    return [row(minutes_ago=10 + i, trace_id=uuid.uuid4().hex, **fields) for i in range(n)]


def traffic(mg: Metergraph, workspace: str = "w1") -> None:
    """Three kinds of work: short tagged support replies (plus two outliers of a longer shape), long
    support answers with one tag, and summaries on two models."""
    rows = (
        calls(30, tags={"prompt_id": "reply-v3", "tenant": "a"}, input_tokens=300, output_tokens=50,
              request_json={"messages": [{"role": "user", "content": "hi"}]})
        + calls(2, tags={"tenant": "b", "prompt_id": "reply-v2"}, input_tokens=600, output_tokens=50)
        + calls(25, tags={"prompt_id": "answer"}, input_tokens=5000, output_tokens=500)
        + calls(20, route="summarize", input_tokens=8000, output_tokens=300)
        + calls(20, route="summarize", model="gpt-4o-mini", input_tokens=9000, output_tokens=200)
    )  # fmt: skip
    mg.ingest.ingest_rows(app(workspace), rows, "sdk")


def classify(mg: Metergraph, workspace: str = "w1", role: str = "debug") -> dict[str, Any]:
    return mg.workloads.start_classification(agent(workspace, role), days=7)


def test_calls_group_into_workloads_by_route_metadata_keys_and_token_shape(mg: Metergraph) -> None:
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    traffic(mg)
    doc = classify(mg)
    run, workloads = doc["run"], doc["workloads"]
    assert run["status"] == "succeeded" and run["kind"] == "classification"
    assert run["progress"] == {"calls": 97, "workloads": 3, "days": 7} and doc["content_included"] is False
    by_calls = {w["calls"]: w for w in workloads}
    assert sorted(by_calls) == [25, 32, 40]
    tagged = by_calls[32]  # the two outliers of a longer input joined the family's main shape
    assert tagged["route"] == "support" and tagged["metadata_keys"] == ["prompt_id", "tenant"]
    assert tagged["token_shapes"] == [shape_label(9), shape_label(17)]
    assert tagged["workload_name"] == "support [prompt_id, tenant] · in 0-512 / out 0-64"
    assert tagged["replay_eligible_calls"] == 30
    summaries = by_calls[40]
    assert summaries["route"] == "summarize" and summaries["metadata_keys"] == []
    assert [(m["model"], m["calls"]) for m in summaries["models"]] == [("gpt-4o", 20), ("gpt-4o-mini", 20)]
    assert summaries["cost_usd"] == pytest.approx(
        20 * (8000 * 2.5e-6 + 300 * 10e-6) + 20 * (9000 * 0.15e-6 + 200 * 0.6e-6)
    )
    assert by_calls[25]["metadata_keys"] == ["prompt_id"] and by_calls[25]["replay_eligible_calls"] == 0


def test_workload_ids_are_stable_across_runs_and_new_calls(mg: Metergraph) -> None:
    traffic(mg)
    first = {w["workload_id"] for w in classify(mg)["workloads"]}
    assert {w["workload_id"] for w in classify(mg)["workloads"]} == first
    mg.ingest.ingest_rows(app("w1"), calls(5, route="summarize", input_tokens=7000, output_tokens=250), "sdk")
    assert {w["workload_id"] for w in classify(mg)["workloads"]} == first
    assert len(mg.workloads.store.runs("w1", 10)) == 3


def test_query_traces_matches_a_saved_workload(mg: Metergraph) -> None:
    traffic(mg)
    workloads = {w["calls"]: w["workload_id"] for w in classify(mg)["workloads"]}
    who = agent("w1", "metadata")
    tagged = mg.traces.query(who, workload=workloads[32], limit=200)
    assert len(tagged["traces"]) == 32 and {tuple(t["routes"]) for t in tagged["traces"]} == {("support",)}
    assert tagged["attribution"]["cost_basis"] == "matching_calls"
    assert len(mg.traces.query(who, workload=workloads[40], limit=200)["traces"]) == 40
    # With a route too, both must hold.
    assert mg.traces.query(who, workload=workloads[40], route="support")["traces"] == []
    assert len(mg.traces.query(who, workload=workloads[40], route="summarize", limit=200)["traces"]) == 40
    # A workload that is no saved workload's id is a route, as before.
    assert len(mg.traces.query(who, workload="summarize", limit=200)["traces"]) == 40
    # New calls of the same kind match the saved workload without a new classification.
    mg.ingest.ingest_rows(app("w1"), calls(3, route="summarize", input_tokens=6000, output_tokens=100), "sdk")
    assert len(mg.traces.query(who, workload=workloads[40], limit=200)["traces"]) == 43


def test_workloads_are_isolated_by_workspace(mg: Metergraph) -> None:
    traffic(mg, "w1")
    traffic(mg, "w2")
    w1 = {w["workload_id"] for w in classify(mg, "w1")["workloads"]}
    w2 = {w["workload_id"] for w in classify(mg, "w2")["workloads"]}
    assert w1.isdisjoint(w2) and len(w1) == len(w2) == 3
    for workload in w1:
        assert mg.traces.query(agent("w2", "metadata"), workload=workload)["traces"] == []
        assert mg.workloads.match("w2", workload) is None
    mg.ingest.ingest_rows(app("w2"), calls(1, route="other"), "sdk")
    classify(mg, "w2")  # replacing w2's workloads leaves w1's alone
    assert {w["workload_id"] for w in mg.workloads.store.workloads("w1")} == w1


def test_classification_needs_the_debug_role_and_a_whole_workspace_key(mg: Metergraph) -> None:
    with pytest.raises(ForbiddenError):
        classify(mg, role="metadata")
    with pytest.raises(ForbiddenError, match="environment allowlist"):
        mg.workloads.start_classification(agent("w1", "debug", ("prod",)))


def test_a_failed_save_leaves_the_previous_workloads(mg: Metergraph) -> None:
    traffic(mg)
    classify(mg)
    saved = mg.workloads.store.workloads("w1")
    row_ = {**saved[0], "stats": saved[0]["stats"]}
    run = {"run_id": "r-dup", "workspace": "w1", "status": "succeeded", "created_at": NOW.isoformat(),
           "started_at": None, "finished_at": None, "error_code": None, "days": 7, "calls": 0, "workloads": 2}  # fmt: skip
    with pytest.raises(sqlite3.IntegrityError):  # a duplicate id: the insert fails
        mg.workloads.store.replace_workloads("w1", "r-dup", [row_, row_], run)
    assert mg.workloads.store.workloads("w1") == saved
    assert mg.workloads.store.run("w1", "r-dup") is None


def test_routes_report_their_evaluation_contract_and_replay_eligible_calls(mg: Metergraph) -> None:
    contract = {"version": 2, "checks": [{"kind": "json_schema", "schema": {"type": "object"}}],
                "candidates": ["gpt-4o-mini"]}  # fmt: skip
    mg.metadata.set_route(
        "w1", "support", "replies", {"model": "gpt-4o", "evaluation_contract": contract}, NOW.isoformat()
    )
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    traffic(mg)
    mg.ingest.ingest_rows(app("w1"), calls(4, environment="prod", response_text="only the answer"), "sdk")
    mg.ingest.ingest_rows(app("w1"), calls(3, environment="prod", request_json="q?"), "sdk")
    routes = {r["route"]: r for r in mg.workspace.routes(agent("w1", "metadata"))["routes"]}
    support = routes["support"]
    assert support["evaluation_contract"] == contract and support["evaluation_contract_version"] == 2
    assert (
        support["evaluation_contract_hash"].startswith("sha256:")
        and len(support["evaluation_contract_hash"]) == 71
    )
    assert support["calls"] == 64 and support["replay_eligible_calls"] == 33  # response-only content is not
    assert (
        routes["summarize"]["evaluation_contract"] is None
        and routes["summarize"]["replay_eligible_calls"] == 0
    )
    prod = {r["route"]: r for r in mg.workspace.routes(agent("w1", "metadata", ("prod",)))["routes"]}
    assert prod["support"]["replay_eligible_calls"] == 3
    mg.metadata.set_retain_content("w1", False, NOW.isoformat())
    assert mg.workspace.routes(agent("w1"))["routes"][0]["replay_eligible_calls"] == 0


def test_get_trace_says_which_spans_replay_can_resend(mg: Metergraph) -> None:
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    mg.ingest.ingest_rows(app("w1"), [row(trace_id="t", request_json="q?"), row(trace_id="t")], "sdk")
    trace = mg.traces.get_trace(agent("w1", "debug"), "t")
    assert [s["replay_eligible"] for s in trace["spans"]] == [True, False]
    assert trace["replay"]["eligible"] is True and "model" in trace["replay"]["allowlisted_overrides"]


@pytest.mark.parametrize(
    "tags", [None, "{}", '{"b": 1, "a": "x"}', '{"é": 1, "z": 2, "Z": 3, "a.b": 4, "中": 5}']
)
def test_the_python_key_signature_matches_the_sql_one(tags: str | None) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE calls (tags TEXT)")
    conn.execute("INSERT INTO calls VALUES (?)", (tags,))
    in_sql = conn.execute(f"SELECT {KEYS_SQL} FROM calls").fetchone()[0]
    assert tags_signature(tags) == in_sql


def test_the_python_shape_matches_the_sql_one() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE calls (input_tokens INTEGER, output_tokens INTEGER)")
    values = [None, 0, 63, 64, 511, 512, 1023, 1024, 4095, 4096, 32767, 32768, 10**9]
    pairs = [(i, o) for i in values for o in values]
    conn.executemany("INSERT INTO calls VALUES (?, ?)", pairs)
    in_sql = [r[0] for r in conn.execute(f"SELECT {SHAPE_SQL} FROM calls ORDER BY rowid")]
    assert [shape_code(i, o) for i, o in pairs] == in_sql
    assert len(set(in_sql)) == 5 * 4


def test_get_trace_names_the_workloads_its_calls_belong_to(mg: Metergraph) -> None:
    traffic(mg)
    mg.ingest.ingest_rows(app("w1"), [row(trace_id="mixed", route="summarize", input_tokens=8000,
                                          output_tokens=300), row(trace_id="mixed", route="elsewhere")], "sdk")  # fmt: skip
    doc = classify(mg)
    by_route = {w["route"]: w["workload_id"] for w in doc["workloads"]}
    found = mg.traces.get_trace(agent("w1", "debug"), "mixed")["root_cause"]["classifications"]
    assert {c["classification"]["workload_id"] for c in found} == {
        by_route["summarize"],
        by_route["elsewhere"],
    }
    assert all(c["analysis_run_id"] == doc["run"]["run_id"] and len(c["span_ids"]) == 1 for c in found)
    assert found[0]["analysis_run"]["status"] == "succeeded"
    assert mg.traces.get_trace(agent("w1", "debug"), "mixed")["root_cause"] == {"classifications": found}


def test_the_retained_calls_of_a_workload_are_its_newest_with_request_and_response(mg: Metergraph) -> None:
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    traffic(mg)
    mg.ingest.ingest_rows(app("w1"), [row(minutes_ago=1, tags={"prompt_id": "x", "tenant": "c"},
                                          input_tokens=300, output_tokens=50, request_json="q", response_text="a",
                                          status="error")], "sdk")  # fmt: skip
    tagged = next(w for w in classify(mg)["workloads"] if w["calls"] == 33)
    f = CallFilter("w1", 0, 2**62, workload=mg.workloads.match("w1", tagged["workload_id"]))
    assert mg.calls.replay_eligible_by_route(f) == {"support": 31}
    assert mg.calls.retained_calls(f, 10) == []  # the 30 calls kept their request but no response
    replies = [row(minutes_ago=2 + i / 10, trace_id=f"r{i}", tags={"prompt_id": "y", "tenant": "d"},
                   input_tokens=300, output_tokens=50, request_json="q", response_text=f"a{i}") for i in range(3)]  # fmt: skip
    mg.ingest.ingest_rows(app("w1"), replies, "sdk")
    newest = mg.calls.retained_calls(f, 2)
    assert [c["trace_id"] for c in newest] == ["r0", "r1"]  # the failed call is not replayable
    assert all(c["request_text"] and c["response_text"] for c in newest)
    assert [c["trace_id"] for c in mg.calls.retained_calls(f, 10)] == ["r0", "r1", "r2"]
    other = CallFilter("w1", 0, 2**62, routes=["summarize"])
    assert mg.calls.retained_calls(other, 10) == [] and mg.calls.replay_eligible_by_route(other) == {}


def test_an_empty_workspace_classifies_into_no_workloads(mg: Metergraph) -> None:
    traffic(mg, "w1")
    doc = classify(mg, "empty")
    assert doc["workloads"] == [] and doc["run"]["status"] == "succeeded"
    assert doc["run"]["progress"] == {"calls": 0, "workloads": 0, "days": 7}


def test_a_spread_sample_of_a_workload_draws_only_its_calls(mg: Metergraph) -> None:
    traffic(mg)
    workloads = {w["calls"]: w["workload_id"] for w in classify(mg)["workloads"]}
    sample = mg.traces.query(agent("w1", "metadata"), workload=workloads[25], sample="spread", limit=10)
    assert sample["sample"]["slices_with_calls"] >= 1 and sample["traces"]
    assert all(t["routes"] == ["support"] and t["input_tokens"] == 5000 for t in sample["traces"])


def test_a_classification_run_links_to_the_analysis_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIPTYCH_PUBLIC_URL", "https://mg.example.com/")
    linked = Metergraph.open(tmp_path, clock=lambda: NOW)
    try:
        run = classify(linked)["run"]
    finally:
        linked.close()
    assert run["app_url"] == "https://mg.example.com/app/w/w1/analysis"
    assert run["report"]["app_url"] is None  # a classification writes no report


def test_each_engine_computes_the_key_signature_and_shape_as_python_does(mg: Metergraph) -> None:
    tag_sets = [None, {}, {"b": 1, "a": "x"}, {"é": 1, "z": 2, "Z": 3, "a.b": 4, "中": 5}]
    values = [None, 0, 63, 64, 511, 512, 4096, 32768]
    rows = [row(tags=tags, input_tokens=i, output_tokens=o)
            for tags in tag_sets for i in values for o in values[::3]]  # fmt: skip
    mg.ingest.ingest_rows(app("w1"), rows, "sdk")
    found = {
        (g["keys"], g["shape"]): g["calls"] for g in mg.calls.workload_features(CallFilter("w1", 0, 2**62))
    }
    expected: dict[tuple[str, int], int] = {}
    for r in rows:
        signature = tags_signature(None if r["tags"] is None else json.dumps(r["tags"]))
        key = (signature, shape_code(r["input_tokens"], r["output_tokens"]))
        expected[key] = expected.get(key, 0) + 1
    assert found == expected and len({k for k, _ in found}) == 3  # None and {} have no keys alike
