"""Ingest: validation is all-or-nothing, outcomes are ignored, content is dropped unless retained,
every row is priced and stored with its rollups."""

from __future__ import annotations

import json

import pytest
from mg_support import NOW, agent, app, row

from triptych.metergraph.ingest import BadBatch
from triptych.metergraph.service import Metergraph


def test_accepted_rows_are_stored_priced_and_outcomes_ignored(mg: Metergraph) -> None:
    result = mg.ingest.ingest_document(
        app(), {"rows": [row(tags={"prompt_id": "p-1"}), {"event_type": "outcome", "route": "x"}]}
    )
    assert (result.accepted, result.ignored) == (1, 1)
    [stored] = mg.store.raw_calls("w1")
    assert stored["cost_status"] == "priced"
    assert stored["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)
    assert stored["price_source"] is None  # nothing to add to the columns below (no partial or ended price)
    # Priced by the product's own catalogue, and the entry that did it recorded with the call.
    assert stored["price_catalog"].startswith("metergraph-core 0.7.4")
    assert stored["price_id"] == "openai/gpt-4o:openai-api:global:2024-08-06"
    assert stored["cost_provenance"] is None  # stored only for a gateway's charge: it is the catalogue's
    assert json.loads(stored["tags"]) == {"prompt_id": "p-1"}


@pytest.mark.parametrize(
    "document",
    [
        {"schema_version": 2, "rows": [row()]},
        {"rows": []},
        {"rows": "nope"},
        {"rows": [row(), "not an object"]},
        {"rows": [row(), row(input_tokens=-1)]},
        {"rows": [row(ts="yesterday")]},
        {"rows": [row(tags="not a map")]},
        {"rows": [row() for _ in range(51)]},
        [row()],
    ],
)
def test_a_bad_batch_is_refused_whole_and_nothing_is_written(mg: Metergraph, document: object) -> None:
    with pytest.raises(BadBatch):
        mg.ingest.ingest_document(app(), document)
    assert mg.store.count_calls("w1") == 0


def test_content_is_dropped_unless_the_workspace_retains_it(mg: Metergraph) -> None:
    content = {"request_json": '{"messages": "secret prompt"}', "response_text": "secret answer"}
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t1", **content)]})
    assert mg.store.raw_content("w1") == []
    mg.store.set_retain_content("w1", True, NOW.isoformat())
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t2", **content)]})
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t3", content_opted_in=False, **content)]})
    [kept] = mg.store.raw_content("w1")
    assert kept["response_text"] == "secret answer"
    # Content never sits in the call rows themselves.
    assert "secret" not in json.dumps(mg.store.raw_calls("w1"))


def test_whitespace_environments_are_stored_as_untagged(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(environment="  "), row(environment="prod")]})
    assert [c["environment"] for c in mg.store.raw_calls("w1")] == [None, "prod"]


def test_sdk_error_boolean_and_raw_error_message_both_mark_failures(mg: Metergraph) -> None:
    mg.ingest.ingest_document(
        app(), {"rows": [row(error=True, error_type="Timeout"), row(error="boom"), row()]}
    )
    calls = mg.store.raw_calls("w1")
    assert [c["error"] for c in calls] == [1, 1, 0]
    assert calls[1]["error_type"] == "boom"


def test_reads_see_rows_only_in_their_own_workspace(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app("w1"), {"rows": [row(trace_id="a")]})
    mg.ingest.ingest_document(app("w2"), {"rows": [row(30, trace_id="b"), row(20, trace_id="c")]})
    assert mg.usage.aggregates(agent("w1"), days=7)["totals"]["calls"] == 1
    assert [t["trace_id"] for t in mg.traces.query(agent("w2"))["traces"]] == ["c", "b"]


def test_rows_keep_batch_order_and_their_own_nulls_whatever_columns_other_rows_fill(mg: Metergraph) -> None:
    # The insert names only the columns some row of the batch fills, and rows with retained content go
    # one by one: ids must still follow the batch and every row keep exactly its own values.
    mg.store.set_retain_content("w1", True, NOW.isoformat())
    rows = [
        row(trace_id="a", environment="prod"),
        row(trace_id="b", cache_read_tokens=300, tags={"k": "v"}),
        row(trace_id="c", response_text="kept"),
        row(trace_id="d", latency_ms=None, status=None, model=None),
        row(trace_id="e", response_text="kept too", environment="dev"),
    ]
    mg.ingest.ingest_document(app(), {"rows": rows})
    stored = mg.store.raw_calls("w1")
    assert [s["trace_id"] for s in stored] == ["a", "b", "c", "d", "e"]
    assert [s["environment"] for s in stored] == ["prod", None, None, None, "dev"]
    assert [s["cache_read_tokens"] for s in stored] == [None, 300, None, None, None]
    assert [s["tags"] for s in stored] == [None, '{"k":"v"}', None, None, None]
    assert (stored[3]["latency_ms"], stored[3]["status"], stored[3]["model"]) == (None, None, None)
    assert stored[3]["cost_status"] == "unpriced" and stored[3]["cost_unknown"] == 1
    content = {c["call_id"]: c["response_text"] for c in mg.store.raw_content("w1")}
    assert content == {stored[2]["id"]: "kept", stored[4]["id"]: "kept too"}


@pytest.mark.parametrize(
    "tags",
    [
        {"prompt_id": "p-1", "team": "a"},
        {"k": 'é中\u2028/\\"\x01\x1f', "": ""},
        {"n": 1, "f": 1e16, "x": [1, {"y": None}]},
    ],
)
def test_tags_are_stored_as_the_standard_librarys_compact_json(
    mg: Metergraph, tags: dict[str, object]
) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(tags=tags)]})
    [stored] = mg.store.raw_calls("w1")
    assert stored["tags"] == json.dumps(tags, ensure_ascii=False, separators=(",", ":"))


def test_a_failing_batch_leaves_no_rows_rollups_or_batch_record(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row()]})
    before = mg.usage.aggregates(agent(), days=7, group_by=["route"])["totals"]
    # A value the engine cannot store (beyond a 64-bit integer) fails the batch after its rows were built.
    with pytest.raises(OverflowError):
        mg.ingest.ingest_document(app(), {"rows": [row(), row(input_tokens=2**70)]})
    assert mg.store.count_calls("w1") == 1
    assert mg.usage.aggregates(agent(), days=7, group_by=["route"])["totals"] == before
    assert mg.store.batch_health("w1", 0)["processed"] == 1


def test_the_gc_pause_nests_and_restores_what_it_found() -> None:
    import gc

    from triptych.metergraph.ingest import gc_paused

    assert gc.isenabled()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer batch is still running
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()
