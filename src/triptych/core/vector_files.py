"""A partition's vector index saved next to the database: its ids, vectors and HNSW graph in one file.

Building the graph of 100,000 vectors takes minutes on two busy cores, and reading the vectors back from
SQLite 1.7 s; the saved file loads in under a second. The database stays the source of truth: a file
is used only when everything it was saved with still holds (format, embedding model and dimension, the
partition's generation, its chunk count and highest id) and its checksum matches; anything else, a
file from another model, an older generation, a torn or corrupt file, is ignored and the partition is
loaded from the database and its graph built again (docs/decisions/0130-saved-vector-index.md).

Layout: one JSON header line, then the ids (int64), the vectors (float32, one row per id) and the
graph as usearch serialises it. Written to a temporary file and renamed over the old one, so a reader
or a crash never sees half a file.

A partition searched exactly (no graph: below ``HNSW_THRESHOLD``) that the memory budget forgets is saved
as ``<name>.columns``: a JSON header line, the ids (int64) and the vectors as the in-memory index holds
them, one column per id (float32, dim x count), so reading it back is one copy with no transpose
(docs/decisions/0320-non-resident-search-reads-flat-files.md). Same checks: fingerprint, sizes, CRC32.

A columns file is used in place: mapped read-only, not copied, its checksum and ids checked once per file
identity in the process (``VERIFIED``), since a search of a workspace the memory budget forgot reads it
back each time (docs/decisions/0370-mapped-columns-verified-once.md). Header lines are padded to
``ALIGN`` bytes so the arrays after them are aligned where they are mapped.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import threading
import zlib
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from triptych.core import embed as _embed  # noqa: F401  (onnxruntime before usearch, see embed.py)

log = logging.getLogger(__name__)

MAGIC = "triptych-vector-index"
COLUMNS_MAGIC = "triptych-vector-columns"
FORMAT = 1
HEADER_LIMIT = 4096  # bytes: a header line longer than this is not ours
ALIGN = 64  # bytes: header lines are padded to a multiple of this, so a mapped body's arrays are aligned


def write_atomically(target: Path, header: dict[str, Any], parts: list[bytes]) -> None:
    """Write a JSON header line and ``parts`` to a temporary file, fsync it and rename it over ``target``:
    a reader or a crash sees the old file or the new one, never half of one (the keyword files use it
    too). On failure the temporary file is removed and the error raised.

    The file's identity after the rename is known good (``VERIFIED``): its reads in this process check
    its sizes, not its checksum again, unless something changed it since (decision 0236)."""
    # Named after the whole target (``p….vectors`` and ``p….keywords`` of one workspace must not share a
    # temporary file) and the writing thread (a build's save and an eviction's may overlap).
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}-{threading.get_ident()}")
    line = json.dumps(header).encode()
    line += b" " * (-(len(line) + 1) % ALIGN) + b"\n"  # JSON allows the trailing spaces; readers strip them
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as out:
            out.write(line)
            for part in parts:
                out.write(part)
            out.flush()
            os.fsync(out.fileno())
            os.replace(tmp, target)
            VERIFIED.add(identity(out.fileno()))  # the inode renamed, as a reader will find it
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


Identity = tuple[int, int, int, int, int]


def identity(fileno: int) -> Identity:
    """What tells one file's bytes from another's without reading them: device, inode, size, and the
    modification and status-change times in ns. Our writers never change a file in place (a save is a new
    inode renamed over the old one), and any write in place moves the status-change time, which no
    caller can set back."""
    found = os.fstat(fileno)
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


class VerifiedFiles:
    """Identities of saved files whose checksum and structure were checked in this process (the last
    ``keep``): a file read back again with the same identity holds the same bytes, so its checks are not
    repeated. A write in place that keeps the size and lands within the file system's timestamp
    granularity of the file's last change would go unnoticed: no writer of ours does that."""

    def __init__(self, keep: int = 100_000) -> None:
        self._keep = keep
        self._known: OrderedDict[Identity, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, found: Identity) -> bool:
        with self._lock:
            return found in self._known

    def add(self, found: Identity) -> None:
        with self._lock:
            self._known[found] = None
            while len(self._known) > self._keep:
                self._known.popitem(last=False)


VERIFIED = VerifiedFiles()


