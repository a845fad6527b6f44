"""Memory locks (hadron_lock_memory, hadron_unlock_memory): one principal holds a memory for a while and
every other principal's writes to it are refused (``MEMORY_LOCKED``, decided in ``AccessPolicy``).

Who may lock: anyone with read-write access to the memory. Taking a lock someone else holds does not
fail; it answers ``locked: false`` with the holder and expiry, as the live server's editor lock does.
The holder renews by locking again (the expiry moves, the lock's start stays). A lock expires by itself
after its ``ttlSeconds``, so a crashed agent never holds a memory for ever. Only the holder unlocks,
or with ``force`` someone who administers the memory (``AccessPolicy.administers``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from triptych.hadron.access import AccessPolicy
from triptych.hadron.domain.model import Memory
from triptych.hadron.errors import Forbidden, MemoryLocked
from triptych.hadron.identity import HadronCaller
from triptych.hadron.lock_store import LockStore, MemoryLock
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import utcnow

DEFAULT_TTL_SECONDS = 900
MAX_TTL_SECONDS = 86_400
MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class LockOutcome:
    memory: Memory
    lock: MemoryLock
    locked: bool  # the caller holds it now
    renewed: bool  # the caller already held it


def _later(now: str, seconds: int) -> str:
    at = datetime.fromisoformat(now.replace("Z", "+00:00")) + timedelta(seconds=seconds)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LockService:
    def __init__(
        self,
        access: AccessPolicy,
        selections: SelectionService,
        locks: LockStore,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.access = access
        self.selections = selections
        self.locks = locks
        self.clock = clock

    def _writable(self, caller: HadronCaller, state: SessionState, memory_ref: str | None) -> Memory:
        """The memory named (else the active one), if the caller may write it, whoever holds its lock."""
        if memory_ref is None:
            memory = self.selections.active_memory(caller, state)
        else:
            memory = self.access.read_memory(caller, memory_ref)[0]
        try:
            self.access.write_memory(caller, memory)
        except MemoryLocked:
            pass  # read-write access is what locking needs; the lock itself is answered below
        return memory

    def lock(
        self, caller: HadronCaller, state: SessionState, memory_ref: str | None, ttl: int, reason: str | None
    ) -> LockOutcome:
        memory = self._writable(caller, state, memory_ref)
        now = self.clock()
        current = self.locks.lock(memory.id, now)
        wanted = MemoryLock(memory.id, caller.key, caller.actor, reason, now, _later(now, ttl))
        stands, mine = self.locks.acquire(wanted, now)
        renewed = mine and current is not None and current.holder == caller.key
        return LockOutcome(memory, stands, mine, renewed)

    def unlock(
        self, caller: HadronCaller, state: SessionState, memory_ref: str | None, force: bool
    ) -> tuple[Memory, MemoryLock | None]:
        """Release the memory's lock; returns the lock released, None when no lock was held."""
        memory = self._writable(caller, state, memory_ref)
        now = self.clock()
        current = self.locks.lock(memory.id, now)
        if current is None:
            return memory, None
        if current.holder != caller.key:
            if not force:
                raise MemoryLocked(
                    f"{memory.urn} is locked by {current.locked_by} until {current.expires_at}; "
                    "only its holder unlocks it",
                    details={"memoryUrn": memory.urn, "lockedBy": current.locked_by,
                             "expiresAt": current.expires_at},
                    hint="Wait for the lock to expire, or pass force: true if you administer the memory",
                )  # fmt: skip
            if not self.access.administers(caller, memory):
                raise Forbidden(
                    f"breaking {current.locked_by}'s lock on {memory.urn} needs administration of the memory",
                    details={"memoryUrn": memory.urn, "lockedBy": current.locked_by},
                    hint="An owner or admin of the memory (or of its organization or App) can force it",
                )
        released = self.locks.release(memory.id, None if force else caller.key, now)
        return memory, current if released else None
