"""Ingest: a batch is refused whole only for what the upstream server refuses (its shape, a row that is
not an object); a row with a refused value is ignored as outcomes are; content is dropped unless
retained; costs arrive as numbers or decimal strings; an imported row is stored once; every row is
priced and stored with its rollups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mg_support import NOW, agent, app, embedded_only, row

from triptych.core.db import Database
from triptych.metergraph import import_events
from triptych.metergraph.import_events import ImportKey
from triptych.metergraph.ingest import BadBatch
from triptych.metergraph.service import Metergraph


def test_accepted_rows_are_stored_priced_and_outcomes_ignored(mg: Metergraph) -> None:
    result = mg.ingest.ingest_document(
        app(), {"rows": [row(tags={"prompt_id": "p-1"}), {"event_type": "outcome", "route": "x"}]}
    )
    assert (result.accepted, result.ignored) == (1, 1)
    [stored] = mg.calls.raw_calls("w1")
    assert stored["cost_status"] == "priced"
    assert stored["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)
    assert stored["price_source"] is None  # nothing to add to the columns below (no partial or ended price)
    # Priced by the product's own catalogue, and the entry that did it recorded with the call.
    assert stored["price_catalog"].startswith("metergraph-core 0.7.4")
    assert stored["price_id"] == "openai/gpt-4o:openai-api:global:2024-08-06"
    assert stored["cost_provenance"] is None  # stored only for a gateway's charge: it is the catalogue's
    assert json.loads(stored["tags"]) == {"prompt_id": "p-1"}


@embedded_only
@pytest.mark.parametrize(
    "document",
    [
        {"schema_version": 2, "rows": [row()]},
        {"rows": []},
        {"rows": "nope"},
        {"rows": [row(), "not an object"]},
        {"rows": [row() for _ in range(51)]},
        {"rows": [row()], "meta": "x"},
        [row()],
    ],
)
def test_a_bad_batch_is_refused_whole_and_nothing_is_written(mg: Metergraph, document: object) -> None:
    with pytest.raises(BadBatch):
        mg.ingest.ingest_document(app(), document)
    assert mg.calls.count_calls("w1") == 0


@embedded_only
@pytest.mark.parametrize(
    "bad",
    [
        {"input_tokens": -1},
        {"ts": "yesterday"},
        {"ts": None},
        {"tags": "not a map"},
        {"route": {"a": 1}},
        {"latency_ms": "slow"},
        {"cost_usd": "-0.01"},
        {"reported_cost_usd": "NaN"},
        {"reported_cost_usd": "1,5"},
        {"reported_cost_usd": " 0.5"},
        {"reported_cost_usd": "2000000"},
        {"reported_cost_usd": float("inf")},
        {"reported_cost_usd": True},
        {"import_source": "portkey", "import_source_scope": "ws"},
        {"import_source": "portkey", "import_source_scope": "ws", "import_event_id": 7},
        {"import_source": "portkey", "import_source_scope": "ws", "import_event_id": "  "},
        {"import_source": "portkey", "import_source_scope": "ws", "import_event_id": "x" * 513},
    ],
)
def test_a_row_with_a_refused_value_is_ignored_and_the_good_rows_are_stored(
    mg: Metergraph, bad: dict[str, object]
) -> None:
    result = mg.ingest.ingest_document(
        app(), {"rows": [row(route="good-1"), row(**bad), row(route="good-2")]}
    )
    assert (result.accepted, result.ignored) == (2, 1)
    assert sorted(c["route"] for c in mg.calls.raw_calls("w1")) == ["good-1", "good-2"]
    assert mg.metadata.batch_health("w1", 0)["processed"] == 1


@embedded_only
def test_a_batch_of_only_refused_rows_is_answered_and_stores_nothing(mg: Metergraph) -> None:
    result = mg.ingest.ingest_document(app(), {"rows": [row(input_tokens=-5), row(ts=[1])]})
    assert (result.accepted, result.ignored) == (0, 2)
    assert mg.calls.count_calls("w1") == 0


@embedded_only
@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("0.0318", 0.0318),
        ("0.000123456789012345678", 0.000123456789012345678),
        ("1E-7", 1e-7),
        ("12", 12.0),
        ("0", 0.0),
        (".5", 0.5),
        (0.0125, 0.0125),
        (3, 3.0),
    ],
)
def test_a_reported_cost_is_read_as_a_number_or_an_exact_decimal_string(
    mg: Metergraph, sent: object, stored: float
) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(reported_cost_usd=sent)]})
    [call] = mg.calls.raw_calls("w1")
    assert call["reported_cost_usd"] == stored  # the double nearest the decimal, rounded once


@embedded_only
def test_the_relays_legacy_cost_usd_string_is_the_reported_cost_when_no_reported_field_is_sent(
    mg: Metergraph,
) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(cost_usd="0.0042")]})
    [call] = mg.calls.raw_calls("w1")
    assert call["reported_cost_usd"] == 0.0042


def _imported(event: str, scope: str = "ws-1", **fields: object) -> dict[str, object]:
    identity = {"import_source": "phoenix", "import_source_scope": scope, "import_event_id": event}
    return row(**identity, **fields)


def test_an_imported_row_is_stored_once_however_often_it_is_sent(mg: Metergraph) -> None:
    first = mg.ingest.ingest_document(app(), {"rows": [_imported("e1"), _imported("e2"), _imported("e1")]})
    again = mg.ingest.ingest_document(app(), {"rows": [_imported(" e2 "), _imported("e3"), row()]})
    # Duplicates are accepted (the relay counts every accepted row as landed) but not stored twice.
    assert (first.accepted, first.ignored, again.accepted, again.ignored) == (3, 0, 3, 0)
    assert mg.calls.count_calls("w1") == 4  # e1, e2, e3 and the row without an identity
    # The identity is per source scope and per workspace.
    mg.ingest.ingest_document(app(), {"rows": [_imported("e1", scope="ws-2")]})
    mg.ingest.ingest_document(app("w2"), {"rows": [_imported("e1")]})
    assert (mg.calls.count_calls("w1"), mg.calls.count_calls("w2")) == (5, 1)


def test_a_batch_that_fails_in_the_engine_leaves_its_import_identities_unclaimed(mg: Metergraph) -> None:
    with pytest.raises(OverflowError):
        mg.ingest.ingest_document(app(), {"rows": [_imported("e1"), _imported("e2", input_tokens=2**70)]})
    mg.ingest.ingest_document(app(), {"rows": [_imported("e1"), _imported("e2")]})
    assert mg.calls.count_calls("w1") == 2


def test_content_is_dropped_unless_the_workspace_retains_it(mg: Metergraph) -> None:
    content = {"request_json": '{"messages": "secret prompt"}', "response_text": "secret answer"}
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t1", **content)]})
    assert mg.calls.raw_content("w1") == []
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t2", **content)]})
    mg.ingest.ingest_document(app(), {"rows": [row(trace_id="t3", content_opted_in=False, **content)]})
    [kept] = mg.calls.raw_content("w1")
    assert kept["response_text"] == "secret answer"
    # Content never sits in the call rows themselves.
    assert "secret" not in json.dumps(mg.calls.raw_calls("w1"))


@embedded_only
def test_whitespace_environments_are_stored_as_untagged(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(environment="  "), row(environment="prod")]})
    assert [c["environment"] for c in mg.calls.raw_calls("w1")] == [None, "prod"]


@embedded_only
def test_sdk_error_boolean_and_raw_error_message_both_mark_failures(mg: Metergraph) -> None:
    mg.ingest.ingest_document(
        app(), {"rows": [row(error=True, error_type="Timeout"), row(error="boom"), row()]}
    )
    calls = mg.calls.raw_calls("w1")
    assert [c["error"] for c in calls] == [1, 1, 0]
    assert calls[1]["error_type"] == "boom"


@embedded_only
def test_reads_see_rows_only_in_their_own_workspace(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app("w1"), {"rows": [row(trace_id="a")]})
    mg.ingest.ingest_document(app("w2"), {"rows": [row(30, trace_id="b"), row(20, trace_id="c")]})
    assert mg.usage.aggregates(agent("w1"), days=7)["totals"]["calls"] == 1
    assert [t["trace_id"] for t in mg.traces.query(agent("w2"))["traces"]] == ["c", "b"]


def test_rows_keep_batch_order_and_their_own_nulls_whatever_columns_other_rows_fill(mg: Metergraph) -> None:
    # The insert names only the columns some row of the batch fills, and rows with retained content go
    # one by one: ids must still follow the batch and every row keep exactly its own values.
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    rows = [
        row(trace_id="a", environment="prod"),
        row(trace_id="b", cache_read_tokens=300, tags={"k": "v"}),
        row(trace_id="c", response_text="kept"),
        row(trace_id="d", latency_ms=None, status=None, model=None),
        row(trace_id="e", response_text="kept too", environment="dev"),
    ]
    mg.ingest.ingest_document(app(), {"rows": rows})
    stored = mg.calls.raw_calls("w1")
    assert [s["trace_id"] for s in stored] == ["a", "b", "c", "d", "e"]
    assert [s["environment"] for s in stored] == ["prod", None, None, None, "dev"]
    assert [s["cache_read_tokens"] for s in stored] == [None, 300, None, None, None]
    assert [s["tags"] for s in stored] == [None, '{"k":"v"}', None, None, None]
    assert (stored[3]["latency_ms"], stored[3]["status"], stored[3]["model"]) == (None, None, None)
    assert stored[3]["cost_status"] == "unpriced" and stored[3]["cost_unknown"] == 1
    content = {c["call_id"]: c["response_text"] for c in mg.calls.raw_content("w1")}
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
    [stored] = mg.calls.raw_calls("w1")
    assert stored["tags"] == json.dumps(tags, ensure_ascii=False, separators=(",", ":"))


def test_a_failing_batch_leaves_no_rows_rollups_or_batch_record(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row()]})
    before = mg.usage.aggregates(agent(), days=7, group_by=["route"])["totals"]
    # A value the engine cannot store (beyond a 64-bit integer) fails the batch after its rows were built.
    with pytest.raises(OverflowError):
        mg.ingest.ingest_document(app(), {"rows": [row(), row(input_tokens=2**70)]})
    assert mg.calls.count_calls("w1") == 1
    assert mg.usage.aggregates(agent(), days=7, group_by=["route"])["totals"] == before
    assert mg.metadata.batch_health("w1", 0)["processed"] == 1


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


def test_a_pending_import_claim_is_retaken_once_stale_and_kept_once_confirmed(tmp_path: Path) -> None:
    # ClickHouse's order: claimed pending, then confirmed (or released) once the engine write returned.
    db = Database(tmp_path / "meta.db", [])
    import_events.migrate(db)
    key = ImportKey("portkey", "ws", "e1")
    with db.transaction() as conn:
        assert import_events.claim(conn, "w1", [key], stored=False) == [True]
        assert import_events.claim(conn, "w1", [key], stored=False) == [False]  # in flight elsewhere
        # Its worker died before the engine write returned: once stale, the next batch claims it again.
        conn.execute("UPDATE import_events SET claimed_ms = claimed_ms - ?", (import_events.STALE_MS + 1,))
        assert import_events.claim(conn, "w1", [key], stored=False) == [True]
        import_events.confirm(conn, "w1", [key])
        conn.execute("UPDATE import_events SET claimed_ms = claimed_ms - ?", (import_events.STALE_MS + 1,))
        assert import_events.claim(conn, "w1", [key]) == [False]  # stored: never again
        import_events.release(conn, "w1", [key])  # a release touches pending claims only
        assert import_events.claim(conn, "w1", [key]) == [False]


@embedded_only
def test_a_refused_batch_is_a_permanent_failure_the_incident_detectors_hear_of(mg: Metergraph) -> None:
    assert mg.ingest.on_refused == mg.incidents.note_failure  # the wiring the doors rely on
    heard: list[str] = []
    mg.ingest.on_refused = heard.append
    mg.ingest.refuse(app(), "otlp")
    health = mg.metadata.batch_health("w1", 0)
    assert (health["failed"], health["permanent"], health["processed"]) == (1, 1, 0)
    assert heard == ["w1"]
