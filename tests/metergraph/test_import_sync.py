"""Import sync, the service under ``/v1/import-sync``: windows that resume where the last completed one
ended, one lease per stream, expiry and takeover, renew/complete/abandon, and every refusal. The import
sync store's contract: every test runs on SQLite and on PostgreSQL (server mode), and on each engine
processes racing for one stream get exactly one lease."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from triptych.core.db import Database
from triptych.metergraph.control_pg import close_control_database, open_control_database
from triptych.metergraph.errors import (
    InitialSinceRequired,
    LeaseEnded,
    LeaseExpired,
    LeaseHeld,
    LeaseNotFound,
    SyncInvalid,
)
from triptych.metergraph.import_sync import ImportSyncService
from triptych.metergraph.import_sync_store import PostgresImportSyncStore, SqliteImportSyncStore

T0 = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
HOUR = 3600.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0 + 10 * HOUR)


@pytest.fixture(params=("sqlite", "postgres"))
def sync(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[ImportSyncService]:
    """The service over each engine's store in turn, empty."""
    if request.param == "sqlite":
        yield ImportSyncService(SqliteImportSyncStore(Database(tmp_path / "metergraph.db", [])), clock=clock)
        return
    db = open_control_database(request.getfixturevalue("postgres").create_database("mgsync"))
    yield ImportSyncService(PostgresImportSyncStore(db), clock=clock)
    close_control_database(db)


def body(**fields: Any) -> dict[str, Any]:
    return {"source": "phoenix", "source_scope": "proj-a", **fields}


SINCE = "2026-12-01T00:00:00Z"


def test_the_first_window_starts_at_initial_since_and_lasts_at_most_max_window(
    sync: ImportSyncService,
) -> None:
    got = sync.acquire("w1", body(initial_since=SINCE, max_window_seconds=1800))
    assert got.lease is not None
    assert (got.lease.window_start_ms, got.lease.window_end_ms) == (int(T0 * 1000), int((T0 + 1800) * 1000))
    assert got.lease.expires_ms == int((T0 + 10 * HOUR + 900) * 1000)
    assert got.lease.checkpoint_version == 0


def test_the_first_window_needs_initial_since(sync: ImportSyncService) -> None:
    with pytest.raises(InitialSinceRequired):
        sync.acquire("w1", body())


def test_windows_resume_at_the_last_checkpoint_with_a_five_minute_overlap(
    sync: ImportSyncService, clock: Clock
) -> None:
    first = sync.acquire("w1", body(initial_since=SINCE)).lease
    assert first is not None
    _, version = sync.complete("w1", first.lease_id)
    assert version == 1
    # initial_since is ignored once the stream has a checkpoint (cron sends it every run).
    second = sync.acquire("w1", body(initial_since="2020-01-01T00:00:00+00:00")).lease
    assert second is not None
    assert second.window_start_ms == first.window_end_ms - 5 * 60 * 1000
    assert second.window_end_ms == first.window_end_ms + 3600 * 1000
    assert second.checkpoint_version == 1
    # An abandoned window is handed out again, unchanged.
    sync.abandon("w1", second.lease_id)
    again = sync.acquire("w1", body()).lease
    assert again is not None and (again.window_start_ms, again.window_end_ms) == (
        second.window_start_ms,
        second.window_end_ms,
    )
    assert again.lease_id != second.lease_id


def test_a_window_ends_at_now_and_a_stream_at_now_is_caught_up(sync: ImportSyncService, clock: Clock) -> None:
    clock.now = T0 + 0.5 * HOUR
    lease = sync.acquire("w1", body(initial_since=SINCE)).lease
    assert lease is not None and lease.window_end_ms == int(clock.now * 1000)
    sync.complete("w1", lease.lease_id)
    caught_up = sync.acquire("w1", body())
    assert caught_up.lease is None and caught_up.stream is not None
    assert caught_up.stream.checkpoint_ms == lease.window_end_ms
    # A first window in the future is caught up too, and takes no lease.
    assert sync.acquire("w1", body(source_scope="later", initial_since="2027-01-01T00:00:00Z")).lease is None
    assert sync.state("w1", "phoenix", "later")["lease"] is None


