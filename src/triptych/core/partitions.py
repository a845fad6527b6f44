"""In-process caches of database partitions (a workspace's vectors, its keyword postings), kept
coherent by generation.

The database is the source of truth. Every write bumps the partition's generation in the same
transaction (generations never go down); this process applies its own committed writes in place, and
a newer generation it did not produce reloads the partition, so several workers over one database
never serve stale data.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Generic, Protocol, TypeVar, cast


class Partition(Protocol):
    generation: int


P = TypeVar("P", bound=Partition)

log = logging.getLogger(__name__)


class MemoryBudget:
    """The one accountant of a process's in-memory index partitions (every ``PartitionCache`` that
    reports its bytes: the knowledge base's vectors and keyword postings, agent memory's indexes,
    Hadron's per-memory indexes), least recently used first, held under ``limit`` bytes
    (``TRIPTYCH_INDEX_MEMORY_MB``; None: no limit) by forgetting the least recently used partitions
    after an install or a write grows one. A forgotten partition is loaded again by the next search
    that needs it, by the same paths as after a start (docs/decisions/0190-index-memory-budget.md).

    Its lock is a leaf: the caches call it under their own locks, and it only ever *tries* a cache's
    lock, so no two locks wait on each other. When the next partition to go belongs to a cache busy in
    another thread, the round stops there, over the limit, rather than forget a more recently used
    partition in its place; the next use of any partition (``pending``) or install or write (``enforce``)
    tries again. A long hold of a cache's lock is a load in a search, which enforces as soon as it ends.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        # (cache serial, key) -> (cache, bytes), least recently used first.
        self._order: OrderedDict[tuple[int, str], tuple[weakref.ref[PartitionCache[Any]], int]] = (
            OrderedDict()
        )
        self._total = 0
        self._used: dict[tuple[int, str], float] = {}  # when each resident partition was last used
        # Partitions asked for while not resident, and when (the last ``ASKED_KEEP``): ``admit``'s memory.
        self._asked: OrderedDict[tuple[int, str], float] = OrderedDict()
        self._sizes: OrderedDict[tuple[int, str], int] = OrderedDict()  # of partitions forgotten, as measured
        self._loads: dict[tuple[int, str], float] = {}  # loads ``admit`` let start, and when
        self._serials = itertools.count(1)
        self._gone: list[int] = []  # serials of caches collected since the last purge
        self._pending = False  # a round stopped at a busy cache: the next use of a partition enforces
        self.evictions: dict[str, int] = {}  # by cache kind, since the process started
        self.on_evict: Callable[[str, int], None] | None = None  # (kind, how many): /metrics' counter

    def configure(self, megabytes: float) -> None:
        """The limit in MB (0: none), then forget down to it at once."""
        self.limit = int(megabytes * 1024 * 1024) if megabytes > 0 else None
        self.enforce(None)

    def join(self, cache: PartitionCache[Any]) -> int:
        """A serial for ``cache``'s entries; they leave when the cache is collected."""
        serial = next(self._serials)
        weakref.finalize(cache, self._leave, serial)
        return serial

    def _leave(self, serial: int) -> None:
        # Called by the garbage collector, possibly inside this class's own lock: no lock here, the
        # next locked call purges the entries.
        self._gone.append(serial)

    def _purge(self) -> None:
        """Drop the entries of collected caches (under the lock)."""
        while self._gone:
            serial = self._gone.pop()
            for entry in [e for e in self._order if e[0] == serial]:
                self._total -= self._order.pop(entry)[1]
                self._used.pop(entry, None)

    def record(self, cache: PartitionCache[Any], serial: int, key: str, nbytes: int) -> None:
        """``key``'s partition in ``cache`` holds ``nbytes`` now, and was just used."""
        with self._lock:
            self._purge()
            entry = (serial, key)
            old = self._order.pop(entry, None)
            self._total += nbytes - (old[1] if old is not None else 0)
            self._order[entry] = (weakref.ref(cache), nbytes)
            self._used[entry] = time.monotonic()

    def touch(self, serial: int, key: str) -> None:
        """``key``'s partition was just used: it moves to the back of the eviction queue."""
        with self._lock:
            if (serial, key) in self._order:
                self._order.move_to_end((serial, key))
                self._used[(serial, key)] = time.monotonic()

    @property
    def pending(self) -> bool:
        """Whether a round stopped at a busy cache (its user then calls ``enforce``, outside its lock).
        Read without the lock: a stale answer only leaves the round to the next use."""
        return self._pending

    def drop(self, serial: int, key: str) -> None:
        with self._lock:
            old = self._order.pop((serial, key), None)
            self._used.pop((serial, key), None)
            if old is not None:
                self._total -= old[1]

    def admit(self, serial: int, key: str) -> bool:
        """Whether a partition asked for while not resident should be loaded now, where the engine can
        answer without it (server mode: pgvector, BM25 in SQL). A load costs the worker seconds of CPU (a
        copy of the partition and an index build) on the cores its searches need, so it has to pay back:

        - one partition key's loads at a time in the process (a key's vectors and keywords together):
          another key asked for meanwhile is answered by the engine, and asked again later;
        - under a limit, only a partition asked for before (``ASKED_KEEP`` remembered), and then only
          when there is room for it (its size when last forgotten, else the size of its cache's resident
          partitions on average, counting the loads in flight) or when that earlier ask is more recent
          than the least recently used resident partition's last use (it is the hotter of the two, as
          LRU-2 counts).

        A workspace searched once in a while is answered by the engine and evicts nothing, and a scan
        over more workspaces than the budget holds leaves the resident ones resident instead of loading
        each in turn to forget it before its next search (docs/decisions/0236). ``loaded`` ends the
        admitted load; one never ended counts as over after ``LOAD_HOLD`` seconds."""
        with self._lock:
            now = time.monotonic()
            entry = (serial, key)
            before = self._asked.pop(entry, None)
            self._asked[entry] = now
            while len(self._asked) > ASKED_KEEP:
                self._asked.popitem(last=False)
            for held in [e for e, t in self._loads.items() if now - t >= LOAD_HOLD]:
                del self._loads[held]
            if any(held[1] != key for held in self._loads):
                return False
            if self.limit is not None and self._order:
                if before is None:
                    return False
                if not self._room(entry) and before <= self._used.get(next(iter(self._order)), now):
                    return False
            self._loads[entry] = now
            return True

    def _room(self, entry: tuple[int, str]) -> bool:
        """Whether ``entry``'s partition would fit beside the resident ones and the loads in flight
        (under the lock)."""
        assert self.limit is not None
        same = [nbytes for (serial, _), (_, nbytes) in self._order.items() if serial == entry[0]]
        typical = sum(same) // len(same) if same else 0

        def size(e: tuple[int, str]) -> int:
            return self._sizes.get(e, typical if e[0] == entry[0] else 0)

        pending = sum(size(e) for e in self._loads if e != entry and e not in self._order)
        return self._total + pending + size(entry) <= self.limit

    def room(self, serial: int, key: str) -> bool:
        """Whether ``key``'s partition would fit now (always, without a limit): a start's warm-up loads
        partitions while this holds, and leaves the rest to ``admit``."""
        with self._lock:
            return self.limit is None or self._room((serial, key))

    def loaded(self, serial: int, key: str) -> None:
        """An admitted load of ``key``'s partition ended (installed, failed or given up)."""
        with self._lock:
            self._loads.pop((serial, key), None)

    def enforce(self, protect: tuple[int, str] | None) -> None:
        """Forget least recently used partitions until the total is under the limit, never ``protect``
        (the partition just installed or changed: its caller is about to read it)."""
        if self.limit is None:
            return
        evicted: list[tuple[PartitionCache[Any], str, Any]] = []
        with self._lock:
            self._purge()
            self._pending = False
            if self._total <= self.limit:
                return
            for entry, (ref, nbytes) in list(self._order.items()):
                if self._total <= self.limit:
                    break
                cache = ref()
                if entry == protect or cache is None:
                    continue
                part = cache._evict(entry[1])
                if part is _BUSY:
                    # Its cache is locked by another thread (a load in a search, say). Going on would
                    # forget a more recently used partition in its place: stop, over the limit, until
                    # that thread's own install or the next use of any partition enforces again.
                    self._pending = True
                    break
                del self._order[entry]
                self._used.pop(entry, None)
                self._total -= nbytes
                self._sizes[entry] = nbytes
                while len(self._sizes) > ASKED_KEEP:
                    self._sizes.popitem(last=False)
                if part is not None:
                    evicted.append((cache, entry[1], part))
        counts: dict[str, int] = {}
        for cache, key, part in evicted:
            counts[cache.kind] = counts.get(cache.kind, 0) + 1
            try:
                cache._finish_eviction(key, part)
            except Exception:  # a save that failed costs a reload from the database, nothing else
                log.warning("finishing the eviction of partition %s failed", key, exc_info=True)
        for kind, count in counts.items():
            with self._lock:
                self.evictions[kind] = self.evictions.get(kind, 0) + count
            if self.on_evict is not None:
                self.on_evict(kind, count)

    def resident(self) -> dict[str, tuple[int, int]]:
        """Bytes and partitions resident now, by cache kind (for /metrics)."""
        found: dict[str, tuple[int, int]] = {}
        with self._lock:
            self._purge()
            for ref, nbytes in self._order.values():
                cache = ref()
                if cache is not None:
                    total, count = found.get(cache.kind, (0, 0))
                    found[cache.kind] = (total + nbytes, count + 1)
        return found

    def entries(self) -> list[tuple[str, str, int]]:
        """(kind, key, bytes) of every resident partition, least recently used first."""
        with self._lock:
            self._purge()
            found = [(ref(), key, nbytes) for (_, key), (ref, nbytes) in self._order.items()]
        return [(cache.kind, key, nbytes) for cache, key, nbytes in found if cache is not None]

    @property
    def total(self) -> int:
        return self._total


