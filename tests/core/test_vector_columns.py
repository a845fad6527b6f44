"""A graph-less vector partition saved as columns (core/vector_files.VectorFiles.save_columns): read back as
the index holds it, mapped read-only, and refused (None, so the partition is read from the database) when
stale, torn, corrupt or not ours, also after a file read before was changed or truncated in place (its
checks are skipped only for the same file, unchanged: ``VERIFIED``)."""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from triptych.core.vector_files import ALIGN, VERIFIED, Fingerprint, VectorFiles, identity

DIM = 8
IDS = [3, 5, 9, 12]


def _saved(tmp_path: Path) -> tuple[VectorFiles, Fingerprint, np.ndarray]:
    files = VectorFiles(tmp_path)
    rng = np.random.default_rng(1)
    columns = rng.normal(size=(DIM, len(IDS))).astype(np.float32)
    fingerprint = Fingerprint("model", DIM, generation=7, count=len(IDS), max_id=max(IDS))
    assert files.save_columns("p", fingerprint, IDS, columns[:, :])
    return files, fingerprint, columns


def test_columns_come_back_as_saved(tmp_path: Path) -> None:
    files, fingerprint, columns = _saved(tmp_path)
    saved = files.load_columns("p", fingerprint)
    assert saved is not None
    assert saved.ids == IDS
    assert saved.columns.shape == (DIM, len(IDS)) and np.array_equal(saved.columns, columns)
    # Mapped where the file is, and read-only: the index copies them before its first write.
    assert saved.aligned and not saved.columns.flags.writeable and not saved.columns.flags.owndata
    header = files.columns_path("p").read_bytes().split(b"\n", 1)[0]
    assert (len(header) + 1) % ALIGN == 0  # padded: the arrays after it are aligned where mapped


def _rewrite(path: Path, change: Callable[[dict[str, object], bytearray], None]) -> None:
    line, body = path.read_bytes().split(b"\n", 1)
    header = json.loads(line)
    data = bytearray(body)
    change(header, data)
    path.write_bytes(json.dumps(header).encode() + b"\n" + bytes(data))


def _flip(header: dict[str, object], data: bytearray) -> None:
    data[-3] ^= 0xFF


def _truncate(header: dict[str, object], data: bytearray) -> None:
    del data[-4:]


def _longer(header: dict[str, object], data: bytearray) -> None:
    data.extend(b"\0" * 4)


def _duplicate_ids(header: dict[str, object], data: bytearray) -> None:
    data[0:8] = data[8:16]  # two columns claim one id: checksummed as if written so
    header["crc32"] = zlib.crc32(bytes(data))


def _garbage_header(header: dict[str, object], data: bytearray) -> None:
    header.clear()
    header["magic"] = ["not", "ours"]


@pytest.mark.parametrize("change", [_flip, _truncate, _longer, _duplicate_ids, _garbage_header])
def test_a_torn_corrupt_or_foreign_file_is_refused(
    tmp_path: Path, change: Callable[[dict[str, object], bytearray], None]
) -> None:
    files, fingerprint, _ = _saved(tmp_path)
    _rewrite(files.columns_path("p"), change)
    assert files.load_columns("p", fingerprint) is None


def test_a_file_of_another_generation_or_model_is_not_used(tmp_path: Path) -> None:
    files, fingerprint, _ = _saved(tmp_path)
    assert files.load_columns("p", Fingerprint("model", DIM, 8, len(IDS), max(IDS))) is None
    assert files.load_columns("p", Fingerprint("other", DIM, 7, len(IDS), max(IDS))) is None
    assert files.load_columns("q", fingerprint) is None  # none saved


def test_a_saved_graph_replaces_the_columns_and_removal_takes_both(tmp_path: Path) -> None:
    from usearch.index import Index

    files, fingerprint, columns = _saved(tmp_path)
    graph = Index(ndim=DIM, metric="ip", dtype="f16")
    graph.add(np.asarray(IDS, dtype=np.uint64), np.ascontiguousarray(columns.T))
    assert files.save("p", fingerprint, IDS, np.ascontiguousarray(columns.T), graph)
    assert files.path("p").exists() and not files.columns_path("p").exists()
    assert files.save_columns("p", fingerprint, IDS, columns)
    assert files.columns_path("p").exists() and not files.path("p").exists()
    files.remove("p")
    assert not files.columns_path("p").exists()


