"""The embedded engine's rollups, folded from the committed calls after ingest (``fold_rollups``): from
the batches in memory or read back, in chunks, by several stores at once, interrupted, after an upgrade,
and after ``kill -9``: the rollups always hold every committed call exactly once, and every read counts
every acknowledged call."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import reference_ingest
from harness import ServerProcess
from mg_support import agent, app, row

from triptych.metergraph.call_model import HIST_COLUMNS, PRICING_COLUMNS, ROLLUP_KEY, ROLLUPS, SUMS
from triptych.metergraph.ingest import IngestService
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.service import DB_FILE, Metergraph
from triptych.metergraph.settings import load_metergraph_settings
from triptych.metergraph.sqlite_call_store import SqliteCallStore

_FLOATS = {SUMS.index("cost_usd"), SUMS.index("latency_sum")}


def varied_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Calls over ten days with missing keys, latencies and costs, and every cost status."""
    out = []
    for _ in range(n):
        fields: dict[str, Any] = {
            "route": rng.choice(["support", "search", "", None]),
            "provider": rng.choice(["openai", "anthropic", None]),
            "model": rng.choice(["gpt-4o", "claude-sonnet-4", "mystery-model", None]),
            "environment": rng.choice(["prod", "staging", None]),
            "latency_ms": rng.choice([None, rng.uniform(1, 90_000)]),
            "input_tokens": rng.randint(0, 5000),
            "output_tokens": rng.choice([None, rng.randint(0, 900)]),
            "status": rng.choice(["success", "error"]),
        }
        if rng.random() < 0.2:
            fields["cost_usd"] = rng.choice([0.0, rng.uniform(0, 2)])
        out.append(row(minutes_ago=rng.uniform(0, 10 * 24 * 60), **{k: v for k, v in fields.items()
                                                                    if v is not None}))  # fmt: skip
    return out


def stored_rollups(store: SqliteCallStore, table: str, workspace: str) -> list[tuple[Any, ...]]:
    columns = ", ".join(["bucket", *ROLLUP_KEY, *SUMS, *HIST_COLUMNS])
    sql = f"SELECT {columns} FROM {table} WHERE workspace = ? ORDER BY bucket, {', '.join(ROLLUP_KEY)}"
    return [tuple(r) for r in store.db.conn.execute(sql, (workspace,))]


def assert_rollups_hold_every_call(store: SqliteCallStore, workspaces: list[str]) -> None:
    """Every rollup table equals the reference grouping of all the workspace's stored calls at once:
    counts, integer sums and histograms exactly, float sums to rounding."""
    for workspace in workspaces:
        expected = reference_ingest.rollup_deltas(store.raw_calls(workspace))
        for table in ROLLUPS:
            want = sorted(expected[table], key=lambda r: r[:5])
            have = stored_rollups(store, table, workspace)
            assert [r[:5] for r in have] == [r[:5] for r in want], table
            for got, ref in zip(have, want, strict=True):
                for i, (g, r) in enumerate(zip(got[5:], ref[5:], strict=True)):
                    assert g == (pytest.approx(r, rel=1e-12, abs=1e-9) if i in _FLOATS else r), (table, i)


def pending(store: SqliteCallStore) -> int:
    return store.rollups_pending()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteCallStore]:
    s = SqliteCallStore.open(tmp_path / DB_FILE)
    yield s
    s.close()


def ingest(store: SqliteCallStore, rows: list[dict[str, Any]], workspace: str = "w1") -> None:
    IngestService(store, store.metadata, Pricer(), 5000).ingest_document(app(workspace), {"rows": rows})


def test_ingest_leaves_the_rollups_to_the_fold_and_a_read_right_after_sees_every_call(
    mg_sqlite: Metergraph,
) -> None:
    store = mg_sqlite.calls
    assert isinstance(store, SqliteCallStore)
    rng = random.Random(3)
    mg_sqlite.ingest.ingest_document(app(), {"rows": varied_rows(rng, 50)})
    assert pending(store) == 50  # committed, not folded: the ingest transaction wrote the calls only
    assert store.db.conn.execute("SELECT COUNT(*) FROM rollup_daily").fetchone()[0] == 0
    out = mg_sqlite.usage.aggregates(agent(), group_by=None, days=30, since=None, until=None, routes=None,
                                     providers=None, models=None, environments=None, metadata=None, limit=100)  # fmt: skip
    assert out["totals"]["calls"] == 50
    assert (
        "rollup_daily_coarse" in out["evidence"]["sources"]
        or "rollup_weekly_coarse" in out["evidence"]["sources"]
    )
    assert pending(store) == 0
    assert_rollups_hold_every_call(store, ["w1"])


