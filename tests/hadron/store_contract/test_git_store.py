"""The ``GitStore`` contract on every engine: a memory's source, its tracked files, and what a sync
records, with detaching taking the files along."""

from __future__ import annotations

import pytest
from hadron.store_contract.conftest import Seed, add_memory

from triptych.hadron.git_store import GitSource, TrackedFile

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def test_a_source_is_attached_synced_failed_and_reattached(seed: Seed) -> None:
    git = seed.stores.git
    mid = seed.memory.id
    assert git.source(mid) is None
    git.attach(mid, "https://example.com/a.git", None)
    git.synced(mid, None, "unreachable")
    assert git.source(mid) == GitSource(mid, "https://example.com/a.git", None, None, None, "unreachable")
    git.synced(mid, "c0ffee", None)
    synced = git.source(mid)
    assert synced is not None and synced.commit == "c0ffee" and synced.last_error is None and synced.synced_at
    git.synced(mid, None, "again")
    git.attach(mid, "https://example.com/b.git", "main")  # a new URL clears the error, keeps the commit
    again = git.source(mid)
    assert again is not None and (again.url, again.branch, again.commit, again.last_error) == (
        "https://example.com/b.git", "main", "c0ffee", None,
    )  # fmt: skip


def test_sources_list_in_attach_order(seed: Seed) -> None:
    git = seed.stores.git
    other = add_memory(seed.stores, seed.org, "aaa")
    git.attach(seed.memory.id, "u1", None)
    git.attach(other.id, "u2", None)
    # By attach time; two attaches in one millisecond go by memory id.
    listed = [s.memory_id for s in git.sources()]
    assert listed in ([seed.memory.id, other.id], sorted([seed.memory.id, other.id]))


def test_tracked_files_are_upserted_found_by_node_and_dropped(seed: Seed) -> None:
    git = seed.stores.git
    mid = seed.memory.id
    git.attach(mid, "u", None)
    git.put_files(mid, [TrackedFile("a.md", "n1", "b1", 1), TrackedFile("b.md", "n2", "b2", 1)])
    git.put_files(mid, [TrackedFile("a.md", "n1", "b3", 2)])
    assert git.files(mid) == {
        "a.md": TrackedFile("a.md", "n1", "b3", 2),
        "b.md": TrackedFile("b.md", "n2", "b2", 1),
    }
    assert git.files_of_nodes(["n2", "n9"]) == {"n2": (mid, TrackedFile("b.md", "n2", "b2", 1))}
    git.drop_files(mid, ["b.md"])
    git.drop_nodes(mid, ["n1"])
    assert git.files(mid) == {}
    git.put_files(mid, [TrackedFile("c.md", "n3", "b4", 1)])
    assert git.detach(mid) is True and git.files(mid) == {} and git.source(mid) is None
    assert git.detach(mid) is False
