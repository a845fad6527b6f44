"""The in-memory BM25 index: the same scores as FTS5's bm25() on the same rows, and coherent updates."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from triptych.core.keyword_files import KeywordFiles, KeywordFingerprint
from triptych.core.keyword_index import Document, KeywordIndex, packed, unpacked

WORDS = (
    "alpha beta gamma delta running runner runs painted painting paints garden gardens camping trip "
    "support group adoption agency pottery class sunset lake mountain violin guitar melody"
).split()


def _corpus(n: int, seed: int) -> list[tuple[int, str, str]]:
    rnd = random.Random(seed)
    return [
        (
            i + 1,
            " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 14))),
            " ".join(rnd.sample(WORDS, rnd.randint(0, 2))),
        )
        for i in range(n)
    ]


def _docs(rows: list[tuple[int, str, str]]) -> list[Document]:
    return [(seq, [(content, 1.0), (tags, 0.5)]) for seq, content, tags in rows]


def _fts5(rows: list[tuple[int, str, str]], query_terms: list[str]) -> list[tuple[int, float]]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tags, tokenize = 'porter unicode61')")
    conn.executemany("INSERT INTO t (rowid, content, tags) VALUES (?, ?, ?)", rows)
    match = " OR ".join(f'"{term}"' for term in query_terms)
    found = conn.execute(
        "SELECT rowid, -bm25(t, 1.0, 0.5) FROM t WHERE t MATCH ? ORDER BY bm25(t, 1.0, 0.5), rowid", (match,)
    ).fetchall()
    return [(int(r), float(s)) for r, s in found]


class Table:
    def __init__(self) -> None:
        self.parts: dict[str, list[Document]] = {}
        self.loads: list[str] = []

    def load(self, key: str) -> list[Document]:
        self.loads.append(key)
        return list(self.parts.get(key, []))


@pytest.mark.parametrize("query", ["painting gardens", "runner group violin", "sunset", "trip camping lake"])
def test_scores_equal_fts5_bm25_on_the_same_rows(query: str) -> None:
    rows = _corpus(300, seed=len(query))
    table = Table()
    table.parts["w"] = _docs(rows)
    index = KeywordIndex(table.load)
    ours = index.search("w", 1, query, None)
    theirs = _fts5(rows, query.split())
    assert [seq for seq, _ in ours] == [seq for seq, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        assert a == pytest.approx(b, rel=1e-5)


def test_stems_match_and_stopword_only_queries_still_answer() -> None:
    table = Table()
    table.parts["w"] = _docs(
        [(1, "she paints every day", ""), (2, "the lake at sunset", ""), (3, "what is it", "")]
    )
    index = KeywordIndex(table.load)
    assert [seq for seq, _ in index.search("w", 1, "painted", 10)] == [1]
    assert [seq for seq, _ in index.search("w", 1, "what is", 10)] == [3]
    assert index.search("w", 1, "violin", 10) == []
    assert index.search("w", 1, "???", 10) == []


def test_k_cuts_after_the_id_tie_break() -> None:
    table = Table()
    table.parts["w"] = _docs([(seq, "violin melody", "") for seq in (9, 3, 7, 5)] + [(1, "guitar", "")])
    index = KeywordIndex(table.load)
    assert [seq for seq, _ in index.search("w", 1, "violin", 2)] == [3, 5]
    assert len(index.search("w", 1, "violin", None)) == 4


def test_partitions_are_isolated_and_keep_their_own_statistics() -> None:
    table = Table()
    table.parts["a"] = _docs([(1, "violin lesson", ""), (2, "violin concert", "")])
    table.parts["b"] = _docs([(3, "violin lesson", ""), (4, "pottery class", ""), (5, "lake trip", "")])
    index = KeywordIndex(table.load)
    assert {seq for seq, _ in index.search("a", 1, "violin", None)} == {1, 2}
    b_hits = index.search("b", 1, "violin", None)
    assert [seq for seq, _ in b_hits] == [3]
    # "violin" is in every record of a (IDF floored) but one of three in b.
    assert index.search("a", 1, "violin", None)[0][1] < b_hits[0][1]


def test_own_writes_apply_in_place_and_foreign_writes_reload() -> None:
    table = Table()
    table.parts["w"] = _docs([(1, "violin lesson", ""), (2, "pottery class", "")])
    index = KeywordIndex(table.load)
    assert [s for s, _ in index.search("w", 1, "violin", None)] == [1]
    index.apply("w", 1, 2, added=[(3, [("violin concert", 1.0), ("music", 0.5)])])
    index.apply("w", 2, 3, removed=[1])
    index.apply("w", 3, 4, added=[(2, [("violin repair", 1.0)])])  # replaces record 2's text
    assert table.loads == ["w"]
    assert {s for s, _ in index.search("w", 4, "violin", None)} == {2, 3}
    assert index.search("w", 4, "pottery", None) == []
    assert [s for s, _ in index.search("w", 4, "music", None)] == [3]
    # A generation this process did not produce: the next search reloads from the table.
    table.parts["w"] = _docs([(7, "lake trip", "")])
    assert [s for s, _ in index.search("w", 9, "lake", None)] == [7]
    assert table.loads == ["w", "w"]
    # A write older than the loaded generation is in the load already: nothing to apply, no reload.
    index.apply("w", 5, 6, added=[(8, [("violin", 1.0)])])
    assert [s for s, _ in index.search("w", 9, "violin", None)] == []
    assert table.loads == ["w", "w"]
    # A write applied on top of a generation the index never saw drops the partition instead.
    index.apply("w", 10, 11, added=[(8, [("violin", 1.0)])])
    assert [s for s, _ in index.search("w", 11, "violin", None)] == []
    assert table.loads == ["w", "w", "w"]


@pytest.mark.parametrize("flat", [False, True], ids=["built", "flat"])
def test_after_updates_scores_still_equal_a_fresh_fts5_over_the_live_rows(flat: bool) -> None:
    """Also for a partition whose postings came as flat arrays (as a saved file or a compaction gives
    them): the writes' postings go beside them, and a term in both ranks by both."""
    rows = _corpus(120, seed=4)
    table = Table()
    table.parts["w"] = _docs(rows)
    index = KeywordIndex(table.load)
    index.search("w", 1, "violin", None)
    if flat:
        index._install("w", unpacked(packed(index._parts["w"]), 1))
        assert index._parts["w"].flat is not None and not index._parts["w"].terms
    live = {seq: (content, tags) for seq, content, tags in rows}
    generation = 1
    rnd = random.Random(8)
    for seq in rnd.sample(sorted(live), 30):
        del live[seq]
        index.apply("w", generation, generation + 1, removed=[seq])
        generation += 1
    for seq in rnd.sample(sorted(live), 20):
        live[seq] = ("violin garden painting", "trip")
        index.apply("w", generation, generation + 1, added=[(seq, [(live[seq][0], 1.0), ("trip", 0.5)])])
        generation += 1
    expected = _fts5([(seq, c, t) for seq, (c, t) in sorted(live.items())], ["violin", "trip"])
    ours = index.search("w", generation, "violin trip", None)
    assert [s for s, _ in ours] == [s for s, _ in expected]
    assert [round(s, 6) for _, s in ours] == [round(s, 6) for _, s in expected]
    if flat:
        assert table.loads == ["w"]  # the writes went in place
        assert index._parts["w"].terms  # beside the flat postings


