"""Retrieval primitives: keyword queries against real FTS5, rank fusion and the dense vector index."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from triptych.core import search
from triptych.core.search import (
    STOPWORDS,
    Vector,
    VectorIndex,
    fts_match,
    keyword_terms,
    partition_token,
    rrf,
)

DIM = 16


def _unit_rows(rng: np.random.Generator, n: int, dim: int = DIM) -> Vector:
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    normalised: Vector = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
    return normalised


def _brute_force(ids: list[int], matrix: Vector, query: Vector, k: int) -> list[tuple[int, float]]:
    scores = matrix @ query
    order = np.argsort(-scores, kind="stable")[:k]
    return [(ids[i], float(scores[i])) for i in order]


class Table:
    """A stand-in for the database: partitions of (ids, vectors), and a log of every load."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[list[int], Vector]] = {}
        self.loads: list[str] = []

    def loader(self, key: str) -> tuple[list[int], Vector]:
        self.loads.append(key)
        ids, matrix = self.rows.get(key, ([], np.zeros((0, DIM), dtype=np.float32)))
        return list(ids), matrix.copy()


# -- keyword_terms ------------------------------------------------------------------


def test_keyword_terms_lowercases_drops_stopwords_and_keeps_first_occurrence_order() -> None:
    assert keyword_terms("The Zebra and THE zebra were near the River") == ["zebra", "near", "river"]


def test_keyword_terms_splits_on_punctuation_and_underscores() -> None:
    assert keyword_terms("foo_bar-baz/qux.v2 (draft)") == ["foo", "bar", "baz", "qux", "v2", "draft"]


def test_keyword_terms_keeps_unicode_letters_and_digits() -> None:
    assert keyword_terms("Café Zürich 2024 naïve") == ["café", "zürich", "2024", "naïve"]


def test_keyword_terms_of_a_stopword_only_query_keeps_the_stopwords() -> None:
    terms = keyword_terms("What is it, and what is it not?")

    assert terms == ["what", "is", "it", "and", "not"]
    assert all(term in STOPWORDS for term in terms)


def test_keyword_terms_is_capped_at_max_terms() -> None:
    text = " ".join(f"term{i}" for i in range(100))

    assert keyword_terms(text) == [f"term{i}" for i in range(32)]
    assert keyword_terms(text, max_terms=3) == ["term0", "term1", "term2"]


@pytest.mark.parametrize("text", ["", "   ", "!!! ??? ---", "___"])
def test_keyword_terms_of_text_without_words_is_empty(text: str) -> None:
    assert keyword_terms(text) == []


# -- partition_token and fts_match ------------------------------------------------------


def test_partition_token_is_stable_alphanumeric_and_distinct_per_workspace() -> None:
    workspaces = ["default", "team:alpha@corp", "a.b-c_d", "Default"]
    tokens = [partition_token(w) for w in workspaces]

    assert tokens == [partition_token(w) for w in workspaces]
    assert len(set(tokens)) == len(workspaces)
    assert all(t.startswith("p") and t.isalnum() and len(t) == 21 for t in tokens)


def test_fts_match_is_none_when_the_query_has_no_terms() -> None:
    assert fts_match("") is None
    assert fts_match("?!", partition="default") is None


def test_fts_match_quotes_every_term_and_scopes_the_partition() -> None:
    assert fts_match("Zebra stripes") == '"zebra" OR "stripes"'
    assert fts_match("Zebra stripes", partition="ws-1") == (
        f'part:{partition_token("ws-1")} AND ("zebra" OR "stripes")'
    )
    assert fts_match("zebra", partition="ws", partition_column="col") == (
        f'col:{partition_token("ws")} AND ("zebra")'
    )


