"""In-memory BM25 keyword indexes, one per partition, kept coherent with the database by generation.

Agent memory searches on every call, and at 10,000 records per agent the FTS5 OR-query over a
workspace partition was the slowest step of ``memory_search`` (5.5 ms alone, 13 ms next to the query
embedding on two cores; docs/benchmarks.md). Here a query reads only the posting lists of its own terms
and scores them with numpy: well under a millisecond at that size.

Terms are the FTS5 ``porter unicode61`` stems (``core.search.stems``), so a query matches what the
FTS5 indexes elsewhere in Triptych would match. Scores are Okapi BM25 as FTS5's ``bm25()`` computes
them (k1 1.2, b 0.75, per-column weights summed into one term frequency, IDF floored at 1e-6), with the
document counts and lengths of the partition itself: one workspace's records never shift another's
ranking.

``idf="fts5"`` floors the IDF of a term in half or more of the partition's documents at 1e-6, as FTS5
does: in a workspace of two documents, an exact match in one of them then scores nothing.
``idf="smooth"`` is Lucene's ``log(1 + (N - n + 0.5) / (n + 0.5))``, positive for every matching term,
so a match in a small workspace still counts (the knowledge base and Hadron's nodes use it; issues 21 and 28).

The database stays the source of truth, as for ``VectorIndex`` (``PartitionCache``): every write that
changes indexed text bumps the partition's generation in its transaction. A store that also logs each
write's changed documents lets another process's index catch up from the log (``follow``) instead of
reloading the partition.

Given ``files`` and ``describe``, a partition is saved as flat arrays beside the database
(``core/keyword_files.py``) after it is built from the database, when it is forgotten by the memory
budget with changes since its last save, and at a clean stop (``save_all``); a load reads a current
file instead of building the postings again (docs/decisions/0260-saved-keyword-index.md).
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from triptych.core.keyword_files import KeywordFiles, KeywordFingerprint, Packed
from triptych.core.partitions import MemoryBudget, PartitionCache
from triptych.core.search import keyword_terms, partition_token, stems, text_terms

log = logging.getLogger(__name__)

# One indexed document: (id, [(text, column weight), ...]).
Document = tuple[int, Sequence[tuple[str, float]]]
# What a change log says happened between two generations: documents (re)added, ids removed.
Changes = tuple[Iterable[Document], Iterable[int]]

K1 = 1.2
B = 0.75
# What a partition holds in memory, measured with tracemalloc over real workspaces (bench/index_budget.py):
# per document its id, length, flag and position-dict entry; per term its key, dict slot and two arrays;
# per posting a position and a weight (arrays over-allocate by about an eighth).
DOCUMENT_BYTES = 120
TERM_BYTES = 280
POSTING_BYTES = 9
# A partition whose postings are flat arrays (read from its file, or compacted), measured the same way:
# per term its string, dictionary entry and place in the vocabulary (the arrays count as they are); per
# document its id, length and flag until a write builds the position dictionary (then DOCUMENT_BYTES).
FLAT_TERM_BYTES = 120
FLAT_DOCUMENT_BYTES = 16
# How ``document_terms`` turns text into terms: part of a saved index's fingerprint, with the SQLite
# whose FTS5 porter stemmer made the stems. Bump it whenever the terms or their weights would change.
TERMS_VERSION = 1
# Documents a load indexes between two checks whether its store is closing (``PartitionCache.stop``).
STOP_CHECK_EVERY = 1024


def estimate_bytes(documents: int, terms: int, postings: int) -> int:
    return documents * DOCUMENT_BYTES + terms * TERM_BYTES + postings * POSTING_BYTES


@dataclass
class _Postings:
    positions: array = field(default_factory=lambda: array("i"))  # type: ignore[type-arg]
    weights: array = field(default_factory=lambda: array("f"))  # type: ignore[type-arg]


@dataclass
class _Partition:
    ids: array = field(default_factory=lambda: array("q"))  # type: ignore[type-arg]
    # Each live document's position; None until a write needs it (a partition read from a file or
    # compacted builds it then: a search never reads it).
    position: dict[int, int] | None = field(default_factory=dict)
    lengths: array = field(default_factory=lambda: array("f"))  # type: ignore[type-arg]
    alive: bytearray = field(default_factory=bytearray)
    # Postings as flat arrays (read from the partition's file, or what a build or a compaction packed),
    # never changed in place, with each term's index into ``flat.starts`` (a dictionary, built at the
    # partition's second search or first packing: ``_flat_index``)...
    flat: Packed | None = None
    flat_terms: dict[str, int] | None = None
    # ... and the postings of documents added since, term by term (every posting of a partition built
    # document by document without files). A term may have postings in both: flat ones first.
    terms: dict[str, _Postings] = field(default_factory=dict)
    live: int = 0
    total_length: float = 0.0
    generation: int = -1
    postings: int = 0  # entries over every term's lists, flat and added: what the memory budget counts
    saved: int = -1  # the generation last saved to (or loaded from) the partition's file
    searched: bool = False  # searched since it was loaded


def _array(typecode: str, values: bytes | memoryview) -> array:  # type: ignore[type-arg]
    out = array(typecode)
    out.frombytes(values)
    return out


_NO_POSITIONS = np.zeros(0, dtype=np.int32)
_NO_WEIGHTS = np.zeros(0, dtype=np.float32)


def _positions(part: _Partition) -> dict[int, int]:
    """The live documents' positions, built on first use for a partition that came flat (every
    document of which is live)."""
    if part.position is None:
        part.position = {doc_id: i for i, doc_id in enumerate(part.ids)}
    return part.position


def _flat_terms(part: _Partition) -> dict[str, int]:
    """Each flat term's index, built on first use."""
    if part.flat_terms is None:
        terms = part.flat.terms if part.flat is not None else []
        part.flat_terms = dict(zip(terms, range(len(terms)), strict=True))
    return part.flat_terms


