"""The search store on a real SQLite file or a fresh PostgreSQL database: the keyword index and vector
generations follow every write path (this process's and another's), filters run inside the query, and
embedding on write follows the memory's policy."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hadron.letters import LetterEmbedder
from harness import count_loads, run_threads

from triptych.core.regex import LinearPattern
from triptych.hadron.domain.where import compile_where
from triptych.hadron.identity import HadronCaller
from triptych.hadron.search_store import NodeFilter
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.search import FindQuery
from triptych.hadron.surface import Hadron

# The store's rules hold on both engines.
pytestmark = pytest.mark.engines("sqlite", "postgresql")


def reopen(hadron: Hadron, path: Path, embedder: LetterEmbedder) -> Hadron:
    """Another process's view of the same stores (the same file, or the same PostgreSQL database)."""
    url = hadron.stores.pg.url if hadron.stores.pg is not None else None
    return Hadron.open(path, embedder, database_url=url)  # type: ignore[arg-type]


@pytest.fixture
def world(tmp_path: Path, database_url: str | None) -> Iterator[tuple[Hadron, HadronCaller, LetterEmbedder]]:
    embedder = LetterEmbedder()
    hadron = Hadron.open(tmp_path / "hadron.db", embedder, database_url=database_url)  # type: ignore[arg-type]
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
    rows = hadron.search.store.keyword(NodeFilter((memory_id,)), text, 10)
    return sorted(n.loc for n in hadron.search.store.nodes_by_rowid([r for r, _ in rows]).values())


@pytest.mark.engines("sqlite")  # the store on every engine: store_contract/test_search_store.py
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


@pytest.mark.engines("sqlite")  # the store on every engine: store_contract/test_search_store.py
def test_where_and_filters_run_inside_the_query(world: tuple[Hadron, HadronCaller, LetterEmbedder]) -> None:
    hadron, caller, _ = world
    for i in range(30):
        write(hadron, caller, f"hrn:node:acme.com:specs:p:n{i:02d}", name=f"widget {i}", properties={"i": i})
    memory_id = hadron.admin().memory("hrn:mem:acme.com:specs").id
    f = NodeFilter((memory_id,), where=compile_where({"path": "i", "gte": 28}))
    rows = hadron.search.store.keyword(f, "widget", 1)
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


@pytest.mark.engines("sqlite")  # the store on every engine: store_contract/test_search_store.py
def test_regex_scores_by_the_best_field_matched_and_ties_go_by_loc(
    world: tuple[Hadron, HadronCaller, LetterEmbedder],
) -> None:
    hadron, caller, _ = world
    for loc, values in (
        ("d", {"name": "plain", "content": "otter"}),
        ("c", {"name": "plain", "content": "otter"}),
        ("b", {"name": "plain", "description": "an otter", "content": "otter"}),
        ("a", {"name": "Otter", "description": "otter", "content": "otter"}),
        ("e", {"name": "plain", "properties": {"kind": "otter"}}),  # properties are not searched
    ):
        write(hadron, caller, f"hrn:node:acme.com:specs:{loc}", **values)
    memory_id = hadron.admin().memory("hrn:mem:acme.com:specs").id
    store = hadron.search.store

    def found(f: NodeFilter, limit: int) -> list[tuple[str, float]]:
        rows = store.regex(f, LinearPattern("(?i)otter"), limit)
        nodes = store.nodes_by_rowid([r for r, _ in rows])
        return [(nodes[r].loc, score) for r, score in rows]

    everything = NodeFilter((memory_id,))
    assert found(everything, 10) == [("a", 1.0), ("b", 0.67), ("c", 0.33), ("d", 0.33)]
    assert found(everything, 3) == [("a", 1.0), ("b", 0.67), ("c", 0.33)]
    # With a where predicate PostgreSQL tests the rows in Python: the same scores and order.
    kinds = NodeFilter((memory_id,), where=compile_where({"path": "kind", "exists": False}))
    assert found(kinds, 2) == [("a", 1.0), ("b", 0.67)]


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


# -- keyword index (issue 20): FTS5's BM25, per memory, following the change log ---------------------