def mapped(source: IO[bytes]) -> mmap.mmap:
    """``source``'s file mapped read-only (arrays over it are read-only too: nothing writes through it).

    The mapping keeps the inode it opened: a save renaming a new file over the path, or a removal, leaves
    it as it was. A truncation of the same inode in place (``truncate``, a copy over the file with ``cp``)
    would make a search touching the lost pages die of SIGBUS: only our writers touch this folder, and
    they never do that (docs/decisions/0370-mapped-columns-verified-once.md)."""
    return mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)


def distinct(ids: npt.NDArray[np.int64]) -> bool:
    """Whether no id appears twice (ids are saved in ascending order as a rule: checked in one pass then;
    a sort otherwise. numpy's hash-based ``unique`` took tens of milliseconds on 10,000 ids here)."""
    if ids.size < 2:
        return True
    if bool(np.all(ids[1:] > ids[:-1])):
        return True
    ordered = np.sort(ids)
    return bool(np.all(ordered[1:] != ordered[:-1]))


def matching_header(
    source: IO[bytes], target: Path, expected: dict[str, Any], what: str
) -> dict[str, Any] | None:
    """A saved file's header line, read from ``source``, if it is a JSON object holding ``expected``'s
    values (format, fingerprint), else None, the reason logged with ``what`` the file holds."""
    line = source.readline(HEADER_LIMIT)
    header = json.loads(line) if line.endswith(b"\n") else None
    if not isinstance(header, dict):
        log.warning("the saved %s %s has no header: not used", what, target)
        return None
    found = {key: header.get(key) for key in expected}
    if found != expected:
        log.info("the saved %s %s is out of date (%s): not used", what, target, changed(found, expected))
        return None
    return header