def test_compaction_after_many_replacements_keeps_a_fresh_loads_ranking() -> None:
    rows = _corpus(40, seed=6)
    table = Table()
    table.parts["w"] = _docs(rows)
    index = KeywordIndex(table.load)
    index.search("w", 1, "violin", None)
    live = {seq: (content, tags) for seq, content, tags in rows}
    rnd = random.Random(2)
    generation = 1
    for step in range(400):  # ten times the workspace's size: the dead outnumber the living many times
        seq = rnd.choice(sorted(live))
        if step % 7 == 0 and len(live) > 20:
            del live[seq]
            index.apply("w", generation, generation + 1, removed=[seq])
        else:
            new = 1000 + step  # a replacement under a new id, as the knowledge base's chunks are
            del live[seq]
            live[new] = (" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 14))), "")
            index.apply(
                "w",
                generation,
                generation + 1,
                added=[(new, _docs([(new, *live[new])])[0][1])],
                removed=[seq],
            )
        generation += 1
    part = index.sync("w", generation)
    assert table.loads == ["w"]  # never reloaded ...
    assert len(part.ids) <= 2 * len(live) + 64  # ... yet holds about what a reload would
    fresh = Table()
    fresh.parts["w"] = _docs([(seq, c, t) for seq, (c, t) in sorted(live.items())])
    for query in ("violin trip", "painting gardens runner", "sunset lake mountain melody"):
        assert index.search("w", generation, query, None) == KeywordIndex(fresh.load).search(
            "w", 1, query, None
        )


def test_follow_applies_a_log_and_reloads_when_the_log_cannot_say() -> None:
    table = Table()
    table.parts["w"] = _docs([(1, "violin lesson", ""), (2, "pottery class", "")])
    index = KeywordIndex(table.load)
    index.follow("w", 1, lambda seen: None)  # nothing cached: nothing to follow, nothing loaded
    assert table.loads == []
    index.search("w", 1, "violin", None)
    asked: list[int] = []

    def log(seen: int) -> tuple[list[Document], list[int]]:
        asked.append(seen)
        return [(3, [("violin concert", 1.0)])], [1]

    index.follow("w", 3, log)
    index.follow("w", 3, log)  # current: the log is not read again
    assert asked == [1]
    assert [s for s, _ in index.search("w", 3, "violin", None)] == [3]
    assert table.loads == ["w"]
    index.follow("w", 4, lambda seen: None)  # a gap: dropped, the next search reloads
    table.parts["w"] = _docs([(5, "violin repair", "")])
    assert [s for s, _ in index.search("w", 4, "violin", None)] == [5]
    assert table.loads == ["w", "w"]


def test_a_partition_read_from_its_file_ranks_alike_on_its_first_search_and_after(tmp_path: Path) -> None:
    """The first search after a load finds its terms in the file's vocabulary (no dictionary of every term
    yet), later ones in the dictionary: the same hits and scores either way. A term that ends another
    ("art" in "cart", which comes first in the vocabulary) is found as itself; one absent is not found."""
    rnd = random.Random(5)
    words = "art cart start artist smart chart".split()
    rows = [(1, "cart start smart", "")]
    rows += [(i, " ".join(rnd.choice(words) for _ in range(rnd.randint(2, 9))), "") for i in range(2, 80)]
    table = Table()
    table.parts["w"] = _docs(rows)
    index = KeywordIndex(table.load)
    queries = ["art", "chart art", "ar", "smart artist"]
    expected = [index.search("w", 1, query, None) for query in queries]
    assert expected[0] and not expected[2]
    files = KeywordFiles(tmp_path)
    fingerprint = KeywordFingerprint("test", 1, len(rows), len(rows))
    assert files.save("p", fingerprint, packed(index._parts["w"]))
    for query, hits in zip(queries, expected, strict=True):
        flat = files.load("p", fingerprint)
        assert flat is not None and flat.terms[:2] == ["cart", "start"]
        copy = KeywordIndex(lambda key: [])
        copy._install("w", unpacked(flat, 1))
        assert copy.search("w", 1, query, None) == hits  # from the vocabulary as the file holds it
        assert copy._parts["w"].flat_terms is None
        assert copy.search("w", 1, query, None) == hits  # from the dictionary
        assert copy._parts["w"].flat_terms is not None
