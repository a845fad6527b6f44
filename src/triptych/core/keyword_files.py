"""A partition's BM25 keyword index saved next to the database: its documents, terms and postings as flat
arrays in one file.

Building the postings of 100,000 chunks in Python takes about a minute (decision 0131); reading them back
from flat arrays takes a fraction of a second. As for the vector files (``core/vector_files.py``), the
database stays the source of truth: a file is used only when everything it was saved with still holds
(format, tokenizer, the partition's generation, its document count and highest id) and its checksum and
structure check out; anything else is ignored and the partition is built from the database again
(docs/decisions/0260-saved-keyword-index.md).

Layout: one JSON header line, then the document ids (int64), their lengths in tokens (float32), each
term's first posting (int64, one more than there are terms), every posting's document position (int32)
and weighted frequency (float32), and the terms in UTF-8, each ended by a NUL byte. Only numbers and
text: a file is parsed, never executed, so a hostile one can at worst be refused.

As the vector columns are, a file is mapped rather than read, and its checksum and structure are checked
the first time its identity is seen in the process (``vector_files.VERIFIED``): a workspace the memory
budget forgot reads it back at each search (docs/decisions/0370-mapped-columns-verified-once.md).
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from triptych.core.vector_files import VERIFIED, distinct, identity, mapped, matching_header, write_atomically

log = logging.getLogger(__name__)

MAGIC = "triptych-keyword-index"
FORMAT = 1


@dataclass(frozen=True, slots=True)
class KeywordFingerprint:
    """What a saved keyword index must match to be used: read from the database when the partition loads."""

    tokenizer: str  # how text became terms (``KeywordIndex``'s and the store's column weights)
    generation: int
    count: int
    max_id: int


@dataclass(frozen=True, slots=True)
class Packed:
    """A partition's live documents and postings as flat arrays (positions index ``ids``)."""

    ids: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.float32]
    terms: list[str]
    starts: npt.NDArray[np.int64]  # term i's postings are [starts[i], starts[i + 1])
    positions: npt.NDArray[np.int32]
    weights: npt.NDArray[np.float32]
    # The terms as a file holds them (UTF-8, each ended by a NUL byte), where read from one: a partition
    # looks its first search's terms up here instead of building a dictionary of them all.
    vocabulary: bytes = b""


class KeywordFiles:
    """One file per partition under ``directory``, named by the caller's file-safe token."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.keywords"

    def save(self, name: str, fingerprint: KeywordFingerprint, packed: Packed) -> bool:
        """Write the partition's file; False (logged) if it could not be: the next load rebuilds it."""
        target = self.path(name)
        try:
            if any("\0" in term for term in packed.terms):  # the separator: never produced by the tokenizer
                raise ValueError("a term holds a NUL character")
            vocabulary = "".join(term + "\0" for term in packed.terms).encode()
            parts = [
                np.ascontiguousarray(packed.ids, dtype=np.int64).tobytes(),
                np.ascontiguousarray(packed.lengths, dtype=np.float32).tobytes(),
                np.ascontiguousarray(packed.starts, dtype=np.int64).tobytes(),
                np.ascontiguousarray(packed.positions, dtype=np.int32).tobytes(),
                np.ascontiguousarray(packed.weights, dtype=np.float32).tobytes(),
                vocabulary,
            ]
            checksum = 0
            for part in parts:
                checksum = zlib.crc32(part, checksum)
            header = {
                "magic": MAGIC,
                "format": FORMAT,
                **asdict(fingerprint),
                "terms": len(packed.terms),
                "postings": int(packed.positions.size),
                "vocabulary": len(vocabulary),
                "crc32": checksum,
            }
            write_atomically(target, header, parts)
            return True
        except Exception:
            log.warning("saving the keyword index to %s failed", target, exc_info=True)
            return False

    def load(self, name: str, fingerprint: KeywordFingerprint) -> Packed | None:
        """The saved index if it matches ``fingerprint``, its checksum and its own structure, else None
        (the reason logged)."""
        target = self.path(name)
        try:
            source = open(target, "rb")
        except FileNotFoundError:
            return None
        try:
            with source:
                expected = {"magic": MAGIC, "format": FORMAT, **asdict(fingerprint)}
                header = matching_header(source, target, expected, "keyword index")
                if header is None:
                    return None
                start, found = source.tell(), identity(source.fileno())
                data = mapped(source)
            known = found in VERIFIED
            packed = _unpack(memoryview(data)[start:], fingerprint, header, known)
            if packed is None:
                log.warning("the saved keyword index %s is corrupt: rebuilding", target)
            elif not known:
                VERIFIED.add(found)
            return packed
        except Exception:
            log.warning("reading the saved keyword index %s failed: rebuilding", target, exc_info=True)
            return None

    def remove(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)


def _unpack(
    data: memoryview, fingerprint: KeywordFingerprint, header: dict[str, object], verified: bool = False
) -> Packed | None:
    """The arrays of a file's body, or None when its sizes, checksum or structure are not what an index
    of ``fingerprint`` can have (every position within the documents, every term's postings in order).
    ``verified``: these very bytes passed before (``VERIFIED``), so only the sizes are checked."""
    n = fingerprint.count
    terms, postings, vocabulary = header.get("terms"), header.get("postings"), header.get("vocabulary")
    if not all(isinstance(v, int) and v >= 0 for v in (terms, postings, vocabulary)):
        return None
    assert isinstance(terms, int) and isinstance(postings, int) and isinstance(vocabulary, int)
    sizes = [8 * n, 4 * n, 8 * (terms + 1), 4 * postings, 4 * postings, vocabulary]
    if sum(sizes) != len(data):
        return None
    chunks = []
    checksum, offset = 0, 0
    for size in sizes:
        chunks.append(data[offset : offset + size])
        if not verified:
            checksum = zlib.crc32(chunks[-1], checksum)
        offset += size
    if not verified and checksum != header.get("crc32"):
        return None
    ids = np.frombuffer(chunks[0], dtype=np.int64)
    lengths = np.frombuffer(chunks[1], dtype=np.float32)
    starts = np.frombuffer(chunks[2], dtype=np.int64)
    positions = np.frombuffer(chunks[3], dtype=np.int32)
    weights = np.frombuffer(chunks[4], dtype=np.float32)
    vocabulary_bytes = bytes(chunks[5])
    words = vocabulary_bytes.decode("utf-8").split("\0")
    if words.pop() != "" or len(words) != terms:
        return None
    if verified:
        return Packed(ids, lengths, words, starts, positions, weights, vocabulary_bytes)
    if len(set(words)) != terms:
        return None
    if n and (int(ids.max()) != fingerprint.max_id or not distinct(ids)):
        return None
    if not np.all(np.isfinite(lengths)) or (n and float(lengths.min()) < 0):
        return None
    if starts[0] != 0 or starts[-1] != postings or np.any(np.diff(starts) <= 0):
        return None
    if postings and (int(positions.min()) < 0 or int(positions.max()) >= n):
        return None
    if not np.all(np.isfinite(weights)) or (postings and float(weights.min()) <= 0):
        return None
    return Packed(ids, lengths, words, starts, positions, weights, vocabulary_bytes)
