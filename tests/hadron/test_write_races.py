"""Writes that read what they write before taking its tenant's key (docs/decisions/0280): the first
posts of a team chat racing to create it, and node writes racing a move of their node.

On real PostgreSQL, two ``Hadron`` instances stand for two workers. One write is held open inside a
transaction holding its keys (``test_tenant_write_families.Held``'s pattern) while the racing write,
on the other worker, has read what it will write and waits for the key (seen in ``pg_locks``, never
timed); then the held one commits and the racing one must build on what committed meanwhile.
SQLite has one writer: its threads race through the same service code, checked at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lock_waits import STUCK, Held, advisory_waiters, in_thread, until

from triptych.hadron import write_keys
from triptych.hadron.errors import HadronError, NotFound
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import EdgeInput, NodeFields
from triptych.hadron.services.replace import ReplaceRequest, ReplaceResult
from triptych.hadron.surface import Hadron

ROOT = "acme.com"
APP = f"hrn:app:{ROOT}:bot"
OWNER = "owner-acme"


def build(hadron: Hadron) -> None:
    admin = hadron.admin()
    admin.create_org(ROOT)
    admin.create_user(OWNER)
    admin.add_org_member(ROOT, OWNER, "OWNER")
    admin.create_memory("plans", "knowledge", org=ROOT, embedding="none")
    admin.create_memory("notes", "knowledge", org=ROOT, embedding="none")
    admin.create_app("bot", "Bot", ROOT, None)
    hadron.team.agents.install(APP, "team", team=True)  # the team memory; its chat is made on first post
    create(hadron, "plans", "seed")
    create(hadron, "plans", "other")


@pytest.fixture
def workers(tmp_path: Path, database_url: str | None) -> Iterator[tuple[Hadron, Hadron]]:
    assert database_url is not None
    first = Hadron.open(tmp_path / "w1" / "hadron.db", database_url=database_url)
    build(first)
    second = Hadron.open(tmp_path / "w2" / "hadron.db", database_url=database_url)
    yield first, second
    second.close()
    first.close()


def caller(hadron: Hadron) -> HadronCaller:
    return HadronCaller("user", OWNER, user=hadron.tenancy.user_by_handle(OWNER))


def create(hadron: Hadron, slug: str, loc: str) -> None:
    who = caller(hadron)
    fields = NodeFields({"name": loc.rpartition(":")[2]}, frozenset({"name"}))
    hadron.nodes.create(
        who, hadron.selections.session(who, "s", None), f"hrn:node:{ROOT}:{slug}:{loc}", fields, None
    )


def post_team(hadron: Hadron, body: str) -> int:
    who = caller(hadron)
    state = hadron.selections.session(who, "s", None)
    return hadron.team.channels.post_team(who, state, APP, None, body, None)[1]


def move(hadron: Hadron, loc: str, source: str = "plans", target: str = "notes") -> None:
    who = caller(hadron)
    state = hadron.selections.session(who, "s", None)
    hadron.nodes.move(
        who, state, f"hrn:node:{ROOT}:{source}:{loc}", f"hrn:node:{ROOT}:{target}:{loc}", False, False
    )


def update(hadron: Hadron, field: str, value: str) -> None:
    who = caller(hadron)
    state = hadron.selections.session(who, "s", None)
    fields = NodeFields({field: value}, frozenset({field}))
    hadron.nodes.update(who, state, f"hrn:node:{ROOT}:plans:seed", fields, None, None)


def merge(hadron: Hadron) -> None:
    who = caller(hadron)
    state = hadron.selections.session(who, "s", None)
    hadron.nodes.merge_data(who, state, f"hrn:node:{ROOT}:plans:seed", {"k": 1})


def add_edge(hadron: Hadron) -> None:
    who = caller(hadron)
    state = hadron.selections.session(who, "s", None)
    hadron.nodes.create_edge(who, state, f"hrn:node:{ROOT}:plans:seed", EdgeInput(target="other"))


def delete(hadron: Hadron) -> None:
    who = caller(hadron)
    state = hadron.selections.session(who, "s", None)
    hadron.nodes.delete(who, state, f"hrn:node:{ROOT}:plans:seed", False, True, False)


def memory_id(hadron: Hadron, slug: str) -> str:
    return hadron.admin().memory(f"hrn:mem:{ROOT}:{slug}").id


def team_memory_key(hadron: Hadron) -> str:
    return write_keys.memory(hadron.team.agents.team_memory(hadron.admin().app(APP)).id)


def racing(database_url: str, held: Held, work: Callable[[], object]) -> object:
    """``work`` started while ``held`` is open, seen waiting for a key, run on after the commit: its
    result, or the error it raised."""

    def attempt() -> object:
        try:
            return work()
        except HadronError as exc:
            return exc

    try:
        thread, out = in_thread(attempt)
        until(lambda: advisory_waiters(database_url) == 1)
        assert thread.is_alive()
    finally:
        held.commit()
    thread.join(STUCK)
    assert not thread.is_alive() and out
    return out[0]


# ── the team chat, created by its first post ───────────────────────────────


@pytest.mark.engines("postgresql")
def test_two_first_posts_to_a_team_chat_both_land_in_one_channel(
    workers: tuple[Hadron, Hadron], database_url: str
) -> None:
    first, second = workers
    held = Held(first, (team_memory_key(first),), lambda: post_team(first, "one"))
    # The second worker saw no chat yet, and waits to create it: it must post into the first's.
    assert racing(database_url, held, lambda: post_team(second, "two")) == 2
    memory = second.team.agents.team_memory(second.admin().app(APP))
    channel = second.team.store.channel_at(memory.id, "chats:team")
    assert channel is not None and channel.last_seq == 2
    assert [c.loc for c in second.team.store.channels(memory_id=memory.id)] == ["chats:team"]
    page = second.team.channels.read(caller(second), channel, memory, 0, None, None, 10, 0)
    assert [(m.seq, m.body) for m in page.messages] == [(1, "one"), (2, "two")]


@pytest.mark.engines("postgresql")
def test_an_explicit_channel_create_at_a_taken_address_is_still_refused(
    workers: tuple[Hadron, Hadron],
) -> None:
    first, _ = workers
    post_team(first, "one")
    memory = first.team.agents.team_memory(first.admin().app(APP))
    with pytest.raises(HadronError) as refused:
        first.team.channels.create_channel(caller(first), memory.urn, "chats:team", "again")
    assert refused.value.code == "loc_protected"  # the create-or-get is the first post's only


# ── node writes racing a move of their node ────────────────────────────────


NODE_WRITES: dict[str, Callable[[Hadron], object]] = {
    "update": lambda h: update(h, "description", "late"),
    "merge_data": merge,
    "create_edge": add_edge,
    "delete": delete,
}


@pytest.mark.engines("postgresql")
@pytest.mark.parametrize("name", list(NODE_WRITES))
def test_a_node_write_racing_a_move_fails_and_never_resurrects_the_node(
    workers: tuple[Hadron, Hadron], database_url: str, name: str
) -> None:
    first, second = workers
    keys = (write_keys.memory(memory_id(first, "plans")), write_keys.memory(memory_id(first, "notes")))
    held = Held(first, keys, lambda: move(first, "seed"))
    outcome = racing(database_url, held, lambda: NODE_WRITES[name](second))
    assert isinstance(outcome, NotFound), outcome
    assert outcome.code == "node_not_found"
    assert second.graph.node_by_loc(memory_id(second, "plans"), "seed") is None  # not written back
    moved = second.graph.node_by_loc(memory_id(second, "notes"), "seed")
    assert moved is not None and moved.memory_id == memory_id(second, "notes")
    assert (
        moved.revision == 2 and moved.description != "late" and not (moved.data or {}).get("k")
    )  # the move's
    assert second.graph.edges_from([moved.id]).get(moved.id, []) == []


def rename(hadron: Hadron) -> ReplaceResult:
    request = ReplaceRequest("seed", "sprout", ("name",), node_refs=(f"hrn:node:{ROOT}:plans:seed",))
    return hadron.live.replace.replace_text(caller(hadron), request)


@pytest.mark.engines("postgresql")
def test_a_replace_racing_a_move_reports_the_node_unavailable_and_leaves_it_moved(
    workers: tuple[Hadron, Hadron], database_url: str
) -> None:
    first, second = workers
    keys = (write_keys.memory(memory_id(first, "plans")), write_keys.memory(memory_id(first, "notes")))
    held = Held(first, keys, lambda: move(first, "seed"))
    outcome = racing(database_url, held, lambda: rename(second))
    assert isinstance(outcome, ReplaceResult), outcome
    assert outcome.results == [] and outcome.unavailable == [f"hrn:node:{ROOT}:plans:seed"]
    assert second.graph.node_by_loc(memory_id(second, "plans"), "seed") is None
    moved = second.graph.node_by_loc(memory_id(second, "notes"), "seed")
    assert moved is not None and moved.name == "seed" and moved.revision == 2


@pytest.mark.engines("postgresql")
def test_two_updates_of_one_node_both_apply(workers: tuple[Hadron, Hadron], database_url: str) -> None:
    first, second = workers
    held = Held(
        first, (write_keys.memory(memory_id(first, "plans")),), lambda: update(first, "description", "a")
    )
    assert racing(database_url, held, lambda: update(second, "name", "b")) is None
    node = second.graph.node_by_loc(memory_id(second, "plans"), "seed")
    assert node is not None
    assert (node.description, node.name, node.revision) == ("a", "b", 3)  # neither lost
    assert [r.revision for r in second.graph.revisions(node.id)][:2] == [3, 2]


@pytest.mark.engines("postgresql")
def test_a_move_takes_the_child_created_while_it_waited(
    workers: tuple[Hadron, Hadron], database_url: str
) -> None:
    first, second = workers
    held = Held(
        first, (write_keys.memory(memory_id(first, "plans")),), lambda: create(first, "plans", "seed:kid")
    )
    assert racing(database_url, held, lambda: move(second, "seed")) is None
    assert second.graph.node_by_loc(memory_id(second, "plans"), "seed:kid") is None  # no orphan left behind
    assert second.graph.node_by_loc(memory_id(second, "notes"), "seed:kid") is not None


# ── SQLite: threads of one process ─────────────────────────────────────────


@pytest.mark.engines("sqlite")
def test_first_team_chat_posts_from_many_threads_all_land(tmp_path: Path) -> None:
    hadron = Hadron.open(tmp_path / "hadron.db")
    try:
        build(hadron)
        start = threading.Barrier(6)

        def poster(n: int) -> Any:
            start.wait(STUCK)
            try:
                return post_team(hadron, f"m{n}")
            except HadronError as exc:
                return exc

        threads = [in_thread(lambda n=n: poster(n)) for n in range(6)]
        for thread, _ in threads:
            thread.join(STUCK)
        seqs = sorted(out[0] for _, out in threads)
        assert seqs == [1, 2, 3, 4, 5, 6], seqs
    finally:
        hadron.close()