def _flat_index(part: _Partition, term: str) -> int | None:
    """``term``'s index among the flat terms, or None. The first search after a load finds it in the
    vocabulary as the file held it (a scan per query term, tens of microseconds) rather than build the
    dictionary of every term first (a quarter of a millisecond at 5,000 terms: a search of a workspace
    the memory budget forgot makes one search per load); later ones use the dictionary."""
    flat = part.flat
    if flat is None:
        return None
    if part.flat_terms is None and not part.searched and flat.vocabulary:
        vocabulary, needle = flat.vocabulary, term.encode() + b"\0"
        at = vocabulary.find(needle)
        while at > 0 and vocabulary[at - 1] != 0:  # a match inside a longer term: look further on
            at = vocabulary.find(needle, at + 1)
        return None if at < 0 else vocabulary.count(b"\0", 0, at)
    return _flat_terms(part).get(term)


def _postings_of(part: _Partition, term: str) -> tuple[np.ndarray, np.ndarray] | None:
    """A term's postings (positions, weights), flat ones first; copies of what writes append to, so
    they can be read outside the lock. None when the partition has none."""
    found: list[tuple[np.ndarray, np.ndarray]] = []
    i = _flat_index(part, term)
    if i is not None and part.flat is not None:
        lo, hi = int(part.flat.starts[i]), int(part.flat.starts[i + 1])
        found.append((part.flat.positions[lo:hi], part.flat.weights[lo:hi]))
    added = part.terms.get(term)
    if added is not None:
        found.append(
            (
                np.frombuffer(added.positions, dtype=np.int32).copy(),
                np.frombuffer(added.weights, dtype=np.float32).copy(),
            )
        )
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    return np.concatenate([p for p, _ in found]), np.concatenate([w for _, w in found])