def test_folds_from_memory_read_back_and_mixed_agree_with_the_reference(store: SqliteCallStore) -> None:
    rng = random.Random(5)
    store.folder.start()  # batches committed while it runs wait for it in memory
    store.folder.idle_s = 3600.0  # it folds only when asked, here
    store.folder.pending_rows = 10**9
    for i in range(6):
        ingest(store, varied_rows(rng, 40), workspace=f"w{i % 2}")
    assert len(store.rollups.unfolded) == 6
    # A chunk smaller than a batch: batches in memory are folded whole, chunk by chunk.
    assert store.fold_rollups(own_only=True, chunk=30) == 240
    assert pending(store) == 0 and not store.rollups.unfolded
    store.folder.close()  # from now on, batches are read back from the table
    for i in range(4):
        ingest(store, varied_rows(rng, 25), workspace=f"w{i % 2}")
    assert not store.rollups.unfolded
    assert store.fold_rollups(chunk=30) == 100
    assert_rollups_hold_every_call(store, ["w0", "w1"])
    before = {t: stored_rollups(store, t, "w0") for t in ROLLUPS}
    store.rebuild_rollups()  # from the raw calls, in one transaction: the same rollups, watermark at the top
    assert pending(store) == 0
    for table in ROLLUPS:
        assert [r[:5] for r in stored_rollups(store, table, "w0")] == [r[:5] for r in before[table]]
    assert_rollups_hold_every_call(store, ["w0", "w1"])


def test_batches_folded_above_an_unfolded_one_are_recorded_and_the_watermark_follows(
    tmp_path: Path,
) -> None:
    """Two stores on one file (as two server processes): each folds its own batches from memory, so
    one's batches are folded above the other's unfolded one; a read then reads back only the gap."""
    first, second = (SqliteCallStore.open(tmp_path / DB_FILE) for _ in range(2))
    try:
        for s in (first, second):
            s.folder.start()
            s.folder.idle_s, s.folder.pending_rows = 3600.0, 10**9
        rng = random.Random(8)
        ingest(first, varied_rows(rng, 30))  # ids 1-30
        ingest(second, varied_rows(rng, 20))  # 31-50
        ingest(first, varied_rows(rng, 10))  # 51-60
        assert second.fold_rollups(own_only=True) == 20
        ranges = second.db.conn.execute("SELECT * FROM rollup_folded").fetchall()
        assert [tuple(r) for r in ranges] == [(31, 50)] and pending(second) == 60
        second.folder.close()
        # The second store reads: it reads back the first store's calls around the range it folded.
        assert second.fold_rollups() == 40
        assert pending(first) == 0 and not first.db.conn.execute("SELECT * FROM rollup_folded").fetchall()
        # The first store's batches were folded by the other: it forgets them, folding nothing twice.
        assert first.fold_rollups(own_only=True) == 0 and not first.rollups.unfolded
        assert_rollups_hold_every_call(first, ["w1"])
    finally:
        first.close()
        second.close()


def test_concurrent_stores_ingesting_and_folding_count_every_call_once(tmp_path: Path) -> None:
    """Two stores on one file, each ingesting from two threads with its folder running (folding often)
    while a third store's reads catch up: nothing is folded twice or missed."""
    stores = [SqliteCallStore.open(tmp_path / DB_FILE) for _ in range(3)]
    try:
        for s in stores[:2]:
            s.folder.idle_s, s.folder.pending_rows, s.stuck_s = 0.01, 60, 0.05
            s.folder.start()
        done = threading.Event()
        errors: list[BaseException] = []

        def writer(s: SqliteCallStore, seed: int) -> None:
            try:
                rng = random.Random(seed)
                for i in range(12):
                    ingest(s, varied_rows(rng, rng.randint(1, 40)), workspace=f"w{i % 2}")
            except BaseException as exc:  # reported below
                errors.append(exc)

        def reader() -> None:
            try:
                while not done.is_set():
                    stores[2].catch_up_rollups()
            except BaseException as exc:
                errors.append(exc)

        writers = [threading.Thread(target=writer, args=(stores[i % 2], i)) for i in range(4)]
        reading = threading.Thread(target=reader)
        reading.start()
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        done.set()
        reading.join()
        assert not errors, errors
        stores[0].catch_up_rollups()
        assert pending(stores[0]) == 0
        assert_rollups_hold_every_call(stores[0], ["w0", "w1"])
    finally:
        for s in stores:
            s.close()


