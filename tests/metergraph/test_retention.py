"""``MG_RETENTION_DAYS``: the workspace context reports it, no read reaches further back (coverage says
``retention_clipped``), and the engines drop what is older: the embedded one deletes, ClickHouse expires."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from mg_support import NOW, agent, app, open_engine, row

from triptych.metergraph.call_model import DEFAULT_RETENTION_DAYS
from triptych.metergraph.service import Metergraph
from triptych.metergraph.sqlite_call_store import SqliteCallStore

OLD = 40 * 24 * 60  # minutes: forty days ago


def old_and_new(mg: Metergraph) -> None:
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    mg.ingest.ingest_document(app(), {"rows": [
        row(minutes_ago=OLD, trace_id="t-old", request_json="old prompt", response_text="old answer"),
        row(minutes_ago=60, trace_id="t-new"),
    ]})  # fmt: skip


def test_the_workspace_context_reports_the_retention_setting(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> None:
    short = open_engine(request, engine, tmp_path / "short", retention_days=30)
    default = open_engine(request, engine, tmp_path / "default")
    try:
        assert short.workspace.context(agent())["retention"]["metadata_days"] == 30
        # Unset: the embedded engine keeps every call; ClickHouse's TTL is ten years.
        expected = None if engine == "sqlite" else DEFAULT_RETENTION_DAYS
        assert default.workspace.context(agent())["retention"]["metadata_days"] == expected
    finally:
        short.close()
        default.close()


def test_reads_never_reach_past_the_retention_window(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> None:
    mg = open_engine(request, engine, tmp_path, retention_days=30)
    try:
        old_and_new(mg)  # ingested after the purge at open: still stored, never read
        usage = mg.usage.usage(agent(), 90, 100, None)
        assert usage["totals"]["calls"] == 1
        coverage = usage["coverage"]
        assert coverage["completeness"] == "partial" and coverage["reasons"] == ["retention_clipped"]
        effective = coverage["effective_window"]["since"]
        assert effective == (NOW - timedelta(days=30)).isoformat() != coverage["requested_window"]["since"]
        grouped = mg.usage.aggregates(agent(), days=90, group_by=["route", "metadata.prompt_id"])
        assert grouped["totals"]["calls"] == 1 and "retention_clipped" in grouped["coverage"]["reasons"]
        traces = mg.traces.query(agent(), days=90)
        assert [t["trace_id"] for t in traces["traces"]] == ["t-new"]
        assert "retention_clipped" in traces["coverage"]["reasons"]
        within = mg.usage.usage(agent(), 7, 100, None)["coverage"]
        assert (within["completeness"], within["reasons"]) == ("complete", [])
        assert mg.workloads.start_classification(agent(), 90)["run"]["progress"]["calls"] == 1
    finally:
        mg.close()


def test_the_embedded_engine_deletes_expired_calls_their_content_and_rollups(tmp_path: Path) -> None:
    mg = open_engine_sqlite(tmp_path, None)
    try:
        old_and_new(mg)
        mg.usage.usage(agent(), 90, 100, None)  # folds both calls into the rollups
    finally:
        mg.close()
    store = SqliteCallStore.open(tmp_path / "metergraph.db", retention_days=30)
    try:
        conn = store.db.conn
        newest = conn.execute("SELECT MAX(id) FROM calls").fetchone()[0]
        assert store.purge_expired(NOW) == 1
        assert [r[0] for r in conn.execute("SELECT trace_id FROM calls")] == ["t-new"]
        assert conn.execute("SELECT COUNT(*) FROM call_content").fetchone()[0] == 0  # the old call's
        assert conn.execute("SELECT MAX(id) FROM calls").fetchone()[0] == newest
        horizon_day = (int(NOW.timestamp() * 1000) - 30 * 86_400_000) // 86_400_000
        assert conn.execute("SELECT MIN(bucket) FROM rollup_daily").fetchone()[0] > horizon_day - 1
        assert store.purge_expired(NOW) == 0
    finally:
        store.close()


def test_the_newest_call_stays_even_when_it_is_expired(tmp_path: Path) -> None:
    mg = open_engine_sqlite(tmp_path, None)
    try:
        mg.ingest.ingest_document(app(), {"rows": [row(minutes_ago=OLD), row(minutes_ago=OLD + 1)]})
    finally:
        mg.close()
    store = SqliteCallStore.open(tmp_path / "metergraph.db", retention_days=30)
    try:
        # Ids are one more than the largest: deleting the largest would hand its id, already folded, on.
        assert store.purge_expired(NOW) == 1
        assert store.db.conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 1
    finally:
        store.close()


def open_engine_sqlite(path: Path, retention_days: int | None) -> Metergraph:
    from triptych.metergraph.settings import load_metergraph_settings

    return Metergraph.open(path, load_metergraph_settings(retention_days=retention_days), clock=lambda: NOW)


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_a_retention_that_is_not_a_positive_number_of_days_is_refused_at_start(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic import ValidationError

    from triptych.metergraph.settings import load_metergraph_settings

    monkeypatch.setenv("MG_RETENTION_DAYS", value)
    with pytest.raises(ValidationError, match="(?i)retention"):
        load_metergraph_settings()


def test_the_servers_fold_thread_purges_on_its_first_round(tmp_path: Path) -> None:
    mg = open_engine_sqlite(tmp_path, None)
    try:
        old_and_new(mg)
    finally:
        mg.close()
    store = SqliteCallStore.open(tmp_path / "metergraph.db", retention_days=30)
    try:
        store.fold_in_background(lambda: False)  # what the server's folder runs every few seconds
        assert [r[0] for r in store.db.conn.execute("SELECT trace_id FROM calls")] == ["t-new"]
    finally:
        store.close()
