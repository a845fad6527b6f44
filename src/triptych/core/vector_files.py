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
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
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


def write_atomically(target: Path, header: dict[str, Any], parts: list[bytes]) -> None:
    """Write a JSON header line and ``parts`` to a temporary file, fsync it and rename it over ``target``:
    a reader or a crash sees the old file or the new one, never half of one (the keyword files use it
    too). On failure the temporary file is removed and the error raised."""
    # Named after the whole target (``p….vectors`` and ``p….keywords`` of one workspace must not share a
    # temporary file) and the writing thread (a build's save and an eviction's may overlap).
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}-{threading.get_ident()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as out:
            out.write(json.dumps(header).encode() + b"\n")
            for part in parts:
                out.write(part)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
        log.info("the saved %s %s is stale (%s, expected %s): not used", what, target, found, expected)
        return None
    return header


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
    columns: npt.NDArray[np.float32]  # dim x count, one column per id


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
            with open(target, "rb") as source:
                header = json.loads(source.readline())
                data = source.read()
            expected = {"magic": MAGIC, "format": FORMAT, **asdict(fingerprint)}
            found = {key: header.get(key) for key in expected}
            if found != expected:
                log.info(
                    "the saved vector index %s is stale (%s, expected %s): rebuilding",
                    target,
                    found,
                    expected,
                )
                return None
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
        """The saved columns if they match ``fingerprint``, their sizes and checksum, else None (logged)."""
        target = self.columns_path(name)
        if not target.exists():
            return None
        try:
            n, dim = fingerprint.count, fingerprint.dim
            with open(target, "rb") as source:
                expected = {"magic": COLUMNS_MAGIC, "format": FORMAT, **asdict(fingerprint)}
                header = matching_header(source, target, expected, "vector columns")
                if header is None:
                    return None
                data = bytearray(8 * n + 4 * dim * n)  # writable: the index appends to a copy, never to it
                complete = source.readinto(data) == len(data) and not source.read(1)
            if not complete or zlib.crc32(data) != header.get("crc32"):
                log.warning(
                    "the saved vector columns %s are truncated or corrupt: reading the database", target
                )
                return None
            ids = np.frombuffer(data, dtype=np.int64, count=n)
            if n and (int(ids.max()) != fingerprint.max_id or not distinct(ids)):
                log.warning("the saved vector columns %s hold other ids: reading the database", target)
                return None
            columns = np.frombuffer(data, dtype=np.float32, offset=8 * n).reshape(dim, n)
            return SavedColumns(ids.tolist(), columns)
        except Exception:
            log.warning(
                "reading the saved vector columns %s failed: reading the database", target, exc_info=True
            )
            return None

    def remove(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)
        self.columns_path(name).unlink(missing_ok=True)
