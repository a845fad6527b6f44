"""The ``CallStore`` contract, on every engine: what a stored batch reads back as, through every read the
services use. Batches are built by ingest's own normalization (the one producer of ``CallBatch``) and
handed to the store directly."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mg_support import NOW, row

from triptych.metergraph.call_model import SUMS, CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.ingest import IngestService
from triptych.metergraph.keys import AppPrincipal
from triptych.metergraph.pricing import Pricer

NOW_MS = int(NOW.timestamp() * 1000)
DAY_MS = 86_400_000
WINDOW = (NOW_MS - 7 * DAY_MS, NOW_MS + DAY_MS)
# normalize() needs neither store: only insert_batch below writes.
NORMALIZE = IngestService(None, None, Pricer(), 5000)  # type: ignore[arg-type]


def put(store: CallStore, rows: list[dict[str, Any]], workspace: str = "w1", retain: bool = False) -> int:
    """Store ``rows`` as one batch; how many calls the batch held."""
    n = NORMALIZE.normalize(AppPrincipal(workspace, "app"), rows, "sdk", retain)
    batch = {"received_ms": NOW_MS, "processed_ms": NOW_MS, "ignored": n.ignored, "dropped": 0,
             "transport_errors": 0, "unknown_attributes": 0, "content_dropped": n.content_dropped}  # fmt: skip
    store.insert_batch(workspace, "sdk", n.calls, n.contents, batch, NOW.isoformat(), n.import_keys)
    return n.calls.size


def window(workspace: str = "w1", **filters: Any) -> CallFilter:
    return CallFilter(workspace, *WINDOW, **filters)


def content(**fields: Any) -> dict[str, Any]:
    return {"request_json": '{"messages": "question"}', "response_text": "answer", **fields}


def sums(found: dict[tuple[Any, ...], Any]) -> dict[tuple[Any, ...], dict[str, float]]:
    return {k: {name: round(v.get(name), 9) for name in SUMS} for k, v in found.items()}


def test_a_batch_reads_back_row_for_row_in_batch_order_with_its_record(call_store: CallStore) -> None:
    rows = [row(trace_id="a", environment="prod"), row(trace_id="b", tags={"k": "v"}), row(trace_id="c")]
    put(call_store, rows)
    stored = call_store.raw_calls("w1")
    assert [c["trace_id"] for c in stored] == ["a", "b", "c"]
    assert [c["environment"] for c in stored] == ["prod", None, None]
    assert [c["id"] for c in stored] == sorted(c["id"] for c in stored)
    assert call_store.count_calls("w1") == 3
    # The batch's record went to the metadata store the call store was opened with.
    health = call_store.metadata.batch_health("w1", 0)  # type: ignore[attr-defined]
    assert (health["processed"], health["accepted"]) == (1, 3)
    assert call_store.metadata.workspace("w1") is not None  # type: ignore[attr-defined]


def test_workspaces_never_see_each_others_calls(call_store: CallStore) -> None:
    put(call_store, [row(trace_id="a")], "w1")
    put(call_store, [row(trace_id="b"), row(trace_id="c")], "w2", retain=True)
    assert [c["trace_id"] for c in call_store.raw_calls("w1")] == ["a"]
    assert call_store.count_calls("w2") == 2 and call_store.count_calls("w3") == 0
    assert call_store.raw_content("w1") == []
    assert call_store.aggregate_raw(window("w3"), ("model",), None) == {}
    assert call_store.trace_page(window("w3"), None, None, 10) == []


def test_content_is_stored_apart_only_where_the_batch_carries_it(call_store: CallStore) -> None:
    put(call_store, [row(trace_id="a", **content()), row(trace_id="b")], retain=True)
    [kept] = call_store.raw_content("w1")
    assert kept["response_text"] == "answer"
    a, b = call_store.raw_calls("w1")
    assert kept["call_id"] == a["id"] and (a["has_content"], b["has_content"]) == (1, 0)
    [span] = call_store.trace_spans("w1", "a", 10)
    assert (span["request_text"], span["response_text"]) == ('{"messages": "question"}', "answer")
    [plain] = call_store.trace_spans("w1", "b", 10)
    assert plain["request_text"] is None and plain["response_text"] is None


def test_rows_with_an_import_identity_already_stored_are_left_out(call_store: CallStore) -> None:
    ident = {"import_source": "portkey", "import_source_scope": "ws", "import_event_id": "e1"}
    put(call_store, [row(trace_id="a", **ident), row(trace_id="b")])
    put(call_store, [row(trace_id="a2", **ident), row(trace_id="c")])
    assert [c["trace_id"] for c in call_store.raw_calls("w1")] == ["a", "b", "c"]
    # Another workspace's identities are its own.
    put(call_store, [row(trace_id="x", **ident)], "w2")
    assert call_store.count_calls("w2") == 1


def test_rollups_and_raw_calls_give_the_same_sums(call_store: CallStore) -> None:
    rows = [
        row(minutes_ago=60 * 24 * 2, model="gpt-4o", latency_ms=120),
        row(minutes_ago=30, model="gpt-4o-mini", status="error", latency_ms=900),
        row(minutes_ago=10, model="gpt-4o-mini", latency_ms=None, environment="prod"),
    ]
    put(call_store, rows)
    dims = ("provider", "model")
    day_from, day_to = WINDOW[0] // DAY_MS, WINDOW[1] // DAY_MS + 1
    rolled = call_store.aggregate_rollups("rollup_daily", window(), day_from, day_to, dims, 1)
    raw = call_store.aggregate_raw(window(), dims, None)
    assert sums(rolled) == sums(raw)
    assert {k: v.get("calls") for k, v in raw.items()} == {
        ("openai", "gpt-4o"): 1,
        ("openai", "gpt-4o-mini"): 2,
    }
    assert raw[("openai", "gpt-4o-mini")].get("errors") == 1
    assert int(raw[("openai", "gpt-4o-mini")].hist.sum()) == 1  # one of the two has a latency
    by_env = call_store.aggregate_rollups(
        "rollup_daily", window(environments=["prod"]), day_from, day_to, (), 1
    )
    assert by_env[()].get("calls") == 1


def test_a_metadata_group_by_tells_values_from_ineligible_and_missing_keys(call_store: CallStore) -> None:
    put(call_store, [row(tags={"team": "a"}), row(tags={"team": "a"}), row(tags={"team": 7}), row()])
    found = call_store.aggregate_raw(window(), (), "team")
    assert {k: v.get("calls") for k, v in found.items()} == {("v", "a"): 2, ("i", None): 1, ("m", None): 1}
    only_a = call_store.aggregate_raw(window(metadata=[("team", "a")]), ("model",), None)
    assert {k: v.get("calls") for k, v in only_a.items()} == {("gpt-4o",): 2}


def test_traces_page_newest_first_and_a_cursor_resumes_after_the_last(call_store: CallStore) -> None:
    put(call_store, [row(50, trace_id="t1"), row(40, trace_id="t2"), row(45, trace_id="t2"), row(30)])
    page = call_store.trace_page(window(), None, None, 2)
    assert [t["trace_key"] for t in page][0].startswith("call:")  # the untraced call is newest
    assert page[1]["trace_key"] == "t2" and page[1]["span_count"] == 2
    rest = call_store.trace_page(window(), None, page[-1]["position"], 10)
    assert [t["trace_key"] for t in rest] == ["t1"]
    [summary] = call_store.trace_summaries(window(), ["t2"])
    assert summary["input_tokens"] == 2000 and summary["first_ms"] < summary["last_ms"]


def test_a_trace_with_a_span_outside_the_allowed_environments_is_left_out(call_store: CallStore) -> None:
    put(call_store, [row(20, trace_id="mixed", environment="prod"), row(19, trace_id="mixed", environment="dev"),
                     row(10, trace_id="clean", environment="prod")])  # fmt: skip
    page = call_store.trace_page(window(environments=["prod"]), ["prod"], None, 10)
    assert [t["trace_key"] for t in page] == ["clean"]


def test_samples_pick_the_call_nearest_each_slice_middle(call_store: CallStore) -> None:
    put(call_store, [row(100, trace_id="early"), row(10, trace_id="late")])
    start = NOW_MS - 120 * 60_000
    slices = [(start, start + 60 * 60_000), (start + 60 * 60_000, NOW_MS)]
    assert call_store.sample_calls(window(), slices) == ["early", "late"]


def test_route_calls_count_each_route_and_its_calls_with_content(call_store: CallStore) -> None:
    put(call_store, [row(route="support", **content()), row(route="support"), row(route="triage"),
                     row(route=None)], retain=True)  # fmt: skip
    found = call_store.route_calls(window())
    assert {k: (v["calls"], v["replay_eligible_calls"]) for k, v in found.items()} == {
        "support": (2, 1),
        "triage": (1, 0),
    }
    assert found["triage"]["last_ms"] == NOW_MS - 10 * 60_000
    assert call_store.replay_eligible_by_route(window()) == {"support": 1}


def test_workload_reads_group_calls_and_return_retained_text(call_store: CallStore) -> None:
    put(call_store, [row(20, route="support", tags={"a": "1"}, **content(response_text="one")),
                     row(10, route="support", tags={"a": "2"}, **content(response_text="two")),
                     row(5, route="support", status="error", **content())], retain=True)  # fmt: skip
    features = call_store.workload_features(window())
    assert sum(f["calls"] for f in features) == 3 and sum(f["retained"] for f in features) == 3
    assert {f["keys"] for f in features} == {"a", ""}
    retained = call_store.retained_calls(window(), 5)
    assert [c["response_text"] for c in retained] == ["two", "one"]  # successful ones, newest first


def test_rebuilt_rollups_hold_every_call_once(call_store: CallStore) -> None:
    put(call_store, [row(30), row(20, model="gpt-4o-mini")])
    call_store.rebuild_rollups()
    day_from, day_to = WINDOW[0] // DAY_MS, WINDOW[1] // DAY_MS + 1
    rolled = call_store.aggregate_rollups("rollup_daily_coarse", window(), day_from, day_to, (), 1)
    assert rolled[()].get("calls") == 2


def test_purging_keeps_every_call_inside_the_retention_window(call_store: CallStore) -> None:
    put(call_store, [row(10), row(20)])
    call_store.retention_days = 30
    assert call_store.purge_expired(NOW + timedelta(days=1)) == 0
    assert call_store.count_calls("w1") == 2