def changed(found: dict[str, Any], expected: dict[str, Any]) -> str:
    """What differs between a saved file's header and the database, as ``key saved -> now``: the routine
    case (another writer moved the workspace on) read as two whole headers at every start."""
    return ", ".join(
        f"{key} {found.get(key)!r} -> {value!r}" for key, value in expected.items() if found.get(key) != value
    )


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a saved index must match to be used: read from the database when the partition loads."""

    model: str
    dim: int
    generation: int
    count: int
    max_id: int


@dataclass(frozen=True, slots=True)
class SavedIndex:
    ids: list[int]
    matrix: npt.NDArray[np.float32]  # one row per id
    graph: Any  # usearch.index.Index


@dataclass(frozen=True, slots=True)
class SavedColumns:
    ids: list[int]
    columns: npt.NDArray[np.float32]  # dim x count, one column per id; read-only where mapped
    aligned: bool = True  # False: a file with an unpadded header, copied (saving it again maps next time)


class VectorFiles:
    """One file per partition under ``directory``, named by the caller's file-safe token."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.vectors"

    def save(
        self, name: str, fingerprint: Fingerprint, ids: list[int], matrix: npt.NDArray[np.float32], graph: Any
    ) -> bool:
        """Write the partition's file; False (logged) if it could not be written: the next start
        rebuilds, which is slower but correct."""
        target = self.path(name)
        try:
            id_bytes = np.asarray(ids, dtype=np.int64).tobytes()
            vec_bytes = np.ascontiguousarray(matrix, dtype=np.float32).tobytes()
            graph_bytes = bytes(graph.save())
            checksum = zlib.crc32(graph_bytes, zlib.crc32(vec_bytes, zlib.crc32(id_bytes)))
            header = {
                "magic": MAGIC,
                "format": FORMAT,
                **asdict(fingerprint),
                "sizes": [len(id_bytes), len(vec_bytes), len(graph_bytes)],
                "crc32": checksum,
            }
            write_atomically(target, header, [id_bytes, vec_bytes, graph_bytes])
            self.columns_path(name).unlink(missing_ok=True)  # older columns never match again
            return True
        except Exception:
            log.warning("saving the vector index to %s failed", target, exc_info=True)
            return False

    def load(self, name: str, fingerprint: Fingerprint) -> SavedIndex | None:
        """The saved index if it matches ``fingerprint`` and its checksum, else None (the reason logged)."""
        target = self.path(name)
        if not target.exists():
            return None
        try:
            expected = {"magic": MAGIC, "format": FORMAT, **asdict(fingerprint)}
            with open(target, "rb") as source:
                header = matching_header(source, target, expected, "vector index")
                if header is None:
                    return None
                data = source.read()
            sizes = [int(s) for s in header["sizes"]]
            if sum(sizes) != len(data) or sizes[0] != 8 * fingerprint.count:
                log.warning("the saved vector index %s is truncated: rebuilding", target)
                return None
            view = memoryview(data)
            id_bytes, vec_bytes = view[: sizes[0]], view[sizes[0] : sizes[0] + sizes[1]]
            graph_bytes = view[sizes[0] + sizes[1] :]
            if zlib.crc32(graph_bytes, zlib.crc32(vec_bytes, zlib.crc32(id_bytes))) != header["crc32"]:
                log.warning("the saved vector index %s is corrupt (checksum): rebuilding", target)
                return None
            ids = np.frombuffer(id_bytes, dtype=np.int64).tolist()
            matrix = np.frombuffer(vec_bytes, dtype=np.float32).reshape(len(ids), fingerprint.dim)
            from usearch.index import Index

            graph = Index.restore(bytes(graph_bytes))
            if graph is None or len(graph) != len(ids) or graph.ndim != fingerprint.dim:
                log.warning("the saved vector graph in %s does not match its vectors: rebuilding", target)
                return None
            return SavedIndex(ids, matrix, graph)
        except Exception:
            log.warning("reading the saved vector index %s failed: rebuilding", target, exc_info=True)
            return None

    def columns_path(self, name: str) -> Path:
        return self.directory / f"{name}.columns"

    def save_columns(
        self, name: str, fingerprint: Fingerprint, ids: list[int], columns: npt.NDArray[np.float32]
    ) -> bool:
        """Write a graph-less partition's ids and vector columns; False (logged) if it could not be: its
        next load reads the database, which is slower but correct."""
        target = self.columns_path(name)
        try:
            id_bytes = np.asarray(ids, dtype=np.int64).tobytes()
            column_bytes = np.ascontiguousarray(columns, dtype=np.float32).tobytes()
            header = {
                "magic": COLUMNS_MAGIC,
                "format": FORMAT,
                **asdict(fingerprint),
                "crc32": zlib.crc32(column_bytes, zlib.crc32(id_bytes)),
            }
            write_atomically(target, header, [id_bytes, column_bytes])
            self.path(name).unlink(missing_ok=True)  # a graph saved before is older: it never matches again
            return True
        except Exception:
            log.warning("saving the vector columns to %s failed", target, exc_info=True)
            return False

    def load_columns(self, name: str, fingerprint: Fingerprint) -> SavedColumns | None:
        """The saved columns if they match ``fingerprint``, their sizes and checksum, else None (logged).

        Mapped, not read: the exact search reads them where they are. The checksum and the ids are
        checked the first time a file (by ``identity``) is read in the process, not at each reload."""
        target = self.columns_path(name)
        try:
            source = open(target, "rb")
        except FileNotFoundError:
            return None
        try:
            with source:
                n, dim = fingerprint.count, fingerprint.dim
                expected = {"magic": COLUMNS_MAGIC, "format": FORMAT, **asdict(fingerprint)}
                header = matching_header(source, target, expected, "vector columns")
                if header is None:
                    return None
                start, size = source.tell(), 8 * n + 4 * dim * n
                found = identity(source.fileno())
                if found[2] != start + size:
                    log.warning("the saved vector columns %s are truncated: reading the database", target)
                    return None
                data = mapped(source)
            ids = np.frombuffer(data, dtype=np.int64, count=n, offset=start)
            if found not in VERIFIED:
                with memoryview(data)[start:] as body:  # released: the arrays alone hold the mapping
                    if zlib.crc32(body) != header.get("crc32"):
                        log.warning("the saved vector columns %s are corrupt: reading the database", target)
                        return None
                if n and (int(ids.max()) != fingerprint.max_id or not distinct(ids)):
                    log.warning("the saved vector columns %s hold other ids: reading the database", target)
                    return None
                VERIFIED.add(found)
            ids_list = ids.tolist()
            offset = start + 8 * n
            columns = np.frombuffer(data, dtype=np.float32, count=dim * n, offset=offset).reshape(dim, n)
            if offset % 4:  # a file written before headers were padded: BLAS wants aligned floats
                return SavedColumns(ids_list, np.array(columns), aligned=False)
            return SavedColumns(ids_list, columns)
        except Exception:
            log.warning(
                "reading the saved vector columns %s failed: reading the database", target, exc_info=True
            )
            return None

    def remove(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)
        self.columns_path(name).unlink(missing_ok=True)
