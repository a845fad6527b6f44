"""Hadron's per-memory indexes under the process's memory budget (``TRIPTYCH_INDEX_MEMORY_MB``), on every
engine: with room for one memory, searching another forgets the least recently used one, and a search of a
forgotten memory loads it back and returns the same hits, keyword and vector alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hadron.letters import LetterEmbedder

from triptych.core import partitions
from triptych.core.partitions import MemoryBudget
from triptych.hadron.identity import HadronCaller
from triptych.hadron.search_store import NodeFilter
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("sqlite", "postgresql")
MEMORIES = ("specs", "guides")
WORDS = "deploy rollback cache header badge facade bead chafe".split()


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> MemoryBudget:
    accountant = MemoryBudget()
    monkeypatch.setattr(partitions, "BUDGET", accountant)  # the stores below join this one
    return accountant


@pytest.fixture
def hadron(tmp_path: Path, database_url: str | None, budget: MemoryBudget) -> Iterator[Hadron]:
    opened = Hadron.open(tmp_path / "hadron.db", LetterEmbedder(), database_url=database_url)  # type: ignore[arg-type]
    admin = opened.admin()
    admin.create_org("acme.com")
    admin.create_user("alice")
    admin.add_org_member("acme.com", "alice", "OWNER")
    caller = HadronCaller("user", "alice", user=opened.tenancy.user_by_handle("alice"))
    state = opened.selections.session(caller, "s", None)
    for m, memory in enumerate(MEMORIES):
        admin.create_memory(memory, "knowledge", org="acme.com")  # knowledge: nodes are embedded
        for i in range(10):
            words = [WORDS[(i + m + j) % len(WORDS)] for j in range(3)]
            values = {"name": f"{memory} {' '.join(words)}", "content": " ".join(words * 2)}
            opened.nodes.create(
                caller, state, f"hrn:node:acme.com:{memory}:n{i}", NodeFields(values, frozenset(values)), None
            )
    yield opened
    opened.close()


def _searches(hadron: Hadron, memory: str) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    store = hadron.search.store
    memory_id = hadron.admin().memory(f"hrn:mem:acme.com:{memory}").id
    keyword = store.keyword(NodeFilter((memory_id,)), "rollback cache", 5)
    vector = store.vector(memory_id, LetterEmbedder().embed(["badge facade"])[0], 5)
    return [(r, round(s, 4)) for r, s in keyword], [(r, round(s, 4)) for r, s in vector]


def _resident(hadron: Hadron, memory: str) -> tuple[bool, bool]:
    store = hadron.search.store
    memory_id = hadron.admin().memory(f"hrn:mem:acme.com:{memory}").id
    assert store.index is not None
    return store.index.resident(memory_id), store.keywords.index.resident(memory_id)


def test_a_forgotten_memory_is_loaded_back_by_its_search_with_the_same_hits(
    hadron: Hadron, budget: MemoryBudget
) -> None:
    before = {memory: _searches(hadron, memory) for memory in MEMORIES}
    assert all(keyword and vector for keyword, vector in before.values())
    ids = {memory: hadron.admin().memory(f"hrn:mem:acme.com:{memory}").id for memory in MEMORIES}
    sizes = {m: sum(b for _, key, b in budget.entries() if key == ids[m]) for m in MEMORIES}
    budget.limit = max(sizes.values()) + 1  # room for one memory's indexes, not for any of a second

    assert _searches(hadron, "specs") == before["specs"]  # resident: guides is now the least recently used
    budget.enforce(None)
    assert budget.total <= budget.limit
    assert _resident(hadron, "specs") == (True, True)
    assert _resident(hadron, "guides") == (False, False)

    assert _searches(hadron, "guides") == before["guides"]  # loaded back in the search
    assert _resident(hadron, "guides") == (True, True)
    assert budget.total <= budget.limit
    assert _resident(hadron, "specs") == (False, False)
    assert budget.evictions == {"vectors": 2, "keywords": 2}
