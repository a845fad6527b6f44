"""Agent-memory persistence: records, their tags, entities, vectors, and the counters that keep the
in-process caches coherent. The review queue, audit events and freshness queue are ``review_store``'s
job (``SqliteMemoryStore.reviews``); the record model is ``memory_model``.

The embedded default keeps everything in ``metronix.db`` (its own migration component), with the
dense vectors served from an in-process ``VectorIndex`` per workspace like the knowledge base, and the
keyword (BM25) side from an in-process ``KeywordIndex`` over the same rows.
Dedup is a UNIQUE constraint on (workspace, agent, scope, session, content hash): two concurrent
writers of the same content cannot both insert.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

import numpy as np
import psycopg
import psycopg.errors

from triptych.core.db import Database
from triptych.core.keyword_index import Document, KeywordIndex
from triptych.core.partitions import PartitionCache, WriteGate, gated
from triptych.core.pg import PortableDatabase
from triptych.core.search import Vector, VectorIndex
from triptych.metronix.adjacency import AdjacencyIndex
from triptych.metronix.attributes import AttributeIndex, Attributes, Visibility
from triptych.metronix.memory_counters import SqliteCounters
from triptych.metronix.memory_model import (
    PLAIN_FIELDS,
    DuplicateContent,
    MemoryRecord,
    RankingRow,
    dedup_key,
    keyword_document,
    record_attributes,
    record_from_attributes,
    record_from_row,
    stored_fields,
)
from triptych.metronix.memory_pg import insert_record
from triptych.metronix.memory_pg import touch as touch_records
from triptych.metronix.review_store import ReviewStore, SqliteReviewStore
from triptych.metronix.store import utcnow

MIGRATIONS = [
    """
    CREATE TABLE memory_records (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        workspace_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        session_id TEXT,
        kind TEXT NOT NULL DEFAULT 'fact',
        content TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        importance_score REAL NOT NULL DEFAULT 0.5,
        source_type TEXT NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{}',
        status TEXT NOT NULL DEFAULT 'active',
        verification_state TEXT,
        superseded_by TEXT,
        ttl_expires_at TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        embedding BLOB NOT NULL,
        dedup_key TEXT NOT NULL UNIQUE
    );
    CREATE INDEX memory_by_agent ON memory_records (workspace_id, agent_id, status);
    CREATE INDEX memory_by_scope ON memory_records (workspace_id, scope, status);
    CREATE TABLE memory_tags (
        seq INTEGER NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (seq, tag)
    );
    CREATE INDEX memory_tags_by_tag ON memory_tags (tag, seq);
    CREATE TABLE memory_entities (
        seq INTEGER NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        entity TEXT NOT NULL,
        PRIMARY KEY (seq, entity)
    );
    CREATE INDEX memory_entities_by_entity ON memory_entities (entity, seq);
    -- explicit relationships from updates and reviews: superseded_by, merged_into, contradicts ...
    CREATE TABLE memory_links (
        seq INTEGER NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        related_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        PRIMARY KEY (seq, related_id, kind)
    );
    CREATE VIRTUAL TABLE memory_fts USING fts5(part, content, tags, tokenize = 'porter unicode61');
    CREATE TABLE memory_generations (workspace_id TEXT PRIMARY KEY, generation INTEGER NOT NULL);
    CREATE TABLE review_entries (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        target_id TEXT NOT NULL,
        target_kind TEXT NOT NULL DEFAULT 'memory_record',
        reason TEXT NOT NULL,
        related_record_id TEXT NOT NULL DEFAULT '',
        content TEXT NOT NULL,
        confidence REAL NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (target_id, related_record_id, reason)
    );
    CREATE INDEX review_by_workspace ON review_entries (workspace_id, created_at);
    CREATE TABLE machine_events (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        actor TEXT NOT NULL,
        target_id TEXT,
        payload TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL
    );
    -- Writes enqueue their freshness check in the same transaction, so a crash loses none.
    CREATE TABLE freshness_queue (
        record_id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        enqueued_at TEXT NOT NULL
    );
    """,
    # Published for a few hours of 2026-11-30 as the first form of conversation adjacency (a column);
    # migration 3 moved it to its own table. Kept so that databases at version 2 stay consistent.
    """
    ALTER TABLE memory_records ADD COLUMN follows INTEGER;
    CREATE INDEX memory_follows ON memory_records (follows) WHERE follows IS NOT NULL;
    CREATE INDEX memory_by_agent_seq ON memory_records (workspace_id, agent_id, scope, session_id, seq);
    """,
    # Conversation adjacency: the record each one was written right after (same agent, scope and
    # session, within FOLLOW_WINDOW_SECONDS). Search lends a record part of its neighbours' relevance.
    # A narrow table, not the column of migration 2: that column sits behind the embedding blob, and
    # reading it cost 2 ms per 100 records instead of 0.2. The column is left unused (always NULL
    # from now on); SQLite drops a column only by rewriting the table.
    """
    DROP INDEX IF EXISTS memory_follows;
    CREATE TABLE memory_follows (
        seq INTEGER PRIMARY KEY REFERENCES memory_records(seq) ON DELETE CASCADE,
        follows INTEGER NOT NULL
    );
    INSERT INTO memory_follows SELECT seq, follows FROM memory_records WHERE follows IS NOT NULL;
    UPDATE memory_records SET follows = NULL WHERE follows IS NOT NULL;
    CREATE INDEX memory_follows_by_follows ON memory_follows (follows);
    """,
    # Every session-scoped write purges expired session records first; without this index that
    # scanned the whole table (14 ms at 10,000 records, growing with the database).
    """
    CREATE INDEX memory_session_expiry ON memory_records (ttl_expires_at) WHERE scope = 'session';
    """,
    # Keyword search moved to an in-process BM25 index (core/keyword_index.py) read from the records
    # themselves: the FTS5 query was the slowest step of memory_search at 10,000 records, and keeping
    # the FTS5 table in step cost every write. Content and tags stay in memory_records.
    """
    DROP TABLE memory_fts;
    """,
    # The model that embedded the records, so vectors of two models never mix (memory_search would
    # compare them silently). Records stored before this was kept are of an unknown model ('').
    """
    CREATE TABLE memory_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO memory_meta SELECT 'embedding_model', '' WHERE EXISTS (SELECT 1 FROM memory_records);
    INSERT INTO memory_meta SELECT 'embedding_dim', '0' WHERE EXISTS (SELECT 1 FROM memory_records);
    """,
    # The attribute cache (metronix/attributes.py) has its own generation: status changes and TTL slides
    # must reach it without making every process reload its vector and keyword indexes.
    """
    ALTER TABLE memory_generations ADD COLUMN attributes INTEGER NOT NULL DEFAULT 0;
    """,
]


# The same schema on PostgreSQL (server mode, issue 16), as the embedded one stands after its migrations:
# its history starts here. Text that is sorted sorts bytewise (COLLATE "C"), as SQLite does. Vectors are
# float32 bytes, as in SQLite: memory search ranks them in-process, inside the attribute filters.
PG_MIGRATIONS = [
    """
    CREATE TABLE memory_records (
        seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        id TEXT COLLATE "C" NOT NULL UNIQUE,
        workspace_id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        session_id TEXT,
        kind TEXT COLLATE "C" NOT NULL DEFAULT 'fact',
        content TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        importance_score DOUBLE PRECISION NOT NULL DEFAULT 0.5,
        source_type TEXT COLLATE "C" NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{}',
        status TEXT NOT NULL DEFAULT 'active',
        verification_state TEXT,
        superseded_by TEXT,
        ttl_expires_at TEXT COLLATE "C",
        created_at TEXT COLLATE "C" NOT NULL,
        updated_at TEXT COLLATE "C" NOT NULL,
        embedding BYTEA NOT NULL,
        dedup_key TEXT NOT NULL UNIQUE
    );
    CREATE INDEX memory_by_agent ON memory_records (workspace_id, agent_id, status);
    CREATE INDEX memory_by_scope ON memory_records (workspace_id, scope, status);
    CREATE INDEX memory_by_agent_seq ON memory_records (workspace_id, agent_id, scope, session_id, seq);
    CREATE INDEX memory_session_expiry ON memory_records (ttl_expires_at) WHERE scope = 'session';
    CREATE TABLE memory_tags (
        seq BIGINT NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (seq, tag)
    );
    CREATE INDEX memory_tags_by_tag ON memory_tags (tag, seq);
    CREATE TABLE memory_entities (
        seq BIGINT NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        entity TEXT NOT NULL,
        PRIMARY KEY (seq, entity)
    );
    CREATE INDEX memory_entities_by_entity ON memory_entities (entity, seq);
    CREATE TABLE memory_links (
        seq BIGINT NOT NULL REFERENCES memory_records(seq) ON DELETE CASCADE,
        related_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        PRIMARY KEY (seq, related_id, kind)
    );
    CREATE TABLE memory_follows (
        seq BIGINT PRIMARY KEY REFERENCES memory_records(seq) ON DELETE CASCADE,
        follows BIGINT NOT NULL
    );
    CREATE INDEX memory_follows_by_follows ON memory_follows (follows);
    CREATE TABLE memory_generations (
        workspace_id TEXT PRIMARY KEY,
        generation BIGINT NOT NULL,
        attributes BIGINT NOT NULL DEFAULT 0
    );
    CREATE TABLE memory_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE review_entries (
        id TEXT COLLATE "C" PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        target_id TEXT NOT NULL,
        target_kind TEXT NOT NULL DEFAULT 'memory_record',
        reason TEXT NOT NULL,
        related_record_id TEXT NOT NULL DEFAULT '',
        content TEXT NOT NULL,
        confidence DOUBLE PRECISION NOT NULL,
        created_at TEXT COLLATE "C" NOT NULL,
        UNIQUE (target_id, related_record_id, reason)
    );
    CREATE INDEX review_by_workspace ON review_entries (workspace_id, created_at);
    CREATE TABLE machine_events (
        id TEXT COLLATE "C" PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        event_type TEXT NOT NULL,
        actor TEXT NOT NULL,
        target_id TEXT,
        payload TEXT NOT NULL DEFAULT '{}',
        created_at TEXT COLLATE "C" NOT NULL
    );
    CREATE TABLE freshness_queue (
        record_id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL,
        enqueued_at TEXT COLLATE "C" NOT NULL
    );
    """,
]

# Records written by one agent within this many seconds of each other are adjacent: one exchange of a
# conversation, or one batch. Longer gaps usually start another topic.
FOLLOW_WINDOW_SECONDS = 3600.0
# Filters this selective (fewer than 1 visible record in this many of the workspace's nearest) are
# served from the materialised visible set instead of widening the post-filtered probe further.
MAX_PROBE = 4096


_COLUMNS = (
    "r.seq, r.id, r.workspace_id, r.agent_id, r.scope, r.session_id, r.kind, r.content, r.content_hash, \
r.tags, r.importance_score, r.source_type, r.metadata, r.status, r.verification_state, r.superseded_by, \
r.ttl_expires_at, r.created_at, r.updated_at"
)


class MemoryStore(Protocol):
    """Agent-memory records as the memory service uses them: persistence, retrieval inside a
    ``Visibility`` (tenancy and filters inside every query), and the review job beside them
    (``reviews``). Each engine implements it; the embedded one is ``SqliteMemoryStore``."""

    @property
    def reviews(self) -> ReviewStore: ...
    def warm(self) -> None: ...
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
    def dense_search(self, view: Visibility, query: Vector, limit: int) -> list[tuple[int, float]]: ...
    def keyword_search(self, view: Visibility, query: str, limit: int) -> list[tuple[int, float]]: ...
    def vectors(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, Vector]: ...
    def context(self, workspace_id: str, scores: dict[int, float], hops: int) -> dict[int, float]: ...
    def links(self, seqs: Sequence[int], workspace_id: str | None = None) -> dict[int, set[str]]: ...


class SqliteMemoryStore:
    def __init__(self, db: Database | PortableDatabase, dim: int) -> None:
        self.db = db
        self._gate = WriteGate()
        # One engine's schema history each; the SQL of the statements below runs on both.
        db.migrate("memory", PG_MIGRATIONS if isinstance(db, PortableDatabase) else MIGRATIONS)
        self.counters = SqliteCounters(db)
        self._snapshots = threading.local()
        self.index = VectorIndex(dim, self._load_vectors)
        self.keywords = KeywordIndex(self._load_documents)
        self.adjacency = AdjacencyIndex(self._load_links)
        self.attributes = AttributeIndex(self._load_attributes)
        self.reviews = SqliteReviewStore(db, self._gate, self.attributes, self._attribute_write)

    # -- generations (vector cache coherence) -------------------------------------

    # Two counters per workspace: ``generation`` for the vector, keyword and adjacency caches (new text,
    # new rows), ``attributes`` for the attribute cache (every change to a record).

    def _generation(self, workspace_id: str) -> int:
        return self.counters.get(workspace_id, "generation")

    def _attribute_generation(self, workspace_id: str) -> int:
        return self.counters.get(workspace_id, "attributes")

    def _bump(self, conn: Any, workspace_id: str) -> int:
        return self.counters.bump(conn, workspace_id, "generation")

    def _bump_attributes(self, conn: Any, workspace_id: str) -> int:
        return self.counters.bump(conn, workspace_id, "attributes")

    def _counters(self, workspace_id: str) -> tuple[int, int]:
        """Both counters in one read: a search that reads them together and passes them down never
        asks a cache for a generation newer than its first look (a concurrent write of this process
        may commit meanwhile, and a cache asked for it before the write applies it would reload)."""
        return self.counters.both(workspace_id)

    def _read_counters(self, workspace_id: str) -> tuple[int, int]:
        """``_counters`` for a read, once this process's write in progress has reached the caches
        (``WriteGate.settle``). Inside ``snapshot()`` the first read of a workspace serves the rest."""
        pinned: dict[str, tuple[int, int]] | None = getattr(self._snapshots, "counters", None)
        if pinned is not None and workspace_id in pinned:
            return pinned[workspace_id]
        counters = self._counters(workspace_id)
        self._gate.settle(lambda: self._lagging(workspace_id, counters))
        if pinned is not None:
            pinned[workspace_id] = counters
        return counters

    @contextmanager
    def snapshot(self, pinned: Mapping[str, tuple[int, int]] | None = None) -> Iterator[None]:
        """The reads of this thread inside the block share one reading of the counters: one search
        ranks against one generation of every cache, and asks the database once instead of at each
        step (a round trip each on a server engine: 5 of a search's 7 statements on PostgreSQL).
        Caches newer than that reading still serve (``PartitionCache.sync``). ``pinned``: readings
        another thread's snapshot made (``pinned()``), shared with a helper thread of the same call."""
        outer = getattr(self._snapshots, "counters", None)
        if outer is None:
            self._snapshots.counters = dict(pinned or {})
        try:
            yield
        finally:
            if outer is None:
                self._snapshots.counters = None

    def pinned(self) -> dict[str, tuple[int, int]]:
        """The counters this thread's snapshot has read so far (for ``snapshot(pinned)``)."""
        return dict(getattr(self._snapshots, "counters", None) or {})

    def _lagging(self, workspace_id: str, counters: tuple[int, int]) -> bool:
        generation, attributes = counters
        return (
            any(cache.generation(workspace_id) < generation for cache in self._caches())
            or self.attributes.generation(workspace_id) < attributes
        )

    def _load_attributes(self, workspace_id: str) -> list[Attributes]:
        entities = self._workspace_pairs(
            "SELECT e.seq, e.entity FROM memory_records r JOIN memory_entities e ON e.seq = r.seq"
            " WHERE r.workspace_id = ?",
            workspace_id,
        )
        links = self._workspace_pairs(
            "SELECT l.seq, l.related_id FROM memory_records r JOIN memory_links l ON l.seq = r.seq"
            " WHERE r.workspace_id = ?",
            workspace_id,
        )
        rows = self._plain().execute(
            f"SELECT seq, tags, metadata, {', '.join(PLAIN_FIELDS)} FROM memory_records WHERE workspace_id = ?",
            (workspace_id,),
        )
        found = []
        for seq, tags_json, metadata, *plain in rows:
            tags = json.loads(tags_json)
            found.append(
                Attributes(
                    **dict(zip(PLAIN_FIELDS, plain, strict=True)),
                    seq=int(seq),
                    tags=frozenset(tags),
                    entities=frozenset(entities.get(int(seq), ())),
                    metadata=metadata,
                    tag_list=tuple(tags),
                    links=frozenset(links.get(int(seq), ())),
                )
            )
        return found

    def _workspace_pairs(self, query: str, workspace_id: str) -> dict[int, set[str]]:
        pairs: dict[int, set[str]] = {}
        for seq, value in self._plain().execute(query, (workspace_id,)):
            pairs.setdefault(int(seq), set()).add(value)
        return pairs

    def _load_vectors(self, workspace_id: str) -> tuple[list[int], Vector]:
        rows = self.db.conn.execute(
            "SELECT seq, embedding FROM memory_records WHERE workspace_id = ? ORDER BY seq", (workspace_id,)
        ).fetchall()
        if not rows:
            return [], np.zeros((0, self.index.dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
        return [int(r[0]) for r in rows], matrix

    def _load_links(self, workspace_id: str) -> list[tuple[int, int]]:
        rows = self._plain().execute(
            "SELECT f.seq, f.follows FROM memory_records r JOIN memory_follows f ON f.seq = r.seq"
            " JOIN memory_records e ON e.seq = f.follows WHERE r.workspace_id = ?",
            (workspace_id,),
        )
        return [(int(later), int(earlier)) for later, earlier in rows]

    def _load_documents(self, workspace_id: str) -> list[Document]:
        rows = self._plain().execute(
            "SELECT seq, content, tags FROM memory_records WHERE workspace_id = ? ORDER BY seq",
            (workspace_id,),
        )
        return [(int(seq), keyword_document(content, json.loads(tags))) for seq, content, tags in rows]

    def warm(self) -> None:
        """Load the vector, keyword, adjacency and attribute caches of every workspace that holds records (best
        effort: a server closing meanwhile ends it, and a search loads whatever is missing itself)."""
        try:
            workspaces = [
                r[0] for r in self._plain().execute("SELECT DISTINCT workspace_id FROM memory_records")
            ]
            for workspace in workspaces:
                generation = self._generation(workspace)
                for cache in self._caches():
                    cache.sync(workspace, generation)
                self.attributes.sync(workspace, self._attribute_generation(workspace))
        except (sqlite3.Error, psycopg.Error, ValueError):
            return

    # -- embedding model ------------------------------------------------------------

    def embedding_model(self) -> tuple[str, int] | None:
        rows = dict(self._plain().execute("SELECT key, value FROM memory_meta").fetchall())
        if "embedding_model" not in rows:
            return None
        return rows["embedding_model"], int(rows["embedding_dim"])

    def set_embedding_model(self, name: str, dim: int) -> None:
        with self.db.transaction() as conn:
            conn.executemany(
                "INSERT INTO memory_meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("embedding_model", name), ("embedding_dim", str(dim))],
            )

    def count_records(self) -> int:
        return int(self.db.conn.execute("SELECT count(*) FROM memory_records").fetchone()[0])

    def iter_contents(self, batch: int = 256) -> Iterator[list[tuple[int, str]]]:
        """Every record's (seq, content), a batch at a time, in seq order."""
        last = 0
        while True:
            rows = (
                self._plain()
                .execute(
                    "SELECT seq, content FROM memory_records WHERE seq > ? ORDER BY seq LIMIT ?",
                    (last, batch),
                )
                .fetchall()
            )
            if not rows:
                return
            yield [(int(seq), content) for seq, content in rows]
            last = int(rows[-1][0])

    @gated
    def replace_embeddings(self, vectors: Sequence[tuple[int, Vector]]) -> None:
        """New vectors for existing records (a re-embedding); the touched workspaces reload their index."""
        with self.db.transaction() as conn:
            conn.executemany(
                "UPDATE memory_records SET embedding = ? WHERE seq = ?",
                [(np.ascontiguousarray(vec, dtype=np.float32).tobytes(), seq) for seq, vec in vectors],
            )
            marks = ",".join("?" * len(vectors))
            workspaces = [
                row[0]
                for row in conn.execute(
                    f"SELECT DISTINCT workspace_id FROM memory_records WHERE seq IN ({marks})",
                    [seq for seq, _ in vectors],
                )
            ]
            for workspace in workspaces:
                self._bump(conn, workspace)

    # -- writes ----------------------------------------------------------------------

    @gated
    def insert(
        self, record: MemoryRecord, embedding: Vector, entities: set[str], enqueue: bool = True
    ) -> tuple[MemoryRecord, bool]:
        """Insert, or return the existing record with the same dedup key and True."""
        key = dedup_key(
            record.workspace_id, record.agent_id, record.scope, record.session_id, record.content_hash
        )
        vec = np.ascontiguousarray(embedding, dtype=np.float32)
        if vec.shape != (self.index.dim,):
            raise ValueError(f"embedding has shape {vec.shape}, expected ({self.index.dim},)")
        if record.scope == "session":
            self.purge_expired(utcnow())  # an expired twin must not come back under its old id
        if isinstance(self.db, PortableDatabase):
            # PostgreSQL: the same writes in one round trip; a twin (nothing written) goes the neutral way.
            done = insert_record(self.db, record, vec, key, entities, enqueue, FOLLOW_WINDOW_SECONDS)
            if done is not None:
                self._inserted(
                    record, vec, entities, done.seq, done.follows, done.generation, done.attributes
                )
                return replace(record, seq=done.seq), False
        with self.db.transaction() as conn:
            found = self.find_duplicate(
                record.workspace_id, record.agent_id, record.scope, record.session_id, record.content_hash
            )  # read inside the transaction: ``db.conn`` is this thread's ``conn``
            slide: tuple[int, int] | None = None
            if found is not None:
                if found.scope == "session" and record.ttl_expires_at:
                    # Sliding TTL: storing it again keeps it alive.
                    conn.execute(
                        "UPDATE memory_records SET ttl_expires_at = ? WHERE seq = ?",
                        (record.ttl_expires_at, found.seq),
                    )
                    found = replace(found, ttl_expires_at=record.ttl_expires_at)
                    slide = self._attribute_write(conn, record.workspace_id)
            else:
                before = self._generation(record.workspace_id)
                attrs_before, attrs_after = self._attribute_write(conn, record.workspace_id)
                seq, previous = self._insert_row(conn, record, vec, key, entities, enqueue)
                after = self._bump(conn, record.workspace_id)
        if found is not None:
            if slide is not None:
                self.attributes.apply(
                    record.workspace_id, *slide, changes={found.seq: {"ttl_expires_at": found.ttl_expires_at}}
                )
            return found, True
        self._inserted(record, vec, entities, seq, previous, after, attrs_after, before, attrs_before)
        return replace(record, seq=seq), False

    def _inserted(
        self,
        record: MemoryRecord,
        vec: Vector,
        entities: set[str],
        seq: int,
        previous: int | None,
        after: int,
        attrs_after: int,
        before: int | None = None,
        attrs_before: int | None = None,
    ) -> None:
        """Hand a committed insert to the caches (counters before it: one less than after, by default)."""
        self._apply(
            record.workspace_id,
            after - 1 if before is None else before,
            after,
            vectors=[(seq, vec)],
            documents=[(seq, keyword_document(record.content, record.tags))],
            links=[(seq, previous)] if previous is not None else [],
        )
        self.attributes.apply(
            record.workspace_id,
            attrs_after - 1 if attrs_before is None else attrs_before,
            attrs_after,
            put=[record_attributes(record, seq, entities)],
        )

    def _attribute_write(self, conn: Any, workspace_id: str) -> tuple[int, int]:
        """Inside a write transaction: the attribute generation before it and after bumping it."""
        return self._attribute_generation(workspace_id), self._bump_attributes(conn, workspace_id)

    def _insert_row(
        self, conn: Any, record: MemoryRecord, vec: Vector, key: str, entities: set[str], enqueue: bool
    ) -> tuple[int, int | None]:
        """The INSERT of ``insert`` and its side tables; (new seq, the seq it follows)."""
        previous = self._previous(conn, record)
        seq = conn.execute(
            "INSERT INTO memory_records (id, workspace_id, agent_id, scope, session_id, kind, content,"
            " content_hash, tags, importance_score, source_type, metadata, status, ttl_expires_at,"
            " created_at, updated_at,"
            " embedding, dedup_key) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING seq",
            (
                record.id,
                record.workspace_id,
                record.agent_id,
                record.scope,
                record.session_id,
                record.kind,
                record.content,
                record.content_hash,
                json.dumps(record.tags),
                record.importance_score,
                record.source_type,
                json.dumps(record.metadata),
                record.status,
                record.ttl_expires_at,
                record.created_at,
                record.updated_at,
                vec.tobytes(),
                key,
            ),
        ).fetchone()[0]
        if previous is not None:
            conn.execute("INSERT INTO memory_follows VALUES (?, ?)", (seq, previous))
        self._write_side_tables(conn, seq, record.tags, entities)
        if enqueue:
            conn.execute(
                "INSERT INTO freshness_queue VALUES (?, ?, ?) ON CONFLICT (record_id) DO UPDATE"
                " SET workspace_id = excluded.workspace_id, enqueued_at = excluded.enqueued_at",
                (record.id, record.workspace_id, utcnow()),
            )
        return int(seq), previous

    def _caches(self) -> tuple[PartitionCache[Any], ...]:
        return (self.index, self.keywords, self.adjacency)

    def _apply(
        self,
        workspace_id: str,
        before: int,
        after: int,
        vectors: Sequence[tuple[int, Vector]] = (),
        documents: Sequence[Document] = (),
        links: Sequence[tuple[int, int]] = (),
        removed: Sequence[int] = (),
        removed_vectors: Sequence[int] = (),
    ) -> None:
        """Hand this process's committed write to every in-process index. Each one must see the new
        generation, even when the write changes nothing of its own, or it would reload."""
        self.index.apply(workspace_id, before, after, added=vectors, removed=removed_vectors)
        self.keywords.apply(workspace_id, before, after, added=documents, removed=removed)
        self.adjacency.apply(workspace_id, before, after, added=links, removed=removed)

    @staticmethod
    def _previous(conn: Any, record: MemoryRecord) -> int | None:
        """The seq of the record the same agent wrote just before, if within the follow window."""
        row = conn.execute(
            "SELECT seq, created_at FROM memory_records WHERE workspace_id = ? AND agent_id = ?"
            " AND scope = ? AND session_id IS NOT DISTINCT FROM ? ORDER BY seq DESC LIMIT 1",
            (record.workspace_id, record.agent_id, record.scope, record.session_id),
        ).fetchone()
        if row is None:
            return None
        gap = datetime.fromisoformat(record.created_at) - datetime.fromisoformat(row[1])
        return int(row[0]) if abs(gap.total_seconds()) <= FOLLOW_WINDOW_SECONDS else None

    @staticmethod
    def _write_side_tables(conn: Any, seq: int, tags: list[str], entities: set[str]) -> None:
        conn.execute("DELETE FROM memory_tags WHERE seq = ?", (seq,))
        conn.execute("DELETE FROM memory_entities WHERE seq = ?", (seq,))
        conn.executemany(
            "INSERT INTO memory_tags VALUES (?, ?) ON CONFLICT DO NOTHING", [(seq, t) for t in tags]
        )
        conn.executemany(
            "INSERT INTO memory_entities VALUES (?, ?) ON CONFLICT DO NOTHING", [(seq, e) for e in entities]
        )

    def update(
        self,
        record: MemoryRecord,
        changes: dict[str, Any],
        embedding: Vector | None,
        entities: set[str] | None,
        enqueue: bool,
    ) -> MemoryRecord:
        """Apply ``changes`` (field -> value); a content change comes with its new embedding. Raises
        ``DuplicateContent`` if another record of the agent and scope already has the new content."""
        try:
            return self._update(record, changes, embedding, entities, enqueue)
        except (sqlite3.IntegrityError, psycopg.errors.UniqueViolation) as exc:
            raise DuplicateContent(record.id) from exc

    @gated
    def _update(
        self,
        record: MemoryRecord,
        changes: dict[str, Any],
        embedding: Vector | None,
        entities: set[str] | None,
        enqueue: bool,
    ) -> MemoryRecord:
        updated = replace(record, **changes, updated_at=utcnow())
        key = dedup_key(
            updated.workspace_id, updated.agent_id, updated.scope, updated.session_id, updated.content_hash
        )
        with self.db.transaction() as conn:
            before = self._generation(record.workspace_id)
            attrs_before, attrs_after = self._attribute_write(conn, record.workspace_id)
            conn.execute(
                "UPDATE memory_records SET content = ?, content_hash = ?, tags = ?, importance_score = ?,"
                " kind = ?,"
                " status = ?, verification_state = ?, superseded_by = ?, updated_at = ?, dedup_key = ?,"
                " embedding = COALESCE(?, embedding) WHERE seq = ?",
                (
                    updated.content,
                    updated.content_hash,
                    json.dumps(updated.tags),
                    updated.importance_score,
                    updated.kind,
                    updated.status,
                    updated.verification_state,
                    updated.superseded_by,
                    updated.updated_at,
                    key,
                    None
                    if embedding is None
                    else np.ascontiguousarray(embedding, dtype=np.float32).tobytes(),
                    record.seq,
                ),
            )
            ents: set[str] | None = None
            if entities is not None or "tags" in changes:
                ents = (
                    entities if entities is not None else self.entities([record.seq]).get(record.seq, set())
                )
                ents = {e for e in ents if not e.startswith("tag:")} | {
                    "tag:" + t.lower() for t in updated.tags
                }
                self._write_side_tables(conn, record.seq, updated.tags, ents)
            if enqueue:
                conn.execute(
                    "INSERT INTO freshness_queue VALUES (?, ?, ?) ON CONFLICT (record_id) DO UPDATE"
                    " SET workspace_id = excluded.workspace_id, enqueued_at = excluded.enqueued_at",
                    (record.id, record.workspace_id, utcnow()),
                )
            # Only new text changes the vector, keyword and adjacency indexes; every change reaches the
            # attribute cache.
            reindex = embedding is not None or "tags" in changes
            after = self._bump(conn, record.workspace_id) if reindex else before
        fields = stored_fields(updated)
        if ents is not None:
            fields["entities"] = frozenset(ents)
        self.attributes.apply(record.workspace_id, attrs_before, attrs_after, changes={record.seq: fields})
        if reindex:
            vectors = (
                [(record.seq, np.ascontiguousarray(embedding, dtype=np.float32))]
                if embedding is not None
                else []
            )
            # A document replaces the record's own; a new vector replaces the old one.
            self._apply(
                record.workspace_id,
                before,
                after,
                vectors=vectors,
                documents=[(record.seq, keyword_document(updated.content, updated.tags))],
                removed_vectors=[record.seq] if vectors else [],
            )
        return updated

    @gated
    def delete(self, workspace_id: str, record_id: str) -> bool:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT seq FROM memory_records WHERE workspace_id = ? AND id = ?", (workspace_id, record_id)
            ).fetchone()
            if row is None:
                return False
            before = self._generation(workspace_id)
            attrs = self._attribute_write(conn, workspace_id)
            conn.execute("DELETE FROM memory_records WHERE seq = ?", (row[0],))
            conn.execute("DELETE FROM memory_follows WHERE follows = ?", (row[0],))  # `seq` cascades
            conn.execute("DELETE FROM freshness_queue WHERE record_id = ?", (record_id,))
            conn.execute(
                "DELETE FROM review_entries WHERE target_id = ? OR related_record_id = ?",
                (record_id, record_id),
            )
            after = self._bump(conn, workspace_id)
        seq = int(row[0])
        self._apply(workspace_id, before, after, removed=[seq], removed_vectors=[seq])
        self.attributes.apply(workspace_id, *attrs, removed=[seq])
        return True

    def purge_expired(self, now: str) -> int:
        """Delete session records whose TTL has passed (they are already invisible to reads)."""
        rows = self.db.conn.execute(
            "SELECT workspace_id, id FROM memory_records WHERE scope = 'session' AND ttl_expires_at <= ?",
            (now,),
        ).fetchall()
        for row in rows:
            self.delete(row[0], row[1])
        return len(rows)

    @gated
    def touch(self, workspace_id: str, seqs: Sequence[int], ttl_expires_at: str) -> None:
        """Slide the TTL of ``seqs`` (session records of ``workspace_id``; others are left alone)."""
        if not seqs:
            return
        if isinstance(self.db, PortableDatabase):  # PostgreSQL: one round trip (memory_pg.touch)
            touched, after = touch_records(self.db, workspace_id, list(seqs), ttl_expires_at)
            changes = {seq: {"ttl_expires_at": ttl_expires_at} for seq in touched}
            self.attributes.apply(workspace_id, after - 1, after, changes=changes)
            return
        marks = ",".join("?" * len(seqs))
        with self.db.transaction() as conn:
            touched = [
                int(r[0])
                for r in conn.execute(
                    f"UPDATE memory_records SET ttl_expires_at = ? WHERE workspace_id = ? AND scope = 'session'"
                    f" AND seq IN ({marks}) RETURNING seq",
                    (ttl_expires_at, workspace_id, *seqs),
                )
            ]
            attrs = self._attribute_write(conn, workspace_id)
        self.attributes.apply(
            workspace_id, *attrs, changes={seq: {"ttl_expires_at": ttl_expires_at} for seq in touched}
        )

    # -- reads -------------------------------------------------------------------------

    def find_duplicate(
        self, workspace_id: str, agent_id: str, scope: str, session_id: str | None, content_hash: str
    ) -> MemoryRecord | None:
        """The record ``insert`` would dedup to, if one is stored (a read; the constraint decides)."""
        key = dedup_key(workspace_id, agent_id, scope, session_id, content_hash)
        pinned: dict[str, tuple[int, int]] | None = getattr(self._snapshots, "counters", None)
        if pinned is None or workspace_id in pinned:
            row = self.db.conn.execute(
                f"SELECT {_COLUMNS} FROM memory_records r WHERE dedup_key = ?", (key,)
            ).fetchone()
            return None if row is None else record_from_row(row)
        # In a snapshot that has not read this workspace's counters yet: both in one statement (the
        # store call's first read: the rest of the call then asks the database nothing before writing).
        row = self.db.conn.execute(
            f"SELECT g.generation AS g_generation, g.attributes AS g_attributes, {_COLUMNS}"
            " FROM (SELECT 1 AS one) AS o LEFT JOIN memory_generations g ON g.workspace_id = ?"
            " LEFT JOIN memory_records r ON r.dedup_key = ?",
            (workspace_id, key),
        ).fetchone()
        counters = (int(row["g_generation"] or 0), int(row["g_attributes"] or 0))
        self._gate.settle(lambda: self._lagging(workspace_id, counters))
        pinned[workspace_id] = counters
        return None if row["id"] is None else record_from_row(row)

    def _plain(self) -> Any:
        """A cursor yielding tuples: hot queries of many small rows skip building ``sqlite3.Row``s."""
        cursor = self.db.conn.cursor()
        cursor.row_factory = None
        return cursor

    def get(self, workspace_id: str, record_id: str) -> MemoryRecord | None:
        row = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM memory_records r WHERE r.workspace_id = ? AND r.id = ?",
            (workspace_id, record_id),
        ).fetchone()
        return None if row is None else record_from_row(row)

    def by_seqs(self, seqs: Sequence[int], workspace_id: str | None = None) -> dict[int, MemoryRecord]:
        """The records of ``seqs``; with ``workspace_id``, those of that workspace, from the attribute
        cache (no query: inside ``snapshot()`` a search asks the database only for its counters)."""
        if workspace_id is not None:
            cached = self.attributes.rows(workspace_id, self._read_counters(workspace_id)[1], seqs)
            return {seq: record_from_attributes(workspace_id, a) for seq, a in cached.items()}
        if not seqs:
            return {}
        marks = ",".join("?" * len(seqs))
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM memory_records r WHERE r.seq IN ({marks})", tuple(seqs)
        )
        return {int(r["seq"]): record_from_row(r) for r in rows}

    def ranking_rows(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, RankingRow]:
        """What ranking reads of each candidate: no content, tags or metadata to decode."""
        rows = self.attributes.rows(workspace_id, self._read_counters(workspace_id)[1], seqs)
        return {
            seq: RankingRow(
                seq, a.id, a.session_id, a.updated_at, a.importance_score, a.created_at, a.entities
            )
            for seq, a in rows.items()
        }

    def _where(self, view: Visibility) -> tuple[str, list[Any]]:
        """The WHERE clause of everything ``view`` may see; every filter applies here, inside the query."""
        # Without an agent (the REST whole-workspace view) the agent term goes, rather than becoming
        # `? IS NULL OR ...`, which would keep the planner off the (workspace, agent) index.
        agent = "" if view.agent_id is None else "r.agent_id = ? AND "
        clauses = [
            "r.workspace_id = ?",
            f"(r.scope = 'global' OR ({agent}(r.scope = 'per_agent'"
            " OR (r.scope = 'session' AND r.ttl_expires_at > ? AND (CAST(? AS TEXT) IS NULL OR r.session_id = ?)))))",
        ]
        params: list[Any] = [view.workspace_id]
        if view.agent_id is not None:
            params.append(view.agent_id)
        params.extend((view.now, view.session_id, view.session_id))
        if view.statuses is not None:
            clauses.append(f"r.status IN ({','.join('?' * len(view.statuses))})")
            params.extend(view.statuses)
        if view.exclude_statuses:
            clauses.append(f"r.status NOT IN ({','.join('?' * len(view.exclude_statuses))})")
            params.extend(view.exclude_statuses)
        if view.scope is not None:
            clauses.append("r.scope = ?")
            params.append(view.scope)
        if view.kind is not None:
            clauses.append("r.kind = ?")
            params.append(view.kind)
        if view.source_types:
            clauses.append(f"r.source_type IN ({','.join('?' * len(view.source_types))})")
            params.extend(view.source_types)
        for tag in view.tags:
            clauses.append("EXISTS (SELECT 1 FROM memory_tags t WHERE t.seq = r.seq AND t.tag = ?)")
            params.append(tag)
        return " AND ".join(clauses), params

    def list_records(self, view: Visibility, limit: int, offset: int) -> tuple[list[MemoryRecord], int]:
        where, params = self._where(view)
        total = int(
            self.db.conn.execute(f"SELECT count(*) FROM memory_records r WHERE {where}", params).fetchone()[0]
        )
        rows = self.db.conn.execute(
            f"SELECT {_COLUMNS} FROM memory_records r WHERE {where} ORDER BY r.created_at DESC, r.seq DESC"
            " LIMIT ? OFFSET ?",
            (*params, limit, offset),
        ).fetchall()
        return [record_from_row(r) for r in rows], total

    def facets(self, workspace_id: str, now: str) -> tuple[list[str], list[str]]:
        """The distinct kinds and source types of the workspace's live records (expired sessions aside)."""
        live = "workspace_id = ? AND (ttl_expires_at IS NULL OR ttl_expires_at > ?)"
        kinds = self.db.conn.execute(
            f"SELECT DISTINCT kind FROM memory_records WHERE {live} ORDER BY kind", (workspace_id, now)
        ).fetchall()
        sources = self.db.conn.execute(
            f"SELECT DISTINCT source_type FROM memory_records WHERE {live} AND source_type != ''"
            " ORDER BY source_type",
            (workspace_id, now),
        ).fetchall()
        return [r[0] for r in kinds], [r[0] for r in sources]

    def visible_seqs(self, view: Visibility) -> list[int]:
        where, params = self._where(view)
        return [
            int(r[0])
            for r in self.db.conn.execute(f"SELECT r.seq FROM memory_records r WHERE {where}", params)
        ]

    def visible_subset(
        self, view: Visibility, seqs: Sequence[int], attributes: int | None = None
    ) -> set[int]:
        """Which of ``seqs`` the view may see, every filter applied (from the attribute cache, as of
        the ``attributes`` generation the caller read, else the current one)."""
        if not seqs:
            return set()
        workspace = view.workspace_id
        generation = self._read_counters(workspace)[1] if attributes is None else attributes
        return self.attributes.visible(workspace, generation, seqs, view)

    def dense_search(self, view: Visibility, query: Vector, limit: int) -> list[tuple[int, float]]:
        """The ``limit`` records nearest ``query`` among those the view may see.

        Ranks the whole workspace (one GEMV, or the HNSW graph) and keeps the visible records among the
        first ``4 * limit``, widening while too few survive. Exact for the exact index: a visible record
        outside the probe ranks below every record inside it. Selecting the visible set in SQL first
        cost 42 ms at 10,000 records; this costs about 1 ms when most records are visible.
        """
        workspace = view.workspace_id
        generation, attributes = self._read_counters(workspace)

        def exact(seqs: list[int]) -> list[tuple[int, float]]:
            return self.index.search_subset(workspace, generation, query, seqs, limit) if seqs else []

        return self._post_filtered(
            view,
            limit,
            attributes,
            lambda probe: self.index.search(workspace, generation, query, probe),
            # The HNSW graph (above 20,000 vectors) may return fewer than asked: only the size says
            # whether the workspace is exhausted.
            lambda hits, probe: probe >= self.index.size(workspace, generation),
            exact,
        )

    def keyword_search(self, view: Visibility, query: str, limit: int) -> list[tuple[int, float]]:
        """BM25 top ``limit`` among visible records, post-filtered the same way as ``dense_search``."""
        workspace = view.workspace_id
        generation, attributes = self._read_counters(workspace)

        def exact(seqs: list[int]) -> list[tuple[int, float]]:
            # A selective filter: rank every match (cheap in memory), keep the visible ones.
            allowed = set(seqs)
            hits = self.keywords.search(workspace, generation, query, None)
            return [(s, score) for s, score in hits if s in allowed][:limit]

        return self._post_filtered(
            view,
            limit,
            attributes,
            lambda probe: self.keywords.search(workspace, generation, query, probe),
            lambda hits, probe: len(hits) < probe,
            exact,
        )

    def _post_filtered(
        self,
        view: Visibility,
        limit: int,
        attributes: int,
        ranked: Callable[[int], list[tuple[int, float]]],
        exhausted: Callable[[list[tuple[int, float]], int], bool],
        exact: Callable[[list[int]], list[tuple[int, float]]],
    ) -> list[tuple[int, float]]:
        """The first ``limit`` visible hits of a workspace-wide ranking: probe ``4 * limit`` hits, widen
        ×4 while too few are visible and the ranking is not ``exhausted``, and past ``MAX_PROBE`` rank
        the materialised visible set with ``exact``."""
        probe = 4 * limit
        while probe <= MAX_PROBE:
            hits = ranked(probe)
            visible = self.visible_subset(view, [s for s, _ in hits], attributes)
            found = [(s, score) for s, score in hits if s in visible]
            if len(found) >= limit or exhausted(hits, probe):
                return found[:limit]
            probe *= 4
        return exact(self.visible_seqs(view))

    def vectors(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, Vector]:
        return self.index.vectors(workspace_id, self._read_counters(workspace_id)[0], seqs)

    def adjacent(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, set[int]]:
        """Each seq's conversation neighbours: the record it follows and the records that follow it."""
        return self.adjacency.neighbours(workspace_id, self._read_counters(workspace_id)[0], seqs)

    def context(self, workspace_id: str, scores: dict[int, float], hops: int) -> dict[int, float]:
        """Scores lent along conversation links (``AdjacencyIndex.lend``)."""
        return self.adjacency.lend(workspace_id, self._read_counters(workspace_id)[0], scores, hops)

    def entities(self, seqs: Sequence[int]) -> dict[int, set[str]]:
        return self._grouped("SELECT seq, entity FROM memory_entities WHERE seq IN ({})", seqs)

    def links(self, seqs: Sequence[int], workspace_id: str | None = None) -> dict[int, set[str]]:
        """Each seq's explicitly related record ids; with ``workspace_id``, from the attribute cache."""
        if workspace_id is not None:
            rows = self.attributes.rows(workspace_id, self._read_counters(workspace_id)[1], seqs)
            return {seq: set(a.links) for seq, a in rows.items() if a.links}
        return self._grouped("SELECT seq, related_id FROM memory_links WHERE seq IN ({})", seqs)

    def _grouped(self, query: str, seqs: Sequence[int]) -> dict[int, set[str]]:
        found: dict[int, set[str]] = {}
        if seqs:
            for seq, value in self.db.conn.execute(query.format(",".join("?" * len(seqs))), tuple(seqs)):
                found.setdefault(int(seq), set()).add(value)
        return found
