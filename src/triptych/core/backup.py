"""Backups of the embedded data directory: one consistent copy while a server runs and writes, and its restore.

A backup is a folder::

    data/...        the copied files, at their paths in the data directory
    manifest.json   written last (so a backup without one did not finish): the Triptych version, when,
                    and per file its kind, size, SHA-256 and (SQLite) schema versions; what was not
                    copied and why

How each kind of file is copied while writers run:

- SQLite files: SQLite's online backup API, in one step. The step is one read transaction, so under
  WAL the copy is the database as of one commit, and writers do not wait for it. ``VACUUM INTO`` is as
  consistent and was measured slower (docs/decisions/0071-backup-sqlite-online-backup-api.md).
- append-only folders (Metergraph's columnar projection): the state file first, then the files, which
  only grow while a server runs. On open the projection truncates whatever its state does not count,
  and rebuilds from the calls when anything disagrees, so a copy taken this way always opens.
- other files (the source registry): read once; the server replaces them atomically.

A restore checks every file's size against the manifest before writing anything, then copies into a
hidden folder beside the target while hashing, and renames it into place only when every SHA-256
matched: a refused or failed restore leaves nothing behind.

This module knows no surface: what lives where comes in a :class:`Layout`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.request import pathname2url

FORMAT = "triptych-backup"
VERSION = 1
MANIFEST = "manifest.json"
DATA = "data"
SQLITE_HEADER = b"SQLite format 3\x00"
CHUNK = 1 << 20
# Files a running server has open besides its databases: SQLite's own (their content is in the
# snapshot), and the short-lived probes and temporaries that are renamed or removed at once.
TRANSIENT_SUFFIXES = ("-wal", "-shm", "-journal", ".tmp")
TRANSIENT_PREFIXES = (".write-probe-",)

Advance = Callable[[int], None]


class BackupRefused(Exception):
    """A backup or restore that cannot go on; the message is one line: what is wrong, then what to do."""


@dataclass(frozen=True)
class Layout:
    """What the caller knows of the data directory: folders copied state file first (folder -> state
    file, paths relative to the data directory), and paths never copied (path -> why)."""

    append_only: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    lock_files: tuple[str, ...] = ("LOCK",)


@dataclass
class Entry:
    path: str  # relative, with '/'
    kind: str  # "sqlite" or "file"
    size: int = 0
    sha256: str = ""
    schema: dict[str, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "path": self.path,
            "kind": self.kind,
            "size": self.size,
            "sha256": self.sha256,
        }
        if self.schema is not None:
            found["schema"] = self.schema
        return found


@dataclass
class Manifest:
    triptych_version: str
    created_at: str
    data_dir: str
    files: list[Entry]
    not_copied: list[dict[str, str]]
    seconds: float = 0.0

    @property
    def size(self) -> int:
        return sum(e.size for e in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "triptych_version": self.triptych_version,
            "created_at": self.created_at,
            "data_dir": self.data_dir,
            "seconds": round(self.seconds, 3),
            "files": [e.as_dict() for e in self.files],
            "not_copied": self.not_copied,
        }


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _transient(name: str) -> bool:
    return name.endswith(TRANSIENT_SUFFIXES) or name.startswith(TRANSIENT_PREFIXES)


def _state_of(path: str, layout: Layout) -> str | None:
    """The append-only folder whose state file ``path`` is, if it is one."""
    return next((f for f, state in layout.append_only.items() if path == f"{f}/{state}"), None)


def plan(data_dir: Path, layout: Layout, only: str | None = None) -> tuple[list[Entry], list[dict[str, str]]]:
    """The files to copy, in copy order (append-only folders first: a projection copied before the
    database it follows is never ahead of it), and the ones not copied with the reason; ``only``: the
    files under that folder alone."""
    skipped = [
        {"path": path, "why": why} for path, why in layout.skipped.items() if (data_dir / path).exists()
    ]
    first: list[Entry] = []
    rest: list[Entry] = []
    for path in sorted(_walk(data_dir, layout)):
        rel = path.relative_to(data_dir).as_posix()
        if only is not None and not rel.startswith(only + "/"):
            continue
        folder = next((f for f in layout.append_only if rel.startswith(f + "/")), None)
        if folder is not None:
            state = f"{folder}/{layout.append_only[folder]}"
            entry = Entry(rel, "file")
            if rel == state:
                first.insert(0, entry)
            else:
                first.append(entry)
        else:
            rest.append(Entry(rel, "sqlite" if is_sqlite(path) else "file"))
    rest.sort(key=lambda e: e.kind != "sqlite")  # the databases, then the small files
    return first + rest, skipped


def _walk(data_dir: Path, layout: Layout) -> Iterator[Path]:
    for root, dirs, files in os.walk(data_dir):
        here = Path(root)
        rel_root = here.relative_to(data_dir).as_posix()
        dirs[:] = [d for d in dirs if _rel(rel_root, d) not in layout.skipped]
        in_append_only = rel_root in layout.append_only
        for name in files:
            rel = _rel(rel_root, name)
            if rel in layout.skipped or _transient(name) or (in_append_only and name in layout.lock_files):
                continue
            yield here / name


def _rel(root: str, name: str) -> str:
    return name if root == "." else f"{root}/{name}"


def backup(
    data_dir: Path,
    dest: Path,
    layout: Layout,
    version: str,
    advance: Advance,
    not_copied: list[dict[str, str]] | None = None,
) -> Manifest:
    """Copy ``data_dir`` into the new or empty folder ``dest``; the manifest goes last. On any failure
    what was written is removed and the error raised."""
    data_dir = data_dir.resolve()
    dest = dest.resolve()
    if not data_dir.is_dir():
        raise BackupRefused(
            f"the data directory {data_dir} does not exist: pass the one the server uses (--data-dir)"
        )
    if dest == data_dir or data_dir in dest.parents:
        raise BackupRefused(f"{dest} is inside the data directory {data_dir}: choose a folder outside it")
    _require_empty(dest, "backup never writes over a folder's files; choose a new or empty folder")
    created = not dest.exists()
    started = time.monotonic()
    entries, skipped = plan(data_dir, layout)
    try:
        (dest / DATA).mkdir(parents=True, exist_ok=True)
        copied: list[Entry] = []
        pending = list(entries)
        while pending:
            entry = pending.pop(0)
            source, target = data_dir / entry.path, dest / DATA / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                if entry.kind == "sqlite":
                    entry.schema = _snapshot_sqlite(source, target, advance)
                    entry.size, entry.sha256 = target.stat().st_size, sha256_of(target)
                else:
                    entry.size, entry.sha256 = _copy_hashing(source, target, advance)
            except FileNotFoundError:
                continue  # a file removed since the listing (a folder the projection dropped)
            copied.append(entry)
            folder = _state_of(entry.path, layout)
            if folder is not None:
                # List the folder again now that its state is copied: a file the state counts may have
                # appeared since the plan (a new workspace of the projection).
                fresh = [e for e in plan(data_dir, layout, only=folder)[0] if e.path != entry.path]
                pending = fresh + [e for e in pending if not e.path.startswith(folder + "/")]
        _sync_folders(dest / DATA)
        manifest = Manifest(
            version,
            datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            str(data_dir),
            copied,
            skipped + (not_copied or []),
            time.monotonic() - started,
        )
        _write_atomically(dest / MANIFEST, json.dumps(manifest.as_dict(), indent=1).encode() + b"\n")
    except BaseException:
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            shutil.rmtree(dest / DATA, ignore_errors=True)
        raise
    return manifest


def _snapshot_sqlite(source: Path, target: Path, advance: Advance) -> dict[str, int]:
    """The database as of one commit, through the online backup API in one step (several steps would
    restart whenever another connection writes, which a busy server does all the time); returns its
    schema versions. The step runs in a thread so the bar can follow the copy's size."""
    failure: list[BaseException] = []
    schema: dict[str, int] = {}

    def run() -> None:
        try:
            uri = f"file:{pathname2url(str(source))}?mode=rw"  # never creates a missing file
            with closing(sqlite3.connect(uri, uri=True, timeout=60.0)) as src:
                with closing(sqlite3.connect(target)) as dst:
                    src.backup(dst)
                    # Read through the writable connection: closing it, the last one, removes the -wal and
                    # -shm files the read makes (a read-only one would leave them in the backup).
                    schema.update(schema_versions(dst))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name=f"backup-{source.name}")
    worker.start()
    reported = 0
    while worker.is_alive():
        worker.join(0.2)
        size = target.stat().st_size if target.exists() else 0
        if size > reported:
            advance(size - reported)
            reported = size
    if failure:
        exc = failure[0]
        if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
            raise FileNotFoundError(str(source)) from exc
        raise exc
    size = target.stat().st_size
    if size > reported:
        advance(size - reported)
    return schema


