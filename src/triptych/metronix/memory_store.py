"""Agent-memory persistence: the ``MemoryStore`` protocol the memory service uses, and one implementation
per engine, named after it: ``SqliteMemoryStore`` (the embedded default, ``metronix.db``) and
``PostgresMemoryStore`` (server mode). The review queue, audit events and freshness queue are
``review_store``'s job (``store.reviews``); the record model is ``memory_model``.

What the engines share is written once: the reads (``memory_store_reads``), the writes
(``memory_store_writes``) and the in-process caches with their counters (``memory_caches``), in the SQL
both engines speak, with the spellings that differ from the class's ``dialect`` (``metronix/dialect.py``);
each engine runs its statements as written (PostgreSQL's through ``core.pg.NativeDatabase``: psycopg,
nothing rewritten). Each engine's DDL is its own (``memory_schema_sqlite``, ``memory_schema_pg``), and
what an engine does its own way is in its class below. ``tests/metronix/test_memory_store_contract.py``
holds every implementation to the same contract.

Dense vectors are served from an in-process ``VectorIndex`` per workspace like the knowledge base, and
the keyword (BM25) side from an in-process ``KeywordIndex`` over the same rows, on both engines.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

import psycopg
import psycopg.errors

from triptych.core.db import Database
from triptych.core.partitions import Stopped, WriteGate, gated_by
from triptych.core.pg import NativeDatabase, PgDatabase
from triptych.core.search import Vector
from triptych.metronix import memory_schema_pg, memory_schema_sqlite
from triptych.metronix.attributes import Visibility
from triptych.metronix.dialect import POSTGRES, SQLITE, Dialect
from triptych.metronix.memory_caches import MemoryCaches
from triptych.metronix.memory_model import MemoryRecord, RankingRow, named_workspace
from triptych.metronix.memory_pg import insert_record
from triptych.metronix.memory_pg import touch as touch_records
from triptych.metronix.memory_store_reads import FirstStage
from triptych.metronix.memory_store_writes import FOLLOW_WINDOW_SECONDS, MemoryWrites
from triptych.metronix.review_store import PostgresReviewStore, ReviewStore, SqliteReviewStore

# Writers of one workspace's memory go one at a time across every PostgreSQL worker, as SQLite's single
# writer does: the writes' read-then-bump of the workspace's cache counters relies on it. Writers of two
# workspaces do not wait for each other; a store-wide write waits for all (docs/decisions/0170;
# ``PostgresMemoryStore.__init__`` is the one place the lock is chosen).
WRITE_LOCK = "metronix-memory"


class MemoryStore(Protocol):
    """Agent-memory records as the memory service uses them: persistence, retrieval inside a
    ``Visibility`` (tenancy and filters inside every query), and the review job beside them
    (``reviews``)."""

    @property
    def reviews(self) -> ReviewStore: ...
    def warm(self) -> None: ...
    def stop(self) -> list[threading.Thread]: ...
    def close(self) -> None: ...
    def snapshot(
        self, pinned: Mapping[str, tuple[int, int]] | None = None
    ) -> AbstractContextManager[None]: ...
    def pinned(self) -> dict[str, tuple[int, int]]: ...
    def embedding_model(self) -> tuple[str, int] | None: ...
    def set_embedding_model(self, name: str, dim: int) -> None: ...
    def count_records(self) -> int: ...
    def iter_contents(self, batch: int = 256) -> Iterator[list[tuple[int, str]]]: ...
    def replace_embeddings(self, vectors: Sequence[tuple[int, Vector]]) -> None: ...
    def insert(
        self, record: MemoryRecord, embedding: Vector, entities: set[str], enqueue: bool = True
    ) -> tuple[MemoryRecord, bool]: ...
    def update(
        self,
        record: MemoryRecord,
        changes: dict[str, Any],
        embedding: Vector | None,
        entities: set[str] | None,
        enqueue: bool,
    ) -> MemoryRecord: ...
    def delete(self, workspace_id: str, record_id: str) -> bool: ...
    def purge_expired(self, now: str) -> int: ...
    def touch(self, workspace_id: str, seqs: Sequence[int], ttl_expires_at: str) -> None: ...
    def find_duplicate(
        self, workspace_id: str, agent_id: str, scope: str, session_id: str | None, content_hash: str
    ) -> MemoryRecord | None: ...
    def get(self, workspace_id: str, record_id: str) -> MemoryRecord | None: ...
    def by_seqs(self, seqs: Sequence[int], workspace_id: str | None = None) -> dict[int, MemoryRecord]: ...
    def ranking_rows(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, RankingRow]: ...
    def list_records(self, view: Visibility, limit: int, offset: int) -> tuple[list[MemoryRecord], int]: ...
    def facets(self, workspace_id: str, now: str) -> tuple[list[str], list[str]]: ...
    def visible_subset(
        self, view: Visibility, seqs: Sequence[int], attributes: int | None = None
    ) -> set[int]: ...
    def first_stage(
        self, view: Visibility, query: str, embedding: Callable[[], Vector], limit: int
    ) -> FirstStage: ...
    def dense_search(self, view: Visibility, query: Vector, limit: int) -> list[tuple[int, float]]: ...
    def keyword_search(self, view: Visibility, query: str, limit: int) -> list[tuple[int, float]]: ...
    def vectors(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, Vector]: ...
    def context(self, workspace_id: str, scores: dict[int, float], hops: int) -> dict[int, float]: ...
    def links(self, seqs: Sequence[int], workspace_id: str | None = None) -> dict[int, set[str]]: ...

    def adjacent(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, set[int]]: ...


class _EngineStore(MemoryWrites):
    """What both engines' constructors share: the caches over the database, and the review store."""

    reviews: ReviewStore
    # What the engine raises once its connections close (a server stopping while ``warm`` runs).
    closed_errors: tuple[type[Exception], ...] = ()

    def __init__(self, db: Database | NativeDatabase, dialect: Dialect, dim: int) -> None:
        self.db = db
        self.dialect = dialect
        # One gate per workspace where the engine's writers of two workspaces run at once (PostgreSQL).
        self._gate = WriteGate(keyed=isinstance(db, NativeDatabase))
        self.caches = MemoryCaches(db, dialect, dim, self._gate)
        # The caches under their former names (tests and benchmarks count their loads).
        self.index, self.keywords = self.caches.index, self.caches.keywords
        self.adjacency, self.attributes = self.caches.adjacency, self.caches.attributes

    def snapshot(self, pinned: Mapping[str, tuple[int, int]] | None = None) -> AbstractContextManager[None]:
        return self.caches.snapshot(pinned)

    def pinned(self) -> dict[str, tuple[int, int]]:
        return self.caches.pinned()

    def warm(self) -> None:
        """Load the vector, keyword, adjacency and attribute caches of every workspace that holds records
        (best effort: a server closing meanwhile ends it, and a search loads whatever is missing itself)."""
        errors: tuple[type[Exception], ...] = (*self.closed_errors, ValueError, Stopped)
        try:
            self.caches.warm(self.workspaces())
        except errors:
            return

    def stop(self) -> list[threading.Thread]:
        """Stop the caches' background work (graph builds) and wait for it, bounded; loads after this
        raise ``Stopped``. The database is its owner's: this store closes none of it."""
        return self.caches.stop()

    def close(self) -> None:
        """``stop``, then forget the cached partitions (out of the memory budget now)."""
        self.stop()
        self.caches.clear()


