"""The process's memory budget for in-memory partitions (core/partitions.MemoryBudget): least recently used
first, across caches, even when a cache whose partition is next is busy in another thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from triptych.core.partitions import MemoryBudget, PartitionCache

SIZE = 100  # bytes each partition counts for


@dataclass
class _Part:
    generation: int


class Sized(PartitionCache[_Part]):
    """A cache whose partitions are loaded from nothing and count ``SIZE`` bytes each."""

    def __init__(self, kind: str, budget: MemoryBudget) -> None:
        self.kind = kind
        super().__init__(budget)

    def _load(self, key: str, generation: int) -> _Part:
        return _Part(generation)

    def _measure(self, part: _Part) -> int:
        return SIZE


def _resident(cache: Sized) -> set[str]:
    return {key for key in ("x", "y", "z") if cache.resident(key)}


def test_a_busy_cache_holding_the_least_recently_used_partition_costs_no_younger_partition() -> None:
    """Another thread holds the lock of the cache whose partition is least recently used (a search loading
    a partition under it, say) while a partition of another cache is installed: before, the accountant
    skipped the busy cache and forgot a more recently used partition instead. Now it waits over the limit
    for that cache, whose holder (or the next use of any partition) finishes the eviction in LRU order."""
    budget = MemoryBudget()
    older, newer = Sized("keywords", budget), Sized("vectors", budget)
    older.sync("x", 1)  # least recently used
    newer.sync("y", 1)
    budget.limit = 2 * SIZE

    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with older._lock:  # as ``sync`` holds it while it loads a partition
            held.set()
            release.wait(30)
        done.set()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(30)
    try:
        newer.sync("z", 1)  # over the limit: "x" is the one to go, but its cache is busy
        assert _resident(newer) == {"y", "z"}  # the younger "y" was not forgotten in its place
        assert _resident(older) == {"x"}
        assert budget.total == 3 * SIZE  # over the limit until the busy cache is free
    finally:
        release.set()
        holder.join(30)
    assert done.is_set()

    newer.sync("y", 1)  # the next use of a partition finishes the eviction, in LRU order
    assert _resident(older) == set()
    assert _resident(newer) == {"y", "z"}
    assert budget.total == 2 * SIZE
    assert budget.evictions == {"keywords": 1}


def test_the_least_recently_used_partition_of_any_cache_goes_first() -> None:
    budget = MemoryBudget()
    first, second = Sized("keywords", budget), Sized("vectors", budget)
    first.sync("x", 1)
    second.sync("x", 1)
    first.sync("y", 1)
    first.sync("x", 1)  # used again: now the second cache's "x" is the least recently used
    budget.limit = 2 * SIZE
    second.sync("y", 1)
    assert _resident(first) == {"x"}  # "y" of the first cache went after the second's "x"
    assert _resident(second) == {"y"}
    assert budget.evictions == {"vectors": 1, "keywords": 1}