ASKED_KEEP = 10_000  # partitions ``admit`` remembers being asked for
LOAD_HOLD = 120.0  # seconds after which an admitted load never reported ``loaded`` stops counting
_BUSY: Final = object()  # ``_evict``'s answer when the cache's lock is held elsewhere

# The process's accountant: every cache joins it unless given another (tests give their own).
BUDGET = MemoryBudget()

# How long ``PartitionCache.stop`` waits for the work in flight: a load checks for the stop between its
# steps and a graph build between its batches, so this bounds only one step (a database read, a file
# write), never a whole load or build.
STOP_WAIT = 30.0


class Stopped(Exception):
    """Raised inside a cache's work once ``stop`` was called: its store is closing, so the work ends
    without touching the database or installing what it read."""


class PartitionCache(Generic[P]):
    # What the partitions hold, for the memory budget and /metrics ("vectors", "keywords", ...). A cache
    # that names none and measures nothing stays out of the budget.
    kind: str = ""

    def __init__(self, budget: MemoryBudget | None = None) -> None:
        self._parts: dict[str, P] = {}
        self._lock = threading.RLock()
        self._loading: set[str] = set()  # keys with a ``preload`` running
        self._loaded = threading.Condition(self._lock)  # notified when a ``preload`` ends
        self._budget = (budget if budget is not None else BUDGET) if self.kind else None
        self._serial = self._budget.join(self) if self._budget is not None else 0
        # Set by ``stop``: background work checks it between steps and ends.
        self.stopping = threading.Event()
        # Threads doing this cache's work now (loads, graph builds, an eviction's save), how many sections
        # each: ``stop`` waits for them before its store closes the database under them. Under a lock of
        # their own, a leaf (nothing is called while it is held): an eviction's save enters from a thread
        # that may hold another cache's lock, and must not wait for this cache's.
        self._work_lock = threading.Lock()
        self._working: dict[threading.Thread, int] = {}
        self._idle = threading.Condition(self._work_lock)  # notified when a thread leaves ``_working``
        self._spawned: set[threading.Thread] = set()  # the threads ``_spawn`` started (ended ones pruned)

    def _measure(self, part: P) -> int:
        """The bytes ``part`` holds in memory (an estimate where exact figures cost a walk)."""
        return 0

    def _install(self, key: str, part: P) -> None:
        """Cache ``part`` under ``key`` and account for it (under the lock)."""
        self._parts[key] = part
        self._account(key, part)

    def _account(self, key: str, part: P) -> None:
        if self._budget is not None:
            self._budget.record(self, self._serial, key, self._measure(part))

    def _within_budget(self, key: str) -> None:
        """After an install or a write to ``key``: forget least recently used partitions of any cache
        until the process is under its budget, never ``key``'s here. Called outside this cache's lock
        where the caller allows (a victim's lock is only tried, so it is safe under it too)."""
        if self._budget is not None:
            self._budget.enforce((self._serial, key))

    def _evict(self, key: str) -> Any:
        """The accountant forgets ``key``: the partition removed (None if gone already), or ``_BUSY``
        when another thread holds this cache's lock."""
        if not self._lock.acquire(blocking=False):
            return _BUSY
        try:
            return self._parts.pop(key, None)
        finally:
            self._lock.release()

    def _evicted(self, key: str, part: P) -> None:
        """After ``part`` was forgotten by the budget, outside every lock (``VectorIndex`` saves an
        unsaved graph here, so the reload reads it instead of building it again)."""

    def _finish_eviction(self, key: str, part: P) -> None:
        """``_evicted`` as work of this cache (it may read this cache's database from any thread), or
        nothing once the cache is stopped."""
        if not self._enter():
            return
        try:
            self._evicted(key, part)
        finally:
            self._leave()

    # -- background work and stopping ------------------------------------------------

    def _enter(self, thread: threading.Thread | None = None) -> bool:
        """Count a section of this cache's work in ``thread`` (this one by default); False once stopped."""
        with self._work_lock:
            if self.stopping.is_set():
                return False
            thread = thread or threading.current_thread()
            self._working[thread] = self._working.get(thread, 0) + 1
            return True

    def _leave(self, thread: threading.Thread | None = None) -> None:
        with self._work_lock:
            thread = thread or threading.current_thread()
            left = self._working.get(thread, 1) - 1
            if left > 0:
                self._working[thread] = left
            else:
                self._working.pop(thread, None)
                self._idle.notify_all()

    def _check_stop(self) -> None:
        """Between two steps of this cache's work: end it (``Stopped``) once ``stop`` was called."""
        if self.stopping.is_set():
            raise Stopped(f"the {self.kind or 'partition'} cache's store is closing")

    def _spawn(self, work: Callable[[], None], name: str) -> bool:
        """Run ``work`` in a daemon thread counted as this cache's work from before it starts (so a
        ``stop`` right after this waits for it); False, and nothing started, once stopped."""
        thread = threading.Thread(target=lambda: self._background(work), name=name, daemon=True)
        if not self._enter(thread):
            return False
        try:
            thread.start()
        except BaseException:
            self._leave(thread)
            raise
        with self._work_lock:
            self._spawned = {t for t in self._spawned if t.is_alive()}
            self._spawned.add(thread)
        return True

    def _background(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Stopped:
            pass
        except Exception:
            log.exception("background work of the %s cache failed", self.kind or "partition")
        finally:
            self._leave()

    def stop(self, timeout: float = STOP_WAIT) -> list[threading.Thread]:
        """Start no more background work and wait, up to ``timeout`` seconds, for the work in flight to
        end: each piece checks ``stopping`` between its steps. Call it before closing what the work reads
        (a SQLite connection closed under a query crashes the interpreter, CPython's sqlite3).

        Returns the threads still inside this cache's work after the wait (normally none): their
        database connections must be left open."""
        deadline = time.monotonic() + timeout
        with self._work_lock:
            self.stopping.set()
            me = threading.current_thread()
            self._idle.wait_for(
                lambda: not any(t is not me for t in self._working), max(0.0, deadline - time.monotonic())
            )
            busy = [t for t in self._working if t is not me]
            done = [t for t in self._spawned if t.is_alive() and t not in busy and t is not me]
        for thread in done:  # past their last step: let them end, so none outlives its store
            thread.join(max(0.0, deadline - time.monotonic()))
        if busy:
            log.warning(
                "the %s cache's background work in %s did not end within %.0f s of its store closing",
                self.kind or "partition",
                ", ".join(t.name for t in busy),
                timeout,
            )
        return busy

    def _load(self, key: str, generation: int) -> P:
        raise NotImplementedError

    def _fetch(self, key: str, generation: int) -> P:
        """The partition as ``load_in_background`` reads it, outside the lock (default: ``_load``)."""
        return self._load(key, generation)

    def _adopted(self, key: str, part: P) -> None:
        """Called under the lock when ``load_in_background`` (or ``adopt_saved``) installs ``part``."""

    def _saved(self, key: str) -> P | None:
        """The partition from files this cache saved, if they match the database now (default: none)."""
        return None

    def adopt_saved(self, key: str) -> bool:
        """Install ``key``'s partition from its saved files if they match the database now (a read of
        its fingerprint, then a mapping: no database rows), and say whether it did. Server mode answers a
        workspace the budget forgot this way, as the embedded engine does, when no other worker wrote to
        it since; else the engine answers (docs/decisions/0236)."""
        try:
            part = self._saved(key)
        except Stopped:
            return False
        if part is None:
            return False
        with self._lock:
            cached = self._parts.get(key)
            if cached is None or cached.generation < part.generation:
                self._install(key, part)
                self._adopted(key, part)
        self._within_budget(key)
        return True

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
        if not self._claim(key, generation):
            self.loaded(key)  # loaded already, or stopped: nothing to wait for
        elif not self._spawn(lambda: self._load_claimed(key, generation), f"load-{key}"):
            self._unclaim(key)  # stopped in between

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
            if key in self._loading or self.current(key, generation) or self.stopping.is_set():
                return False
            self._loading.add(key)
            return True

    def _unclaim(self, key: str) -> None:
        with self._lock:
            self._loading.discard(key)
            self._loaded.notify_all()
        self.loaded(key)

    def _load_claimed(self, key: str, generation: int) -> None:
        """Load a claimed partition as work of this cache: ``stop`` waits for it, and once stopped it
        installs nothing and reads no more."""
        if not self._enter():
            self._unclaim(key)
            return
        try:
            part = self._fetch(key, generation)
            with self._lock:
                self._check_stop()
                cached = self._parts.get(key)
                if cached is None or cached.generation < part.generation:
                    self._install(key, part)
                    self._adopted(key, part)
            self._within_budget(key)
        except Stopped:
            pass
        except Exception:
            log.warning("loading partition %s failed", key, exc_info=True)
        finally:
            self._leave()
            self._unclaim(key)

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
            loaded = part is None or part.generation < generation
            if not loaded:
                if self._budget is not None:
                    self._budget.touch(self._serial, key)
            else:
                part = self._load(key, generation)
                self._install(key, part)
        if loaded or (self._budget is not None and self._budget.pending):
            self._within_budget(key)  # outside the lock: an eviction may save what it forgets
        assert part is not None
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
                self._drop(key)  # someone else wrote in between: reload on next use
                return
            try:
                change(part)
                part.generation = after
            except Exception:
                self._drop(key)
                raise
            self._account(key, part)  # a write grows (or shrinks) it
        self._within_budget(key)

    def _drop(self, key: str) -> None:
        """Forget ``key``'s partition (under the lock)."""
        self._parts.pop(key, None)
        if self._budget is not None:
            self._budget.drop(self._serial, key)

    def generation(self, key: str) -> int:
        """The cached partition's generation; a missing one counts as current (loading it is not a lag)."""
        part = self._parts.get(key)
        return part.generation if part is not None else 1 << 62

    def forget(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def clear(self) -> None:
        """Forget every partition (the store closes: its memory leaves the budget now, not at collection)."""
        with self._lock:
            for key in list(self._parts):
                self._drop(key)

    def resident(self, key: str) -> bool:
        """Whether ``key``'s partition is in memory now, at any generation."""
        return key in self._parts

    def admit(self, key: str) -> bool:
        """Whether to load ``key``'s partition, not resident, that an engine could answer for instead
        (``MemoryBudget.admit``; its load then ends with ``loaded``): no while it is loading already;
        always, for a cache outside the budget."""
        if self._budget is None:
            return True
        return key not in self._loading and self._budget.admit(self._serial, key)

    def room(self, key: str) -> bool:
        """Whether ``key``'s partition would fit in the budget now (``MemoryBudget.room``)."""
        return self._budget is None or self._budget.room(self._serial, key)

    def loaded(self, key: str) -> None:
        """A load of ``key``'s partition ended, whether ``admit`` let it start or not."""
        if self._budget is not None:
            self._budget.loaded(self._serial, key)


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