def schema_versions(conn: sqlite3.Connection) -> dict[str, int]:
    """Each migration component's version in one SQLite file (``core.db``'s ``schema_version``)."""
    try:
        rows = conn.execute("SELECT component, version FROM schema_version ORDER BY component").fetchall()
    except sqlite3.OperationalError:  # a file of no migrated store
        return {}
    return {str(component): int(version) for component, version in rows}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _copy_hashing(source: Path, target: Path, advance: Advance) -> tuple[int, str]:
    """Copy, hashing on the way, and sync: a backup or restore said to be done is on the disk (SQLite
    syncs the files it writes itself)."""
    digest = hashlib.sha256()
    size = 0
    with open(source, "rb") as src, open(target, "wb") as dst:
        while block := src.read(CHUNK):
            dst.write(block)
            digest.update(block)
            size += len(block)
            advance(len(block))
        dst.flush()
        os.fsync(dst.fileno())
    return size, digest.hexdigest()


def _sync_folders(top: Path) -> None:
    for root, _, _ in os.walk(top):
        _sync_folder(Path(root))


def _sync_folder(folder: Path) -> None:
    """Make a rename or a new file's name in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    _sync_folder(path.parent)


def _require_empty(folder: Path, what_to_do: str) -> None:
    if folder.exists() and not folder.is_dir():
        raise BackupRefused(f"{folder} is a file, not a folder: {what_to_do}")
    if folder.is_dir() and any(folder.iterdir()):
        raise BackupRefused(f"{folder} is not empty: {what_to_do}")


# -- restore ------------------------------------------------------------------------------------------


def read_manifest(src: Path) -> Manifest:
    """The backup's manifest, checked for shape and against the files' sizes; ``BackupRefused`` saying
    what is wrong otherwise."""
    another = "use another backup, or make a new one with `triptych backup`"
    if not src.is_dir():
        raise BackupRefused(f"{src} is not a folder: pass the folder `triptych backup` wrote")
    path = src / MANIFEST
    if not path.is_file():
        raise BackupRefused(
            f"{src} has no {MANIFEST}: it is not a backup, or one that did not finish (the manifest is written"
            f" last); {another}"
        )
    try:
        raw = json.loads(path.read_bytes())
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}")
        if int(raw["version"]) > VERSION:
            raise BackupRefused(
                f"{src} was written by a newer Triptych ({raw.get('triptych_version')}, backup format"
                f" {raw['version']}): restore it with that version"
            )
        files = [
            Entry(str(f["path"]), str(f["kind"]), int(f["size"]), str(f["sha256"]), f.get("schema"))
            for f in raw["files"]
        ]
        manifest = Manifest(
            str(raw["triptych_version"]), str(raw["created_at"]), str(raw["data_dir"]), files,
            list(raw.get("not_copied", [])), float(raw.get("seconds", 0.0)),
        )  # fmt: skip
    except BackupRefused:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BackupRefused(f"{path} is damaged (not a backup manifest: {exc}); {another}") from exc
    for entry in files:
        relative = PurePosixPath(entry.path)
        if relative.is_absolute() or ".." in relative.parts:
            raise BackupRefused(f"{path} is damaged (it names {entry.path!r}, outside the backup); {another}")
        copy = src / DATA / entry.path
        if not copy.is_file():
            raise BackupRefused(
                f"the backup in {src} is incomplete: {DATA}/{entry.path} is missing (the manifest lists it);"
                f" {another}"
            )
        size = copy.stat().st_size
        if size != entry.size:
            raise BackupRefused(
                f"the backup in {src} is damaged: {DATA}/{entry.path} has {size} bytes, the manifest says"
                f" {entry.size}; {another}"
            )
    return manifest


def restore(src: Path, target: Path, advance: Advance) -> Manifest:
    """Lay the backup ``src`` out as the data directory ``target`` (new or empty), all or nothing."""
    src, target = src.resolve(), target.resolve()
    manifest = read_manifest(src)
    _require_empty(target, "restore never writes over data; choose a new or empty folder with --data-dir")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.restoring-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for entry in manifest.files:
            out = staging / entry.path
            out.parent.mkdir(parents=True, exist_ok=True)
            _, digest = _copy_hashing(src / DATA / entry.path, out, advance)
            if digest != entry.sha256:
                raise BackupRefused(
                    f"the backup in {src} is damaged: {DATA}/{entry.path} does not match its SHA-256 in the"
                    " manifest; use another backup, or make a new one with `triptych backup`"
                )
        staging.mkdir(exist_ok=True)  # a backup of an empty data directory
        _sync_folders(staging)
        if target.exists():
            target.rmdir()  # empty, checked above
        os.rename(staging, target)
        _sync_folder(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest
