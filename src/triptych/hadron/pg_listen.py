"""Server mode: every worker hears every chat post through PostgreSQL ``LISTEN``/``NOTIFY``.

A post ``NOTIFY``s in its own transaction (``PostgresTeamStore.announce``), so PostgreSQL delivers it at
commit, to every worker at once (the poster's own included), and never for a post rolled back. Each
worker holds one connection of its own, outside the pool, that does nothing but ``LISTEN``: a thread
waits on it and hands each event to push (``PushService.publish``), which never blocks.

Notifications are hints (the chat reads are the source of truth), so a lost connection is reconnected
with a backoff and what was posted meanwhile is not replayed: readers catch up at their next read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg

from triptych.hadron.domain.push import NOTIFY_CHANNEL, ChatEvent

log = logging.getLogger(__name__)

WAIT = 1.0  # how long one wait for notifications lasts: the latency of noticing ``stop``
MAX_BACKOFF = 10.0


class PgChatListener:
    def __init__(self, url: str, publish: Callable[[ChatEvent], None]) -> None:
        self.url = url
        self.publish = publish
        self._stop = threading.Event()
        self._listens = 0  # how many times LISTEN took effect (1 + the reconnections)
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start listening; returns once ``LISTEN`` took effect (or after ``timeout``: it keeps trying)."""
        self._thread = threading.Thread(target=self._run, name="hadron-chat-listen", daemon=True)
        self._thread.start()
        if not self.wait_listening(1, timeout):
            log.warning("the chat listener is not listening yet; push waits for PostgreSQL")

    def wait_listening(self, times: int, timeout: float) -> bool:
        """Whether ``LISTEN`` has taken effect ``times`` times (a reconnection counts again) within
        ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._listens >= times, timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT + 5)
            self._thread = None

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    with self._changed:
                        self._listens += 1
                        self._changed.notify_all()
                    backoff = 0.5
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=WAIT):
                            self._hand_on(note.payload)
            except Exception as exc:  # a lost connection, mostly; whatever it is, the thread must go on
                log.warning("chat listener lost PostgreSQL (%s); reconnecting in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _hand_on(self, payload: str) -> None:
        try:
            event = ChatEvent.parse(payload)
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed chat notification: %.200s", payload)
            return
        self.publish(event)