class SqliteMemoryStore(_EngineStore):
    """The embedded engine: ``metronix.db`` (its ``memory`` component), one writer at a time."""

    unique_violation = (sqlite3.IntegrityError,)
    closed_errors = (sqlite3.Error,)

    def __init__(self, db: Database, dim: int) -> None:
        db.migrate("memory", memory_schema_sqlite.MIGRATIONS)
        super().__init__(db, SQLITE, dim)
        self.reviews = SqliteReviewStore(db, self._gate, self.caches, self.writing)

    @gated_by(named_workspace)
    def touch(self, workspace_id: str, seqs: Sequence[int], ttl_expires_at: str) -> None:
        """Slide the TTL of ``seqs`` (session records of ``workspace_id``; others are left alone)."""
        if not seqs:
            return
        marks = ",".join("?" * len(seqs))
        with self.writing(workspace_id) as conn:
            touched = [
                int(r[0])
                for r in conn.execute(
                    f"UPDATE memory_records SET ttl_expires_at = ? WHERE workspace_id = ? AND scope = 'session'"
                    f" AND seq IN ({marks}) RETURNING seq",
                    (ttl_expires_at, workspace_id, *seqs),
                )
            ]
            attrs = self.caches.attribute_write(conn, workspace_id)
        self.attributes.apply(
            workspace_id, *attrs, changes={seq: {"ttl_expires_at": ttl_expires_at} for seq in touched}
        )


