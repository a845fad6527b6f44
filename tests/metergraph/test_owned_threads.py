"""Metergraph's close waits a bounded time for its two background threads, the columns' catch-up and the
rollup fold (decision 0450, after 0420 did the other owners): one still inside a query after the wait is
returned as busy, keeps its connection to the metergraph file (closing it under the query would crash
CPython's sqlite3, decision 0390) and finishes on it, and once it ends the data directory opens and reads
as after a normal close.

A thread is held inside a real SQLite query: a progress handler on its connection waits until the test
releases it, then the query runs on. The wait given to the close is short (``stop_wait``), the margins
for "the close returned" and "the thread ended" generous."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from mg_support import NOW, app, row

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.columns import ColumnProjection
from triptych.metergraph.service import COLUMNS_DIR, Metergraph
from triptych.metergraph.settings import load_metergraph_settings
from triptych.metergraph.sqlite_call_store import SqliteCallStore
from triptych.metergraph.sqlite_rollups import SqliteRollups

T = TypeVar("T")
CALLS = 500
CHUNK = 100  # the catch-up's batch: five of them
STOP_WAIT = 1.0  # what the close waits for a held thread (the default is 30 s)
MARGIN = 60.0  # for "returned" and "ended": never reached unless something hangs
DAY = 86_400_000


class HeldQuery:
    """The first query run through ``run`` waits inside SQLite (``sqlite3_step``) until ``release``."""

    def __init__(self) -> None:
        self.holding = threading.Event()  # a query is waiting inside SQLite
        self.release = threading.Event()
        self.outcomes: list[str] = []  # how each held query ended

    def run(self, conn: sqlite3.Connection, query: Callable[[], T], outcome: Callable[[T], str]) -> T:
        def wait() -> int:
            self.holding.set()
            self.release.wait(MARGIN)
            return 0  # go on with the query

        conn.set_progress_handler(wait, 100)
        try:
            result = query()
        except Exception as exc:
            self.outcomes.append(type(exc).__name__)
            raise
        finally:
            conn.set_progress_handler(None, 100)
        self.outcomes.append(outcome(result))
        return result


def open_mg(data_dir: Path) -> Metergraph:
    return Metergraph.open(data_dir, load_metergraph_settings(max_rows=CALLS), clock=lambda: NOW)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A metergraph file holding 500 calls (ids 1 to 500) in one workspace, nothing folded or projected."""
    mg = open_mg(tmp_path)
    routes = ["support", "search", "billing"]
    rows = [row(minutes_ago=i, route=routes[i % 3], input_tokens=i) for i in range(CALLS)]
    mg.ingest.ingest_document(app("w1"), {"rows": rows})
    assert mg.close() == []
    return tmp_path


@pytest.fixture
def held() -> Iterator[HeldQuery]:
    held = HeldQuery()
    yield held
    held.release.set()  # a failed test leaves no thread waiting


def close_in_background(mg: Metergraph) -> list[threading.Thread]:
    """``mg.close()``'s answer, asserting that it came (an unbounded join would never return)."""
    answer: list[list[threading.Thread]] = []
    closer = threading.Thread(target=lambda: answer.append(mg.close()), name="test-close", daemon=True)
    closer.start()
    closer.join(MARGIN)
    assert not closer.is_alive(), "the close did not return"
    return answer[0]


def assert_projection_owned_and_exact(mg: Metergraph) -> None:
    """The projection is this process's (its ``LOCK`` was let go of) and answers what SQL answers."""
    assert isinstance(mg.calls, SqliteCallStore) and mg.columns is not None
    f = CallFilter("w1", 0, int(NOW.timestamp() * 1000) + DAY)
    found = mg.columns.aggregate(f, ["route"], None)
    expected = mg.calls.aggregate_calls_sql(f, ["route"], None)
    assert found is not None and set(found) == set(expected) == {("support",), ("search",), ("billing",)}
    for key, agg in expected.items():
        np.testing.assert_allclose(found[key].sums, agg.sums, rtol=1e-12, err_msg=repr(key))  # costs: floats
        assert found[key].hist.tolist() == agg.hist.tolist(), key


def persisted_watermark(data_dir: Path) -> int:
    return int(json.loads((data_dir / COLUMNS_DIR / "state.json").read_text())["watermark"])