def test_one_lease_per_stream_until_it_runs_out_then_it_is_taken_over(
    sync: ImportSyncService, clock: Clock
) -> None:
    held = sync.acquire("w1", body(initial_since=SINCE)).lease
    assert held is not None
    with pytest.raises(LeaseHeld) as busy:
        sync.acquire("w1", body())
    assert busy.value.retry_at == "2026-12-01T10:15:00+00:00"
    # Other scopes, sources and workspaces are other streams.
    assert sync.acquire("w1", body(source_scope="proj-b", initial_since=SINCE)).lease is not None
    assert sync.acquire("w1", body(source="langfuse", initial_since=SINCE)).lease is not None
    assert sync.acquire("w2", body(initial_since=SINCE)).lease is not None
    clock.now += 900  # the lease runs out
    taker = sync.acquire("w1", body()).lease
    assert taker is not None and taker.window_start_ms == held.window_start_ms
    for call in (sync.renew, sync.complete, sync.abandon):
        with pytest.raises(LeaseExpired):
            call("w1", held.lease_id)
    sync.complete("w1", taker.lease_id)
    assert sync.state("w1", "phoenix", "proj-a")["checkpoint_version"] == 1


def test_a_renewed_lease_lasts_from_its_renewal_and_an_expired_one_cannot_be_renewed(
    sync: ImportSyncService, clock: Clock
) -> None:
    lease = sync.acquire("w1", body(initial_since=SINCE)).lease
    assert lease is not None
    clock.now += 600
    assert sync.renew("w1", lease.lease_id).expires_ms == int((clock.now + 900) * 1000)
    clock.now += 899
    with pytest.raises(LeaseHeld):
        sync.acquire("w1", body())
    clock.now += 1
    with pytest.raises(LeaseExpired):
        sync.renew("w1", lease.lease_id)  # run out, even though nobody took it over yet
    with pytest.raises(LeaseExpired):
        sync.complete("w1", lease.lease_id)
    assert sync.state("w1", "phoenix", "proj-a")["checkpoint"] is None


def test_ended_and_unknown_leases_are_refused(sync: ImportSyncService) -> None:
    lease = sync.acquire("w1", body(initial_since=SINCE)).lease
    assert lease is not None
    with pytest.raises(LeaseNotFound):
        sync.renew("w2", lease.lease_id)  # another workspace's lease is none of its business
    with pytest.raises(LeaseNotFound):
        sync.complete("w1", "isl_nope")
    sync.complete("w1", lease.lease_id)
    for call in (sync.renew, sync.complete, sync.abandon):
        with pytest.raises(LeaseEnded):
            call("w1", lease.lease_id)
    other = sync.acquire("w1", body()).lease
    assert other is not None
    sync.abandon("w1", other.lease_id)
    with pytest.raises(LeaseEnded):
        sync.abandon("w1", other.lease_id)


@pytest.mark.parametrize(
    "sent",
    [
        [],
        body(initial_since=SINCE, extra=1),
        body(source="Portkey"),
        body(source=""),
        body(source=7),
        body(source_scope="   "),
        body(source_scope="x" * 513),
        body(source_scope=None),
        body(initial_since="2026-12-01T00:00:00"),
        body(initial_since="yesterday"),
        body(initial_since=1764547200),
        body(initial_since=SINCE, max_window_seconds=0),
        body(initial_since=SINCE, max_window_seconds=3601),
        body(initial_since=SINCE, max_window_seconds=True),
        body(initial_since=SINCE, max_window_seconds=60.0),
    ],
)
def test_a_bad_acquire_is_refused_and_takes_no_lease(sync: ImportSyncService, sent: Any) -> None:
    with pytest.raises(SyncInvalid):
        sync.acquire("w1", sent)
    assert sync.state("w1", "phoenix", "proj-a") == {
        "source": "phoenix", "source_scope": "proj-a", "checkpoint": None, "checkpoint_version": 0,
        "last_completed_at": None, "lease": None,
    }  # fmt: skip


