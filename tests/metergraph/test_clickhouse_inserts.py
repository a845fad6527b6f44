"""Group commit on the ClickHouse engine: ingest batches waiting at the same time share one INSERT, each
caller returns once its rows are stored, and a bad batch in a shared INSERT fails alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.models import SettingDef
from clickhouse_endpoint import AsyncInserts, ClickHouseEndpoint
from mg_support import NOW, agent, app, row

from triptych.core.errors import StorageUnavailable
from triptych.metergraph.clickhouse_call_store import ClickHouseCallStore
from triptych.metergraph.clickhouse_client import insert_settings
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings


@pytest.fixture
def mg(clickhouse: ClickHouseEndpoint, tmp_path: Path) -> Iterator[Metergraph]:
    service = Metergraph.open(
        tmp_path, load_metergraph_settings(clickhouse_url=clickhouse.database_url()), clock=lambda: NOW
    )
    yield service
    service.close()


def hold_first_insert(store: ClickHouseCallStore) -> tuple[threading.Event, list[int]]:
    """The first INSERT waits for the gate (the real INSERT, held), so batches queue behind it; the
    rows each INSERT carried are recorded."""
    inserter = store._calls
    real: Callable[[list[list[Any]]], None] = inserter._insert
    gate, sent = threading.Event(), []

    def held(columns: list[list[Any]]) -> None:
        sent.append(len(columns[0]))
        if len(sent) == 1:
            assert gate.wait(30)
        real(columns)

    inserter._insert = held
    return gate, sent


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def ingest_in_threads(
    mg: Metergraph, batches: list[list[dict[str, Any]]]
) -> tuple[list[Any], list[threading.Thread]]:
    outcomes: list[Any] = [None] * len(batches)

    def run(i: int) -> None:
        try:
            outcomes[i] = mg.ingest.ingest_document(app(), {"rows": batches[i]}).accepted
        except Exception as exc:  # the test checks which batch failed, and how
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batches))]
    return outcomes, threads


def test_batches_waiting_together_go_in_one_insert_and_each_returns_stored(mg: Metergraph) -> None:
    store = mg.calls
    assert isinstance(store, ClickHouseCallStore)
    gate, sent = hold_first_insert(store)
    batches = [[row(request_id=f"b{b}-{i}") for i in range(5)] for b in range(4)]
    outcomes, threads = ingest_in_threads(mg, batches)
    threads[0].start()
    wait_for(lambda: len(sent) == 1)  # the first batch's INSERT is in flight, alone
    for t in threads[1:]:
        t.start()
    wait_for(lambda: len(store._calls._queue) == 3)  # the others wait behind it
    assert store.count_calls("w1") == 0 and outcomes == [None] * 4  # nobody was told stored yet
    gate.set()
    for t in threads:
        t.join()
    assert outcomes == [5, 5, 5, 5]
    assert sent == [5, 15]  # two INSERTs for four batches
    calls = store.raw_calls("w1")
    assert len({c["id"] for c in calls}) == 20
    assert {c["request_id"] for c in calls} == {f"b{b}-{i}" for b in range(4) for i in range(5)}
    assert mg.usage.aggregates(agent(), days=1)["totals"]["calls"] == 20
    assert store.metadata.batch_health("w1", 0)["processed"] == 4


def test_a_bad_batch_in_a_shared_insert_fails_alone(mg: Metergraph) -> None:
    store = mg.calls
    assert isinstance(store, ClickHouseCallStore)
    gate, sent = hold_first_insert(store)
    batches = [[row(request_id=f"b{b}-{i}") for i in range(3)] for b in range(4)]
    batches[2][1]["input_tokens"] = 2**70  # beyond Int64: refused while the INSERT is encoded
    outcomes, threads = ingest_in_threads(mg, batches)
    threads[0].start()
    wait_for(lambda: len(sent) == 1)
    for t in threads[1:]:
        t.start()
    wait_for(lambda: len(store._calls._queue) == 3)
    gate.set()
    for t in threads:
        t.join()
    assert outcomes[:2] == [3, 3] and outcomes[3] == 3
    assert isinstance(outcomes[2], OverflowError)
    assert sent == [3, 9, 3, 3, 3]  # the shared INSERT refused, then each of its batches alone
    assert {c["request_id"] for c in store.raw_calls("w1")} == {
        f"b{b}-{i}" for b in (0, 1, 3) for i in range(3)
    }
    assert mg.usage.aggregates(agent(), days=1)["totals"]["calls"] == 9
    assert store.metadata.batch_health("w1", 0)["processed"] == 3


def test_batches_from_two_workers_share_one_server_side_insert_and_return_once_stored(
    clickhouse: ClickHouseEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two workers (two services on one data directory and one database); the server's async insert
    # buffer flushes once it holds two inserts, so the workers' batches can only land together.
    url = clickhouse.database_url()
    workers = [
        Metergraph.open(tmp_path, load_metergraph_settings(clickhouse_url=url), clock=lambda: NOW)
        for _ in range(2)
    ]
    try:
        store = workers[0].calls
        assert isinstance(store, ClickHouseCallStore)
        store.command("SYSTEM STOP MERGES calls")  # so the parts show how many INSERTs wrote
        monkeypatch.setattr(clickhouse.engine, "inserts", AsyncInserts(clickhouse.engine, 60.0, 1 << 30, 2))
        outcomes: list[Any] = [None, None]

        def run(i: int) -> None:
            batch = [row(request_id=f"w{i}-{n}") for n in range(4)]
            outcomes[i] = workers[i].ingest.ingest_document(app(), {"rows": batch}).accepted

        first = threading.Thread(target=run, args=(0,))
        first.start()
        wait_for(lambda: sum(len(b.items) for b in clickhouse.engine.inserts._buffers.values()) == 1)
        assert outcomes == [None, None] and store.count_calls("w1") == 0  # held until the flush
        second = threading.Thread(target=run, args=(1,))
        second.start()
        first.join(60)
        second.join(60)
        assert outcomes == [4, 4]
        assert {c["request_id"] for c in store.raw_calls("w1")} == {
            f"w{i}-{n}" for i in (0, 1) for n in range(4)
        }
        parts = store.query("SELECT count() FROM system.parts WHERE database = currentDatabase()"
                             " AND table = 'calls' AND active").result_rows  # fmt: skip
        assert parts == [(1,)]
        assert workers[1].usage.aggregates(agent(), days=1)["totals"]["calls"] == 8
    finally:
        for worker in workers:
            worker.close()


def _settings(async_insert: tuple[str, int], wait: tuple[str, int]) -> dict[str, SettingDef]:
    return {
        "async_insert": SettingDef("async_insert", *async_insert),
        "wait_for_async_insert": SettingDef("wait_for_async_insert", *wait),
    }


@pytest.mark.parametrize(
    ("async_insert", "wait", "asked"),
    [
        (("0", 0), ("1", 0), {"async_insert": 1, "wait_for_async_insert": 1}),  # changeable: both asked
        (("0", 1), ("1", 0), {}),  # async inserts locked off: plain inserts, nothing asked
        (("1", 1), ("1", 0), {"wait_for_async_insert": 1}),  # locked on: only the wait is asked
        (("0", 0), ("0", 1), {}),  # the wait locked off: plain inserts rather than unsafe ones
        (("1", 1), ("1", 1), {}),  # both locked on: the server already does what is wanted
    ],
)
def test_inserts_ask_only_for_the_async_settings_the_server_lets_them_change(
    async_insert: tuple[str, int], wait: tuple[str, int], asked: dict[str, int]
) -> None:
    assert insert_settings(_settings(async_insert, wait)) == asked


def test_a_server_that_acknowledges_async_inserts_before_writing_them_is_refused() -> None:
    with pytest.raises(StorageUnavailable, match="wait_for_async_insert"):
        insert_settings(_settings(("1", 1), ("0", 1)))
    assert insert_settings({}) == {}  # a server from before async inserts: plain inserts