def test_a_close_during_a_held_catch_up_returns_it_busy_and_it_stops_after_its_batch_on_its_open_connection(
    data_dir: Path, held: HeldQuery, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SqliteCallStore.calls_after

    def calls_after(self: SqliteCallStore, after_id: int, limit: int) -> list[tuple[Any, ...]]:
        if after_id < CHUNK or held.holding.is_set():
            return real(self, after_id, limit)
        # The second batch: its thread's connection, as the real read takes it.
        return held.run(self.db.conn, lambda: real(self, after_id, limit), lambda rows: f"read {len(rows)}")

    monkeypatch.setattr(SqliteCallStore, "calls_after", calls_after)
    mg = open_mg(data_dir)
    projection = mg.columns
    assert isinstance(projection, ColumnProjection)
    projection.chunk, projection.persist_every, projection.stop_wait = CHUNK, 0.0, STOP_WAIT
    projection.start()
    assert held.holding.wait(MARGIN)
    mine = mg.sqlite.conn  # the closing thread's own connection

    busy = close_in_background(mg)
    assert [t.name for t in busy] == ["metergraph-columns"]
    assert busy[0].is_alive()  # still inside its query
    with pytest.raises(sqlite3.ProgrammingError):
        mine.execute("SELECT 1")  # every other connection is closed

    held.release.set()
    busy[0].join(MARGIN)
    assert not busy[0].is_alive()
    assert held.outcomes == [f"read {CHUNK}"]  # its query ran whole on the connection the close left open
    # It stopped after that batch (three were left) and wrote its state as it ended.
    assert persisted_watermark(data_dir) == 2 * CHUNK

    reopened = open_mg(data_dir)
    try:
        assert_projection_owned_and_exact(reopened)  # it let go of the files, and they are whole
    finally:
        assert reopened.close() == []


def test_a_close_during_a_held_fold_returns_it_busy_and_its_chunk_commits_on_its_open_connection(
    data_dir: Path, held: HeldQuery, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = SqliteRollups._fold_chunk

    def fold_chunk(self: SqliteRollups, conn: sqlite3.Connection, chunk: int, own_only: bool) -> Any:
        if own_only or held.holding.is_set():  # no batch of this process is in memory: hold the read-back
            return real(self, conn, chunk, own_only)
        return held.run(conn, lambda: real(self, conn, chunk, own_only), lambda done: f"folded {done.calls}")

    monkeypatch.setattr(SqliteRollups, "_fold_chunk", fold_chunk)
    mg = open_mg(data_dir)
    store = mg.calls
    assert isinstance(store, SqliteCallStore)
    store.stuck_s = 0.0  # the 500 calls are from before this open: fold them read back, at once
    store.folder.poll_s, store.folder.stop_wait = 0.0, STOP_WAIT
    assert store.rollups_pending() == CALLS
    store.folder.start()
    assert held.holding.wait(MARGIN)

    busy = close_in_background(mg)
    assert [t.name for t in busy] == ["metergraph-rollups"]
    assert busy[0].is_alive()

    held.release.set()
    busy[0].join(MARGIN)
    assert not busy[0].is_alive()
    # Its chunk ran whole inside its write transaction, on the connection the close left open ...
    assert held.outcomes == [f"folded {CALLS}"]
    reopened = open_mg(data_dir)
    try:
        reopened_store = reopened.calls
        assert isinstance(reopened_store, SqliteCallStore)
        assert reopened_store.rollups_pending() == 0  # ... and committed
        total = reopened_store.db.conn.execute("SELECT SUM(calls) FROM rollup_daily").fetchone()[0]
        assert total == CALLS
    finally:
        assert reopened.close() == []


def test_a_normal_close_joins_both_threads_and_writes_the_projection(data_dir: Path) -> None:
    mg = open_mg(data_dir)
    store, projection = mg.calls, mg.columns
    assert isinstance(store, SqliteCallStore) and isinstance(projection, ColumnProjection)
    store.stuck_s, store.folder.poll_s = 0.0, 0.0
    projection.persist_every = 3600.0  # only the close writes the state
    projection.start()
    store.folder.start()
    deadline = time.monotonic() + MARGIN
    while store.rollups_pending() or projection.status()["watermark"] < CALLS:
        assert time.monotonic() < deadline, "the catch-up and the fold did not finish"
        time.sleep(0.05)
    threads = [t for t in threading.enumerate() if t.name in ("metergraph-columns", "metergraph-rollups")]
    assert len(threads) == 2

    assert close_in_background(mg) == []
    assert not any(t.is_alive() for t in threads)
    assert persisted_watermark(data_dir) == CALLS
    reopened = open_mg(data_dir)
    try:
        assert_projection_owned_and_exact(reopened)
    finally:
        assert reopened.close() == []
