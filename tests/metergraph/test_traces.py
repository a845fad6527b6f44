"""Trace metadata: pages with an opaque cursor, spread samples, cost basis, environment rules, and the
Debug-role trace view with retained content."""

from __future__ import annotations

import json

import pytest
from mg_support import NOW, agent, app, row

from triptych.metergraph.errors import ForbiddenError, InvalidArgument, NotFoundError
from triptych.metergraph.service import Metergraph


def test_pages_walk_every_trace_newest_first_without_repeats(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(minutes_ago=i, trace_id=f"t{i:02d}") for i in range(25)]})
    seen: list[str] = []
    cursor = None
    while True:
        page = mg.traces.query(agent(), limit=10, cursor=cursor)
        seen += [t["trace_id"] for t in page["traces"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert page["truncated"] and "next_cursor" in page["coverage"]["reasons"]
    assert seen == [f"t{i:02d}" for i in range(25)]


def test_pages_are_exact_when_many_traces_share_a_timestamp(mg: Metergraph) -> None:
    rows = [row(minutes_ago=5, trace_id=f"same-{i:02d}") for i in range(23)]
    rows += [
        row(minutes_ago=6, trace_id=f"same-{i:02d}") for i in range(0, 23, 4)
    ]  # older spans of some traces
    mg.ingest.ingest_document(app(), {"rows": rows})
    seen: list[str] = []
    cursor = None
    while True:
        page = mg.traces.query(agent(), limit=4, cursor=cursor)
        seen += [t["trace_id"] for t in page["traces"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert sorted(seen) == [f"same-{i:02d}" for i in range(23)]


def test_a_cursor_only_continues_its_own_query(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(minutes_ago=i, trace_id=f"t{i}") for i in range(3)]})
    cursor = mg.traces.query(agent(), limit=1)["next_cursor"]
    assert cursor is not None
    with pytest.raises(InvalidArgument):
        mg.traces.query(agent(), limit=1, cursor=cursor, route="other")
    with pytest.raises(InvalidArgument):
        mg.traces.query(agent(), cursor="garbage!")


def test_trace_totals_and_span_filters_switch_the_cost_basis(mg: Metergraph) -> None:
    mg.ingest.ingest_document(
        app(),
        {"rows": [row(trace_id="t", route="plan", provider="openai"),
                  row(trace_id="t", route="answer", provider="anthropic", model="claude-3-5-sonnet-latest")]},
    )  # fmt: skip
    [whole] = mg.traces.query(agent())["traces"]
    assert whole["span_count"] == 2 and whole["mixed_providers"] is True
    assert mg.traces.query(agent())["attribution"] == {"cost_basis": "trace_total"}
    filtered = mg.traces.query(agent(), route="plan")
    assert filtered["attribution"] == {"cost_basis": "matching_calls"}
    assert filtered["traces"][0]["span_count"] == 1
    assert filtered["traces"][0]["cost_usd"] < whole["cost_usd"]


def test_a_trace_without_any_price_has_a_null_cost(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t", model="mystery-model")]})
    assert mg.traces.query(agent())["traces"][0]["cost_usd"] is None


def test_spread_samples_are_deterministic_and_spread_over_the_window(mg: Metergraph) -> None:
    rows = [row(minutes_ago=60 * 24 * d + 60 * h, trace_id=f"d{d}h{h}") for d in range(7) for h in (1, 13)]
    mg.ingest.ingest_document(app(), {"rows": rows})
    first = mg.traces.query(agent(), sample="spread", limit=50)
    second = mg.traces.query(agent(), sample="spread", limit=50)
    assert first["traces"] == second["traces"]
    assert first["coverage"]["rows"]["shape"] == "sample" and "sampled" in first["coverage"]["reasons"]
    assert first["sample"]["slices"] == 10
    assert len({t["trace_id"][:2] for t in first["traces"]}) >= 6  # drawn across the days, not the newest
    with pytest.raises(InvalidArgument):
        mg.traces.query(agent(), sample="spread", cursor="x")


def test_restricted_keys_see_only_traces_wholly_inside_their_environments(mg: Metergraph) -> None:
    mg.ingest.ingest_document(
        app(),
        {"rows": [row(trace_id="prod-only", environment="prod"), row(trace_id="mixed", environment="prod"),
                  row(trace_id="mixed", environment="dev"), row(trace_id="untagged")]},
    )  # fmt: skip
    restricted = agent(environments=("prod",))
    assert [t["trace_id"] for t in mg.traces.query(restricted)["traces"]] == ["prod-only"]
    with pytest.raises(ForbiddenError):
        mg.traces.query(restricted, environment=["dev"])
    with pytest.raises(NotFoundError):
        mg.traces.get_trace(restricted, "mixed")
    unrestricted = {t["trace_id"]: t for t in mg.traces.query(agent())["traces"]}
    assert unrestricted["mixed"]["environment"] is None and unrestricted["untagged"]["environment"] is None


def test_investigation_reads_never_carry_content(mg: Metergraph) -> None:
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    secret = "SECRET-PROMPT-TEXT"
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t", request_json=secret, response_text=secret)]})
    for document in (
        mg.traces.query(agent()),
        mg.traces.query(agent(), sample="spread"),
        mg.usage.usage(agent(), 7, 100, None),
        mg.workspace.routes(agent()),
        mg.workspace.context(agent()),
    ):
        assert secret not in json.dumps(document)
        assert document["content_included"] is False


def test_get_trace_needs_the_debug_role_and_returns_retained_content(mg: Metergraph) -> None:
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t", request_json="hello", response_text="world"),
                                               row(trace_id="t")]})  # fmt: skip
    with pytest.raises(ForbiddenError):
        mg.traces.get_trace(agent(role="metadata"), "t")
    trace = mg.traces.get_trace(agent(role="debug"), "t")
    assert trace["schema_version"] == "metergraph.trace-debug/v1"
    assert [s["content"]["request"] for s in trace["spans"]] == [
        {"state": "captured", "text": "hello"},
        {"state": "not_retained", "text": None},
    ]
    with pytest.raises(NotFoundError):
        mg.traces.get_trace(agent(), "unknown")
    with pytest.raises(NotFoundError):
        mg.traces.get_trace(agent("w2"), "t")


