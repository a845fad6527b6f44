"""The contract of Metergraph's control stores (incidents, webhooks, reports and analysis runs, workloads),
written once and run on every engine that implements them: SQLite (the data directory) and PostgreSQL
(server mode, a real embedded PostgreSQL). Import sync's contract is ``test_import_sync.py``, run on both
engines the same way."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from postgres import PostgresCluster  # noqa: E402

from triptych.core.db import Database  # noqa: E402
from triptych.metergraph.control_stores import ANALYSIS_FILE, ControlStores  # noqa: E402
from triptych.metergraph.incident_store import Incident  # noqa: E402
from triptych.metergraph.incidents import DB_FILE as INCIDENTS_FILE  # noqa: E402
from triptych.metergraph.metadata_store import SqliteMetadataStore  # noqa: E402
from triptych.metergraph.migrate import FILES, METADATA_FILE, TABLES  # noqa: E402
from triptych.metergraph.postgres_metadata_store import PostgresMetadataStore  # noqa: E402
from triptych.metergraph.report_store import ReportExists, RunEnded, StoredReport  # noqa: E402
from triptych.metergraph.sqlite_schema import open_database  # noqa: E402
from triptych.metergraph.webhook_store import WebhookStore, webhook_store  # noqa: E402

CONTROL_ENGINES = ("sqlite", "postgres")


@pytest.fixture(params=CONTROL_ENGINES)
def control(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ControlStores]:
    """The control stores on each engine in turn, empty."""
    url = None
    if request.param == "postgres":
        cluster: PostgresCluster = request.getfixturevalue("postgres")
        url = cluster.create_database("mgc")
    metadata = Database(tmp_path / "metergraph.db", [])
    stores = ControlStores.open(tmp_path, url, metadata)
    assert stores.engine == request.param
    yield stores
    stores.close()
    metadata.close()


@pytest.fixture
def webhooks(control: ControlStores) -> WebhookStore:
    return webhook_store(control.incidents.db)


def incident(ident: str, workspace: str = "w1", **fields: Any) -> Incident:
    values: dict[str, Any] = {
        "id": ident, "workspace": workspace, "kind": "error_rate", "grain": "5m", "series": '["r1"]',
        "route": "r1", "provider": None, "model": None, "environment": "prod", "status": "open",
        "severity": "warning", "title": f"errors on {ident}", "window_start_ms": 1_000, "window_end_ms": 2_000,
        "first_seen_ms": 1_000, "last_seen_ms": 2_000, "resolved_ms": None, "occurrences": 1,
        "generation": 1, "clear_windows": 0, "last_trigger_bucket": 7, "diagnosis": {"why": ["burst"]},
    }  # fmt: skip
    values.update(fields)
    return Incident(**values)


# -- incidents -------------------------------------------------------------------------------------------


def test_an_incident_saved_with_its_cursor_reads_back_whole(control: ControlStores) -> None:
    store = control.incidents
    saved = incident("i1", last_seen_ms=17_000_000_000_000)  # milliseconds past 32 bits
    store.save("w1", "5m", (12, 11), [saved], {"i1"})
    assert store.cursor("w1", "5m") == (12, 11)
    assert store.cursor("w1", "1h") is None
    assert store.open_incidents("w1", "5m") == [saved]
    assert store.open_incidents("w2", "5m") == []


def test_a_second_open_episode_of_one_series_is_ignored_not_an_error(control: ControlStores) -> None:
    store = control.incidents
    store.save("w1", "5m", None, [incident("i1")], {"i1"})
    store.save("w1", "5m", None, [incident("i2")], {"i2"})  # another worker's copy of the same episode
    assert [i.id for i in store.open_incidents("w1", "5m")] == ["i1"]


def test_an_update_keeps_first_seen_and_a_resolution_frees_the_series(control: ControlStores) -> None:
    store = control.incidents
    store.save("w1", "5m", None, [incident("i1")], {"i1"})
    store.save("w1", "5m", (20, 19), [incident("i1", first_seen_ms=5, occurrences=3)], set())
    (stored,) = store.open_incidents("w1", "5m")
    assert (stored.first_seen_ms, stored.occurrences) == (1_000, 3)
    store.save("w1", "5m", None, [incident("i1", status="resolved", resolved_ms=3_000)], set())
    store.save("w1", "5m", None, [incident("i2")], {"i2"})
    assert [i.id for i in store.open_incidents("w1", "5m")] == ["i2"]
    assert store.cursor("w1", "5m") == (20, 19)


def test_listing_puts_open_first_then_newest_and_counts_what_it_lists(control: ControlStores) -> None:
    store = control.incidents
    store.save("w1", "5m", None, [
        incident("a", status="resolved", resolved_ms=10, last_seen_ms=9_000, series='["x"]'),
        incident("b", last_seen_ms=5_000, series='["y"]', severity="critical"),
        incident("c", last_seen_ms=6_000, series='["z"]', environment="staging"),
        incident("d", last_seen_ms=6_000, series="[]", environment=None),
        incident("e", workspace="w2"),
    ], {"a", "b", "c", "d", "e"})  # fmt: skip
    assert [i.id for i in store.for_workspace("w1")] == ["c", "d", "b", "a"]
    assert [i.id for i in store.for_workspace("w1", limit=2)] == ["c", "d"]
    assert store.counts("w1", None) == (4, 3, 1)
    # A restricted key sees its environments' incidents and the workspace-wide ones.
    assert [i.id for i in store.for_workspace("w1", ["prod"])] == ["d", "b", "a"]
    assert store.counts("w1", ["prod"]) == (3, 2, 1)
    assert [i.id for i in store.for_workspace("w1", ["prod", "staging"])] == ["c", "d", "b", "a"]
    assert store.counts("w1", ["staging", "prod"]) == (4, 3, 1)
    assert [i.id for i in store.for_workspace("w1", [])] == ["d"]
    assert store.counts("w1", []) == (1, 1, 0)
    assert [i.id for i in store.for_workspace("w2")] == ["e"]


def test_prune_forgets_only_incidents_resolved_before_the_bound(control: ControlStores) -> None:
    store = control.incidents
    store.save("w1", "5m", None, [
        incident("old", status="resolved", resolved_ms=100, series='["a"]'),
        incident("new", status="resolved", resolved_ms=900, series='["b"]'),
        incident("open", series='["c"]'),
    ], {"old", "new", "open"})  # fmt: skip
    store.prune(500)
    assert sorted(i.id for i in store.for_workspace("w1")) == ["new", "open"]


def test_the_outbox_hears_each_transition_once_in_the_save_transaction(control: ControlStores) -> None:
    store = control.incidents
    heard: list[tuple[str, str]] = []
    committed: list[bool] = []
    store.outbox = lambda conn, event, inc: heard.append((event, inc.id))
    store.outbox_committed = lambda: committed.append(True)
    try:
        store.save("w1", "5m", None, [incident("i1")], {"i1"})
        store.save("w1", "5m", None, [incident("i1", last_trigger_bucket=8)], set())  # same window again
        store.save("w1", "5m", None, [incident("i1", occurrences=2)], set())
        store.save("w1", "5m", None, [incident("i1", status="resolved", resolved_ms=5)], set())
    finally:
        store.outbox = store.outbox_committed = None
    assert heard == [("incident.opened", "i1"), ("incident.updated", "i1"), ("incident.resolved", "i1")]
    assert len(committed) == 3


def test_a_failed_save_leaves_neither_incidents_nor_cursor(control: ControlStores) -> None:
    store = control.incidents

    def refuse(conn: Any, event: str, inc: Incident) -> None:
        raise RuntimeError("the outbox failed")

    store.outbox = refuse
    try:
        with pytest.raises(RuntimeError):
            store.save("w1", "5m", (3, 2), [incident("i1")], {"i1"})
    finally:
        store.outbox = None
    assert store.open_incidents("w1", "5m") == [] and store.cursor("w1", "5m") is None


# -- webhooks --------------------------------------------------------------------------------------------


def _endpoint(webhooks: WebhookStore, ident: str, workspace: str = "w1") -> None:
    webhooks.add_endpoint(ident, workspace, f"https://example.test/{ident}", None, f"sealed-{ident}", 1_000)


def _announce(control: ControlStores, webhooks: WebhookStore, ident: str, workspace: str = "w1") -> None:
    """Save an incident whose outbox enqueues one delivery per endpoint of its workspace."""

    def outbox(conn: Any, event: str, inc: Incident) -> None:
        rows = [
            {"id": f"d-{inc.id}-{e}", "endpoint_id": e, "workspace": inc.workspace, "event_type": event,
             "incident_id": inc.id, "body": f'{{"e":"{e}"}}', "created_ms": 2_000}
            for e in webhooks.workspace_endpoints(conn, inc.workspace)
        ]  # fmt: skip
        webhooks.enqueue(conn, rows)

    control.incidents.outbox = outbox
    try:
        control.incidents.save(workspace, "5m", None, [incident(ident, workspace)], {ident})
    finally:
        control.incidents.outbox = None


def test_endpoints_are_listed_per_workspace_and_read_with_their_sealed_secret(webhooks: WebhookStore) -> None:
    _endpoint(webhooks, "e2")
    _endpoint(webhooks, "e1")
    _endpoint(webhooks, "e3", "w2")
    assert [e["id"] for e in webhooks.endpoints("w1")] == ["e1", "e2"]  # created_ms, then id: equal times
    assert [e["id"] for e in webhooks.endpoints()] == ["e1", "e2", "e3"]
    got = webhooks.endpoint("e1")
    assert got is not None and got[1] == "sealed-e1" and "secret" not in got[0]
    assert webhooks.endpoint("nope") is None


def test_deliveries_commit_with_the_incident_and_are_claimed_once_until_the_lease_ends(
    control: ControlStores, webhooks: WebhookStore
) -> None:
    _endpoint(webhooks, "e1")
    _endpoint(webhooks, "e2")
    _endpoint(webhooks, "e3", "w2")
    _announce(control, webhooks, "i1")
    assert webhooks.next_due_ms() == 2_000
    claimed = webhooks.claim(now_ms=3_000, lease_ms=500, limit=10)
    assert sorted((c.endpoint_id, c.url, c.attempts) for c in claimed) == [
        ("e1", "https://example.test/e1", 1), ("e2", "https://example.test/e2", 1),
    ]  # fmt: skip
    assert webhooks.claim(now_ms=3_100, lease_ms=500, limit=10) == []  # leased to the first claimer
    assert webhooks.next_due_ms() == 3_500
    again = webhooks.claim(now_ms=3_600, lease_ms=500, limit=1)  # the lease ran out: sent again
    assert [c.attempts for c in again] == [2]
    webhooks.finish([
        {"id": c.id, "status": "delivered", "next_attempt_ms": 0, "last_status": 200, "last_error": None,
         "last_response": "ok", "finished_ms": 4_000}
        for c in claimed
    ])  # fmt: skip
    assert webhooks.next_due_ms() is None
    listed = webhooks.deliveries("w1", None, "delivered", 10)
    assert {d["endpoint_id"] for d in listed} == {"e1", "e2"} and "body" not in listed[0]
    assert webhooks.body(claimed[0].id) == f'{{"e":"{claimed[0].endpoint_id}"}}'
    assert webhooks.deliveries("w2", None, None, 10) == []


def test_concurrent_claimers_never_hold_the_same_delivery(
    control: ControlStores, webhooks: WebhookStore
) -> None:
    for n in range(6):
        _endpoint(webhooks, f"e{n}")
    _announce(control, webhooks, "i1")
    got: list[str] = []
    barrier = threading.Barrier(3)

    def claimer() -> None:
        barrier.wait()
        got.extend(c.id for c in webhooks.claim(now_ms=3_000, lease_ms=60_000, limit=2))

    threads = [threading.Thread(target=claimer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == len(set(got)) == 6


def test_removing_an_endpoint_cancels_its_pending_deliveries_and_prune_forgets_finished_ones(
    control: ControlStores, webhooks: WebhookStore
) -> None:
    _endpoint(webhooks, "e1")
    _announce(control, webhooks, "i1")
    assert webhooks.remove_endpoint("e1", 5_000) == 1
    assert webhooks.remove_endpoint("e1", 5_000) is None
    assert [d["status"] for d in webhooks.deliveries("w1", "e1", None, 10)] == ["cancelled"]
    webhooks.record({
        "id": "t1", "endpoint_id": "e9", "workspace": "w1", "event_type": "ping", "incident_id": None,
        "body": "{}", "created_ms": 9_000, "status": "failed", "last_status": 500, "last_error": "HTTP 500",
        "last_response": "no",
    })  # fmt: skip
    assert [d["id"] for d in webhooks.deliveries("w1", None, None, 10)] == ["t1", "d-i1-e1"]
    assert webhooks.prune(6_000) == 1
    assert [d["id"] for d in webhooks.deliveries(None, None, None, 10)] == ["t1"]


# -- reports and analysis runs ---------------------------------------------------------------------------


def report(ident: str, environment: str | None = None, sha: str = "s") -> StoredReport:
    return StoredReport(ident, 1, "2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z", "cli_import", "ok",
                        environment, sha + ident, 3, 0)  # fmt: skip


def test_reports_are_numbered_per_workspace_and_listed_newest_first(control: ControlStores) -> None:
    store = control.reports
    assert store.insert_report("w1", report("a", "prod"), b"\x00\x01a")
    assert store.insert_report("w1", report("b"), b"b")
    assert store.insert_report("w2", report("c"), b"c")
    assert not store.insert_report("w1", report("a", "prod"), b"\x00\x01a")  # the same bytes again
    with pytest.raises(ReportExists):
        store.insert_report("w1", report("a", sha="other"), b"x")
    assert [(r.analysis_id, r.seq) for r in store.list_reports("w1", 10)] == [("b", 2), ("a", 1)]
    assert [r.analysis_id for r in store.list_reports("w1", 10, before_seq=2)] == ["a"]
    assert [r.analysis_id for r in store.list_reports("w1", 10, environments=("prod",))] == ["a"]
    assert [r.analysis_id for r in store.list_reports("w1", 10, environments=("staging", "prod"))] == ["a"]
    assert store.list_reports("w1", 10, environments=()) == []
    assert store.list_reports("w2", 10)[0].seq == 1
    assert store.artifact("w1", "a") == b"\x00\x01a" and store.artifact("w2", "a") is None
    assert store.report("w1", "b") == replace(report("b"), seq=2)


def _run(ident: str, **fields: Any) -> dict[str, Any]:
    return {"run_id": ident, "kind": "analysis", "analysis_id": f"an-{ident}", "status": "queued",
            "created_at": "2026-12-01T00:00:00Z", "arguments": {"days": 7}, **fields}  # fmt: skip


def test_a_run_goes_queued_running_succeeded_with_its_report_in_one_commit(control: ControlStores) -> None:
    store = control.reports
    store.insert_run("w1", _run("r1", request_key="k1", request_hash="h"))
    assert store.run_by_request_key("w1", "k1")["run_id"] == "r1"  # type: ignore[index]
    assert store.active_run("w1", "analysis")["run_id"] == "r1"  # type: ignore[index]
    store.start_run("w1", "r1", "2026-12-01T00:00:01Z")
    store.update_run("w1", "r1", progress={"done": 1})
    store.heartbeat("w1", "r1", 17_000_000_000_000)
    store.finish_run_with_report("w1", "r1", "2026-12-01T00:00:02Z", report("an-r1"), b"artifact")
    run = store.run("w1", "r1")
    assert run is not None and run["status"] == "succeeded" and run["progress"] == {"done": 1}
    assert run["arguments"] == {"days": 7} and run["heartbeat_ms"] == 17_000_000_000_000
    assert store.artifact("w1", "an-r1") == b"artifact"
    assert store.active_run("w1", "analysis") is None and store.run("w2", "r1") is None


def test_a_cancelled_run_cannot_start_or_commit_its_report(control: ControlStores) -> None:
    store = control.reports
    store.insert_run("w1", _run("r1"))
    assert not store.cancel_requested("w1", "r1")
    assert store.request_cancel("w1", "r1")
    assert store.cancel_requested("w1", "r1")
    with pytest.raises(RunEnded):
        store.start_run("w1", "r1", "t")
    with pytest.raises(RunEnded):
        store.finish_run_with_report("w1", "r1", "t", report("an-r1"), b"x")
    assert store.artifact("w1", "an-r1") is None
    store.end_active_run("w1", "r1", "cancelled", "cancelled", "2026-12-01T00:00:03Z")
    assert store.run("w1", "r1")["status"] == "cancelled"  # type: ignore[index]
    assert not store.request_cancel("w1", "r1")
    assert store.cancel_requested("w1", "nope")  # an unknown run is never to be continued


def test_runs_page_newest_first_and_only_stale_ones_are_failed_as_abandoned(control: ControlStores) -> None:
    store = control.reports
    for n in range(3):
        store.insert_run("w1", _run(f"r{n}", created_at=f"2026-12-01T00:00:0{n}Z", heartbeat_ms=n * 100))
    first = store.list_runs("w1", 2)
    assert [r["run_id"] for r in first] == ["r2", "r1"]
    after = (first[-1]["created_at"], first[-1]["seq"])
    assert [r["run_id"] for r in store.list_runs("w1", 2, before=after)] == ["r0"]
    assert store.fail_abandoned_runs("2026-12-01T01:00:00Z", stale_before_ms=150) == 2
    assert {r["run_id"]: r["status"] for r in store.list_runs("w1", 10)} == {
        "r0": "failed", "r1": "failed", "r2": "queued",
    }  # fmt: skip


def test_runs_inserted_at_once_get_distinct_numbers(control: ControlStores) -> None:
    barrier = threading.Barrier(4)

    def insert(n: int) -> None:
        barrier.wait()
        for k in range(5):
            control.reports.insert_run("w1", _run(f"r{n}-{k}"))

    threads = [threading.Thread(target=insert, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [r["seq"] for r in control.reports.list_runs("w1", 100)]
    assert sorted(seqs) == list(range(1, 21))


# -- workloads -------------------------------------------------------------------------------------------


def _workload(ident: str, route: str | None, calls: int) -> dict[str, Any]:
    return {"workload_id": ident, "name": ident, "route": route, "tag_keys": ["a"], "shapes": ["s1"],
            "calls": calls, "replay_eligible_calls": calls, "cost_usd": 0.25, "stats": {"models": ["m"]},
            "classified_at": "2026-12-01T00:00:00Z"}  # fmt: skip


def _class_run(ident: str, workspace: str = "w1", **fields: Any) -> dict[str, Any]:
    return {"run_id": ident, "workspace": workspace, "status": "succeeded", "created_at": f"2026-12-0{ident[-1]}",
            "started_at": None, "finished_at": None, "error_code": None, "days": 7, "calls": 9, "workloads": 2,
            **fields}  # fmt: skip


def test_a_classification_replaces_the_workspace_s_workloads_and_records_its_run(
    control: ControlStores,
) -> None:
    store = control.workloads
    store.replace_workloads("w1", "c1", [_workload("x", "r1", 5)], _class_run("c1"))
    store.replace_workloads("w2", "c1b", [_workload("z", "r1", 1)], _class_run("c1b", "w2"))
    store.replace_workloads("w1", "c2", [_workload("a", None, 3), _workload("b", "r2", 8)], _class_run("c2"))
    assert [w["workload_id"] for w in store.workloads("w1")] == ["b", "a"]
    assert (
        store.workloads("w1")[0]["stats"] == {"models": ["m"]}
        and store.workloads("w1")[0]["cost_usd"] == 0.25
    )
    assert [w["workload_id"] for w in store.workloads("w1", [None])] == ["a"]
    assert [w["workload_id"] for w in store.workloads("w1", ["r2", None])] == ["b", "a"]
    assert [w["workload_id"] for w in store.workloads("w1", ["r1", "r2"])] == ["b"]
    assert store.workloads("w1", []) == []
    assert store.workload("w1", "x") is None and store.workload("w2", "z") is not None
    store.insert_run(_class_run("c3", status="running"))
    store.insert_run(_class_run("c3", status="failed", error_code="boom"))
    assert [r["run_id"] for r in store.runs("w1", 2)] == ["c3", "c2"]
    assert store.run("w1", "c3")["error_code"] == "boom"  # type: ignore[index]
    assert store.run("w2", "c3") is None


# -- both engines' DDL ---------------------------------------------------------------------------------


def test_every_control_table_has_the_same_columns_on_both_engines(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    """Each engine's DDL is written in its own module (``sqlite_control_schema.py`` and ``sqlite_schema.py``;
    ``pg_schema.py``) while one SQL serves both: every table ``triptych migrate`` carries, and the call-id
    sequence, has the same columns in the same order on each (PostgreSQL's ``keys.seq`` aside: its stand-in
    for SQLite's rowid)."""
    metadata = open_database(tmp_path / "metergraph.db")
    stores = [
        ControlStores.open(tmp_path, None, metadata),
        ControlStores.open(tmp_path, postgres.create_database(), metadata),
    ]
    try:
        embedded, server = stores
        assert server.pg is not None
        for engine in stores:  # the components opened with their stores (webhooks, metadata) too
            webhook_store(engine.incidents.db)
        SqliteMetadataStore(metadata)
        PostgresMetadataStore(server.pg)
        sqlite_files = {
            INCIDENTS_FILE: embedded.incidents.db,
            ANALYSIS_FILE: embedded.reports.db,  # type: ignore[attr-defined]
            METADATA_FILE: metadata,
        }
        sqlite_columns = {
            table: [r[1] for r in sqlite_files[name].conn.execute(f"PRAGMA table_info({table})")]
            for name, tables in FILES.items()
            for table in tables
        }
        sqlite_columns["clickhouse_call_ids"] = [
            r[1] for r in metadata.conn.execute("PRAGMA table_info(clickhouse_call_ids)")
        ]
        pg_columns: dict[str, list[str]] = {}
        for table, column in server.pg.conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'metergraph'"
            " AND table_name <> 'schema_version' ORDER BY table_name, ordinal_position"
        ).fetchall():
            if (table, column) != ("keys", "seq"):
                pg_columns.setdefault(table, []).append(column)
        assert pg_columns == sqlite_columns
        assert set(pg_columns) == {*TABLES, "clickhouse_call_ids"}
    finally:
        for opened in stores:
            opened.close()
        metadata.close()
