"""The ``LockStore`` contract on every engine: one live holder per memory, renewals keep the first
``locked_at``, an expired lock is nobody's."""

from __future__ import annotations

import pytest
from hadron.store_contract.conftest import Seed

from triptych.hadron.lock_store import MemoryLock

pytestmark = pytest.mark.engines("sqlite", "postgresql")
T0, T1, T2, T3 = (
    "2026-12-01T09:00:00Z",
    "2026-12-01T09:05:00Z",
    "2026-12-01T09:10:00Z",
    "2026-12-01T09:20:00Z",
)


def test_a_live_lock_stands_against_others_and_renews_for_its_holder(seed: Seed) -> None:
    locks, mid = seed.stores.locks, seed.memory.id
    mine = MemoryLock(mid, "user:a", "hrn:user:a", "edit", T0, T2)
    assert locks.lock(mid, T0) is None
    assert locks.acquire(mine, T0) == (mine, True)
    assert locks.acquire(MemoryLock(mid, "user:b", "hrn:user:b", None, T1, T3), T1) == (mine, False)
    renewed, ok = locks.acquire(MemoryLock(mid, "user:a", "hrn:user:a", "more", T1, T3), T1)
    assert ok and renewed == MemoryLock(mid, "user:a", "hrn:user:a", "more", T0, T3)
    assert locks.lock(mid, T2) == renewed and locks.lock(mid, T3) is None


def test_an_expired_lock_is_replaced_and_release_takes_only_live_locks(seed: Seed) -> None:
    locks, mid = seed.stores.locks, seed.memory.id
    locks.acquire(MemoryLock(mid, "user:a", "hrn:user:a", None, T0, T1), T0)
    theirs = MemoryLock(mid, "user:b", "hrn:user:b", None, T2, T3)
    assert locks.acquire(theirs, T2) == (theirs, True)  # a's expired at T1
    assert locks.release(mid, "user:a", T2) is False
    assert locks.release(mid, "user:b", T2) is True and locks.lock(mid, T2) is None
    locks.acquire(MemoryLock(mid, "user:c", "hrn:user:c", None, T0, T1), T0)
    assert locks.release(mid, None, T2) is False  # expired: nothing to release, and the row is cleared
    assert locks.acquire(theirs, T0) == (theirs, True)
    assert locks.release(mid, None, T1) is True
