"""core.db: transactions, and WAL checkpoints moved off the committing connection."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from triptych.core.db import CHECKPOINT_EVERY, FALLBACK_AUTOCHECKPOINT, Database

ROWS = 400  # rows of 4 KiB: about 500 WAL pages, under SQLite's default autocheckpoint of 1,000


def _fill(db: Database) -> int:
    """About ROWS rows in CHECKPOINT_EVERY commits (the background checkpoint runs every so many);
    returns how many rows."""
    with db.transaction() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS blobs (id INTEGER PRIMARY KEY, body BLOB)")
    per = max(1, ROWS // CHECKPOINT_EVERY)
    for _ in range(CHECKPOINT_EVERY):
        with db.transaction() as conn:
            conn.executemany("INSERT INTO blobs (body) VALUES (?)", [(b"x" * 4096,) for _ in range(per)])
    return per * CHECKPOINT_EVERY


def _main_file_grows_past(path: Path, size: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.stat().st_size > size:
            return True
        time.sleep(0.02)
    return False


def test_a_commit_wakes_the_background_checkpoint_which_copies_the_wal_into_the_database(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "bg.db", [], background_checkpoints=True)
    try:
        rows = _fill(db)
        # The rows reach the database file without any connection reaching its autocheckpoint.
        assert _main_file_grows_past(db.path, rows * 4096, within=5.0)
        assert db.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == FALLBACK_AUTOCHECKPOINT
        assert db.conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == rows
    finally:
        db.close()


def test_without_background_checkpoints_the_rows_stay_in_the_wal_until_the_autocheckpoint(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "fg.db", [])
    try:
        rows = _fill(db)
        assert not _main_file_grows_past(db.path, rows * 4096, within=0.5)
    finally:
        db.close()


def test_a_failed_transaction_leaves_nothing_written(tmp_path: Path) -> None:
    db = Database(tmp_path / "tx.db", [], background_checkpoints=True)
    try:
        rows = _fill(db)
        with pytest.raises(sqlite3.IntegrityError), db.transaction() as conn:
            conn.execute("INSERT INTO blobs (body) VALUES (?)", (b"y",))
            conn.execute("INSERT INTO blobs (id, body) VALUES (1, ?)", (b"duplicate id",))
        assert db.conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == rows
    finally:
        db.close()


def test_processes_opening_one_file_at_once_apply_each_migration_once(tmp_path: Path) -> None:
    # Server workers open the same file at the same moment: each reads the schema version before its
    # first write; the ones that lose the race must find the migration applied, not run it again
    # ("table ... already exists").
    migrations = ["CREATE TABLE one (id INTEGER PRIMARY KEY)", "CREATE TABLE two (id INTEGER PRIMARY KEY)"]
    for attempt in range(5):
        path = tmp_path / f"race-{attempt}.db"
        opened = [Database(path, []) for _ in range(6)]
        start = threading.Barrier(len(opened))
        failures: list[BaseException] = []

        def migrate(db: Database, start: threading.Barrier, failures: list[BaseException]) -> None:
            start.wait()
            try:
                db.migrate("component", migrations)
            except sqlite3.Error as exc:
                failures.append(exc)

        threads = [threading.Thread(target=migrate, args=(db, start, failures)) for db in opened]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            assert failures == []
            version = opened[0].conn.execute(
                "SELECT version FROM schema_version WHERE component = 'component'"
            )
            assert version.fetchone()[0] == 2
        finally:
            for db in opened:
                db.close()