class PostgresMemoryStore(_EngineStore):
    """Server mode: the same tables on PostgreSQL, shared by every worker (each with its own caches,
    kept current by the counters).

    Writers are ordered per workspace by the advisory lock ``WRITE_LOCK``, chosen here only: ``self.db``
    takes it first in each transaction ``writing`` opens and in each one-round-trip write (``memory_pg``),
    keyed by the workspace the write names (``NativeDatabase.lock_statement``): two writes to one
    workspace queue, writes to two workspaces do not wait for each other (issue 30, docs/decisions/0170).
    ``writing(None)`` (the model record, a re-embedding, a dequeue by record id) takes the store-wide key
    and waits for every workspace's writer. The caches follow per-workspace counters, bumped under the
    workspace's key, so a worker never needs another workspace's writes to be in order with its own."""

    unique_violation = (psycopg.errors.UniqueViolation,)
    closed_errors = (psycopg.Error,)
    db: NativeDatabase

    def __init__(self, pg: PgDatabase, dim: int) -> None:
        db = NativeDatabase(pg, write_lock=WRITE_LOCK)
        db.migrate("memory", memory_schema_pg.MIGRATIONS)
        super().__init__(db, POSTGRES, dim)
        self.reviews = PostgresReviewStore(db, self._gate, self.caches, self.writing)

    def writing(self, workspace_id: str | None) -> AbstractContextManager[Any]:
        return self.db.transaction(workspace_id)

    def _insert_at_once(
        self, record: MemoryRecord, vec: Vector, key: str, entities: set[str], enqueue: bool
    ) -> MemoryRecord | None:
        """The neutral insert's 14 statements in one round trip (``memory_pg.insert_record``); a twin
        (nothing written) goes the neutral way, which finds it and slides its TTL."""
        done = insert_record(self.db, record, vec, key, entities, enqueue, FOLLOW_WINDOW_SECONDS)
        if done is None:
            return None
        self.caches.inserted(record, vec, entities, done.seq, done.follows, done.generation, done.attributes)
        return replace(record, seq=done.seq)

    @gated_by(named_workspace)
    def touch(self, workspace_id: str, seqs: Sequence[int], ttl_expires_at: str) -> None:
        """``SqliteMemoryStore.touch`` in one round trip (``memory_pg.touch``)."""
        if not seqs:
            return
        touched, after = touch_records(self.db, workspace_id, list(seqs), ttl_expires_at)
        changes = {seq: {"ttl_expires_at": ttl_expires_at} for seq in touched}
        self.attributes.apply(workspace_id, after - 1, after, changes=changes)


def open_memory_store(db: Database | PgDatabase, dim: int) -> SqliteMemoryStore | PostgresMemoryStore:
    """The memory store of ``db``'s engine."""
    if isinstance(db, PgDatabase):
        return PostgresMemoryStore(db, dim)
    return SqliteMemoryStore(db, dim)
