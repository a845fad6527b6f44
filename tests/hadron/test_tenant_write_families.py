"""Every Hadron write family locks only the tenants it touches in server mode (issue 30 item 1,
docs/decisions/0180): one organization's write held open while another organization's write of the same
family commits; two writes to one tenant queue; a move between two memories and the reverse move never
wait for each other in a circle.

Two ``Hadron`` instances on one real PostgreSQL stand for two workers. The held write is the family's
real service (or store) call run inside an outer transaction that names the keys the family is meant to
take: it joins it, and a write naming a key the outer one does not hold fails (``EngineStore.atomic``),
so the keys are checked too. The other writes are the same call, standalone, on the other worker.
Waiting is read from ``pg_locks``, never timed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hadron.two_workers import caller, owner
from lock_waits import STUCK, Held, advisory_waiters, in_thread, tenant_keys_held_by_waiters, until

from triptych.hadron import write_keys
from triptych.hadron.abstract_store import Abstract
from triptych.hadron.lock_store import MemoryLock
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.sessions import SessionStart
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("postgresql")

A, B = "acme.com", "globex.com"
AT = "2026-12-05T00:00:00.000Z"
LATER = "2126-12-05T00:00:00.000Z"
_counter = itertools.count()


@pytest.fixture
def workers(tmp_path: Path, database_url: str | None) -> Iterator[tuple[Hadron, Hadron]]:
    assert database_url is not None
    first = Hadron.open(tmp_path / "w1" / "hadron.db", database_url=database_url)
    admin = first.admin()
    for root in (A, B):
        admin.create_org(root)
        admin.create_user(owner(root))
        admin.add_org_member(root, owner(root), "OWNER")
        admin.create_memory("plans", "knowledge", org=root, embedding="none")
        admin.create_memory("notes", "knowledge", org=root, embedding="none")
        admin.create_app("bot", "Bot", root, None)
        admin.create_memory("room", "app", app=f"hrn:app:{root}:bot", embedding="none")
        first.team.channels.create_channel(caller(first, root), f"hrn:mem:{root}:room", "ops", "Ops")
        first.team.agents.install(f"hrn:app:{root}:bot", "team", team=True)  # the team memory
    second = Hadron.open(tmp_path / "w2" / "hadron.db", database_url=database_url)
    yield first, second
    second.close()
    first.close()


def memory_id(hadron: Hadron, root: str, slug: str) -> str:
    return hadron.admin().memory(f"hrn:mem:{root}:{slug}").id


def create_node(hadron: Hadron, root: str, slug: str = "plans") -> str:
    who = caller(hadron, root)
    loc = f"n{next(_counter)}"
    fields = NodeFields({"name": loc}, frozenset({"name"}))
    hadron.nodes.create(
        who, hadron.selections.session(who, "s", None), f"hrn:node:{root}:{slug}:{loc}", fields, None
    )
    return loc


def move(hadron: Hadron, root: str, source: str, target: str) -> None:
    who = caller(hadron, root)
    loc = create_node(hadron, root, source)
    state = hadron.selections.session(who, "s", None)
    hadron.nodes.move(
        who, state, f"hrn:node:{root}:{source}:{loc}", f"hrn:node:{root}:{target}:{loc}", False, False
    )


def post(hadron: Hadron, root: str) -> None:
    who = caller(hadron, root)
    memory = hadron.admin().memory(f"hrn:mem:{root}:room")
    channel = hadron.team.store.channel_at(memory.id, "ops")
    assert channel is not None
    hadron.team.channels.post(who, channel, memory, "hello", None, None)


def start_session(hadron: Hadron, root: str) -> None:
    who = caller(hadron, root)
    app = hadron.admin().app(f"hrn:app:{root}:bot")
    state = hadron.selections.session(who, "s", None)
    hadron.team.sessions.start(who, state, app, SessionStart("work"), None, False)


def record_work(hadron: Hadron, root: str) -> None:
    who = caller(hadron, root)
    app = hadron.admin().app(f"hrn:app:{root}:bot")
    state = hadron.selections.session(who, "s", None)
    sessions = hadron.team.store.sessions_of(who.user.id if who.user else None, None, False, 1)
    assert sessions, "seed() starts the session work is recorded on"
    sid = sessions[0].id
    n = next(_counter)
    hadron.team.worklog.record(who, state, sid, "github", "pr", f"acme/api#{n}", "opened", None, app.urn)


def team_and_memory(hadron: Hadron, root: str) -> tuple[str, ...]:
    app = hadron.admin().app(f"hrn:app:{root}:bot")
    return write_keys.team(app.id), write_keys.memory(hadron.team.agents.team_memory(app).id)


def create_memory(hadron: Hadron, root: str) -> None:
    hadron.admin().create_memory(f"m{next(_counter)}", "knowledge", org=root, embedding="none")


def lock_memory(hadron: Hadron, root: str) -> None:
    wanted = MemoryLock(memory_id(hadron, root, "plans"), f"k{next(_counter)}", "u", None, AT, AT)
    hadron.stores.locks.acquire(wanted, AT)  # an expired lock: replaced by every call


def embed(hadron: Hadron, root: str) -> None:
    node = hadron.graph.node_by_loc(memory_id(hadron, root, "plans"), "seed")
    assert node is not None
    hadron.search.store.put_embeddings([(node.id, None, f"e{next(_counter)}", "h", AT)])


def put_abstract(hadron: Hadron, root: str) -> None:
    mid = memory_id(hadron, root, "plans")
    node = hadron.graph.node_by_loc(mid, "seed")
    assert node is not None
    hadron.stores.abstracts.put(mid, Abstract(node.id, f"a{next(_counter)}", "h", "extractive", AT))


def attach_git(hadron: Hadron, root: str) -> None:
    hadron.stores.git.attach(memory_id(hadron, root, "plans"), f"https://example.com/{next(_counter)}", None)


@dataclass(frozen=True)
class Family:
    name: str
    write: Callable[[Hadron, str], object]
    keys: Callable[[Hadron, str], tuple[str, ...]]  # the tenant keys the family is meant to take


def _memory(slug: str) -> Callable[[Hadron, str], tuple[str, ...]]:
    return lambda h, root: (write_keys.memory(memory_id(h, root, slug)),)


FAMILIES = [
    Family("node", lambda h, root: create_node(h, root), _memory("plans")),
    Family(
        "move",
        lambda h, root: move(h, root, "plans", "notes"),
        lambda h, root: (_memory("plans")(h, root)[0], _memory("notes")(h, root)[0]),
    ),
    Family("channel_post", post, _memory("room")),
    Family(
        "team_session",
        start_session,
        lambda h, root: (write_keys.team(h.admin().app(f"hrn:app:{root}:bot").id),),
    ),
    Family("worklog", record_work, team_and_memory),
    Family("create_memory", create_memory, lambda h, root: (write_keys.root(root),)),
    Family("memory_lock", lock_memory, _memory("plans")),
    Family("embedding", embed, _memory("plans")),
    Family("abstract", put_abstract, _memory("plans")),
    Family("git", attach_git, _memory("plans")),
]


def seed(hadron: Hadron) -> None:
    for root in (A, B):
        who = caller(hadron, root)
        fields = NodeFields({"name": "seed"}, frozenset({"name"}))
        state = hadron.selections.session(who, "s", None)
        hadron.nodes.create(who, state, f"hrn:node:{root}:plans:seed", fields, None)
        app = hadron.admin().app(f"hrn:app:{root}:bot")
        hadron.team.sessions.start(
            who, state, app, SessionStart("seed"), None, False
        )  # what work is recorded on


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_another_organizations_write_commits_while_one_is_held(
    workers: tuple[Hadron, Hadron], database_url: str, family: Family
) -> None:
    first, second = workers
    seed(first)
    held = Held(first, family.keys(first, A), lambda: family.write(first, A))
    try:
        other, _ = in_thread(lambda: family.write(second, B))
        other.join(STUCK)
        assert not other.is_alive(), f"a {family.name} write of {B} waited for one of {A}"
        assert advisory_waiters(database_url) == 0
    finally:
        held.commit()


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_two_writes_to_one_tenant_queue(
    workers: tuple[Hadron, Hadron], database_url: str, family: Family
) -> None:
    first, second = workers
    seed(first)
    held = Held(first, family.keys(first, A), lambda: family.write(first, A))
    try:
        same, _ = in_thread(lambda: family.write(second, A))
        until(lambda: advisory_waiters(database_url) == 1)
        assert same.is_alive()
    finally:
        held.commit()
    same.join(STUCK)
    assert not same.is_alive()


def test_channel_seqs_stay_gap_free_per_channel_across_organizations(workers: tuple[Hadron, Hadron]) -> None:
    first, second = workers
    held = Held(first, family_keys("channel_post", first, A), lambda: post(first, A))
    try:
        queued, _ = in_thread(lambda: post(second, A))
        post(second, B)
    finally:
        held.commit()
    queued.join(STUCK)
    for root, expected in ((A, [1, 2]), (B, [1])):
        memory = second.admin().memory(f"hrn:mem:{root}:room")
        channel = second.team.store.channel_at(memory.id, "ops")
        assert channel is not None and channel.last_seq == len(expected)
        page = second.team.channels.read(caller(second, root), channel, memory, 0, None, None, 10, 0)
        assert [m.seq for m in page.messages] == expected


def family_keys(name: str, hadron: Hadron, root: str) -> tuple[str, ...]:
    return next(f for f in FAMILIES if f.name == name).keys(hadron, root)


def test_a_move_and_the_reverse_move_never_wait_in_a_circle(
    workers: tuple[Hadron, Hadron], database_url: str
) -> None:
    first, second = workers
    keys = family_keys("move", first, A)
    held = Held(first, keys, lambda: move(first, A, "plans", "notes"))
    try:
        reverse, _ = in_thread(lambda: move(second, A, "notes", "plans"))
        until(lambda: advisory_waiters(database_url) == 1)
        # The reverse move waits holding no memory's key: it asks for both in one fixed order at once.
        assert tenant_keys_held_by_waiters(database_url) == 0
        assert reverse.is_alive()
    finally:
        held.commit()
    reverse.join(STUCK)
    assert not reverse.is_alive()


def test_a_write_naming_a_tenant_its_transaction_does_not_hold_is_refused(
    workers: tuple[Hadron, Hadron],
) -> None:
    first, _ = workers
    with pytest.raises(RuntimeError, match="locked only"):
        with first.graph.atomic(write_keys.memory(memory_id(first, A, "plans"))):
            create_node(first, A, "notes")
