"""The process's memory budget for in-memory partitions (core/partitions.MemoryBudget): least recently used
first, across caches, even when a cache whose partition is next is busy in another thread; and which
partitions a server-mode worker loads when the engine could answer instead (``admit``, decision 0236): a
partition asked for once is left to the engine, one asked for again is loaded when it fits or is hotter
than the coldest resident one, one key's loads run at a time, and a cyclic scan over more partitions than
the budget holds loads none of them."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from triptych.core import partitions
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


def _budget(limit: int | None) -> tuple[MemoryBudget, Sized, Sized]:
    budget = MemoryBudget(limit)
    return budget, Sized("vectors", budget), Sized("keywords", budget)


def _load(cache: PartitionCache[_Part], key: str) -> None:
    """What a store does once ``admit`` said yes: load the partition, then report the load's end."""
    cache.sync(key, 1)
    cache.loaded(key)


def test_without_a_limit_every_partition_is_admitted_but_one_key_loads_at_a_time() -> None:
    budget, vectors, keywords = _budget(None)
    assert vectors.admit("a") and keywords.admit("a")  # one key: its vectors and keywords load together
    assert not vectors.admit("b")  # another key waits for "a"'s loads: the engine answers it meanwhile
    _load(vectors, "a")
    assert not keywords.admit("b")  # "a"'s keywords are still loading
    _load(keywords, "a")
    assert vectors.admit("b")


def test_under_a_limit_a_partition_asked_for_once_is_left_to_the_engine_and_loaded_when_asked_again() -> None:
    budget, vectors, _ = _budget(10 * SIZE)
    assert vectors.admit("a")  # nothing resident: the first load of a start needs no second ask
    _load(vectors, "a")
    assert not vectors.admit("b")  # asked for once
    assert vectors.admit("b")  # asked again: there is room for a partition of this cache's size
    _load(vectors, "b")
    assert vectors.resident("a") and vectors.resident("b")


def test_a_partition_of_unknown_size_is_admitted_only_if_one_like_it_fits() -> None:
    """Before: an unknown size counted as nothing, so any room at all admitted a load (and after every
    eviction there is some), and each load forgot another partition. Now it counts as the cache's
    resident partitions do on average."""
    budget, vectors, _ = _budget(int(2.5 * SIZE))
    for key in ("a", "b"):
        vectors.admit(key)
        vectors.admit(key)
        _load(vectors, key)
    assert budget.total == 2 * SIZE  # half a partition of room left
    for _ in range(2):
        vectors.sync("a", 1)  # both used since "c" was last asked for: "c" is not the hotter
        vectors.sync("b", 1)
        assert not vectors.admit("c")
    assert not vectors.resident("c") and budget.evictions == {}


def test_a_partition_asked_for_again_more_recently_than_the_coldest_resident_was_used_is_admitted() -> None:
    budget, vectors, _ = _budget(2 * SIZE)
    for key in ("a", "b"):
        vectors.admit(key)
        vectors.admit(key)
        _load(vectors, key)
    assert not vectors.admit("c")  # the budget is full and "c" was never asked for
    assert vectors.admit("c")  # asked again since "a", the coldest, was last used: "c" is hotter
    _load(vectors, "c")
    assert vectors.resident("c") and not vectors.resident("a") and budget.evictions == {"vectors": 1}


def test_a_cyclic_scan_over_more_partitions_than_fit_loads_none_of_them() -> None:
    budget, vectors, _ = _budget(3 * SIZE)
    for key in ("a", "b", "c"):
        vectors.admit(key)
        vectors.admit(key)
        _load(vectors, key)
    scanned = [f"s{i}" for i in range(10)]
    for _ in range(3):  # each asked for once per round, every round older than the residents' last use
        for key in scanned:
            vectors.sync("a", 1), vectors.sync("b", 1), vectors.sync("c", 1)  # the hot ones stay hot
            assert not vectors.admit(key)
    assert budget.evictions == {} and {k for k in "abc" if vectors.resident(k)} == {"a", "b", "c"}


def test_a_load_never_reported_ended_stops_holding_others_after_load_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    budget, vectors, _ = _budget(None)
    assert vectors.admit("a")  # its store never calls ``loaded`` (a thread that died, say)
    assert not vectors.admit("b")
    monkeypatch.setattr(partitions, "LOAD_HOLD", 0.0)
    assert vectors.admit("b")


def test_a_partition_loading_is_not_admitted_twice() -> None:
    budget, vectors, _ = _budget(None)
    vectors._loading.add("a")  # as ``load_in_background`` marks it before its thread starts
    assert not vectors.admit("a")
    vectors._unclaim("a")  # the load's end reports it ended, admitted or not
    assert vectors.admit("a")
