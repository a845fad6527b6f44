"""The embedded knowledge base's BM25 keyword index saved beside metronix.db (core/keyword_files.py):
a restart loads it instead of building it from the chunks and ranks alike; a corrupt, hostile, stale or
foreign file is refused and the index built from the database again; a search while the file loads says
so. (Server mode saves nothing: decision 0260.)"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from word_vectors import DIM, WordVectors

from triptych.core.keyword_files import KeywordFiles
from triptych.core.keyword_index import KeywordIndex, packed, unpacked
from triptych.core.search import partition_token
from triptych.metronix import knowledge_model
from triptych.metronix import store as store_module
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.store import NewDocument, SqliteKnowledgeStore, vectors_dir

WS = "ws"
WORDS = "zebra quantum river mountain violin copper orbit meadow lantern harbor falcon glacier".split()
QUERIES = ["zebra river", "quantum violin orbit", "copper lantern", "glacier falcon harbor meadow", "nothing"]


class Opened:
    """Stores opened on one database, each counting the keyword builds from the database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stores: list[SqliteKnowledgeStore] = []
        self.builds: list[str] = []

    def __call__(self) -> SqliteKnowledgeStore:
        store = SqliteKnowledgeStore(self.path, DIM)
        real = store._load_keyword_documents

        def counted(key: str) -> list[tuple[int, list[tuple[str, float]]]]:
            self.builds.append(key)
            return real(key)  # type: ignore[return-value]

        store.keywords._loader = counted  # type: ignore[assignment]
        self.stores.append(store)
        return store


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[Opened]:
    found = Opened(tmp_path / "metronix.db")
    yield found
    for store in found.stores:
        store.close()


def _put(store: SqliteKnowledgeStore, label: str, chunks: list[str]) -> None:
    store.put_document(
        NewDocument(
            WS,
            label,
            f"title {label}",
            " ".join(chunks),
            "doc",
            None,
            None,
            {},
            label,
            chunks,
            WordVectors().embed(chunks),
        )
    )


def _fill(store: SqliteKnowledgeStore, documents: int = 30) -> None:
    store.set_embedding_model("word-vectors", DIM)
    rng = np.random.default_rng(7)
    for d in range(documents):
        _put(store, f"doc-{d}", [" ".join(rng.choice(WORDS, size=6)) for _ in range(3)])


def _rankings(store: SqliteKnowledgeStore) -> list[list[tuple[int, float]]]:
    generation = store.generation(WS)
    return [store.keyword_search(WS, query, 1000, generation) for query in QUERIES]


def _saved(path: Path) -> Path:
    return KeywordFiles(vectors_dir(path)).path(partition_token(WS))


def test_a_restart_loads_the_saved_keyword_index_without_building_it_and_ranks_alike(opened: Opened) -> None:
    first = opened()
    _fill(first)
    first.warm()
    assert opened.builds == [WS]  # built once from the chunks, and saved as built
    # Writes applied in place after the save (a replacement and a deletion): saved again at the stop.
    _put(first, "doc-3", ["zebra zebra lantern"])
    assert first.delete_document(WS, "doc-5")
    before = _rankings(first)
    assert any(before)
    first.close()

    again = opened()
    again.warm()
    assert opened.builds == [WS]  # loaded from the file, not built
    assert _rankings(again) == before  # the same ids, order and scores


def test_a_compacted_or_reloaded_partition_ranks_exactly_as_the_one_it_came_from() -> None:
    rng = np.random.default_rng(3)
    docs = [(i, [(" ".join(rng.choice(WORDS, size=8)), 1.0)]) for i in range(1, 60)]
    index = KeywordIndex(lambda key: docs, idf="smooth")
    index.sync("k", 1)
    index.apply("k", 1, 2, removed=range(1, 40, 3))
    index.apply("k", 2, 3, added=[(7, [("zebra orbit orbit", 1.0)])], removed=[7])
    expected = [index.search("k", 3, q, None) for q in QUERIES]
    copy = KeywordIndex(lambda key: [], idf="smooth")
    copy._install("k", unpacked(packed(index._parts["k"]), 3))
    assert [copy.search("k", 3, q, None) for q in QUERIES] == expected