@pytest.fixture
def fts(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A real FTS5 table like the knowledge store's, with two partitions."""
    conn = sqlite3.connect(tmp_path / "fts.db")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(part, body, tokenize = 'porter unicode61')")
    rows = [
        (1, "alpha", "Zebras run across the savanna"),
        (2, "alpha", "NEAR the river, AND OR NOT are operators"),
        (3, "beta", "Zebras also live in the beta workspace"),
        (4, "beta", 'quotes " and stars * and carets ^ everywhere'),
    ]
    conn.executemany(
        "INSERT INTO t (rowid, part, body) VALUES (?, ?, ?)",
        [(rowid, partition_token(part), body) for rowid, part, body in rows],
    )
    yield conn
    conn.close()


def _match(conn: sqlite3.Connection, expression: str) -> set[int]:
    return {r[0] for r in conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expression,))}


def test_fts_match_finds_only_rows_inside_the_partition(fts: sqlite3.Connection) -> None:
    alpha = fts_match("zebra", partition="alpha")
    beta = fts_match("zebra", partition="beta")
    assert alpha is not None and beta is not None

    assert _match(fts, alpha) == {1}
    assert _match(fts, beta) == {3}


@pytest.mark.parametrize(
    "query",
    [
        'zebra" OR "x',
        "NEAR(zebra river)",
        "zebra AND OR NOT",
        "body:zebra",
        "part:anything zebra",
        "zebra* ^river -savanna +x",
        "(((zebra",
        "'; DROP TABLE t; --",
        "zebra\x00river",
    ],
)
def test_fts_match_of_hostile_query_is_valid_fts5_and_stays_in_its_partition(
    fts: sqlite3.Connection, query: str
) -> None:
    expression = fts_match(query, partition="alpha")
    assert expression is not None

    found = _match(fts, expression)  # a syntax error would raise sqlite3.OperationalError

    assert found <= {1, 2}
    assert fts.execute("SELECT count(*) FROM t").fetchone()[0] == 4


# -- rrf ----------------------------------------------------------------------------


def test_rrf_scores_first_place_in_every_ranking_as_one() -> None:
    scores = rrf([[7, 8, 9], [7, 9, 8]])

    assert scores[7] == pytest.approx(1.0)
    assert all(0.0 < s <= 1.0 for s in scores.values())


def test_rrf_first_place_in_one_of_two_rankings_scores_one_half() -> None:
    scores = rrf([[1, 2], [3]])

    assert scores[1] == pytest.approx(0.5)
    assert scores[3] == pytest.approx(0.5)
    assert scores[2] < scores[1]


def test_rrf_agreement_of_both_rankings_beats_a_single_first_place() -> None:
    scores = rrf([[10, 20, 30], [40, 20, 50]])
    ordered = sorted(scores, key=lambda item: scores[item], reverse=True)

    assert ordered[0] == 20
    assert set(ordered[1:3]) == {10, 40}
    assert scores[10] == pytest.approx(scores[40])
    assert scores[30] == pytest.approx(scores[50])
    assert scores[30] < scores[10]


def test_rrf_weights_scale_each_rankings_share() -> None:
    scores = rrf([[1], [2]], weights=[3.0, 1.0])

    assert scores[1] == pytest.approx(0.75)
    assert scores[2] == pytest.approx(0.25)


def test_rrf_of_no_rankings_is_empty_and_mismatched_weights_are_refused() -> None:
    assert rrf([]) == {}
    assert rrf([[], []]) == {}
    with pytest.raises(ValueError):
        rrf([[1], [2]], weights=[1.0])


# -- VectorIndex: exact search ----------------------------------------------------------


def test_exact_search_matches_brute_force_ranking_and_scores() -> None:
    rng = np.random.default_rng(1)
    table = Table()
    ids = list(range(100, 400))
    matrix = _unit_rows(rng, len(ids))
    table.rows["ws"] = (ids, matrix)
    index = VectorIndex(DIM, table.loader)

    for query in _unit_rows(rng, 10):
        got = index.search("ws", 1, query, 10)
        want = _brute_force(ids, matrix, query, 10)
        assert [i for i, _ in got] == [i for i, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)
    assert index.sync("ws", 1).hnsw is None