DOCS = [
    (
        "deploy",
        "Deploying the service",
        "how releases ship",
        "Deploys run nightly; a deploy needs a review.",
        "ops",
    ),
    ("rollback", "Rollbacks", "undoing a deploy", "Roll back with the previous image tag.", "ops,deploy"),
    ("review", "Code review", None, "Every change needs one review before it ships.", "process"),
    ("oncall", "On-call", "who answers pages", "The on-call engineer owns deploys at night.", None),
    ("glossary", "Glossary", "terms", "Deploy: ship a build. Review: read a change. Page: an alert.", "docs"),
]


def _fts5_ranking(query_terms: str) -> list[tuple[str, float]]:
    """The same rows ranked by BM25 as FTS5's ``bm25(4, 2, 1, 1)`` computes it, with Lucene's IDF
    ``log(1 + (N - n + 0.5) / (n + 0.5))`` in place of FTS5's (which is 1e-6 for a term in half the rows
    or more).

    FTS5 scores each query term alone; its score divided by FTS5's own IDF for the term is the term's
    frequency part, which is then weighted by Lucene's IDF and summed over the terms."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE f USING fts5(loc UNINDEXED, name, description, content, tags, tokenize = 'porter unicode61')"
    )
    conn.executemany(
        "INSERT INTO f VALUES (?, ?, ?, ?, ?)", [(d[0], d[1], d[2] or "", d[3], d[4] or "") for d in DOCS]
    )
    total = len(DOCS)
    scores: dict[str, float] = {}
    for term in dict.fromkeys(query_terms.split()):
        rows = conn.execute(
            "SELECT loc, -bm25(f, 0, 4.0, 2.0, 1.0, 1.0) FROM f WHERE f MATCH ?", (f'"{term}"',)
        ).fetchall()
        n = len(rows)
        fts5_idf = math.log((total - n + 0.5) / (n + 0.5))
        fts5_idf = fts5_idf if fts5_idf > 0 else 1e-6
        lucene_idf = math.log1p((total - n + 0.5) / (n + 0.5))
        for loc, score in rows:
            scores[loc] = scores.get(loc, 0.0) + float(score) / fts5_idf * lucene_idf
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


def _ranking(hadron: Hadron, memory: str, text: str) -> list[tuple[str, float]]:
    memory_id = hadron.admin().memory(memory).id
    rows = hadron.search.store.keyword(NodeFilter((memory_id,)), text, 10)
    nodes = hadron.search.store.nodes_by_rowid([r for r, _ in rows])
    return [(nodes[r].loc, s) for r, s in rows]


def _seed(hadron: Hadron, caller: HadronCaller, memory: str = "specs") -> None:
    for loc, name, description, content, tags in DOCS:
        values: dict[str, object] = {"name": name, "content": content}
        if description is not None:
            values["description"] = description
        if tags is not None:
            values["tags"] = tags.split(",")
        write(hadron, caller, f"hrn:node:acme.com:{memory}:{loc}", **values)


@pytest.mark.parametrize("query", ["deploy", "review change", "night pages", "rollback deploy review"])
def test_keyword_ranking_equals_fts5_bm25_with_the_column_weights_and_lucene_idf(
    world: tuple[Hadron, HadronCaller, LetterEmbedder], query: str
) -> None:
    hadron, caller, _ = world
    _seed(hadron, caller)
    ours = _ranking(hadron, "hrn:mem:acme.com:specs", query)
    # Tags are stored as a JSON list: FTS5 read the same text, brackets and quotes aside.
    theirs = _fts5_ranking(query)
    assert [loc for loc, _ in ours] == [loc for loc, _ in theirs]
    assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], rel=1e-4)


def test_one_memory_s_documents_never_shift_another_memory_s_ranking(
    world: tuple[Hadron, HadronCaller, LetterEmbedder],
) -> None:
    hadron, caller, _ = world
    _seed(hadron, caller)
    before = _ranking(hadron, "hrn:mem:acme.com:specs", "deploy review")
    for i in range(40):  # a flood of "deploy" in another memory: the term grows common there only
        write(hadron, caller, f"hrn:node:acme.com:team:d{i}", name=f"deploy {i}", content="deploy deploy")
    assert _ranking(hadron, "hrn:mem:acme.com:specs", "deploy review") == before


def test_another_process_s_writes_reach_the_keyword_index_without_a_reload(
    world: tuple[Hadron, HadronCaller, LetterEmbedder], tmp_path: Path
) -> None:
    hadron, caller, embedder = world
    _seed(hadron, caller)
    specs = "hrn:mem:acme.com:specs"
    assert [loc for loc, _ in _ranking(hadron, specs, "rollback")] == ["rollback"]
    loads = count_loads(hadron.search.store.keywords.index)
    other = reopen(hadron, tmp_path / "hadron.db", embedder)
    try:
        state = other.selections.session(caller, "s2", None)
        write(
            other,
            caller,
            "hrn:node:acme.com:specs:canary",
            name="Canary rollback",
            content="partial rollback",
        )
        assert [loc for loc, _ in _ranking(hadron, specs, "canary")] == ["canary"]
        other.nodes.update(
            caller, state, "hrn:node:acme.com:specs:rollback",
            NodeFields({"content": "Revert to the last image."}, frozenset({"content"})), None, None,
        )  # fmt: skip
        assert [loc for loc, _ in _ranking(hadron, specs, "revert")] == ["rollback"]
        other.nodes.move(
            caller, state, "hrn:node:acme.com:specs:canary", "hrn:node:acme.com:team:canary", False, False
        )
        assert _ranking(hadron, specs, "canary") == []
        assert [loc for loc, _ in _ranking(hadron, "hrn:mem:acme.com:team", "canary")] == ["canary"]
        other.nodes.delete(caller, state, "hrn:node:acme.com:specs:oncall", False, False, False)
        assert "oncall" not in [loc for loc, _ in _ranking(hadron, specs, "deploy")]
    finally:
        other.close()
    # Every change arrived through the log: the specs index was never loaded again (team's first load only).
    assert hadron.admin().memory(specs).id not in loads
    # And the incrementally maintained index ranks exactly as a fresh load does.
    fresh = reopen(hadron, tmp_path / "hadron.db", embedder)
    try:
        for query in ("deploy", "rollback revert", "review"):
            assert _ranking(hadron, specs, query) == _ranking(fresh, specs, query)
    finally:
        fresh.close()


def test_an_index_older_than_the_pruned_log_reloads_its_memory(
    world: tuple[Hadron, HadronCaller, LetterEmbedder],
) -> None:
    hadron, caller, _ = world
    _seed(hadron, caller)
    specs = "hrn:mem:acme.com:specs"
    assert _ranking(hadron, specs, "canary") == []
    write(hadron, caller, "hrn:node:acme.com:specs:canary", name="Canary")
    loads = count_loads(hadron.search.store.keywords.index)
    with hadron.search.store.db.transaction() as tx:  # as the log's own pruning does past 50,000 entries
        tx.execute("DELETE FROM node_text_changes")
        tx.execute("INSERT INTO node_text_changes (memory_id, node_rowid) VALUES ('other', 0)")
    assert [loc for loc, _ in _ranking(hadron, specs, "canary")] == ["canary"]
    assert loads == [hadron.admin().memory(specs).id]


def test_a_real_match_scores_above_nothing_at_every_memory_size(
    world: tuple[Hadron, HadronCaller, LetterEmbedder],
) -> None:
    """Issue 28: with FTS5's IDF a term in half a memory's nodes or more was worth 1e-6, so in a small
    memory the node titled "Rollback" scored 0.0 for "deploy rollback" and any minScore dropped it."""
    hadron, caller, _ = world
    state = hadron.selections.session(caller, "s", None)
    admin = hadron.admin()
    for size in (1, 2, 3, 10):
        slug = f"size{size}"
        admin.create_memory(slug, "knowledge", org="acme.com")
        write(
            hadron, caller, f"hrn:node:acme.com:{slug}:rollback", name="Rollback", content="Undo a release."
        )
        for i in range(1, size):
            # Every other node says "rollback" too (the term is in all of them), one never matches.
            text = "Glossary of terms" if i == size - 1 and size > 2 else f"Deploy step {i} and its rollback"
            write(hadron, caller, f"hrn:node:acme.com:{slug}:n{i}", name=text)
        found = hadron.search.find_nodes(
            caller,
            state,
            FindQuery(query="deploy rollback", memory_urn=f"hrn:mem:acme.com:{slug}", min_score=0.01),
        )
        scores = {hit.node.loc: hit.score for hit in found.hits}
        assert "rollback" in scores, (size, scores)
        assert all(score is not None and score >= 0.01 for score in scores.values()), (size, scores)
        glossary = size > 2  # the last node of a memory of three or more matches neither term
        assert len(scores) == (size - 1 if glossary else size), (size, scores)
        assert not glossary or f"n{size - 1}" not in scores, (size, scores)