def test_an_interrupted_fold_changes_nothing_and_the_next_one_folds_everything(
    store: SqliteCallStore,
) -> None:
    rng = random.Random(13)
    store.folder.start()
    store.folder.idle_s, store.folder.pending_rows = 3600.0, 10**9
    ingest(store, varied_rows(rng, 60))
    store.fold_rollups()
    ingest(store, varied_rows(rng, 60))  # in memory
    store.folder.close()
    ingest(store, varied_rows(rng, 60))  # read back
    tables = {t: stored_rollups(store, t, "w1") for t in ROLLUPS}
    kept = dict(store.rollups.unfolded)
    conn = store.db.conn
    steps = iter(range(10**9))
    # SQLite interrupts the fold's statements part-way (after the first upserts): the transaction rolls back.
    conn.set_progress_handler(lambda: 1 if next(steps) > 300 else 0, 100)
    try:
        with pytest.raises(sqlite3.OperationalError, match="interrupted"):
            store.fold_rollups()
    finally:
        conn.set_progress_handler(None, 0)
    assert pending(store) == 120
    assert {t: stored_rollups(store, t, "w1") for t in ROLLUPS} == tables
    assert store.rollups.unfolded == kept  # still in memory for the next fold
    assert store.fold_rollups() == 120
    assert_rollups_hold_every_call(store, ["w1"])


def test_the_upgrade_counts_existing_rollups_as_folded(tmp_path: Path) -> None:
    """A database from before the fold (rollups written with the calls) gets a watermark at its newest
    call, so nothing is added twice."""
    store = SqliteCallStore.open(tmp_path / DB_FILE)
    ingest(store, varied_rows(random.Random(21), 80))
    store.fold_rollups()
    with store.db.transaction() as conn:  # the database as it was before migration 5
        conn.execute("DROP TABLE rollup_watermark")
        conn.execute("DROP TABLE rollup_folded")
        for column in PRICING_COLUMNS:  # migration 6's
            conn.execute(f"ALTER TABLE calls DROP COLUMN {column}")
        conn.execute("UPDATE schema_version SET version = 4 WHERE component = 'main'")
    store.close()
    store = SqliteCallStore.open(tmp_path / DB_FILE)
    try:
        assert pending(store) == 0
        assert store.fold_rollups() == 0
        assert_rollups_hold_every_call(store, ["w1"])
    finally:
        store.close()


def test_rollup_reads_after_kill_9_count_every_acknowledged_call(tmp_path: Path) -> None:
    """The server acknowledges batches, dies by ``kill -9`` before its folder folds them, and the
    aggregates after a restart count every acknowledged call."""
    data_dir = tmp_path / "data"
    env = {"MG_TOKENS": "fold-app", "MG_AGENT_TOKENS": "fold-agent", "MG_AGENT_TOKENS_ROLE": "debug",
           "MG_ROLLUP_FOLD_IDLE_MS": "600000", "MG_ROLLUP_FOLD_ROWS": "1000000"}  # fmt: skip
    server = ServerProcess(data_dir, env).start()
    rng = random.Random(34)
    acked = 0
    try:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": "Bearer fold-app"}, timeout=30
        ) as http:
            for _ in range(4):
                rows = varied_rows(rng, 50)
                response = http.post("/v1/ingest", json={"schema_version": 1, "rows": rows})
                assert response.status_code == 202, response.text
                acked += len(rows)
        assert server.process is not None
        server.process.kill()  # SIGKILL: no shutdown hook, no fold
        server.process.wait()
    finally:
        server.stop()
    mg = Metergraph.open(data_dir, load_metergraph_settings())
    try:
        store = mg.calls
        assert isinstance(store, SqliteCallStore)
        assert pending(store) == acked  # the folder never ran: every acknowledged call is pending
        assert store.count_calls("default") == acked
    finally:
        mg.close()
    server = ServerProcess(data_dir, env).start()  # the restart
    try:
        response = httpx.get(server.url + "/v1/agent/usage/aggregates", params={"days": "90"},
                             headers={"Authorization": "Bearer fold-agent"})  # fmt: skip
        assert response.status_code == 200, response.text
        assert response.json()["totals"]["calls"] == acked
    finally:
        server.stop()
    store = SqliteCallStore.open(data_dir / DB_FILE)
    try:
        assert pending(store) == 0
        assert_rollups_hold_every_call(store, ["default"])
    finally:
        store.close()