def test_search_returns_at_most_the_partition_size_and_nothing_for_k_zero() -> None:
    rng = np.random.default_rng(2)
    table = Table()
    table.rows["ws"] = ([1, 2, 3], _unit_rows(rng, 3))
    index = VectorIndex(DIM, table.loader)
    query = _unit_rows(rng, 1)[0]

    assert sorted(i for i, _ in index.search("ws", 1, query, 50)) == [1, 2, 3]
    assert index.search("ws", 1, query, 0) == []
    assert index.search("empty", 1, query, 5) == []


def test_each_partition_searches_only_its_own_vectors() -> None:
    rng = np.random.default_rng(3)
    table = Table()
    table.rows["a"] = (list(range(0, 50)), _unit_rows(rng, 50))
    table.rows["b"] = (list(range(50, 55)), _unit_rows(rng, 5))
    index = VectorIndex(DIM, table.loader)
    # The query is one of a's vectors: a global index would rank it first.
    query = table.rows["a"][1][0]

    results = index.search("b", 1, query, 5)

    assert sorted(i for i, _ in results) == list(range(50, 55))


def test_vectors_returns_the_stored_rows_of_known_ids_only() -> None:
    rng = np.random.default_rng(4)
    table = Table()
    matrix = _unit_rows(rng, 4)
    table.rows["ws"] = ([10, 11, 12, 13], matrix)
    index = VectorIndex(DIM, table.loader)

    found = index.vectors("ws", 1, [11, 13, 99])

    assert set(found) == {11, 13}
    np.testing.assert_allclose(found[11], matrix[1])
    np.testing.assert_allclose(found[13], matrix[3])


# -- VectorIndex: generations ------------------------------------------------------------


def test_index_is_loaded_once_per_generation() -> None:
    rng = np.random.default_rng(5)
    table = Table()
    table.rows["ws"] = ([1, 2], _unit_rows(rng, 2))
    index = VectorIndex(DIM, table.loader)
    query = _unit_rows(rng, 1)[0]

    index.search("ws", 7, query, 2)
    index.search("ws", 7, query, 2)
    index.vectors("ws", 7, [1])

    assert table.loads == ["ws"]


def _loaded_at_generation_1(seed: int) -> tuple[Table, VectorIndex, Vector]:
    """Two vectors loaded at generation 1, and a third one a write of this process is about to add."""
    rng = np.random.default_rng(seed)
    table = Table()
    table.rows["ws"] = ([1, 2], _unit_rows(rng, 2))
    index = VectorIndex(DIM, table.loader)
    index.sync("ws", 1)
    return table, index, _unit_rows(rng, 1)[0]


def test_a_reader_that_read_an_older_generation_is_served_the_newer_cache_without_a_reload() -> None:
    # A search reads generation 1, then this process's own write commits and applies generation 2
    # before the search reaches the cache: the newer partition serves it.
    table, index, added = _loaded_at_generation_1(8)
    index.apply("ws", 1, 2, added=[(3, added)])

    results = index.search("ws", 1, added, 3)

    assert results[0][0] == 3
    assert table.loads == ["ws"]


def test_a_write_applied_after_a_reader_already_loaded_it_keeps_the_loaded_partition() -> None:
    # This process commits a write (generation 1 -> 2); before it applies it, a reader reads generation
    # 2 and loads the partition, which then holds the write. Applying it must neither duplicate the
    # vector nor drop the partition (which would load it a third time).
    table, index, added = _loaded_at_generation_1(9)
    table.rows["ws"] = ([1, 2, 3], np.vstack([table.rows["ws"][1], added]))
    index.sync("ws", 2)

    index.apply("ws", 1, 2, added=[(3, added)])

    assert sorted(i for i, _ in index.search("ws", 2, added, 5)) == [1, 2, 3]
    assert table.loads == ["ws", "ws"]