def test_state_shows_the_checkpoint_and_the_running_lease_without_its_id(
    sync: ImportSyncService, clock: Clock
) -> None:
    first = sync.acquire("w1", body(initial_since=SINCE)).lease
    assert first is not None
    sync.complete("w1", first.lease_id)
    sync.acquire("w1", body())
    state = sync.state("w1", "phoenix", " proj-a ")
    assert state["checkpoint"] == "2026-12-01T01:00:00+00:00"
    assert state["checkpoint_version"] == 1
    assert state["last_completed_at"] == "2026-12-01T10:00:00+00:00"
    assert state["lease"] == {
        "window_start": "2026-12-01T00:55:00+00:00", "window_end": "2026-12-01T02:00:00+00:00",
        "acquired_at": "2026-12-01T10:00:00+00:00", "lease_expires_at": "2026-12-01T10:15:00+00:00",
    }  # fmt: skip
    with pytest.raises(SyncInvalid):
        sync.state("w1", None, "proj-a")


_RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from triptych.core.db import Database
    from triptych.metergraph.control_pg import open_control_database
    from triptych.metergraph.errors import LeaseHeld
    from triptych.metergraph.import_sync import ImportSyncService
    from triptych.metergraph.import_sync_store import PostgresImportSyncStore, SqliteImportSyncStore

    target, go = sys.argv[1], Path(sys.argv[2])
    if target.startswith("postgresql://"):
        store = PostgresImportSyncStore(open_control_database(target))
    else:
        store = SqliteImportSyncStore(Database(Path(target), []))
    sync = ImportSyncService(store)
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.001)
    try:
        lease = sync.acquire("w1", {"source": "phoenix", "source_scope": "race",
                                    "initial_since": "2026-01-01T00:00:00Z"}).lease
        print("won" if lease is not None else "caught_up")
    except LeaseHeld:
        print("busy")
    """
)


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_processes_acquiring_one_stream_at_once_get_one_lease(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """Each racer is its own process with its own connections (on PostgreSQL: as on separate machines)."""
    go = tmp_path / "go"
    if engine == "sqlite":
        target = str(tmp_path / "metergraph.db")
        SqliteImportSyncStore(Database(Path(target), []))  # migrated once, so the racers meet at the acquire
    else:
        target = request.getfixturevalue("postgres").create_database("mgrace")
        close_control_database(open_control_database(target))
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, target, str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    for racer in racers:  # every racer has opened its store and spins on the start file
        assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
    go.touch()
    outcomes = sorted(r.communicate(timeout=60)[0].strip() for r in racers)
    assert outcomes == ["busy", "busy", "busy", "won"]


def test_streams_acquired_at_once_on_postgres_never_wait_for_each_other(
    request: pytest.FixtureRequest, clock: Clock
) -> None:
    """The lock is the stream's, not the store's: while one transaction holds stream A, stream B is
    acquired through another connection."""
    import threading

    db = open_control_database(request.getfixturevalue("postgres").create_database("mgscope"))
    try:
        store = PostgresImportSyncStore(db)
        sync = ImportSyncService(store, clock=clock)
        holding, release = threading.Event(), threading.Event()

        def hold_a() -> None:
            with store.transaction() as tx:
                tx.stream("w1", "phoenix", "a")  # takes stream a's lock until the transaction ends
                holding.set()
                release.wait(30)

        holder = threading.Thread(target=hold_a)
        holder.start()
        assert holding.wait(30)
        got = sync.acquire("w1", body(source_scope="b", initial_since=SINCE))
        still_holding = holder.is_alive()  # a store-wide lock would have waited for the holder to end
        release.set()
        holder.join()
        assert still_holding and got.lease is not None and got.lease.scope == "b"
    finally:
        close_control_database(db)