def test_a_full_disk_refuses_the_fold_and_reads_still_count_every_call(tmp_path: Path) -> None:
    """On a full disk the catch-up fold cannot write: a read adds the calls not folded yet from an
    in-memory table, so its answer is exact, and the rollups are untouched until space comes back."""
    point = tmp_path / "disk"
    point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full disk is a small tmpfs, and mounting one needs root (CI runs as root)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs ({mounted.stderr.decode().strip()})")
    try:
        mg = Metergraph.open(point, load_metergraph_settings())
        try:
            store = mg.calls
            assert isinstance(store, SqliteCallStore)
            rng = random.Random(55)
            mg.ingest.ingest_document(app(), {"rows": varied_rows(rng, 60)})
            store.fold_rollups()
            mg.ingest.ingest_document(app(), {"rows": varied_rows(rng, 90)})
            store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # a write now needs new disk space
            filler = point / "filler.bin"
            with open(filler, "wb", buffering=0) as out, pytest.raises(OSError, match="No space left"):
                while True:
                    out.write(b"\0" * 4096)
            out = mg.usage.aggregates(agent(), group_by=["provider", "model"], days=30, since=None, until=None,
                                      routes=None, providers=None, models=None, environments=None,
                                      metadata=None, limit=100)  # fmt: skip
            assert pending(store) == 90  # the fold was refused
            assert out["totals"]["calls"] == 150
            assert sum(item["calls"] for item in out["items"]) == 150
            filler.unlink()
            again = mg.usage.aggregates(agent(), group_by=["provider", "model"], days=30, since=None, until=None,
                                        routes=None, providers=None, models=None, environments=None,
                                        metadata=None, limit=100)  # fmt: skip
            assert pending(store) == 0 and again["items"] == out["items"]
            assert_rollups_hold_every_call(store, ["w1"])
        finally:
            mg.close()
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_read_right_after_the_202_counts_every_call_while_the_folder_runs(tmp_path: Path) -> None:
    """A server with its folder running (default settings): an aggregate read sent the moment the
    last 202 arrives counts every acknowledged call, folded by then or not."""
    env = {"MG_TOKENS": "fold-app", "MG_AGENT_TOKENS": "fold-agent"}
    server = ServerProcess(tmp_path / "data", env).start()
    rng = random.Random(89)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            acked = 0
            for round_ in range(3):
                for _ in range(2):
                    rows = varied_rows(rng, 40)
                    response = http.post("/v1/ingest", json={"schema_version": 1, "rows": rows},
                                         headers={"Authorization": "Bearer fold-app"})  # fmt: skip
                    assert response.status_code == 202, response.text
                    acked += len(rows)
                read = http.get("/v1/agent/usage/aggregates", params={"days": "90", "group_by": "provider"},
                                headers={"Authorization": "Bearer fold-agent"})  # fmt: skip
                assert read.status_code == 200, read.text
                assert read.json()["totals"]["calls"] == acked, round_
                assert sum(item["calls"] for item in read.json()["items"]) == acked
    finally:
        server.stop()
    store = SqliteCallStore.open(tmp_path / "data" / DB_FILE)
    try:
        assert pending(store) == 0
        assert_rollups_hold_every_call(store, ["default"])
    finally:
        store.close()
