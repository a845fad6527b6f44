"""Stopping a cache's background work before its database closes (decision 0390): ``PartitionCache.stop``
refuses new work and names the threads still inside theirs after its wait, and ``Database.close`` leaves
those threads' connections open, since CPython's sqlite3 crashes when a connection closes under a query
another thread runs on it. The cache reads a real SQLite table."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from triptych.core import search
from triptych.core.db import Database
from triptych.core.search import Vector, VectorIndex

DIM = 8
ROWS = 50
SCHEMA = "CREATE TABLE vectors (id INTEGER PRIMARY KEY, part TEXT NOT NULL, embedding BLOB NOT NULL)"


@pytest.fixture
def db(tmp_path: Path) -> Database:
    db = Database(tmp_path / "vectors.db", [SCHEMA])
    rng = np.random.default_rng(3)
    with db.transaction() as conn:
        conn.executemany(
            "INSERT INTO vectors (part, embedding) VALUES ('p', ?)",
            [(rng.standard_normal(DIM).astype(np.float32).tobytes(),) for _ in range(ROWS)],
        )
    return db


def _read(conn: sqlite3.Connection, key: str) -> tuple[list[int], Vector]:
    rows = conn.execute("SELECT id, embedding FROM vectors WHERE part = ? ORDER BY id", (key,)).fetchall()
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), DIM)
    return [int(r[0]) for r in rows], matrix


def test_a_load_still_reading_when_stop_gives_up_keeps_its_connection_and_installs_nothing(
    db: Database,
) -> None:
    holding, release = threading.Event(), threading.Event()
    read: list[int] = []

    def loader(key: str) -> tuple[list[int], Vector]:
        conn = db.conn  # this thread's connection, taken before its query as every store method does
        holding.set()
        release.wait(30)
        ids, matrix = _read(conn, key)
        read.append(len(ids))
        return ids, matrix

    index = VectorIndex(DIM, loader)
    index.load_in_background("p", 1)
    assert holding.wait(30)

    busy = index.stop(timeout=0)
    assert [t.name for t in busy] == ["load-p"]
    mine = db.conn
    db.close(spare=busy)
    release.set()
    busy[0].join(30)

    assert read == [ROWS]  # its query ran on its connection, left open
    assert not index.resident("p")  # and what it read was not installed: the cache is stopped
    with pytest.raises(sqlite3.ProgrammingError):
        mine.execute("SELECT 1")  # every other connection was closed


def test_a_stopped_cache_starts_no_load_and_no_graph_build(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 16)
    index = VectorIndex(DIM, lambda key: _read(db.conn, key))
    before = set(threading.enumerate())

    assert index.stop() == []
    index.load_in_background("p", 1)
    assert not index.loading("p")
    ids, matrix = _read(db.conn, "p")
    index.install("p", 1, ids, matrix)  # past the graph threshold: a running cache would build one

    assert [t.name for t in threading.enumerate() if t not in before] == []
    assert index.wait_ready("p", timeout=5)  # no build running or pending
    db.close()
