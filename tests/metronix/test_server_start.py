"""Server mode's start-up jobs (queued freshness checks, expiry) run in one worker at a time.

Workers start together on one PostgreSQL database; the one that takes the database lease recovers the
queued checks, the others go on serving. Tested with two real Metronix surfaces on one database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres import PostgresCluster

from triptych.core.config import load_settings
from triptych.core.embed import LocalEmbedder
from triptych.core.pg import PgDatabase
from triptych.metronix.entities import extract_entities
from triptych.metronix.memory import content_hash
from triptych.metronix.memory_model import MemoryRecord
from triptych.metronix.store import utcnow
from triptych.metronix.surface import Metronix

LEASE = "metronix-start-jobs"


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    local = LocalEmbedder(threads=1)
    local.warm_up()
    return local


def test_a_lease_is_held_by_one_handle_at_a_time_and_freed_after(postgres: PostgresCluster) -> None:
    url = postgres.create_database()
    first, second = PgDatabase(url, max_size=2), PgDatabase(url, max_size=2)
    try:
        with first.lease("job") as mine:
            assert mine
            with second.lease("job") as theirs, second.lease("another job") as other:
                assert not theirs and other
        with second.lease("job") as theirs:
            assert theirs
    finally:
        first.close()
        second.close()


@pytest.fixture
def two_workers(
    postgres: PostgresCluster, embedder: LocalEmbedder, tmp_path: Path
) -> Iterator[tuple[Metronix, Metronix]]:
    url = postgres.create_database()
    opened = [
        Metronix.open(load_settings(data_dir=tmp_path / f"w{i}", database_url=url), embedder)
        for i in range(2)
    ]
    try:
        yield opened[0], opened[1]
    finally:
        for metronix in opened:
            metronix.close()


def _queue_a_check(metronix: Metronix, embedder: LocalEmbedder, content: str) -> None:
    """A record committed with its check queued, by a worker that then "died" before running it."""
    now = utcnow()
    record = MemoryRecord(
        id=str(uuid.uuid4()), workspace_id="start", agent_id="hermes", scope="per_agent", session_id=None,
        kind="fact", content=content, content_hash=content_hash(content), tags=[], importance_score=0.5,
        source_type="", metadata={}, status="active", created_at=now, updated_at=now,
    )  # fmt: skip
    metronix.memory.store.insert(record, embedder.embed([content])[0], extract_entities(content), True)


def test_a_worker_starting_while_another_holds_the_lease_leaves_the_queued_checks_to_it(
    two_workers: tuple[Metronix, Metronix], embedder: LocalEmbedder
) -> None:
    first, second = two_workers
    _queue_a_check(first, embedder, "User prefers dark mode")
    assert first.pg is not None and len(first.memory.store.reviews.pending_checks()) == 1
    with first.pg.lease(LEASE) as held:  # the first worker is running the start-up jobs
        assert held
        second.start()
        assert second.warming is not None
        second.warming.join()
        assert len(second.memory.store.reviews.pending_checks()) == 1  # not run a second time
    first.start()  # the lease holder runs them: once
    assert first.memory.store.reviews.pending_checks() == []