def _rewrite(path: Path, change: Callable[[dict[str, object], bytearray], None]) -> None:
    """Change a saved file's header or body, then (unless the change set one) give it a valid checksum:
    a file that is well-formed on the outside and wrong inside."""
    raw = path.read_bytes()
    line, body = raw.split(b"\n", 1)
    header = json.loads(line)
    data = bytearray(body)
    change(header, data)
    path.write_bytes(json.dumps(header).encode() + b"\n" + bytes(data))


def _flip(header: dict[str, object], data: bytearray) -> None:
    data[len(data) // 2] ^= 0xFF


def _truncate(header: dict[str, object], data: bytearray) -> None:
    del data[-10:]


def _position_out_of_range(header: dict[str, object], data: bytearray) -> None:
    # The first posting's position (after ids, lengths and term starts) set past the documents.
    n, terms = int(header["count"]), int(header["terms"])  # type: ignore[call-overload]
    at = 12 * n + 8 * (terms + 1)
    data[at : at + 4] = np.int32(10**6).tobytes()
    header["crc32"] = zlib.crc32(bytes(data))


def _garbage_header(header: dict[str, object], data: bytearray) -> None:
    header.clear()
    header["magic"] = ["not", "ours"]


def _other_tokenizer(header: dict[str, object], data: bytearray) -> None:
    header["tokenizer"] = "terms-0;sqlite-0;weights-1,1"


@pytest.mark.parametrize(
    "change", [_flip, _truncate, _position_out_of_range, _garbage_header, _other_tokenizer]
)
def test_a_corrupt_hostile_or_foreign_file_is_refused_and_the_index_built_again(
    opened: Opened, change: Callable[[dict[str, object], bytearray], None]
) -> None:
    first = opened()
    _fill(first)
    first.warm()
    before = _rankings(first)
    first.close()
    _rewrite(_saved(opened.path), change)

    again = opened()
    assert _rankings(again) == before
    assert opened.builds == [WS, WS]  # built again from the database, and saved again
    third = opened()
    assert _rankings(third) == before and opened.builds == [WS, WS]


def test_a_file_older_than_the_database_is_not_used(opened: Opened) -> None:
    first = opened()
    _fill(first)
    first.warm()
    first.close()
    # Another writer (a `kb import` while the server was down) adds a document, with no clean stop.
    writer = SqliteKnowledgeStore(opened.path, DIM)
    _put(writer, "late", ["zebra zebra zebra zebra"])
    writer.db.close()

    again = opened()
    hits = again.keyword_search(WS, "zebra", 1, again.generation(WS))
    assert opened.builds == [WS, WS]
    label = again.db.conn.execute(
        "SELECT d.doc_label FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ?",
        (hits[0][0],),
    ).fetchone()[0]
    assert label == "late"


def test_a_search_while_the_file_loads_says_keyword_loading_then_bm25(
    opened: Opened, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(knowledge_model, "BACKGROUND_LOAD_CHUNKS", 32)
    first = opened()
    _fill(first)
    first.warm()
    first.close()

    store = opened()
    service = KnowledgeService(store, WordVectors())
    release = threading.Event()
    files = store.keywords._files
    assert files is not None
    real = files.load
    monkeypatch.setattr(files, "load", lambda name, fp: (release.wait(30), real(name, fp))[1])
    store.index.sync(WS, store.generation(WS))
    try:
        assert service.hybrid_with_retrieval(WS, "zebra river", 5)[1]["keyword"] == "loading"
    finally:
        release.set()
    store.keywords.await_load(WS)
    results, retrieval = service.hybrid_with_retrieval(WS, "zebra river", 5)
    assert retrieval["keyword"] == "bm25" and results
    assert opened.builds == [WS]  # the first start's build only: this one read the file


def test_a_tokenizer_change_makes_the_file_stale(opened: Opened, monkeypatch: pytest.MonkeyPatch) -> None:
    first = opened()
    _fill(first)
    first.warm()
    first.close()
    monkeypatch.setattr(store_module, "TOKENIZER", store_module.TOKENIZER + "-next")
    again = opened()
    again.warm()
    assert opened.builds == [WS, WS]