def test_route_and_workload_must_both_match(mg: Metergraph) -> None:
    mg.ingest.ingest_document(
        app(), {"rows": [row(trace_id="a", route="plan"), row(trace_id="b", route="answer")]}
    )
    assert [t["trace_id"] for t in mg.traces.query(agent(), workload="plan")["traces"]] == ["a"]
    assert [t["trace_id"] for t in mg.traces.query(agent(), route="plan", workload="plan")["traces"]] == ["a"]
    assert mg.traces.query(agent(), route="plan", workload="answer")["traces"] == []


def test_a_trace_id_selects_that_whole_trace_and_a_request_id_the_calls_that_carry_it(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [
        row(minutes_ago=3, trace_id="t1", request_id="req-a", route="plan"),
        row(minutes_ago=2, trace_id="t1", request_id="req-b", route="answer"),
        row(minutes_ago=1, trace_id="t2", request_id="req-c"),
        row(minutes_ago=4, request_id="req-lone"),  # no trace id: a trace of its own
    ]})  # fmt: skip
    whole = mg.traces.query(agent(), trace_id="t1")
    assert [(t["trace_id"], t["span_count"]) for t in whole["traces"]] == [("t1", 2)]
    assert whole["attribution"]["cost_basis"] == "trace_total"  # a trace id selects whole traces
    assert whole["coverage"]["filters"]["trace_id"] == "t1"
    by_request = mg.traces.query(agent(), request_id="req-b")
    assert [(t["trace_id"], t["span_count"], t["routes"]) for t in by_request["traces"]] == [
        ("t1", 1, ["answer"])
    ]
    assert by_request["attribution"]["cost_basis"] == "matching_calls"  # a request id selects calls
    lone = mg.traces.query(agent(), request_id="req-lone")["traces"]
    assert len(lone) == 1 and lone[0]["trace_id"].startswith("call:")
    # The key a trace read lists for a call without a trace id finds that call again.
    assert [t["trace_id"] for t in mg.traces.query(agent(), trace_id=lone[0]["trace_id"])["traces"]] == [
        lone[0]["trace_id"]
    ]
    assert mg.traces.query(agent(), trace_id="t1", request_id="req-c")["traces"] == []  # both must match
    assert mg.traces.query(agent(), trace_id="nope")["traces"] == []
    assert mg.traces.query(agent("w2"), trace_id="t1")["traces"] == []  # never another workspace's
    assert mg.traces.query(agent(environments=("prod",)), trace_id="t1")["traces"] == []  # untagged


@pytest.mark.parametrize("name", ["cursor", "trace_id", "request_id"])
def test_a_spread_sample_takes_no_cursor_trace_id_or_request_id(mg: Metergraph, name: str) -> None:
    with pytest.raises(InvalidArgument, match=f"takes no {name}"):
        mg.traces.query(agent(), sample="spread", **{name: "x"})
