"""The search store on a real SQLite file: full text and vector generations follow every write path,
filters run inside the query, and embedding on write follows the memory's policy."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from harness import count_loads, run_threads

from triptych.hadron.domain.where import compile_where
from triptych.hadron.identity import HadronCaller
from triptych.hadron.search_store import NodeFilter
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.search import FindQuery
from triptych.hadron.surface import Hadron


class LetterEmbedder:
    """A tiny deterministic embedder: letter frequencies of a-h, L2-normalised."""

    name = "letters"
    dim = 8

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "h":
                    out[i, ord(ch) - ord("a")] += 1
            out[i] /= max(float(np.linalg.norm(out[i])), 1e-9)
        return out


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Hadron, HadronCaller, LetterEmbedder]]:
    embedder = LetterEmbedder()
    hadron = Hadron.open(tmp_path / "hadron.db", embedder)  # type: ignore[arg-type]
    admin = hadron.admin()
    admin.create_org("acme.com")
    admin.create_user("alice")
    admin.add_org_member("acme.com", "alice", "OWNER")
    admin.create_memory("specs", "knowledge", org="acme.com")
    admin.create_memory("team", "group", org="acme.com")
    caller = HadronCaller("user", "alice", user=hadron.tenancy.user_by_handle("alice"))
    yield hadron, caller, embedder
    hadron.close()


def write(hadron: Hadron, caller: HadronCaller, urn: str, **values: object) -> None:
    state = hadron.selections.session(caller, "s", None)
    hadron.nodes.create(caller, state, urn, NodeFields(dict(values), frozenset(values)), None)


def keyword(hadron: Hadron, memory: str, text: str) -> list[str]:
    memory_id = hadron.admin().memory(memory).id
    rows = hadron.search.store.keyword(NodeFilter((memory_id,)), f'"{text}"', 10)
    return sorted(n.loc for n in hadron.search.store.nodes_by_rowid([r for r, _ in rows]).values())


def test_full_text_follows_create_update_move_and_delete(
    world: tuple[Hadron, HadronCaller, LetterEmbedder],
) -> None:
    hadron, caller, _ = world
    state = hadron.selections.session(caller, "s", None)
    write(hadron, caller, "hrn:node:acme.com:specs:a", name="Deploying", content="ships releases")
    assert keyword(hadron, "hrn:mem:acme.com:specs", "deploy") == ["a"]  # stemmed
    hadron.nodes.update(
        caller,
        state,
        "hrn:node:acme.com:specs:a",
        NodeFields({"content": "rollbacks"}, frozenset({"content"})),
        None,
        None,
    )
    assert keyword(hadron, "hrn:mem:acme.com:specs", "releases") == []
    assert keyword(hadron, "hrn:mem:acme.com:specs", "rollback") == ["a"]
    hadron.nodes.move(caller, state, "hrn:node:acme.com:specs:a", "hrn:node:acme.com:team:b", False, False)
    assert keyword(hadron, "hrn:mem:acme.com:specs", "rollback") == []
    assert keyword(hadron, "hrn:mem:acme.com:team", "rollback") == ["b"]
    hadron.nodes.delete(caller, state, "hrn:node:acme.com:team:b", False, False, False)
    assert keyword(hadron, "hrn:mem:acme.com:team", "rollback") == []


def test_embedding_follows_the_policy_and_generations_follow_the_vectors(
    world: tuple[Hadron, HadronCaller, LetterEmbedder],
) -> None:
    hadron, caller, embedder = world
    store = hadron.search.store
    specs, team = (
        hadron.admin().memory("hrn:mem:acme.com:specs"),
        hadron.admin().memory("hrn:mem:acme.com:team"),
    )
    write(hadron, caller, "hrn:node:acme.com:specs:a", name="abc")
    write(hadron, caller, "hrn:node:acme.com:team:a", name="abc")  # group memory: no policy, no vector
    assert store.vector_count(specs.id) == 1 and store.vector_count(team.id) == 0
    before, calls = store.generation(specs.id), embedder.calls
    write(hadron, caller, "hrn:node:acme.com:specs:a", name="abc")  # same text: not re-embedded
    assert embedder.calls == calls and store.generation(specs.id) == before
    assert store.vector(specs.id, embedder.embed(["abc"])[0], 5)  # loads the memory's index
    write(hadron, caller, "hrn:node:acme.com:specs:b", name="def")
    assert store.index is not None
    cached = store.index._parts[specs.id]  # our own write was applied incrementally, not dropped
    assert cached.generation == store.generation(specs.id) and len(cached.ids) == 2
    write(hadron, caller, "hrn:node:acme.com:specs:a", name="ggg")  # re-embedded in place
    cached = store.index._parts[specs.id]
    assert cached.generation == store.generation(specs.id) and len(cached.ids) == 2
    top = store.vector(specs.id, embedder.embed(["ggg"])[0], 1)
    assert top[0][1] == pytest.approx(1.0)
    before = store.generation(specs.id)
    state = hadron.selections.session(caller, "s", None)
    hadron.nodes.delete(caller, state, "hrn:node:acme.com:specs:a", False, False, False)
    assert store.generation(specs.id) > before and store.vector_count(specs.id) == 1


def test_where_and_filters_run_inside_the_query(world: tuple[Hadron, HadronCaller, LetterEmbedder]) -> None:
    hadron, caller, _ = world
    for i in range(30):
        write(hadron, caller, f"hrn:node:acme.com:specs:p:n{i:02d}", name=f"widget {i}", properties={"i": i})
    memory_id = hadron.admin().memory("hrn:mem:acme.com:specs").id
    f = NodeFilter((memory_id,), where=compile_where({"path": "i", "gte": 28}))
    rows = hadron.search.store.keyword(f, '"widget"', 1)
    assert len(rows) == 1  # limit 1 still finds a survivor: the filter is not applied after truncation
    survey = hadron.search.store.survey(NodeFilter((memory_id,), subtree=(memory_id, "p"), where=f.where), 10)
    assert sorted(n.loc for n in hadron.search.store.nodes_by_rowid(survey).values()) == ["p:n28", "p:n29"]
    state = hadron.selections.session(caller, "s", None)
    hits = hadron.search.find_nodes(
        caller,
        state,
        FindQuery("abc", mode="vector", memory_urn="hrn:mem:acme.com:specs", where={"path": "i", "eq": 3}),
    ).hits
    assert [h.node.loc for h in hits] == ["p:n03"]


def test_concurrent_node_writes_and_vector_searches_never_reload_the_index(
    world: tuple[Hadron, HadronCaller, LetterEmbedder],
) -> None:
    # Each embedding write commits and then hands its vectors to the cached index (``WriteGate``):
    # with one process writing, a search racing a write must never find the index behind and reload.
    hadron, caller, embedder = world
    store = hadron.search.store
    specs = hadron.admin().memory("hrn:mem:acme.com:specs")
    for i in range(10):
        write(hadron, caller, f"hrn:node:acme.com:specs:seed-{i}", name=f"bead {i}")
    query = embedder.embed(["bead"])[0]
    assert store.vector(specs.id, query, 5)
    assert store.index is not None
    loads = count_loads(store.index)

    def work(worker: int) -> None:
        for i in range(10):
            if i % 2:
                write(
                    hadron, caller, f"hrn:node:acme.com:specs:w{worker}-{i}", name=f"faded bead {worker} {i}"
                )
            else:
                assert len(store.vector(specs.id, query, 5)) == 5

    assert run_threads(work, 6) == []
    assert loads == []
    assert store.vector_count(specs.id) == 40
