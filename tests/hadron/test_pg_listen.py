"""Server mode's fan-out of chat posts: ``PostgresTeamStore.announce`` NOTIFYs in the post's transaction and
every worker's ``PgChatListener`` hears it at commit, never for a post rolled back."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from triptych.hadron.domain.push import MAX_PAYLOAD, NOTIFY_CHANNEL, ChatEvent
from triptych.hadron.engines import Stores, open_stores
from triptych.hadron.pg_listen import PgChatListener


def test_an_event_too_large_for_a_notify_leaves_its_mentions_to_the_message() -> None:
    small = ChatEvent("m1", "chats:team", "c1", 7, ("w:1", "u:2"))
    assert ChatEvent.parse(small.payload()) == small
    many = ChatEvent("m1", "chats:team", "c1", 8, tuple(f"w:{i:032d}" for i in range(400)))
    assert len(many.payload().encode()) <= MAX_PAYLOAD
    assert ChatEvent.parse(many.payload()) == ChatEvent("m1", "chats:team", "c1", 8, None)


@pytest.fixture
def stores(tmp_path: Path, database_url: str | None) -> Iterator[Stores]:
    opened = open_stores(tmp_path / "hadron.db", database_url, None, None)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def listening(database_url: str | None) -> Iterator[tuple[PgChatListener, queue.SimpleQueue[ChatEvent]]]:
    """A started listener and what it hears."""
    assert database_url is not None
    heard: queue.SimpleQueue[ChatEvent] = queue.SimpleQueue()
    listener = PgChatListener(database_url, heard.put)
    listener.start()
    try:
        yield listener, heard
    finally:
        listener.stop()


@pytest.mark.engines("postgresql")
def test_a_committed_announcement_is_heard_and_a_rolled_back_one_never(
    stores: Stores, listening: tuple[PgChatListener, queue.SimpleQueue[ChatEvent]]
) -> None:
    _, heard = listening
    rolled_back = ChatEvent("m1", "chats:team", "c1", 1, ())
    with pytest.raises(RuntimeError), stores.team.atomic():
        stores.team.announce(rolled_back)
        raise RuntimeError("the post failed after its announcement")
    committed = ChatEvent("m1", "chats:team", "c1", 2, ("w:iris",))
    with stores.team.atomic():
        stores.team.announce(committed)
    assert heard.get(timeout=10) == committed  # the first heard: the rolled-back one never was


@pytest.mark.engines("postgresql")
def test_the_listener_listens_again_after_losing_its_connection(
    stores: Stores, listening: tuple[PgChatListener, queue.SimpleQueue[ChatEvent]], database_url: str
) -> None:
    listener, heard = listening
    with psycopg.connect(database_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = %s",
            (f"LISTEN {NOTIFY_CHANNEL}",),
        ).fetchall()
    assert killed == [(True,)]  # what a PostgreSQL restart does to it
    assert listener.wait_listening(2, timeout=30)
    after = ChatEvent("m1", "chats:team", "c1", 3, ())
    with stores.team.atomic():
        stores.team.announce(after)
    assert heard.get(timeout=10) == after
