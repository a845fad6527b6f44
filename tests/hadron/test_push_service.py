"""The push service in process, over a real team world: what a session is sent while an earlier send is
still being written (plain updates fold to the newest, a mention is sent on its own), and when its
subscriptions end (the session ends, a send to it fails, its credential is no longer valid)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hadron.team_world import build_team
from harness import SECRET

from triptych.core.auth import mint_token
from triptych.core.config import Settings
from triptych.hadron.domain.push import ChatEvent
from triptych.hadron.identity import HadronCaller, authenticator
from triptych.hadron.services.push import MENTIONED_META, SEQ_META, PushService, Target
from triptych.hadron.surface import Hadron

CREW_CHAT = "hrn:node:acme.com:crew-team:chats:team"
OPS_CHAT = "hrn:node:acme.com:ops-team:chats:team"


@pytest.fixture
def hadron(tmp_path: Path) -> Iterator[Hadron]:
    build_team(tmp_path / "data")
    opened = Hadron.open(tmp_path / "data" / "hadron.db")
    opened.push.start()
    try:
        yield opened
    finally:
        opened.close()


def alice(hadron: Hadron) -> HadronCaller:
    user = hadron.tenancy.user_by_handle("alice")
    assert user is not None
    return HadronCaller("user", "alice", user=user)


def event(target: Target, seq: int, refs: tuple[str, ...] = ()) -> ChatEvent:
    return ChatEvent(target.memory.id, target.loc, "c", seq, refs)


class Barrier:
    """A subscription whose first update says every event published before it was dispatched (one
    dispatcher thread, in order; sends start on the loop in the order they were handed over)."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()

    async def send(self, uri: str, meta: dict[str, Any]) -> None:
        self.reached.set()


async def test_a_burst_folds_behind_a_send_in_flight_and_a_mention_is_sent_on_its_own(hadron: Hadron) -> None:
    push: PushService = hadron.push
    caller = alice(hadron)
    state = hadron.selections.session(caller, "mcp-1", None)
    crew = await asyncio.to_thread(push.resolve, caller, CREW_CHAT)
    ops = await asyncio.to_thread(push.resolve, caller, OPS_CHAT)
    gate = asyncio.Event()
    sent: list[tuple[int, bool]] = []
    three = asyncio.Event()

    async def held(uri: str, meta: dict[str, Any]) -> None:
        sent.append((meta[SEQ_META], meta[MENTIONED_META]))
        if len(sent) == 3:
            three.set()
        await gate.wait()  # a client that is slow to take its notifications

    barrier = Barrier()
    push.subscribe(crew, caller, state, "mcp-1", held)
    push.subscribe(ops, caller, state, "mcp-1", barrier.send)
    assert caller.user is not None
    for seq in range(1, 9):
        push.publish(event(crew, seq, (f"u:{caller.user.id}",) if seq == 6 else ()))
    push.publish(event(ops, 1))
    await asyncio.wait_for(barrier.reached.wait(), 10)
    assert sent == [(1, False), (6, True)]  # 2-5 and 7-8 wait behind the send of 1
    gate.set()
    await asyncio.wait_for(three.wait(), 10)
    assert sent == [(1, False), (6, True), (8, False)]  # only the newest of the folded ones follows
    assert push.count() == 2
    push.end_session("mcp-1")
    assert push.count() == 0


async def test_a_session_whose_send_fails_loses_its_subscriptions(hadron: Hadron) -> None:
    push = hadron.push
    caller = alice(hadron)
    crew = await asyncio.to_thread(push.resolve, caller, CREW_CHAT)
    ops = await asyncio.to_thread(push.resolve, caller, OPS_CHAT)

    async def gone(uri: str, meta: dict[str, Any]) -> None:
        raise ConnectionError("the client went away")

    barrier = Barrier()
    push.subscribe(crew, caller, hadron.selections.session(caller, "mcp-gone", None), "mcp-gone", gone)
    push.subscribe(ops, caller, hadron.selections.session(caller, "mcp-gone", None), "mcp-gone", gone)
    push.subscribe(ops, caller, hadron.selections.session(caller, "mcp-2", None), "mcp-2", barrier.send)
    assert push.count() == 3
    push.publish(event(crew, 1))
    push.publish(event(ops, 1))
    await asyncio.wait_for(barrier.reached.wait(), 10)
    assert push.count() == 1  # mcp-2's


async def test_a_credential_no_longer_valid_hears_nothing_and_its_subscription_ends(
    hadron: Hadron, tmp_path: Path
) -> None:
    push = hadron.push
    settings = Settings(data_dir=tmp_path, auth_enabled=True, jwt_secret=SECRET)
    push.authenticate = authenticator(settings, hadron.tenancy)  # what the mounted endpoint sets
    caller = alice(hadron)
    crew = await asyncio.to_thread(push.resolve, caller, CREW_CHAT)
    expired: list[int] = []

    async def heard(uri: str, meta: dict[str, Any]) -> None:
        expired.append(meta[SEQ_META])

    barrier = Barrier()
    push.subscribe(crew, caller, hadron.selections.session(caller, "mcp-key", None), "mcp-key", heard,
                   "Bearer hk_not-a-key")  # fmt: skip
    for mcp_session, ttl, send in (("mcp-expired", -60, heard), ("mcp-valid", 3600, barrier.send)):
        state = hadron.selections.session(caller, mcp_session, None)
        credential = "Bearer " + mint_token(SECRET, "alice", "editor", [], ttl)
        push.subscribe(crew, caller, state, mcp_session, send, credential)  # the barrier last: checked last
    push.publish(event(crew, 1))
    await asyncio.wait_for(barrier.reached.wait(), 10)  # dispatched: the refused ones came first
    assert expired == [] and push.count() == 1