def test_index_reloads_when_another_writer_changed_the_partition() -> None:
    rng = np.random.default_rng(6)
    table = Table()
    table.rows["ws"] = ([1, 2], _unit_rows(rng, 2))
    index = VectorIndex(DIM, table.loader)
    assert {i for i, _ in index.search("ws", 1, table.rows["ws"][1][0], 5)} == {1, 2}

    # Another process replaces the partition's rows and bumps the generation to 2.
    new = _unit_rows(rng, 3)
    table.rows["ws"] = ([3, 4, 5], new)
    results = index.search("ws", 2, new[1], 5)

    assert {i for i, _ in results} == {3, 4, 5}
    assert results[0][0] == 4
    assert table.loads == ["ws", "ws"]


def test_apply_adds_and_removes_vectors_without_reloading() -> None:
    rng = np.random.default_rng(7)
    table = Table()
    matrix = _unit_rows(rng, 5)
    table.rows["ws"] = ([1, 2, 3, 4, 5], matrix)
    index = VectorIndex(DIM, table.loader)
    index.sync("ws", 0)
    added = _unit_rows(rng, 2)

    index.apply("ws", 0, 1, added=[(6, added[0]), (7, added[1])], removed=[2, 4])

    results = index.search("ws", 1, added[0], 10)
    assert results[0][0] == 6
    assert {i for i, _ in results} == {1, 3, 5, 6, 7}
    assert set(index.vectors("ws", 1, [1, 2, 4, 6])) == {1, 6}
    assert table.loads == ["ws"]


def test_many_single_appends_equal_a_fresh_load_of_the_same_rows() -> None:
    rng = np.random.default_rng(17)
    table = Table()
    table.rows["ws"] = ([1, 2, 3], _unit_rows(rng, 3))
    index = VectorIndex(DIM, table.loader)
    index.sync("ws", 0)
    ids, rows = [1, 2, 3], list(table.rows["ws"][1])
    generation = 0
    # Appends grow the buffer past several doublings; a removal in between compacts it.
    for new_id, vec in zip(range(10, 60), _unit_rows(rng, 50), strict=True):
        index.apply("ws", generation, generation + 1, added=[(new_id, vec)])
        generation += 1
        ids.append(new_id)
        rows.append(vec)
        if new_id == 30:
            index.apply("ws", generation, generation + 1, removed=[2, 20])
            generation += 1
            keep = [i for i, item in enumerate(ids) if item not in (2, 20)]
            ids, rows = [ids[i] for i in keep], [rows[i] for i in keep]
    matrix = np.vstack(rows)

    for query in _unit_rows(rng, 5):
        got = index.search("ws", generation, query, 8)
        want = _brute_force(ids, matrix, query, 8)
        assert [i for i, _ in got] == [i for i, _ in want]
        subset = ids[::3]
        got_subset = index.search_subset("ws", generation, query, subset, 4)
        assert [i for i, _ in got_subset] == [i for i, _ in _brute_force(subset, matrix[::3], query, 4)]
    assert table.loads == ["ws"]


def test_search_subset_with_repeated_ids_scores_only_those_ids() -> None:
    rng = np.random.default_rng(19)
    table = Table()
    table.rows["ws"] = ([1, 2], _unit_rows(rng, 2))
    index = VectorIndex(DIM, table.loader)
    query = table.rows["ws"][1][1]  # id 2's own vector would rank first if it were scored

    assert [i for i, _ in index.search_subset("ws", 1, query, [1, 1], 5)] == [1]


def test_search_subset_ignores_unknown_ids_even_when_the_count_matches_the_partition() -> None:
    rng = np.random.default_rng(18)
    table = Table()
    table.rows["ws"] = ([1, 2, 3], _unit_rows(rng, 3))
    index = VectorIndex(DIM, table.loader)
    query = table.rows["ws"][1][2]

    results = index.search_subset("ws", 1, query, [1, 2, 99], 5)

    assert sorted(i for i, _ in results) == [1, 2]