def packed(part: _Partition) -> Packed:
    """The partition's live documents and their postings as flat arrays, positions renumbered (what a
    compaction keeps and a file holds: scores depend on live documents only, ties on ids). Terms in the
    order they came (flat ones first), each term's postings in the order they were added."""
    alive = np.frombuffer(part.alive, dtype=np.bool_)
    keep = np.flatnonzero(alive)
    renumber = np.cumsum(alive, dtype=np.int64).astype(np.int32) - 1
    flat_terms = _flat_terms(part)
    names = list(flat_terms)
    owners: list[np.ndarray] = []  # each posting's term, as an index into ``names``
    positions: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    if part.flat is not None and part.flat.positions.size:
        owners.append(np.repeat(np.arange(len(names), dtype=np.int64), np.diff(part.flat.starts)))
        positions.append(part.flat.positions)
        weights.append(part.flat.weights)
    for term, postings in part.terms.items():
        owner = flat_terms.get(term)
        if owner is None:
            owner = len(names)
            names.append(term)
        at = np.frombuffer(postings.positions, dtype=np.int32)
        owners.append(np.full(at.size, owner, dtype=np.int64))
        positions.append(at)
        weights.append(np.frombuffer(postings.weights, dtype=np.float32))
    if positions:
        owner_of, at, weight = np.concatenate(owners), np.concatenate(positions), np.concatenate(weights)
    else:
        owner_of, at, weight = np.zeros(0, dtype=np.int64), _NO_POSITIONS, _NO_WEIGHTS
    live = alive[at]
    owner_of, at, weight = owner_of[live], at[live], weight[live]
    order = np.argsort(owner_of, kind="stable")  # by term; within one, as added
    counts = np.bincount(owner_of, minlength=len(names))
    present = np.flatnonzero(counts)
    starts = np.zeros(present.size + 1, dtype=np.int64)
    np.cumsum(counts[present], out=starts[1:])
    return Packed(
        ids=np.frombuffer(part.ids, dtype=np.int64)[keep].copy(),
        lengths=np.frombuffer(part.lengths, dtype=np.float32)[keep].copy(),
        terms=[names[i] for i in present.tolist()],
        starts=starts,
        positions=np.ascontiguousarray(renumber[at[order]], dtype=np.int32),
        weights=np.ascontiguousarray(weight[order], dtype=np.float32),
    )


def unpacked(flat: Packed, generation: int) -> _Partition:
    """A partition holding exactly ``flat`` (every document live), as of ``generation``. Its postings
    stay the flat arrays they are (a file's body is mapped, checked and used as it is): a term costs a
    dictionary entry once searched twice, so a load is a few copies of the documents' arrays, not a list
    per term."""
    ids = flat.ids.astype(np.int64, copy=False)
    return _Partition(
        ids=_array("q", ids.tobytes()),
        position=None,
        lengths=_array("f", flat.lengths.astype(np.float32, copy=False).tobytes()),
        alive=bytearray(b"\x01") * len(ids),
        flat=Packed(
            ids=flat.ids,
            lengths=flat.lengths,
            terms=flat.terms,
            starts=np.ascontiguousarray(flat.starts, dtype=np.int64),
            positions=np.ascontiguousarray(flat.positions, dtype=np.int32),
            weights=np.ascontiguousarray(flat.weights, dtype=np.float32),
            vocabulary=flat.vocabulary,
        ),
        live=len(ids),
        # Lengths are token counts, exact in float32 and float64: the running sum ``_add`` keeps.
        total_length=float(flat.lengths.sum(dtype=np.float64)),
        generation=generation,
        postings=int(flat.positions.size),
    )


def document_terms(columns: Sequence[tuple[str, float]]) -> tuple[dict[str, float], float]:
    """Weighted term frequencies of a document and its length in tokens (every column counts)."""
    weighted: dict[str, float] = {}
    length = 0
    for text, weight in columns:
        words = text_terms(text)
        length += len(words)
        if weight <= 0:
            continue
        mapped = stems(list(set(words)))
        for word in words:
            stem = mapped.get(word)
            if stem:
                weighted[stem] = weighted.get(stem, 0.0) + weight
    return weighted, float(length)


