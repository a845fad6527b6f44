"""The rules of the live server's tools (issue 28) on the service layer, on both engines: locks held in the
database (seen by another process's services, expiring by the clock, one winner of a race), who
administers a memory, text replacement's substitution and all-or-nothing writes, and the batch read's
size cap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hadron.world import build_world
from harness import run_threads

from triptych.hadron.access import AccessPolicy
from triptych.hadron.errors import BadInput, Forbidden, MemoryLocked
from triptych.hadron.identity import HadronCaller
from triptych.hadron.lock_store import MemoryLock
from triptych.hadron.services import replace as replace_service
from triptych.hadron.services.locks import LockService
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.replace import Replacer, ReplaceRequest
from triptych.hadron.services.selection import SessionState
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("sqlite", "postgresql")

SPECS = "hrn:mem:acme.com:specs"
TEAM = "hrn:mem:acme.com:team"


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None
) -> Iterator[tuple[Path, str | None]]:
    data = tmp_path_factory.mktemp("live-tools")
    build_world(data, module_database_url)
    yield data / "hadron.db", module_database_url


@pytest.fixture
def hadron(world: tuple[Path, str | None]) -> Iterator[Hadron]:
    opened = Hadron.open(world[0], database_url=world[1])
    yield opened
    opened.close()


def user(hadron: Hadron, handle: str) -> HadronCaller:
    return HadronCaller("user", handle, user=hadron.tenancy.user_by_handle(handle))


def state() -> SessionState:
    return SessionState("s-live", "test")


def write(hadron: Hadron, who: HadronCaller, loc: str, name: str = "N") -> None:
    hadron.nodes.create(
        who, state(), f"hrn:node:acme.com:team:{loc}", NodeFields({"name": name}, frozenset({"name"})), None
    )


def test_a_lock_taken_by_one_process_refuses_another_processs_writes(
    world: tuple[Path, str | None], hadron: Hadron
) -> None:
    other = Hadron.open(world[0], database_url=world[1])  # a second worker on the same database
    try:
        alice, carol = user(hadron, "alice"), user(other, "carol")
        taken = hadron.live.locks.lock(alice, state(), TEAM, 600, "moving")
        assert taken.locked
        with pytest.raises(MemoryLocked) as refused:
            write(other, carol, "locked-out")
        assert refused.value.details["lockedBy"] == "hrn:user:alice"
        assert not other.live.locks.lock(carol, state(), TEAM, 60, None).locked
        write(other, user(other, "alice"), "the-holder-writes")  # the holder is the principal, on any worker
        memory, released = other.live.locks.unlock(user(other, "alice"), state(), TEAM, False)
        assert released is not None and released.locked_by == "hrn:user:alice"
        write(other, carol, "after-unlock")
    finally:
        other.close()


def test_a_lock_expires_by_the_clock(hadron: Hadron) -> None:
    now = ["2026-12-04T10:00:00.000Z"]
    access = AccessPolicy(hadron.tenancy, hadron.stores.locks, clock=lambda: now[0])
    locks = LockService(access, hadron.selections, hadron.stores.locks, clock=lambda: now[0])
    carol, alice = user(hadron, "carol"), user(hadron, "alice")
    team = hadron.tenancy.memory_by_key("acme.com", "team")
    assert team is not None
    out = locks.lock(carol, state(), TEAM, 60, None)
    assert out.lock.expires_at == "2026-12-04T10:01:00.000Z"
    now[0] = "2026-12-04T10:00:59.999Z"
    with pytest.raises(MemoryLocked):
        access.check_unlocked(alice, team)
    assert not locks.lock(alice, state(), TEAM, 60, None).locked
    now[0] = "2026-12-04T10:01:00.000Z"
    access.check_unlocked(alice, team)  # expired: nobody's lock
    assert locks.unlock(carol, state(), TEAM, False)[1] is None  # nothing left to release
    assert locks.lock(alice, state(), TEAM, 60, None).locked
    assert locks.unlock(alice, state(), TEAM, False)[1] is not None


def test_two_workers_racing_for_one_lock_one_wins(world: tuple[Path, str | None], hadron: Hadron) -> None:
    team = hadron.tenancy.memory_by_key("acme.com", "team")
    assert team is not None
    now = "2026-12-04T10:00:00.000Z"
    winners: list[str] = []

    def race(i: int) -> None:
        opened = Hadron.open(world[0], database_url=world[1])
        try:
            wanted = MemoryLock(
                team.id, f"user:racer{i}", f"hrn:user:racer{i}", None, now, "2999-01-01T00:00:00.000Z"
            )
            stands, mine = opened.stores.locks.acquire(wanted, now)
            if mine:
                winners.append(stands.holder)
        finally:
            opened.close()

    assert run_threads(race, 4) == []
    assert len(winners) == 1
    assert hadron.stores.locks.release(team.id, None, now)


def test_who_administers_a_memory(hadron: Hadron) -> None:
    def memory(root: str, slug: str):  # type: ignore[no-untyped-def]
        found = hadron.tenancy.memory_by_key(root, slug)
        assert found is not None
        return found

    bot = hadron.admin().app("hrn:app:acme.com:bot")
    cases = [
        ("alice", memory("acme.com", "specs"), True),  # org OWNER
        ("carol", memory("acme.com", "specs"), False),  # org CONTRIBUTOR writes, does not administer
        ("dave", memory("globex.com", "plans"), True),  # org ADMIN
        ("alice", memory("acme.com", "botmem"), True),  # the owning App's org OWNER
        ("bob", memory("acme.com", "botmem"), False),  # the App's CONTRIBUTOR member
        ("alice", memory("alice", "journal"), True),  # a user-owned memory's owner
        ("bob", memory("alice", "journal"), False),  # a share is not ownership
    ]
    for handle, mem, expected in cases:
        assert hadron.access.administers(user(hadron, handle), mem) is expected, (handle, mem.urn)
    assert not hadron.access.administers(HadronCaller("app", bot.urn, app=bot), memory("acme.com", "botmem"))


def test_forcing_another_holders_lock_needs_administration(hadron: Hadron) -> None:
    carol, bob_app = user(hadron, "carol"), user(hadron, "bob")
    hadron.live.locks.lock(user(hadron, "alice"), state(), SPECS, 600, None)
    try:
        with pytest.raises(Forbidden):
            hadron.live.locks.unlock(carol, state(), SPECS, True)
        with pytest.raises(Forbidden):  # a reader may not even try
            hadron.live.locks.unlock(bob_app, state(), SPECS, True)
    finally:
        hadron.live.locks.unlock(user(hadron, "alice"), state(), SPECS, False)


@pytest.mark.parametrize(
    ("old", "new", "flags", "text", "expected"),
    [
        ("a.b", "X", {}, "a.b axb A.B", ("X axb A.B", 1)),
        ("a.b", "X", {"case_insensitive": True}, "a.b axb A.B", ("X axb X", 2)),
        ("(1+1)", "2", {"case_insensitive": True}, "(1+1)=(1+1)", ("2=2", 2)),
        (
            r"(\w+)@old\.com",
            "$1@new.com",
            {"regex": True},
            "bo@old.com al@old.com",
            ("bo@new.com al@new.com", 2),
        ),
        (r"(?P<user>\w+)@x", "<$<user>>", {"regex": True}, "me@x", ("<me>", 1)),
        ("o", "[$&|$$|$9]", {"regex": True}, "oo", ("[o|$|$9][o|$|$9]", 2)),
        ("x*", "-", {"regex": True}, "ab", ("-a-b-", 3)),
        ("é", "e", {}, "café", ("cafe", 1)),
        ("none", "x", {}, "text", ("text", 0)),
    ],
)
def test_the_replacement_of_one_text(
    old: str, new: str, flags: dict[str, bool], text: str, expected: tuple[str, int]
) -> None:
    assert Replacer(ReplaceRequest(old, new, ("content",), **flags)).apply(text) == expected


def test_a_replacement_refused_in_one_memory_writes_nothing_in_the_other(hadron: Hadron) -> None:
    bob = user(hadron, "bob")  # writes botmem (the App's CONTRIBUTOR), reads specs only
    alice = user(hadron, "alice")
    fields = NodeFields({"name": "N", "content": "zeta here"}, frozenset({"name", "content"}))
    hadron.nodes.create(alice, state(), "hrn:node:acme.com:specs:repl-one", fields, None)
    hadron.nodes.create(bob, state(), "hrn:node:acme.com:botmem:repl-two", fields, None)
    request = ReplaceRequest(
        "zeta", "eta", ("content",),
        node_refs=("hrn:node:acme.com:botmem:repl-two", "hrn:node:acme.com:specs:repl-one"),
    )  # fmt: skip
    with pytest.raises(Forbidden):
        hadron.live.replace.replace_text(bob, request)
    for urn in ("hrn:node:acme.com:botmem:repl-two", "hrn:node:acme.com:specs:repl-one"):
        assert hadron.nodes.find(alice, state(), urn)[1].content == "zeta here"


def test_a_batch_past_the_size_cap_lists_the_rest_as_omitted(hadron: Hadron) -> None:
    alice = user(hadron, "alice")
    body = "x" * 400_000
    ids = []
    for i in range(3):
        fields = NodeFields({"name": f"Big {i}", "content": body}, frozenset({"name", "content"}))
        ids.append(
            hadron.nodes.create(alice, state(), f"hrn:node:acme.com:specs:big:{i}", fields, None)[1].id
        )
    batch = hadron.live.reads.batch(alice, ids, None, None)
    assert [n["id"] for n in batch.nodes] == ids[:2]
    assert batch.truncated and batch.omitted == ids[2:]
    subtree = hadron.live.reads.batch(alice, None, SPECS, "big")
    assert [n["loc"] for n in subtree.nodes] == ["big:0", "big:1"] and subtree.omitted == [ids[2]]


def test_a_replacement_selecting_more_nodes_than_the_bound_is_refused_before_writing(
    hadron: Hadron, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = user(hadron, "alice")
    for i in range(3):
        fields = NodeFields({"name": f"Bound {i}", "content": "omega"}, frozenset({"name", "content"}))
        hadron.nodes.create(alice, state(), f"hrn:node:acme.com:team:bound:{i}", fields, None)
    monkeypatch.setattr(replace_service, "MAX_SCAN_NODES", 2)
    for prefix in ("bound", None):
        request = ReplaceRequest("omega", "psi", ("content",), memory_refs=(TEAM,), prefix=prefix)
        with pytest.raises(BadInput, match="more than 2 nodes"):
            hadron.live.replace.replace_text(alice, request)
    assert hadron.nodes.find(alice, state(), "hrn:node:acme.com:team:bound:0")[1].content == "omega"
