"""Who may read and write which memory: decided here and nowhere else, failing closed.

A memory the caller cannot read is reported exactly like a memory that does not exist
(``[memory_not_found]``); one the caller can read but not write refuses writes with ``FORBIDDEN``.

The rules, per memory class and owner:

- ``private`` (user-owned): its owner only; grants do not open it.
- ``personal`` (user-owned): its owner read-write; others through a share (a grant).
- org-owned ``knowledge``: every org member reads; CONTRIBUTOR and above write.
- org-owned ``group``/``app``: its members (grants); org OWNER/ADMIN read-write.
- ``system``: readable by members of the owning org or app, written only by org OWNER/ADMIN.
- app-owned: app members by role (READER reads, CONTRIBUTOR+ writes), the owning org's
  OWNER/ADMIN, the owner of a user-owned app, and the app's own key.
- an app key also reaches memories granted to its app, and its org's ``knowledge`` read-only.

Grants add to what ownership gives; they never take away.

A memory locked by one principal (hadron_lock_memory) refuses every write of every other principal with
``MEMORY_LOCKED`` until its holder unlocks it or the lock expires; reads are never locked. The lock is a
row in the database, so every worker enforces it. Breaking another's lock needs ``administers``: the
owner of a user-owned memory, an OWNER/ADMIN of the owning organization, or the owner, an OWNER/ADMIN
member or an org OWNER/ADMIN of the owning App. An App key administers nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import copy

from triptych.hadron.domain.loc import MemoryKey, is_id, parse_memory_ref
from triptych.hadron.domain.model import AccessLevel, App, Memory, role_at_least
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import BadInput, Forbidden, MemoryLocked, NotFound, Unauthenticated
from triptych.hadron.identity import HadronCaller
from triptych.hadron.lock_store import LockStore
from triptych.hadron.store import TenancyStore, utcnow

RW: AccessLevel = "read-write"
RO: AccessLevel = "read-only"


def _level(value: str | None) -> AccessLevel | None:
    return RW if value == RW else RO if value == RO else None


def _best(*levels: AccessLevel | None) -> AccessLevel | None:
    if RW in levels:
        return RW
    return RO if RO in levels else None


class AccessPolicy:
    def __init__(
        self, tenancy: TenancyStore, locks: LockStore | None = None, clock: Callable[[], str] = utcnow
    ) -> None:
        self.tenancy = tenancy
        self.locks = locks
        self.clock = clock
        # What the memory rules read per memory; ``readable`` answers them from one batch of reads (each
        # read is a round trip on a server engine: 2 per memory before).
        self._grants: Callable[[str], dict[tuple[str, str], str]] = tenancy.grants
        self._org_role: Callable[[str, str], str | None] = tenancy.org_role

    # ── memories ────────────────────────────────────────────────────────────

    def memory_level(self, caller: HadronCaller, memory: Memory) -> AccessLevel | None:
        if caller.kind == "app" and caller.app is not None:
            return self._app_key_level(caller.app, memory)
        if caller.user is None:
            return None
        user_id = caller.user.id
        if memory.memory_class == "private":
            return RW if memory.user_id == user_id else None
        grant = self._grants(memory.id).get(("user", user_id))
        owned: AccessLevel | None = None
        if memory.user_id is not None:
            owned = RW if memory.user_id == user_id else None
        elif memory.org_id is not None:
            owned = self._org_member_level(memory, self._org_role(memory.org_id, user_id))
        elif memory.app_id is not None:
            owned = self._app_member_level(memory, user_id)
        return _best(owned, _level(grant))

    @staticmethod
    def _org_member_level(memory: Memory, role: str | None) -> AccessLevel | None:
        if role is None:
            return None
        if role_at_least(role, "ADMIN"):
            return RW
        if memory.memory_class == "knowledge":
            return RW if role_at_least(role, "CONTRIBUTOR") else RO
        if memory.memory_class == "system":
            return RO
        return None  # group/app memories: membership comes from grants

    def _app_member_level(self, memory: Memory, user_id: str) -> AccessLevel | None:
        app = self.tenancy.app(memory.app_id or "")
        if app is None:
            return None
        if app.owner_user_id == user_id:
            return RW
        if app.org_id and role_at_least(self._org_role(app.org_id, user_id), "ADMIN"):
            return RW
        role = self.tenancy.app_role(app.id, user_id)
        if role is None:
            return None
        if memory.memory_class == "system":
            return RO
        return RW if role_at_least(role, "CONTRIBUTOR") else RO

    def _app_key_level(self, app: App, memory: Memory) -> AccessLevel | None:
        if memory.memory_class == "private":
            return None
        owned: AccessLevel | None = None
        if memory.app_id == app.id:
            owned = RO if memory.memory_class == "system" else RW
        elif memory.org_id is not None and memory.org_id == app.org_id and memory.memory_class == "knowledge":
            owned = RO
        return _best(owned, _level(self._grants(memory.id).get(("app", app.id))))

    def readable(self, caller: HadronCaller) -> list[tuple[Memory, AccessLevel]]:
        """Every memory the caller may read, with its access level, in URN order."""
        if caller.kind == "anonymous":
            return []
        memories = self.tenancy.memories()
        return [
            (m, level)
            for m, level in zip(memories, self.levels(caller, memories), strict=True)
            if level is not None
        ]

    def levels(self, caller: HadronCaller, memories: Sequence[Memory]) -> list[AccessLevel | None]:
        """``memory_level`` of each memory, from one read of their grants and one per organization."""
        batch = copy(self)
        grants = self.tenancy.grants_of([m.id for m in memories])
        batch._grants = lambda memory_id: grants.get(memory_id, {})
        roles: dict[tuple[str, str], str | None] = {}

        def org_role(org_id: str, user_id: str) -> str | None:
            if (org_id, user_id) not in roles:
                roles[(org_id, user_id)] = self.tenancy.org_role(org_id, user_id)
            return roles[(org_id, user_id)]

        batch._org_role = org_role
        return [batch.memory_level(caller, memory) for memory in memories]

    def find_memory(self, ref: str) -> Memory | None:
        """The memory a reference names (URN in any accepted form, or id), readable or not."""
        try:
            key = parse_memory_ref(ref)
        except UrnError as exc:
            raise BadInput(str(exc), details={"reason": exc.reason, "ref": ref}) from exc
        if key is None:
            return self.tenancy.memory(ref) if is_id(ref) else None
        return self.tenancy.memory_by_key(key.root, key.slug)

    def read_memory(self, caller: HadronCaller, ref: str | MemoryKey) -> tuple[Memory, AccessLevel]:
        """The memory ``ref`` names, if the caller may read it; otherwise ``[memory_not_found]``."""
        require_identity(caller)
        if isinstance(ref, MemoryKey):
            memory = self.tenancy.memory_by_key(ref.root, ref.slug)
            shown = ref.urn
        else:
            memory = self.find_memory(ref)
            shown = ref
        level = self.memory_level(caller, memory) if memory is not None else None
        if memory is None or level is None:
            raise NotFound("memory", shown, hint="hadron_list_memories lists the memories you can reach")
        return memory, level

    def write_memory(self, caller: HadronCaller, ref: str | MemoryKey | Memory) -> Memory:
        if isinstance(ref, Memory):
            level = self.memory_level(caller, ref)
            if level is None:
                raise NotFound("memory", ref.urn)
            memory = ref
        else:
            memory, level = self.read_memory(caller, ref)
        if level != RW:
            raise Forbidden(
                f"read-only access to {memory.urn}: this write needs read-write access",
                details={"memoryUrn": memory.urn, "access": level},
                hint="Ask an owner of the memory for read-write access",
            )
        self.check_unlocked(caller, memory)
        return memory

    def check_unlocked(self, caller: HadronCaller, memory: Memory) -> None:
        """Refuse (``MEMORY_LOCKED``) a write to a memory whose live lock another principal holds."""
        if self.locks is None:
            return
        lock = self.locks.lock(memory.id, self.clock())
        if lock is not None and lock.holder != caller.key:
            raise MemoryLocked(
                f"{memory.urn} is locked by {lock.locked_by} until {lock.expires_at}",
                details={"memoryUrn": memory.urn, "lockedBy": lock.locked_by, "expiresAt": lock.expires_at}
                | ({"reason": lock.reason} if lock.reason else {}),
            )

    def administers(self, caller: HadronCaller, memory: Memory) -> bool:
        """May break another principal's lock on ``memory`` (see the module's rules)."""
        if caller.kind != "user" or caller.user is None:
            return False
        user_id = caller.user.id
        if memory.user_id is not None:
            return memory.user_id == user_id
        if memory.org_id is not None:
            return role_at_least(self._org_role(memory.org_id, user_id), "ADMIN")
        app = self.tenancy.app(memory.app_id or "")
        if app is None:
            return False
        return (
            app.owner_user_id == user_id
            or role_at_least(self.tenancy.app_role(app.id, user_id), "ADMIN")
            or (app.org_id is not None and role_at_least(self._org_role(app.org_id, user_id), "ADMIN"))
        )

    def can_read_id(self, caller: HadronCaller, memory_id: str) -> bool:
        memory = self.tenancy.memory(memory_id)
        return memory is not None and self.memory_level(caller, memory) is not None

    # ── apps ───────────────────────────────────────────────────────────────

    def app_role(self, caller: HadronCaller, app: App) -> str | None:
        """The caller's role on ``app`` (its own for an app key), or None when it may not use it."""
        if caller.kind == "app":
            return "APP_KEY" if caller.app is not None and caller.app.id == app.id else None
        if caller.user is None:
            return None
        if app.owner_user_id == caller.user.id:
            return "OWNER"
        role = self.tenancy.app_role(app.id, caller.user.id)
        if role is not None:
            return role
        if app.org_id is not None:
            org_role = self.tenancy.org_role(app.org_id, caller.user.id)
            if org_role is not None:
                return f"ORG_{org_role}"
        return None

    # ── the team of an App (issue 14) ───────────────────────────────────────

    def team_member(self, caller: HadronCaller, app: App) -> bool:
        """On the team: an AppMember at any role, an org CONTRIBUTOR+, or a user-owned App's owner."""
        if caller.kind != "user" or caller.user is None:
            return False
        user_id = caller.user.id
        if app.owner_user_id == user_id or self.tenancy.app_role(app.id, user_id) is not None:
            return True
        return app.org_id is not None and role_at_least(
            self.tenancy.org_role(app.org_id, user_id), "CONTRIBUTOR"
        )

    def team_reader(self, caller: HadronCaller, app: App) -> bool:
        """Reads the roster, the chat and the worklog: the team, and the App's own key."""
        if caller.kind == "app":
            return caller.app is not None and caller.app.id == app.id
        return self.team_member(caller, app)

    def staff_writer(self, caller: HadronCaller, app: App) -> bool:
        """Casts and amends workers: an org CONTRIBUTOR+, a non-reader AppMember, or the owner.
        Never an App key: staffing is a human act."""
        if caller.kind != "user" or caller.user is None:
            return False
        user_id = caller.user.id
        if app.owner_user_id == user_id or role_at_least(
            self.tenancy.app_role(app.id, user_id), "CONTRIBUTOR"
        ):
            return True
        return app.org_id is not None and role_at_least(
            self.tenancy.org_role(app.org_id, user_id), "CONTRIBUTOR"
        )

    def visible_apps(self, caller: HadronCaller) -> list[tuple[App, str]]:
        out = []
        for app in self.tenancy.apps():
            role = self.app_role(caller, app)
            if role is not None:
                out.append((app, role))
        return out


def require_identity(caller: HadronCaller) -> None:
    if caller.kind == "anonymous":
        raise Unauthenticated("this tool needs an authenticated caller")
