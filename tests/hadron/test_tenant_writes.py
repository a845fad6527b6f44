"""Node writes to two memories never wait for each other in server mode (issue 30 item 1,
docs/decisions/0171), and every worker's BM25 still sees every change before a search that follows it.

Two ``Hadron`` instances on one real PostgreSQL stand for two workers. A node write to memory A is held
open (its lock taken, its ``node_text_changes`` entry numbered, not committed) while a node write to
memory B, numbered after it, commits: the other worker's search finds B at once, and A once A commits
(its entry was numbered first and committed last: a follower reading "entries after the log's head"
would have skipped it). Two writes to one memory still queue. Waiting is read from ``pg_locks``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hadron.two_workers import caller, owner
from lock_waits import STUCK, advisory_waiters, in_thread, until

from triptych.hadron import write_keys
from triptych.hadron.search_store import NodeFilter
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("postgresql")

ORGS = ("acme.com", "globex.com")


@pytest.fixture
def workers(tmp_path: Path, database_url: str | None) -> Iterator[tuple[Hadron, Hadron]]:
    assert database_url is not None
    first = Hadron.open(tmp_path / "w1" / "hadron.db", database_url=database_url)
    admin = first.admin()
    for root in ORGS:
        admin.create_org(root)
        admin.create_user(owner(root))
        admin.add_org_member(root, owner(root), "OWNER")
        admin.create_memory("plans", "knowledge", org=root, embedding="none")
    second = Hadron.open(tmp_path / "w2" / "hadron.db", database_url=database_url)
    yield first, second
    second.close()
    first.close()


def write(hadron: Hadron, root: str, loc: str, name: str) -> None:
    who = caller(hadron, root)
    state = hadron.selections.session(who, "s", None)
    fields = NodeFields({"name": name}, frozenset({"name"}))
    hadron.nodes.create(who, state, f"hrn:node:{root}:plans:{loc}", fields, None)


def names(hadron: Hadron, root: str, word: str) -> list[str]:
    """What this worker's BM25 (its in-process index, brought up to the log) finds in the org's memory."""
    memory = hadron.admin().memory(f"hrn:mem:{root}:plans")
    store = hadron.search.store
    rowids = [r for r, _ in store.keyword(NodeFilter((memory.id,)), word, 10)]
    return sorted(n.name for n in store.nodes_by_rowid(rowids).values())


class HeldWrite:
    """A node rename in the org's memory through ``GraphStore.atomic(memory)``, as ``NodeService`` opens
    it, stopped before its commit until ``release``."""

    def __init__(self, hadron: Hadron, root: str, loc: str, name: str) -> None:
        self.began, self.release = threading.Event(), threading.Event()
        memory = hadron.admin().memory(f"hrn:mem:{root}:plans")

        def run() -> None:
            graph = hadron.graph
            with graph.atomic(write_keys.memory(memory.id)):
                node = graph.node_by_loc(memory.id, loc)
                assert node is not None
                graph.update_node(replace(node, name=name))
                self.began.set()
                self.release.wait(STUCK)

        self.thread, _ = in_thread(run)
        assert self.began.wait(STUCK)

    def commit(self) -> None:
        self.release.set()
        self.thread.join(STUCK)
        assert not self.thread.is_alive()


def test_a_write_to_another_memory_commits_meanwhile_and_a_late_commit_is_not_missed(
    workers: tuple[Hadron, Hadron], database_url: str
) -> None:
    first, second = workers
    write(first, "acme.com", "deal", "acme lantern")
    assert names(second, "acme.com", "lantern") == ["acme lantern"]  # the follower's index of A is loaded
    held = HeldWrite(first, "acme.com", "deal", "acme beacon")  # A's log entry numbered, not committed
    try:
        b, _ = in_thread(lambda: write(second, "globex.com", "deal", "globex beacon"))
        b.join(STUCK)
        assert not b.is_alive(), "a write to memory B waited for memory A's open write"
        assert advisory_waiters(database_url) == 0
        # B is found by the other worker at once; A's index, brought up meanwhile, still shows A as committed.
        assert names(first, "globex.com", "beacon") == ["globex beacon"]
        assert names(second, "acme.com", "lantern") == ["acme lantern"]
        assert names(second, "acme.com", "beacon") == []
    finally:
        held.commit()
    # A's entry was numbered before B's and committed after it: the follower still applies it.
    assert names(second, "acme.com", "beacon") == ["acme beacon"]
    assert names(second, "acme.com", "lantern") == []
    assert names(first, "acme.com", "beacon") == ["acme beacon"]
    assert names(second, "globex.com", "beacon") == ["globex beacon"]


def test_two_writes_to_one_memory_still_queue(workers: tuple[Hadron, Hadron], database_url: str) -> None:
    first, second = workers
    write(first, "acme.com", "deal", "acme lantern")
    held = HeldWrite(first, "acme.com", "deal", "acme beacon")
    try:
        other, _ = in_thread(lambda: write(second, "acme.com", "terms", "acme harbour"))
        until(lambda: advisory_waiters(database_url) == 1)
        assert other.is_alive()
    finally:
        held.commit()
    other.join(STUCK)
    assert not other.is_alive()
    assert names(second, "acme.com", "beacon") == ["acme beacon"]
    assert names(second, "acme.com", "harbour") == ["acme harbour"]


def test_a_store_wide_write_waits_for_a_memory_write_in_progress(
    workers: tuple[Hadron, Hadron], database_url: str
) -> None:
    first, second = workers
    write(first, "acme.com", "deal", "acme lantern")
    held = HeldWrite(first, "acme.com", "deal", "acme beacon")

    def store_wide() -> None:
        with second.graph.atomic():  # no tenant named: the store's key, exclusively (as a key rotation)
            pass

    try:
        whole, _ = in_thread(store_wide)
        until(lambda: advisory_waiters(database_url) == 1)
        assert whole.is_alive()
    finally:
        held.commit()
    whole.join(STUCK)
    assert not whole.is_alive()