def _identity(path: Path) -> tuple[int, int, int, int, int]:
    with open(path, "rb") as source:
        return identity(source.fileno())


def _verified(files: VectorFiles, fingerprint: Fingerprint) -> Path:
    """The saved file, its modification time put in the past (so a change in place moves it even where
    timestamps are coarse), read back once: its identity is then known good."""
    path = files.columns_path("p")
    os.utime(path, ns=(10**18, 10**18))
    assert files.load_columns("p", fingerprint) is not None
    assert _identity(path) in VERIFIED
    return path


def test_a_file_read_before_then_changed_in_place_is_checked_again_and_refused(tmp_path: Path) -> None:
    files, fingerprint, _ = _saved(tmp_path)
    path = _verified(files, fingerprint)
    with open(path, "r+b") as out:  # same inode, same size: one byte of the vectors flipped
        out.seek(-3, os.SEEK_END)
        byte = out.read(1)
        out.seek(-3, os.SEEK_END)
        out.write(bytes([byte[0] ^ 0xFF]))
    assert _identity(path) not in VERIFIED
    assert files.load_columns("p", fingerprint) is None


def test_a_file_read_before_then_truncated_in_place_is_refused(tmp_path: Path) -> None:
    files, fingerprint, _ = _saved(tmp_path)
    path = _verified(files, fingerprint)
    os.truncate(path, path.stat().st_size - 4)
    assert files.load_columns("p", fingerprint) is None


def test_a_file_saved_again_is_checked_again(tmp_path: Path) -> None:
    files, fingerprint, columns = _saved(tmp_path)
    _verified(files, fingerprint)
    assert files.save_columns("p", fingerprint, IDS, columns)  # a new inode renamed over the old one
    _rewrite(files.columns_path("p"), _flip)
    assert files.load_columns("p", fingerprint) is None


def test_columns_mapped_stay_readable_after_their_file_is_replaced_or_removed(tmp_path: Path) -> None:
    files, fingerprint, columns = _saved(tmp_path)
    saved = files.load_columns("p", fingerprint)
    assert saved is not None
    assert files.save_columns("p", fingerprint, IDS, columns * 2)  # renamed over: the mapping keeps its inode
    files.remove("p")
    assert np.array_equal(saved.columns, columns)


def test_a_file_with_an_unpadded_header_is_read_as_a_copy(tmp_path: Path) -> None:
    """As written before headers were padded: its floats may sit off their alignment where mapped."""
    files, fingerprint, columns = _saved(tmp_path)

    def unpadded(header: dict[str, object], data: bytearray) -> None:
        header["pad"] = ""
        while (len(json.dumps(header)) + 1) % 4 != 1:  # the body starts one byte past a multiple of 4
            header["pad"] += "x"

    _rewrite(files.columns_path("p"), unpadded)
    saved = files.load_columns("p", fingerprint)
    assert saved is not None and not saved.aligned
    assert saved.ids == IDS and np.array_equal(saved.columns, columns) and saved.columns.flags.aligned


def test_a_file_this_process_saved_is_known_good_until_it_changes(tmp_path: Path) -> None:
    """Its identity after the rename is ``VERIFIED`` (a server-mode worker reads back at once what its
    budget saved, decision 0236): the first read checks sizes only. A change in place still moves it."""
    files, fingerprint, _ = _saved(tmp_path)
    path = files.columns_path("p")
    assert _identity(path) in VERIFIED
    os.utime(path, ns=(10**18, 10**18))  # touched: a new identity, checked in full again
    assert _identity(path) not in VERIFIED
    assert files.load_columns("p", fingerprint) is not None and _identity(path) in VERIFIED
