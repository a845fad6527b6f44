"""What the per-tenant write-lock tests share (issue 30 item 1): threads that hold or wait on a write,
and PostgreSQL's own view of who waits for an advisory lock, so a wait is observed, never timed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

# A thread that should finish does so in milliseconds; a stuck one fails the test here, not CI's timeout.
STUCK = 60.0


def advisory_waiters(url: str) -> int:
    """How many backends of the database's cluster wait for an advisory lock right now."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return int(row[0]) if row else 0


def until(condition: Callable[[], bool]) -> None:
    """Poll a condition another backend's progress sets (no event to await across processes)."""
    pause = threading.Event()
    for _ in range(int(STUCK / 0.02)):
        if condition():
            return
        pause.wait(0.02)
    raise AssertionError("the condition never held")


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``work`` started in a thread of its own; the list receives its result."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    return thread, out


def tenant_keys_held_by_waiters(url: str) -> int:
    """How many tenant keys (PostgreSQL's two-``int4`` advisory keys) the backends that wait for an
    advisory lock hold meanwhile: a write that takes its tenants' keys in one fixed order, all in one
    statement, holds none while it waits, so no two such writes wait for each other in a circle."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks held WHERE held.locktype = 'advisory' AND held.granted "
            "AND held.objsubid = 2 AND held.pid IN "
            "(SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)"
        ).fetchone()
    return int(row[0]) if row else 0


class Held:
    """``work`` inside a transaction of ``hadron`` (a Hadron) holding ``keys``, stopped before its commit
    until ``commit``: a write held open while another is seen to wait for it, or not."""

    def __init__(self, hadron: Any, keys: tuple[str, ...], work: Callable[[], object]) -> None:
        self.began, self.release = threading.Event(), threading.Event()
        self.failed: list[BaseException] = []

        def run() -> None:
            try:
                with hadron.graph.atomic(*keys):
                    work()
                    self.began.set()
                    self.release.wait(3 * STUCK)  # longer than any join: a wait fails, never times out
            except BaseException as exc:  # surfaced by the test, not lost in the thread
                self.failed.append(exc)
                self.began.set()

        self.thread, _ = in_thread(run)
        assert self.began.wait(STUCK)
        assert not self.failed, self.failed

    def commit(self) -> None:
        self.release.set()
        self.thread.join(STUCK)
        assert not self.thread.is_alive()
        assert not self.failed, self.failed
