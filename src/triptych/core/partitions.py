"""In-process caches of database partitions (a workspace's vectors, its keyword postings), kept
coherent by generation.

The database is the source of truth. Every write bumps the partition's generation in the same
transaction (generations never go down); this process applies its own committed writes in place, and
a newer generation it did not produce reloads the partition, so several workers over one database
never serve stale data.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar, cast


class Partition(Protocol):
    generation: int


P = TypeVar("P", bound=Partition)

log = logging.getLogger(__name__)


class PartitionCache(Generic[P]):
    def __init__(self) -> None:
        self._parts: dict[str, P] = {}
        self._lock = threading.RLock()
        self._loading: set[str] = set()  # keys with a ``preload`` running
        self._loaded = threading.Condition(self._lock)  # notified when a ``preload`` ends

    def _load(self, key: str, generation: int) -> P:
        raise NotImplementedError

    def _fetch(self, key: str, generation: int) -> P:
        """The partition as ``load_in_background`` reads it, outside the lock (default: ``_load``)."""
        return self._load(key, generation)

    def _adopted(self, key: str, part: P) -> None:
        """Called under the lock when ``load_in_background`` installs ``part``."""

    def current(self, key: str, generation: int) -> bool:
        """Whether the partition is cached as of ``generation`` or later: a search then waits for no load.
        Reads without the lock (a stale answer only sends one search down the slower path)."""
        part = self._parts.get(key)
        return part is not None and part.generation >= generation

    def loading(self, key: str) -> bool:
        return key in self._loading

    def load_in_background(self, key: str, generation: int) -> None:
        """``preload`` in a thread of its own: searches meanwhile answer without the partition. The key
        is marked loading before the thread starts, so ``await_load`` right after this waits for it."""
        if self._claim(key, generation):
            threading.Thread(
                target=self._load_claimed, args=(key, generation), name=f"load-{key}", daemon=True
            ).start()

    def preload(self, key: str, generation: int) -> None:
        """Load the partition outside the lock, once at a time per key (a second caller returns at once),
        so other partitions' searches and writes go on, and install it unless something as new got there
        first (a write applies to what is cached, so one landing during the load is in the rows read or
        leaves the load's generation behind, and the next search reloads). Failures are logged: the next
        search tries again."""
        if self._claim(key, generation):
            self._load_claimed(key, generation)

    def _claim(self, key: str, generation: int) -> bool:
        with self._lock:
            if key in self._loading or self.current(key, generation):
                return False
            self._loading.add(key)
            return True

    def _load_claimed(self, key: str, generation: int) -> None:
        try:
            part = self._fetch(key, generation)
            with self._lock:
                cached = self._parts.get(key)
                if cached is None or cached.generation < part.generation:
                    self._parts[key] = part
                    self._adopted(key, part)
        except Exception:
            log.warning("loading partition %s failed", key, exc_info=True)
        finally:
            with self._lock:
                self._loading.discard(key)
                self._loaded.notify_all()

    def await_load(self, key: str, timeout: float = 600.0) -> None:
        """Wait for a ``preload`` of the partition in progress, if any: a caller about to load it in
        its own path then finds it loaded instead of reading it a second time."""
        with self._lock:
            self._loaded.wait_for(lambda: key not in self._loading, timeout)

    def sync(self, key: str, generation: int) -> P:
        """The partition as of ``generation`` or later.

        Generations only grow, so a cached partition newer than the one asked for serves too: a search
        that read the generation just before a write of this process committed and applied its change
        would otherwise reload the whole partition (about 0.1 s at 10,000 records) for nothing.
        """
        with self._lock:
            part = self._parts.get(key)
            if part is None or part.generation < generation:
                part = self._load(key, generation)
                self._parts[key] = part
            return part

    def _update(self, key: str, before: int, after: int, change: Callable[[P], None]) -> None:
        """Apply this process's own committed write, if the cached partition was current before it.

        All or nothing: if ``change`` fails the partition is dropped and reloads from the database.
        """
        with self._lock:
            part = self._parts.get(key)
            if part is None:
                return
            if part.generation >= after:
                # A reader loaded the partition after this write committed (it read the new generation
                # before the write got here): the write is in it already.
                return
            if part.generation != before:
                del self._parts[key]  # someone else wrote in between: reload on next use
                return
            try:
                change(part)
                part.generation = after
            except Exception:
                self._parts.pop(key, None)
                raise

    def generation(self, key: str) -> int:
        """The cached partition's generation; a missing one counts as current (loading it is not a lag)."""
        part = self._parts.get(key)
        return part.generation if part is not None else 1 << 62

    def forget(self, key: str) -> None:
        with self._lock:
            self._parts.pop(key, None)


class WriteGate:
    """Keeps a store's in-process caches in step with its writes when threads write and read at once.

    Writes go one at a time, each holding the gate across its commit and its hand-off to the caches:
    hand-offs then follow commit order (a hand-off out of order finds a cache a generation behind and
    drops it), and writers queue here instead of in SQLite's busy handler, which sleeps up to 100 ms
    between tries. A reader that read the generations between a write's commit and its hand-off would
    find a cache behind and reload it (hundreds of milliseconds at 10,000 records); ``settle`` makes it
    wait for the write in progress instead. A cache that still lags after that was changed by another
    process, and reloads as it must.

    ``keyed``: one gate per partition key (a workspace) instead of one for the store, for an engine
    whose writers of two partitions run at once (PostgreSQL's per-tenant write lock, docs/decisions/0170):
    the caches are per partition, so only one partition's hand-offs need its commit order. A write that
    opens another partition's write while it holds one (an insert purging expired records elsewhere)
    passes that gate: waiting there could deadlock two such writers, and an out-of-order hand-off only
    costs that partition a reload. Unkeyed (SQLite's single writer), every key shares one gate.
    """

    def __init__(self, keyed: bool = False) -> None:
        self._keyed = keyed
        self._locks: dict[str | None, threading.RLock] = {}
        self._guard = threading.Lock()
        self._held = threading.local()  # the key this thread's outermost gated write holds
        self._writes = 0  # read without the lock by ``settle``: a stale read only costs a wait or a reload

    def _lock(self, key: str | None) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(key if self._keyed else None, threading.RLock())

    def _count(self, step: int) -> None:
        with self._guard:
            self._writes += step

    @contextmanager
    def writing(self, key: str | None = None) -> Iterator[None]:
        held = getattr(self._held, "keys", None)
        if self._keyed and held and key not in held:
            yield  # nested in another partition's write: see the class's note
            return
        with self._lock(key):
            self._held.keys = (held or set()) | {key}
            self._count(1)
            try:
                yield
            finally:
                self._count(-1)
                self._held.keys = held

    def settle(self, lagging: Callable[[], bool], key: str | None = None) -> None:
        """Wait for this process's write in progress to ``key``'s partition, if there is one and
        ``lagging()`` says a cache is behind the generations the reader just read."""
        if self._writes and lagging():
            with self._lock(key):
                pass


W = TypeVar("W", bound=Callable[..., Any])


def gated(method: W) -> W:
    """A store method that writes through the store's ``_gate`` (a ``WriteGate``): its commit and its
    hand-off to the caches go together."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._gate.writing():
            return method(self, *args, **kwargs)

    return cast(W, wrapper)


def gated_by(key: Callable[..., str | None]) -> Callable[[W], W]:
    """``gated``, through the gate of the partition ``key(*args, **kwargs)`` names (a keyed gate)."""

    def decorate(method: W) -> W:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with self._gate.writing(key(*args, **kwargs)):
                return method(self, *args, **kwargs)

        return cast(W, wrapper)

    return decorate
