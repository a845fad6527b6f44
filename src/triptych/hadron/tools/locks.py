"""Memory lock tools of the live server: hadron_lock_memory and hadron_unlock_memory."""

from __future__ import annotations

from pydantic import Field

from triptych.hadron.services.locks import (
    DEFAULT_TTL_SECONDS,
    MAX_REASON_CHARS,
    MAX_TTL_SECONDS,
)
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

MEMORY = "Memory URN or id (default: the active memory)"


class LockMemoryArgs(ToolArgs):
    memoryUrn: str | None = Field(None, description=MEMORY)
    ttlSeconds: int = Field(
        DEFAULT_TTL_SECONDS, ge=1, le=MAX_TTL_SECONDS, description="How long the lock lasts unless renewed"
    )
    reason: str | None = Field(None, max_length=MAX_REASON_CHARS, description="Shown to whoever is refused")


class UnlockMemoryArgs(ToolArgs):
    memoryUrn: str | None = Field(None, description=MEMORY)
    force: bool = Field(False, description="Break another holder's lock (owners and admins of the memory)")


def lock_memory(svc: Services, ctx: Ctx, args: LockMemoryArgs) -> ToolOutput:
    out = svc.locks.lock(ctx.caller, ctx.session, args.memoryUrn, args.ttlSeconds, args.reason)
    lock = out.lock
    data = {
        "memoryUrn": out.memory.urn,
        "locked": out.locked,
        "lockedBy": lock.locked_by,
        "expiresAt": lock.expires_at,
        "lockedAt": lock.locked_at,
        "renewed": out.renewed,
        "reason": lock.reason,
    }
    if out.locked:
        verb = "Renewed the lock on" if out.renewed else "Locked"
        text = f"{verb} {out.memory.urn} until {lock.expires_at}: other principals' writes are refused"
    else:
        text = f"Not locked: {out.memory.urn} is held by {lock.locked_by} until {lock.expires_at}" + (
            f" ({lock.reason})" if lock.reason else ""
        )
    return ToolOutput(text, data)


def unlock_memory(svc: Services, ctx: Ctx, args: UnlockMemoryArgs) -> ToolOutput:
    memory, released = svc.locks.unlock(ctx.caller, ctx.session, args.memoryUrn, args.force)
    data = {
        "memoryUrn": memory.urn,
        "unlocked": released is not None,
        "lockedBy": released.locked_by if released is not None else None,
    }
    text = (
        f"Unlocked {memory.urn} (held by {released.locked_by})"
        if released is not None
        else f"{memory.urn} was not locked"
    )
    return ToolOutput(text, data)


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_lock_memory",
        "Lock a memory (default: the active one) for a while: every other principal's write to it is refused "
        "with MEMORY_LOCKED until you unlock it or it expires; reads are not affected. Locking again renews. "
        "If someone else holds it, answers locked: false with the holder and expiry. Needs write access.",
        LockMemoryArgs,
        lock_memory,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_unlock_memory",
        "Release your lock on a memory (default: the active one); unlocked: false when it was not locked. "
        "force: true breaks another holder's lock, for owners and admins of the memory only.",
        UnlockMemoryArgs,
        unlock_memory,
        read_only=False,
    ),
]
