"""core/backup.py on real files: what a backup copies, in which order, what it skips, and a restore that
leaves nothing behind when a file does not match."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from triptych.core.backup import BackupRefused, Layout, backup, plan, read_manifest, restore

LAYOUT = Layout(
    append_only={"metergraph.columns": "state.json"},
    skipped={"hadron-git": "a cache", "metergraph.web-secret": "a secret"},
)


def data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "metergraph.columns" / "0").mkdir(parents=True)
    (data / "hadron-git" / "m1.git").mkdir(parents=True)
    (data / ".metronix").mkdir()
    with closing(sqlite3.connect(data / "metronix.db")) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE schema_version (component TEXT PRIMARY KEY, version INTEGER)")
        conn.execute("INSERT INTO schema_version VALUES ('main', 3), ('memory', 7)")
        conn.commit()
    files = {
        "metergraph.columns/LOCK": b"",
        "metergraph.columns/0/ts_ms.bin": b"\x01" * 16,
        "metergraph.columns/state.json": b'{"format": 1}',
        "metergraph.columns/state.json.tmp": b"{",
        "hadron-git/m1.git/HEAD": b"ref: refs/heads/main\n",
        "metergraph.web-secret": b"secret",
        ".metronix/mcp_servers.json": b'{"mcpServers": {}}',
        ".write-probe-12": b"ok",
        "notes.txt": b"kept as a plain file",
    }
    for name, content in files.items():
        (data / name).write_bytes(content)
    return data


def test_the_projection_goes_first_state_file_leading_and_caches_secrets_and_transients_are_left(
    tmp_path: Path,
) -> None:
    entries, skipped = plan(data_dir(tmp_path), LAYOUT)
    assert [(e.path, e.kind) for e in entries] == [
        ("metergraph.columns/state.json", "file"),
        ("metergraph.columns/0/ts_ms.bin", "file"),
        ("metronix.db", "sqlite"),
        (".metronix/mcp_servers.json", "file"),
        ("notes.txt", "file"),
    ]
    assert skipped == [
        {"path": "hadron-git", "why": "a cache"},
        {"path": "metergraph.web-secret", "why": "a secret"},
    ]


def test_a_backup_round_trips_with_schema_versions_and_checksums(tmp_path: Path) -> None:
    data = data_dir(tmp_path)
    copied: list[int] = []
    manifest = backup(data, tmp_path / "backup", LAYOUT, "9.9.9", copied.append)
    assert sum(copied) == manifest.size > 0
    db = next(e for e in manifest.files if e.path == "metronix.db")
    assert db.schema == {"main": 3, "memory": 7}
    assert sorted(p.name for p in (tmp_path / "backup" / "data").iterdir()) == [
        ".metronix",
        "metergraph.columns",
        "metronix.db",
        "notes.txt",
    ]  # fmt: skip: no -wal, -shm, LOCK or temporaries
    on_disk = json.loads((tmp_path / "backup" / "manifest.json").read_text())
    assert on_disk["triptych_version"] == "9.9.9" and len(on_disk["files"]) == 5
    assert read_manifest(tmp_path / "backup").size == manifest.size
    restore(tmp_path / "backup", tmp_path / "new", lambda n: None)
    with closing(sqlite3.connect(tmp_path / "new" / "metronix.db")) as conn:
        assert conn.execute("SELECT version FROM schema_version WHERE component = 'memory'").fetchone() == (
            7,
        )
    assert (tmp_path / "new" / "notes.txt").read_bytes() == b"kept as a plain file"


def test_a_restore_that_finds_a_changed_file_leaves_no_folder(tmp_path: Path) -> None:
    backup(data_dir(tmp_path), tmp_path / "backup", LAYOUT, "1", lambda n: None)
    note = tmp_path / "backup" / "data" / "notes.txt"
    note.write_bytes(b"kept as a plain fil3")  # same size, other bytes
    with pytest.raises(BackupRefused, match="notes.txt does not match its SHA-256"):
        restore(tmp_path / "backup", tmp_path / "new", lambda n: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "data"]


def test_a_backup_refuses_a_folder_inside_the_data_directory(tmp_path: Path) -> None:
    data = data_dir(tmp_path)
    with pytest.raises(BackupRefused, match="inside the data directory"):
        backup(data, data / "backups", LAYOUT, "1", lambda n: None)
    assert not (data / "backups").exists()


def test_a_projection_file_that_appears_while_its_state_is_copied_is_copied_too(tmp_path: Path) -> None:
    data = data_dir(tmp_path)
    late = data / "metergraph.columns" / "1" / "ts_ms.bin"

    def advance(n: int) -> None:
        if not late.exists():  # the first bytes copied are the state file's: a workspace appears now
            late.parent.mkdir()
            late.write_bytes(b"\x02" * 8)

    manifest = backup(data, tmp_path / "backup", LAYOUT, "1", advance)
    paths = [e.path for e in manifest.files]
    assert paths[0] == "metergraph.columns/state.json" and "metergraph.columns/1/ts_ms.bin" in paths
    assert (
        tmp_path / "backup" / "data" / "metergraph.columns" / "1" / "ts_ms.bin"
    ).read_bytes() == b"\x02" * 8
