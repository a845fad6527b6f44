"""Rules of the ClickHouse engine itself: retention as a TTL, several writers at once, its URL, and a
server that cannot be reached."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from clickhouse_endpoint import ClickHouseEndpoint
from clickhouse_schema_v4 import v4_rollups
from mg_support import NOW, agent, app, row

from triptych.core.errors import StorageUnavailable
from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.clickhouse_call_store import ClickHouseCallStore
from triptych.metergraph.clickhouse_client import parse_url
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings


def open_ch(path: Path, url: str, **settings: object) -> Metergraph:
    return Metergraph.open(path, load_metergraph_settings(clickhouse_url=url, **settings), clock=lambda: NOW)


def test_calls_and_rollups_older_than_the_retention_window_expire(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    rows = [row(minutes_ago=40 * 24 * 60, tags={"prompt_id": "p1"}, trace_id="t-old"),
            row(minutes_ago=60, tags={"prompt_id": "p1"}, trace_id="t-new")]  # fmt: skip
    kept = open_ch(tmp_path / "kept", clickhouse.database_url())  # the default window: ten years
    short = open_ch(tmp_path / "short", clickhouse.database_url(), clickhouse_retention_days=30)
    try:
        for mg in (kept, short):
            mg.ingest.ingest_document(app(), {"rows": rows})
            store = mg.calls
            assert isinstance(store, ClickHouseCallStore)
            for table in ("calls", "rollups", "rollup_meta_daily", "trace_bounds"):
                store.client.command(f"OPTIMIZE TABLE {table} FINAL")  # merges apply the TTL now
        assert kept.calls.count_calls("w1") == 2
        assert kept.usage.aggregates(agent(), days=90)["totals"]["calls"] == 2
        assert short.calls.count_calls("w1") == 1
        assert short.usage.aggregates(agent(), days=90)["totals"]["calls"] == 1
        assert short.usage.aggregates(agent(), days=90, group_by=["route"])["totals"]["calls"] == 1
        by_prompt = short.usage.aggregates(agent(), days=90, group_by=["metadata.prompt_id"])
        assert [(i["metadata.prompt_id"], i["calls"]) for i in by_prompt["items"]] == [("p1", 1)]
        assert short.calls.client.command("SELECT count() FROM trace_bounds") == 1
    finally:
        kept.close()
        short.close()


def test_a_shorter_retention_set_later_applies_to_the_tables_that_exist(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    url = clickhouse.database_url()
    first = open_ch(tmp_path / "first", url)  # created with the default: ten years
    try:
        first.metadata.set_retain_content("w1", True, NOW.isoformat())
        first.ingest.ingest_document(app(), {"rows": [
            row(minutes_ago=40 * 24 * 60, trace_id="t-old", request_json="old"),
            row(minutes_ago=60, trace_id="t-new", request_json="new"),
        ]})  # fmt: skip
    finally:
        first.close()
    later = open_ch(tmp_path / "later", url, retention_days=30)  # the same tables, MG_RETENTION_DAYS=30
    try:
        store = later.calls
        assert isinstance(store, ClickHouseCallStore)
        for table in ("calls", "call_content", "rollups", "rollup_meta_daily", "trace_bounds"):
            store.client.command(f"OPTIMIZE TABLE {table} FINAL")  # merges apply the new TTL now
        assert store.count_calls("w1") == 1
        assert store.client.command("SELECT count() FROM call_content") == 1
        assert store.client.command("SELECT count() FROM trace_bounds") == 1
    finally:
        later.close()


def test_a_database_from_before_the_metadata_rollup_and_trace_bounds_gets_them_filled(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    url = clickhouse.database_url()
    rows = [row(minutes_ago=m * 97, tags={"prompt_id": f"p{m % 3}"} if m % 4 else {}, trace_id=f"t{m // 2}")
            for m in range(40)]  # fmt: skip
    mg = open_ch(tmp_path, url)
    mg.ingest.ingest_document(app(), {"rows": rows})
    reads = {
        "by_prompt": lambda m: m.usage.aggregates(agent(), days=7, group_by=["metadata.prompt_id", "day"]),
        "by_prompt_weeks": lambda m: m.usage.aggregates(agent(), days=30, group_by=["metadata.prompt_id"]),
        "traces": lambda m: m.traces.query(agent(), days=7, limit=5),
    }
    before = {name: read(mg) for name, read in reads.items()}
    assert before["by_prompt"]["metadata_groups"]["unlisted"]["missing_key"]["calls"] == 10
    store = mg.calls
    assert isinstance(store, ClickHouseCallStore)
    for table in ("rollup_meta_daily", "trace_bounds"):
        store.client.command(f"DROP TABLE {table}_mv")
        store.client.command(f"DROP TABLE {table}")
    mg.close()
    reopened = open_ch(tmp_path, url)  # the tables come back, filled from the stored calls
    try:
        assert {name: read(reopened) for name, read in reads.items()} == before
    finally:
        reopened.close()


def _version_4_database(data_dir: Path, url: str, rows: list[dict[str, Any]]) -> None:
    """A database as version 4 left it, holding ``rows`` ingested through version 4's views."""
    old = open_ch(data_dir, url)
    client = old.calls.client  # type: ignore[attr-defined]
    client.command("DROP VIEW rollups_mv")
    client.command("DROP TABLE rollups")
    for statement in v4_rollups(3650):
        client.command(statement)
    old.ingest.ingest_document(app(), {"rows": rows})
    assert client.command("SELECT sum(calls) FROM rollup_weekly_coarse") == len(rows)
    assert client.command("SELECT count() FROM rollup_meta_weekly") > 0
    old.close()


def test_a_database_of_schema_version_4_gets_its_rollups_rebuilt_and_answers_the_same(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    """Version 5 keeps the rollups without metadata as grains of one table and reads weeks from daily
    rows: opening a version-4 database drops its four rollup tables, its weekly metadata rollup and their
    views (every INSERT ran them), fills ``rollups`` from the stored calls, and answers as a database
    created by version 5 with the same calls."""
    rows = [row(minutes_ago=m * 331, tags={"prompt_id": f"p{m % 3}"} if m % 4 else {}, trace_id=f"t{m // 2}",
                route=f"r{m % 2}") for m in range(60)]  # fmt: skip
    reads = {
        "by_model": lambda m: m.usage.aggregates(agent(), days=30, group_by=["provider", "model"]),
        "by_day": lambda m: m.usage.aggregates(agent(), days=30, group_by=["day", "route"]),
        "by_prompt": lambda m: m.usage.aggregates(agent(), days=30, group_by=["metadata.prompt_id"]),
        "by_route_prompt": lambda m: m.usage.aggregates(
            agent(), days=30, group_by=["route", "metadata.prompt_id"]
        ),
        "hours": lambda m: m.usage.aggregates(
            agent(), since=(NOW - timedelta(hours=30, minutes=17)).isoformat(), until=NOW.isoformat()
        ),
    }
    fresh = open_ch(tmp_path / "fresh", clickhouse.database_url())
    try:
        fresh.ingest.ingest_document(app(), {"rows": rows})
        expected = {name: read(fresh) for name, read in reads.items()}
    finally:
        fresh.close()
    assert expected["by_model"]["totals"]["calls"] == 60

    url = clickhouse.database_url()
    _version_4_database(tmp_path / "old", url, rows)
    reopened = open_ch(tmp_path / "old", url)
    try:
        client = reopened.calls.client  # type: ignore[attr-defined]
        retired = ("rollup_daily", "rollup_hourly_coarse", "rollup_daily_coarse", "rollup_weekly_coarse",
                   "rollup_meta_weekly")  # fmt: skip
        for table in (*retired, *(f"{t}_mv" for t in retired)):
            assert client.command("EXISTS TABLE {t:Identifier}", parameters={"t": table}) == 0, table
        assert client.command("SELECT sum(calls) FROM rollups WHERE grain = 0") == 60
        got = {name: read(reopened) for name, read in reads.items()}
        assert got == expected
        reopened.ingest.ingest_document(app(), {"rows": [row(minutes_ago=5, tags={"prompt_id": "p9"})]})
        assert reopened.usage.aggregates(agent(), days=30)["totals"]["calls"] == 61
    finally:
        reopened.close()


def test_workers_upgrading_a_version_4_database_at_once_backfill_its_calls_once(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    """``serve --workers 3`` opens three stores at once: one backfills ``rollups`` from the stored calls,
    the others wait for it and find the table there."""
    rows = [row(minutes_ago=m * 97, tags={"prompt_id": f"p{m % 3}"}) for m in range(40)]
    url = clickhouse.database_url()
    _version_4_database(tmp_path, url, rows)
    opened: list[Metergraph] = []
    with ThreadPoolExecutor(3) as pool:
        opened.extend(pool.map(lambda _: open_ch(tmp_path, url), range(3)))
    try:
        client = opened[0].calls.client  # type: ignore[attr-defined]
        assert client.command("SELECT sum(calls) FROM rollups WHERE grain = 0") == 40
        for mg in opened:
            assert mg.usage.aggregates(agent(), days=30, group_by=["provider"])["totals"]["calls"] == 40
    finally:
        for mg in opened:
            mg.close()


def test_several_workers_ingest_at_once_with_distinct_call_ids(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    url = clickhouse.database_url()
    workers = [open_ch(tmp_path, url) for _ in range(3)]  # one data directory, one database
    try:

        def ingest(mg: Metergraph, n: int) -> None:
            for i in range(4):
                mg.ingest.ingest_document(
                    app(), {"rows": [row(request_id=f"w{n}-{i}-{j}") for j in range(25)]}
                )

        threads = [threading.Thread(target=ingest, args=(mg, n)) for n, mg in enumerate(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        calls = workers[0].calls.raw_calls("w1")
        assert len(calls) == 300
        assert len({c["id"] for c in calls}) == 300
        assert {c["id"] for c in calls} == set(range(1, 301))
        assert workers[1].usage.aggregates(agent(), days=1)["totals"]["calls"] == 300
        assert workers[2].metadata.batch_health("w1", 0)["processed"] == 12
    finally:
        for mg in workers:
            mg.close()


def test_the_url_names_credentials_database_and_compression() -> None:
    options = parse_url("https://reader:p%40ss@ch.example:9440/telemetry?compress=lz4")
    assert options == {"host": "ch.example", "port": 9440, "secure": True, "username": "reader",
                       "password": "p@ss", "database": "telemetry", "compress": "lz4"}  # fmt: skip
    plain = parse_url("http://127.0.0.1")
    assert (plain["port"], plain["database"], plain["username"], plain["compress"]) == (
        8123,
        "metergraph",
        "default",
        False,
    )
    with pytest.raises(ValueError, match="TRIPTYCH_METERGRAPH_CLICKHOUSE_URL"):
        parse_url("clickhouse://host")


def test_an_unreachable_server_is_refused_at_start_with_what_to_check(tmp_path: Path) -> None:
    from harness import free_port

    with pytest.raises(StorageUnavailable, match="not reachable") as refused:
        open_ch(tmp_path, f"http://127.0.0.1:{free_port()}/nothing")
    assert refused.value.hint is not None and "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL" in refused.value.hint


def test_a_server_gone_mid_run_answers_storage_unavailable_and_no_half_batch(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    mg = open_ch(tmp_path, clickhouse.database_url())
    try:
        mg.ingest.ingest_document(app(), {"rows": [row()]})
        with clickhouse.down():
            with pytest.raises(StorageUnavailable, match="ClickHouse did not answer") as refused:
                mg.ingest.ingest_document(app(), {"rows": [row(), row()]})
            assert refused.value.details["reason"] == "clickhouse_unavailable"
            with pytest.raises(StorageUnavailable):
                mg.usage.aggregates(agent(), days=1)
        # Back up: the refused batch left nothing behind, and the SDK's retry lands whole.
        assert mg.calls.count_calls("w1") == 1
        assert mg.metadata.batch_health("w1", 0)["processed"] == 1
        mg.ingest.ingest_document(app(), {"rows": [row(), row()]})
        assert mg.usage.aggregates(agent(), days=1)["totals"]["calls"] == 3
    finally:
        mg.close()


def test_a_read_with_parameters_too_long_for_a_url_still_answers(
    clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    # A page of 600 trace ids is a parameter of several kB: the client sends it as a form field.
    mg = open_ch(tmp_path, clickhouse.database_url())
    try:
        mg.ingest.ingest_rows(app(), [row(trace_id="trace-599"), row(trace_id="other")], "sdk")
        keys = [f"trace-{i}" for i in range(600)]
        [summary] = mg.calls.trace_summaries(CallFilter("w1", 0, 2**62), keys)
        assert summary["trace_key"] == "trace-599" and summary["span_count"] == 1
    finally:
        mg.close()