def test_apply_removing_every_vector_leaves_an_empty_searchable_partition() -> None:
    rng = np.random.default_rng(8)
    table = Table()
    table.rows["ws"] = ([1, 2], _unit_rows(rng, 2))
    index = VectorIndex(DIM, table.loader)
    index.sync("ws", 0)

    index.apply("ws", 0, 1, removed=[1, 2])
    assert index.search("ws", 1, _unit_rows(rng, 1)[0], 5) == []

    vector = _unit_rows(rng, 1)[0]
    index.apply("ws", 1, 2, added=[(3, vector)])
    assert [i for i, _ in index.search("ws", 2, vector, 5)] == [3]
    assert table.loads == ["ws"]


def test_apply_after_a_foreign_write_drops_the_cache_and_the_next_search_reloads() -> None:
    rng = np.random.default_rng(9)
    table = Table()
    table.rows["ws"] = ([1], _unit_rows(rng, 1))
    index = VectorIndex(DIM, table.loader)
    index.sync("ws", 0)

    # Generation 0 -> 1 was someone else's write; ours is 1 -> 2, so the cache cannot be patched.
    table.rows["ws"] = ([1, 2, 3], _unit_rows(rng, 3))
    index.apply("ws", 1, 2, added=[(3, table.rows["ws"][1][2])])

    assert {i for i, _ in index.search("ws", 2, table.rows["ws"][1][0], 5)} == {1, 2, 3}
    assert table.loads == ["ws", "ws"]


def test_apply_to_a_partition_never_loaded_does_not_load_it() -> None:
    table = Table()
    index = VectorIndex(DIM, table.loader)

    index.apply("ws", 0, 1, added=[(1, np.ones(DIM, dtype=np.float32) / 4)])

    assert table.loads == []


def test_forget_drops_the_cached_partition() -> None:
    rng = np.random.default_rng(10)
    table = Table()
    table.rows["ws"] = ([1], _unit_rows(rng, 1))
    index = VectorIndex(DIM, table.loader)
    index.sync("ws", 0)

    index.forget("ws")
    index.sync("ws", 0)

    assert table.loads == ["ws", "ws"]


# -- VectorIndex: the usearch HNSW path ------------------------------------------------


def _recall_at_10(index: VectorIndex, ids: list[int], matrix: Vector, queries: Vector, gen: int) -> float:
    hits = 0
    for query in queries:
        approximate = {i for i, _ in index.search("ws", gen, query, 10)}
        exact = {i for i, _ in _brute_force(ids, matrix, query, 10)}
        hits += len(approximate & exact)
    return hits / (10 * len(queries))


def test_hnsw_index_above_threshold_recalls_what_exact_search_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 64)
    rng = np.random.default_rng(11)
    dim = 32
    ids = list(range(1_000, 1_400))
    matrix = _unit_rows(rng, len(ids), dim)
    index = VectorIndex(dim, lambda key: (ids, matrix))

    # The graph is built in the background; exact search answers meanwhile, so the first search never waits.
    assert index.search("ws", 1, matrix[7], 1)[0][0] == ids[7]
    assert index.wait_ready("ws", timeout=60)
    assert index.sync("ws", 1).hnsw is not None
    assert _recall_at_10(index, ids, matrix, _unit_rows(rng, 25, dim), 1) >= 0.9
    # A stored vector is its own nearest neighbour, with a cosine of about 1 (f16 storage).
    best_id, best_score = index.search("ws", 1, matrix[123], 1)[0]
    assert best_id == ids[123]
    assert best_score == pytest.approx(1.0, abs=1e-2)


def test_hnsw_index_applies_removals_and_additions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 64)
    rng = np.random.default_rng(12)
    dim = 32
    ids = list(range(300))
    matrix = _unit_rows(rng, len(ids), dim)
    index = VectorIndex(dim, lambda key: (ids, matrix))
    index.sync("ws", 1)
    assert index.wait_ready("ws", timeout=60) and index.sync("ws", 1).hnsw is not None
    removed = ids[:20]
    new = _unit_rows(rng, 5, dim)

    index.apply("ws", 1, 2, added=[(500 + i, v) for i, v in enumerate(new)], removed=removed)

    for query in matrix[:20]:  # the removed vectors themselves
        assert not {i for i, _ in index.search("ws", 2, query, 10)} & set(removed)
    for i, query in enumerate(new):
        assert index.search("ws", 2, query, 1)[0][0] == 500 + i
    kept_ids = ids[20:] + [500 + i for i in range(5)]
    kept = np.vstack([matrix[20:], new])
    assert _recall_at_10(index, kept_ids, kept, _unit_rows(rng, 20, dim), 2) >= 0.9