class KeywordIndex(PartitionCache[_Partition]):
    """BM25 over partitions loaded from the database by ``loader(key)`` and updated in place."""

    kind = "keywords"

    def __init__(
        self,
        loader: Callable[[str], Iterable[Document]],
        idf: Literal["fts5", "smooth"] = "fts5",
        budget: MemoryBudget | None = None,
        files: KeywordFiles | None = None,
        describe: Callable[[str], KeywordFingerprint | None] | None = None,
    ) -> None:
        """``files`` and ``describe`` (the partition's fingerprint as the database has it now) save each
        partition built and load it back instead of building it again (core/keyword_files.py)."""
        super().__init__(budget)
        self._loader = loader
        self._files = files
        self._describe = describe
        self._smooth_idf = idf == "smooth"
        # One catch-up at a time: two threads applying overlapping stretches of a log would make the
        # second find the partition moved under it and drop it.
        self._following = threading.Lock()

    def _load(self, key: str, generation: int) -> _Partition:
        saved = self._saved(key)
        # A saved file is exactly as of its own generation: newer than the one asked for serves, older is of
        # no use (server mode's fingerprint may be the one kept for an older search's: pg_saved).
        if saved is not None and saved.generation >= generation:
            return saved
        part = _Partition(generation=generation)
        self._check_stop()
        documents = list(self._loader(key))
        # Stem the whole vocabulary in one probe instead of one per document.
        stems(list({w for _, columns in documents for text, _ in columns for w in text_terms(text)}))
        for count, (doc_id, columns) in enumerate(documents):
            if count % STOP_CHECK_EVERY == 0:  # a minute at 100,000 chunks: a closing store stops it
                self._check_stop()
            self._add(part, doc_id, columns)
        if self._files is not None:  # flat, as the next read of its file gives it: one form, less memory
            part = unpacked(packed(part), part.generation)
        # Saved as built (its rows may be newer than ``generation``: the file is then stale at once, never
        # wrong): what took a minute at 100,000 chunks loads in a fraction of a second next time.
        self._check_stop()
        if self._save(key, part):
            part.saved = part.generation
        return part

    def _saved(self, key: str) -> _Partition | None:
        saved = self._read(key)
        if saved is None:
            return None
        part = unpacked(saved[0], saved[1].generation)
        part.saved = part.generation
        return part

    def _read(self, key: str) -> tuple[Packed, KeywordFingerprint] | None:
        """The partition's saved file and the database's fingerprint, if the file matches it."""
        if self._files is None or self._describe is None:
            return None
        self._check_stop()
        fingerprint = self._describe(key)
        if fingerprint is None:
            return None
        flat = self._files.load(partition_token(key), fingerprint)
        return None if flat is None else (flat, fingerprint)

    def _save(self, key: str, part: _Partition) -> bool:
        """Save the partition's live documents as of its generation, if files are kept (and it holds any)."""
        if self._files is None or self._describe is None or part.live <= 0:
            return False
        try:
            described = self._describe(key)
        except Exception:  # the database closed under a late save: nothing saved, the next load builds
            log.warning(
                "reading the fingerprint of %s failed: its keyword index is not saved", key, exc_info=True
            )
            return False
        if described is None:
            return False
        flat = packed(part)
        fingerprint = KeywordFingerprint(
            described.tokenizer, part.generation, int(flat.ids.size), int(flat.ids.max())
        )
        return self._files.save(partition_token(key), fingerprint, flat)

    def _evicted(self, key: str, part: _Partition) -> None:
        """A partition changed since it was saved is saved before it goes (outside every lock; nothing
        else holds it now): the next search of the workspace reads it instead of building it."""
        if part.saved != part.generation:
            self._save(key, part)

    def save_all(self) -> None:
        """Save every partition changed since it was last saved (at a clean stop). Under the lock, so no
        write changes a partition mid-save."""
        with self._lock:
            for key, part in list(self._parts.items()):
                if part.saved != part.generation and self._save(key, part):
                    part.saved = part.generation

    def _measure(self, part: _Partition) -> int:
        flat = part.flat
        if flat is None:
            return estimate_bytes(len(part.ids), len(part.terms), part.postings)
        # Flat postings: their arrays as they are and a dictionary entry per term; what was added since
        # as a partition built document by document holds it.
        arrays = flat.ids.nbytes + flat.lengths.nbytes + flat.starts.nbytes + flat.positions.nbytes
        arrays += flat.weights.nbytes + len(flat.terms) * FLAT_TERM_BYTES
        documents = len(part.ids) * (FLAT_DOCUMENT_BYTES if part.position is None else DOCUMENT_BYTES)
        added = len(part.terms) * TERM_BYTES + (part.postings - int(flat.positions.size)) * POSTING_BYTES
        return arrays + documents + added

    @staticmethod
    def _add(part: _Partition, doc_id: int, columns: Sequence[tuple[str, float]]) -> None:
        weighted, length = document_terms(columns)
        pos = len(part.ids)
        _positions(part)[doc_id] = pos
        part.ids.append(doc_id)
        part.lengths.append(length)
        part.alive.append(1)
        part.live += 1
        part.total_length += length
        for term, weight in weighted.items():
            postings = part.terms.get(term)
            if postings is None:
                postings = part.terms[term] = _Postings()
            postings.positions.append(pos)
            postings.weights.append(weight)
        part.postings += len(weighted)

    @staticmethod
    def _compact(part: _Partition) -> None:
        """Drop removed documents' postings, renumbering positions (the ranking is unchanged). Done when
        the dead outnumber the living, so a long-lived index that only ever follows its writes stays near
        the size a reload would give."""
        fresh = unpacked(packed(part), part.generation)
        fresh.saved = part.saved
        part.__dict__.update(fresh.__dict__)

    @staticmethod
    def _remove(part: _Partition, doc_id: int) -> None:
        # Postings keep the dead position; searches mask it out. A reload compacts.
        pos = _positions(part).pop(doc_id, None)
        if pos is None or not part.alive[pos]:
            return
        part.alive[pos] = 0
        part.live -= 1
        part.total_length -= part.lengths[pos]

    def apply(
        self,
        key: str,
        before: int,
        after: int,
        added: Iterable[Document] = (),
        removed: Iterable[int] = (),
    ) -> None:
        """Apply this process's own committed write (``PartitionCache._update``). Removals come first,
        so replacing a document is ``removed=[id], added=[(id, ...)]``."""

        def change(part: _Partition) -> None:
            for doc_id in removed:
                self._remove(part, doc_id)
            for doc_id, columns in added:
                self._remove(part, doc_id)
                self._add(part, doc_id, columns)
            if len(part.ids) - part.live > max(part.live, 64):
                self._compact(part)

        self._update(key, before, after, change)

    def follow(self, key: str, generation: int, changes: Callable[[int], Changes | None]) -> None:
        """Bring the cached partition up to ``generation`` from a log of the writes made since the
        generation it holds, by any process: ``changes(seen)`` returns what generations ``seen + 1`` to
        ``generation`` added and removed (an added document is read as it is now, so a later write
        applied early is harmless: the log applies it again), or None when the log cannot say (pruned,
        or written by a version that kept none); the partition then reloads on its next use. A
        partition not cached, or already current, costs nothing here."""
        if self.generation(key) >= generation:
            return  # current: no queue behind another partition's catch-up (every search calls this)
        with self._following:
            seen = self.generation(key)
            if seen >= generation:
                return
            found = changes(seen)
            if found is None:
                self.forget(key)
                return
            added, removed = found
            self.apply(key, seen, generation, added=added, removed=removed)

    def search(self, key: str, generation: int, text: str, k: int | None) -> list[tuple[int, float]]:
        """Documents matching any query term, by BM25, best first (ties by id); ``k`` None = all."""
        terms = keyword_terms(text)
        query_stems = list(dict.fromkeys(s for s in stems(terms).values() if s))
        part = self.sync(key, generation)
        # Copy what the scoring reads under the lock: writers append to these arrays in place.
        with self._lock:
            n = len(part.ids)
            live, total = part.live, part.total_length
            alive = np.frombuffer(part.alive, dtype=np.bool_).copy()
            lengths = np.frombuffer(part.lengths, dtype=np.float32).copy()
            lists = [p for s in query_stems if (p := _postings_of(part, s)) is not None]
            part.searched = True
            ids = np.frombuffer(part.ids, dtype=np.int64).copy()
        if not lists or live <= 0 or (k is not None and k <= 0):
            return []
        # All the query's postings at once: one pass of numpy operations instead of one per term.
        positions = np.concatenate([p for p, _ in lists])
        weights = np.concatenate([w for _, w in lists])
        keep = alive[positions]
        matched = np.array([int(np.count_nonzero(alive[p])) for p, _ in lists], dtype=np.float64)
        if self._smooth_idf:
            idf = np.log1p((live - matched + 0.5) / (matched + 0.5))
        else:
            idf = np.log((live - matched + 0.5) / (matched + 0.5))
            idf = np.where(idf > 0, idf, 1e-6)
        term_idf = np.repeat(idf, [p.size for p, _ in lists])
        positions, weights, term_idf = positions[keep], weights[keep], term_idf[keep]
        norm = K1 * (1.0 - B + B * lengths[positions] / max(total / live, 1e-9))
        contributions = term_idf * weights * (K1 + 1.0) / (weights + norm)
        scores = np.bincount(positions, weights=contributions, minlength=n)
        hit = np.flatnonzero(scores > 0)
        if hit.size == 0:
            return []
        if k is not None and k < hit.size:
            # Keep every hit tied with the k-th best, so the id tie-break below decides the cut.
            kth = -np.partition(-scores[hit], k - 1)[k - 1]
            hit = hit[scores[hit] >= kth]
        best = hit[np.lexsort((ids[hit], -scores[hit]))[:k]]
        return list(zip(ids[best].tolist(), scores[best].tolist(), strict=True))
