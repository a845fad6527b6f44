"""Writes to two workspaces never wait for each other in server mode (issue 30 item 1, docs/decisions/0170).

Two ``PostgresMemoryStore``s on one real PostgreSQL stand for two workers. A write to workspace A is held
open (its transaction begun, its lock held, not committed) while other writes run: one to workspace B
commits and the other worker's search finds it; one to A, or a store-wide one, queues until A commits.
Waiting is observed in ``pg_locks`` (a backend waiting for an advisory lock), never by timing. SQLite
keeps its single writer and is not under test here (its memory store is unchanged).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np
import pytest
from lock_waits import STUCK, advisory_waiters, in_thread, until

from triptych.core.pg import PgDatabase
from triptych.metronix.attributes import Visibility
from triptych.metronix.memory_model import MemoryRecord
from triptych.metronix.memory_store import PostgresMemoryStore
from triptych.metronix.store import utcnow

pytestmark = pytest.mark.engines("postgresql")

DIM = 8


@pytest.fixture
def workers(storage_engine: str, request: pytest.FixtureRequest) -> Iterator[tuple[PgDatabase, ...]]:
    url = request.getfixturevalue("postgres").create_database()
    dbs = tuple(PgDatabase(url, max_size=4) for _ in range(3))  # two workers and an observer
    yield dbs
    for db in dbs:
        db.close()


@pytest.fixture
def st(workers: tuple[PgDatabase, ...]) -> PostgresMemoryStore:
    return PostgresMemoryStore(workers[0], DIM)


@pytest.fixture
def other(workers: tuple[PgDatabase, ...], st: PostgresMemoryStore) -> PostgresMemoryStore:
    return PostgresMemoryStore(workers[1], DIM)


def vec(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    return v


def record(content: str, workspace: str) -> MemoryRecord:
    now = utcnow()
    return MemoryRecord(
        id=str(uuid.uuid4()),
        workspace_id=workspace,
        agent_id="hermes",
        scope="per_agent",
        session_id=None,
        kind="fact",
        content=content,
        content_hash="h-" + content,
        tags=[],
        importance_score=0.5,
        source_type="",
        metadata={},
        status="active",
        created_at=now,
        updated_at=now,
    )


def found(store: PostgresMemoryStore, workspace: str, word: str) -> list[int]:
    """The seqs a worker's keyword search of ``workspace`` finds (through its in-process index)."""
    view = Visibility(workspace_id=workspace, agent_id="hermes", statuses=("active",))
    return [seq for seq, _ in store.keyword_search(view, word, 10)]


@contextmanager
def held_open(store: PostgresMemoryStore, workspace: str) -> Iterator[threading.Event]:
    """A write to ``workspace`` begun (lock held, a row updated) and not committed until the block ends,
    from a thread of its own (the store's transaction is per thread)."""
    began, release = threading.Event(), threading.Event()

    def write() -> None:
        with store.writing(workspace) as conn:
            store.caches.bump(conn, workspace)
            began.set()
            release.wait(STUCK)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    assert began.wait(STUCK)
    try:
        yield release
    finally:
        release.set()
        thread.join(STUCK)
        assert not thread.is_alive()


def test_another_workspaces_write_commits_and_is_found_while_one_is_held_open(
    st: PostgresMemoryStore, other: PostgresMemoryStore, workers: tuple[PgDatabase, ...]
) -> None:
    before = found(st, "ws-b", "harbour")  # worker 1's index of B is loaded (empty) before B's write
    with held_open(st, "ws-a"):
        writer, out = in_thread(
            lambda: other.insert(record("the harbour opens at six", "ws-b"), vec(1), set())
        )
        writer.join(STUCK)
        assert not writer.is_alive(), "a write to workspace B waited for workspace A's open write"
        stored, deduped = out[0]
        assert not deduped
        # Visible to the other worker's search while A is still open.
        assert found(st, "ws-b", "harbour") == [stored.seq]
        assert advisory_waiters(workers[2].url) == 0
    assert before == []


def test_two_writes_to_one_workspace_still_queue(
    st: PostgresMemoryStore, other: PostgresMemoryStore, workers: tuple[PgDatabase, ...]
) -> None:
    generation = st.caches.generation("ws-a")
    with held_open(st, "ws-a") as release:
        writer, out = in_thread(
            lambda: other.insert(record("the bridge closes at ten", "ws-a"), vec(2), set())
        )
        until(lambda: advisory_waiters(workers[2].url) == 1)  # the second write to A waits for the first
        assert writer.is_alive() and out == []
        release.set()
        writer.join(STUCK)
        assert not writer.is_alive()
    stored, _ = out[0]
    # Both counted, one after the other: the held write's bump, then the insert's.
    assert st.caches.generation("ws-a") == generation + 2
    assert found(st, "ws-a", "bridge") == [stored.seq]


def test_a_store_wide_write_waits_for_every_workspace_write_in_progress(
    st: PostgresMemoryStore, other: PostgresMemoryStore, workers: tuple[PgDatabase, ...]
) -> None:
    with held_open(st, "ws-a") as release:
        writer, out = in_thread(lambda: other.set_embedding_model("model-b", DIM))
        until(lambda: advisory_waiters(workers[2].url) == 1)
        assert writer.is_alive()
        release.set()
        writer.join(STUCK)
        assert not writer.is_alive()
    assert other.embedding_model() == ("model-b", DIM)


class PausedStore(PostgresMemoryStore):
    """A worker whose inserts take the engine-neutral path (the one PostgreSQL takes for a twin) and
    stop before their commit until released: the record's seq is handed out, the commit comes later."""

    def __init__(self, pg: PgDatabase, dim: int) -> None:
        super().__init__(pg, dim)
        self.inserted, self.release = threading.Event(), threading.Event()

    def _insert_at_once(self, *args: Any, **kwargs: Any) -> MemoryRecord | None:
        return None

    def writing(self, workspace_id: str | None) -> AbstractContextManager[Any]:
        @contextmanager
        def paused() -> Iterator[Any]:
            with super(PausedStore, self).writing(workspace_id) as conn:
                yield conn
                self.inserted.set()
                self.release.wait(STUCK)

        return paused()


def test_a_seq_handed_out_before_another_workspaces_commit_is_not_missed(
    workers: tuple[PgDatabase, ...], st: PostgresMemoryStore
) -> None:
    """A's record takes its seq first and commits last; B's commits in between. Followers read each
    workspace by its own counters, never "seqs after N" across workspaces, so both are found."""
    paused, follower = PausedStore(workers[1], DIM), st
    assert found(follower, "ws-a", "lantern") == [] and found(follower, "ws-b", "lantern") == []
    writer_a, out_a = in_thread(lambda: paused.insert(record("a lantern on the quay", "ws-a"), vec(3), set()))
    assert paused.inserted.wait(STUCK)  # A's row and seq exist, uncommitted
    b, _ = follower.insert(record("a lantern in the tower", "ws-b"), vec(4), set())
    assert found(follower, "ws-b", "lantern") == [b.seq]
    assert found(follower, "ws-a", "lantern") == []  # not committed yet
    paused.release.set()
    writer_a.join(STUCK)
    assert not writer_a.is_alive()
    a, _ = out_a[0]
    assert a.seq < b.seq  # handed out first, committed last
    assert found(follower, "ws-a", "lantern") == [a.seq]
    assert found(follower, "ws-b", "lantern") == [b.seq]
    assert found(paused, "ws-b", "lantern") == [b.seq]