def test_apply_builds_the_hnsw_index_when_a_partition_grows_past_the_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 64)
    rng = np.random.default_rng(13)
    dim = 32
    ids = list(range(60))
    matrix = _unit_rows(rng, len(ids), dim)
    index = VectorIndex(dim, lambda key: (ids, matrix))
    assert index.sync("ws", 1).hnsw is None

    new = _unit_rows(rng, 40, dim)
    index.apply("ws", 1, 2, added=[(100 + i, v) for i, v in enumerate(new)])

    assert index.wait_ready("ws", timeout=60)
    assert index.sync("ws", 2).hnsw is not None
    all_ids = ids + [100 + i for i in range(40)]
    assert _recall_at_10(index, all_ids, np.vstack([matrix, new]), _unit_rows(rng, 20, dim), 2) >= 0.9


def _held_builds(monkeypatch: pytest.MonkeyPatch, index: VectorIndex) -> tuple[threading.Event, list[int]]:
    """Graph builds wait for the returned event; the list counts the builds started."""
    release, started = threading.Event(), []
    build = index._build_hnsw

    def held(ids: Sequence[int], matrix: Vector) -> object:
        started.append(len(ids))
        assert release.wait(60)
        return build(ids, matrix)

    monkeypatch.setattr(index, "_build_hnsw", held)
    return release, started


def test_writes_during_a_graph_build_are_patched_into_it_not_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 64)
    rng = np.random.default_rng(14)
    dim = 32
    ids = list(range(300))
    matrix = _unit_rows(rng, len(ids), dim)
    index = VectorIndex(dim, lambda key: (ids, matrix))
    release, started = _held_builds(monkeypatch, index)
    index.sync("ws", 1)
    new = _unit_rows(rng, 5, dim)
    replaced = _unit_rows(rng, 1, dim)[0]

    # While the graph builds from generation 1: five vectors added, ten removed, and id 7 given a new
    # vector (an id reused after its removal, as SQLite may do).
    index.apply("ws", 1, 2, added=[(500 + i, v) for i, v in enumerate(new)], removed=ids[10:20] + [7])
    index.apply("ws", 2, 3, added=[(7, replaced)])
    release.set()

    assert index.wait_ready("ws", timeout=60)
    assert started == [300]  # adopted, not started over
    part = index.sync("ws", 3)
    assert part.hnsw is not None and len(part.hnsw) == len(part.ids) == 295  # type: ignore[arg-type]
    for i, query in enumerate(new):
        assert index.search("ws", 3, query, 1)[0][0] == 500 + i
    assert index.search("ws", 3, replaced, 1)[0][0] == 7
    for query in matrix[10:20]:
        assert not {i for i, _ in index.search("ws", 3, query, 10)} & set(ids[10:20])


def test_one_graph_build_runs_per_key_and_the_newest_partition_gets_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 64)
    rng = np.random.default_rng(15)
    dim = 32
    index = VectorIndex(dim, lambda key: ([], np.zeros((0, dim), dtype=np.float32)))
    release, started = _held_builds(monkeypatch, index)
    ids = list(range(100))
    for generation in (1, 2, 3):  # a re-embedding installs a partition per batch
        index.install("ws", generation, ids, _unit_rows(rng, len(ids), dim))
    assert started == [100] and not index.wait_ready("ws", timeout=0.2)  # one build, the others wait
    release.set()

    assert index.wait_ready("ws", timeout=60)
    assert len(started) == 2  # the first (for a replaced partition) and one for the newest
    assert index.sync("ws", 3).hnsw is not None
