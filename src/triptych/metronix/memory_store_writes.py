"""Agent memory's writes, shared by both engines' stores: insert with dedup, update, delete, expiry, the
embedding model and re-embedding. Each write bumps the workspace's cache counters inside its transaction
and hands what it committed to this process's caches (``MemoryCaches.apply``). Split from
``memory_store.py`` (issue 29).

Dedup is a UNIQUE constraint on (workspace, agent, scope, session, content hash): two concurrent writers
of the same content cannot both insert. What an engine does its own way (PostgreSQL's one-round-trip
insert and TTL slide, its error classes) it does in its store, through the hooks below.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from triptych.core.partitions import WriteGate, gated, gated_by
from triptych.core.search import Vector
from triptych.metronix.dialect import Dialect
from triptych.metronix.memory_model import (
    DuplicateContent,
    MemoryRecord,
    dedup_key,
    keyword_document,
    named_workspace,
    record_workspace,
    stored_fields,
)
from triptych.metronix.memory_store_reads import MemoryReads
from triptych.metronix.store import utcnow

# Records written by one agent within this many seconds of each other are adjacent: one exchange of a
# conversation, or one batch. Longer gaps usually start another topic.
FOLLOW_WINDOW_SECONDS = 3600.0


def queue_check(conn: Any, d: Dialect, record_id: str, workspace_id: str) -> None:
    """Queue the record's freshness check (again: a queued one moves to now)."""
    conn.execute(
        f"INSERT INTO freshness_queue VALUES ({d.p}, {d.p}, {d.p}) ON CONFLICT (record_id) DO UPDATE"
        " SET workspace_id = excluded.workspace_id, enqueued_at = excluded.enqueued_at",
        (record_id, workspace_id, utcnow()),
    )


class MemoryWrites(MemoryReads):
    """A memory store's writes on top of its reads: each engine's store is one of these."""

    _gate: WriteGate
    # The engine's error for a violated UNIQUE constraint (an update onto another record's content).
    unique_violation: tuple[type[Exception], ...] = ()

    def _insert_at_once(
        self, record: MemoryRecord, vec: Vector, key: str, entities: set[str], enqueue: bool
    ) -> MemoryRecord | None:
        """An engine's own insert of a new record (committed and handed to the caches), or None to take
        the neutral path below (the embedded engine always; PostgreSQL when the record has a twin)."""
        return None

    def writing(self, workspace_id: str | None) -> AbstractContextManager[Any]:
        """The transaction of a write to ``workspace_id``'s records (None: to the whole store). Every
        write of this store and of its review store opens it here: the one place an engine orders its
        writers (``PostgresMemoryStore`` explains how)."""
        return self.db.transaction()

    def set_embedding_model(self, name: str, dim: int) -> None:
        p = self.dialect.p
        with self.writing(None) as conn:
            conn.executemany(
                f"INSERT INTO memory_meta VALUES ({p}, {p}) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("embedding_model", name), ("embedding_dim", str(dim))],
            )

    @gated
    def replace_embeddings(self, vectors: Sequence[tuple[int, Vector]]) -> None:
        """New vectors for existing records (a re-embedding); the touched workspaces reload their index."""
        p = self.dialect.p
        with self.writing(None) as conn:
            conn.executemany(
                f"UPDATE memory_records SET embedding = {p} WHERE seq = {p}",
                [(np.ascontiguousarray(vec, dtype=np.float32).tobytes(), seq) for seq, vec in vectors],
            )
            clause, params = self.dialect.one_of("seq", [seq for seq, _ in vectors])
            workspaces = [
                row[0]
                for row in conn.execute(
                    f"SELECT DISTINCT workspace_id FROM memory_records WHERE {clause}", params
                )
            ]
            for workspace in workspaces:
                self.caches.bump(conn, workspace)

    # -- insert ----------------------------------------------------------------------------------

    @gated_by(record_workspace)
    def insert(
        self, record: MemoryRecord, embedding: Vector, entities: set[str], enqueue: bool = True
    ) -> tuple[MemoryRecord, bool]:
        """Insert, or return the existing record with the same dedup key and True."""
        key = dedup_key(
            record.workspace_id, record.agent_id, record.scope, record.session_id, record.content_hash
        )
        vec = np.ascontiguousarray(embedding, dtype=np.float32)
        if vec.shape != (self.caches.index.dim,):
            raise ValueError(f"embedding has shape {vec.shape}, expected ({self.caches.index.dim},)")
        if record.scope == "session":
            self.purge_expired(utcnow())  # an expired twin must not come back under its old id
        done = self._insert_at_once(record, vec, key, entities, enqueue)
        if done is not None:
            return done, False
        caches, p = self.caches, self.dialect.p
        with self.writing(record.workspace_id) as conn:
            found = self.find_duplicate(
                record.workspace_id, record.agent_id, record.scope, record.session_id, record.content_hash
            )  # read inside the transaction: ``db.conn`` is this thread's ``conn``
            slide: tuple[int, int] | None = None
            if found is not None:
                if found.scope == "session" and record.ttl_expires_at:
                    # Sliding TTL: storing it again keeps it alive.
                    conn.execute(
                        f"UPDATE memory_records SET ttl_expires_at = {p} WHERE seq = {p}",
                        (record.ttl_expires_at, found.seq),
                    )
                    found = replace(found, ttl_expires_at=record.ttl_expires_at)
                    slide = caches.attribute_write(conn, record.workspace_id)
            else:
                before = caches.generation(record.workspace_id)
                attrs_before, attrs_after = caches.attribute_write(conn, record.workspace_id)
                seq, previous = self._insert_row(conn, record, vec, key, entities, enqueue)
                after = caches.bump(conn, record.workspace_id)
        if found is not None:
            if slide is not None:
                caches.attributes.apply(
                    record.workspace_id, *slide, changes={found.seq: {"ttl_expires_at": found.ttl_expires_at}}
                )
            return found, True
        caches.inserted(record, vec, entities, seq, previous, after, attrs_after, before, attrs_before)
        return replace(record, seq=seq), False

    def _insert_row(
        self, conn: Any, record: MemoryRecord, vec: Vector, key: str, entities: set[str], enqueue: bool
    ) -> tuple[int, int | None]:
        """The INSERT of ``insert`` and its side tables; (new seq, the seq it follows)."""
        d = self.dialect
        previous = _previous(conn, d, record)
        seq = conn.execute(
            "INSERT INTO memory_records (id, workspace_id, agent_id, scope, session_id, kind, content,"
            " content_hash, tags, importance_score, source_type, metadata, status, ttl_expires_at,"
            " created_at, updated_at,"
            f" embedding, dedup_key) VALUES ({d.marks(18)}) RETURNING seq",
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
            conn.execute(f"INSERT INTO memory_follows VALUES ({d.p}, {d.p})", (seq, previous))
        _write_side_tables(conn, d, seq, record.tags, entities)
        if enqueue:
            queue_check(conn, self.dialect, record.id, record.workspace_id)
        return int(seq), previous

    # -- update, delete, expiry --------------------------------------------------------------------

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
        except self.unique_violation as exc:
            raise DuplicateContent(record.id) from exc

    @gated_by(record_workspace)
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
        caches, p = self.caches, self.dialect.p
        with self.writing(record.workspace_id) as conn:
            before = caches.generation(record.workspace_id)
            attrs_before, attrs_after = caches.attribute_write(conn, record.workspace_id)
            conn.execute(
                f"UPDATE memory_records SET content = {p}, content_hash = {p}, tags = {p}, importance_score = {p},"
                f" kind = {p},"
                f" status = {p}, verification_state = {p}, superseded_by = {p}, updated_at = {p}, dedup_key = {p},"
                f" embedding = COALESCE({p}, embedding) WHERE seq = {p}",
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
                _write_side_tables(conn, self.dialect, record.seq, updated.tags, ents)
            if enqueue:
                queue_check(conn, self.dialect, record.id, record.workspace_id)
            # Only new text changes the vector, keyword and adjacency indexes; every change reaches the
            # attribute cache.
            reindex = embedding is not None or "tags" in changes
            after = caches.bump(conn, record.workspace_id) if reindex else before
        fields = stored_fields(updated)
        if ents is not None:
            fields["entities"] = frozenset(ents)
        caches.attributes.apply(record.workspace_id, attrs_before, attrs_after, changes={record.seq: fields})
        if reindex:
            vectors = (
                [(record.seq, np.ascontiguousarray(embedding, dtype=np.float32))]
                if embedding is not None
                else []
            )
            # A document replaces the record's own; a new vector replaces the old one.
            caches.apply(
                record.workspace_id,
                before,
                after,
                vectors=vectors,
                documents=[(record.seq, keyword_document(updated.content, updated.tags))],
                removed_vectors=[record.seq] if vectors else [],
            )
        return updated

    @gated_by(named_workspace)
    def delete(self, workspace_id: str, record_id: str) -> bool:
        caches, p = self.caches, self.dialect.p
        with self.writing(workspace_id) as conn:
            row = conn.execute(
                f"SELECT seq FROM memory_records WHERE workspace_id = {p} AND id = {p}",
                (workspace_id, record_id),
            ).fetchone()
            if row is None:
                return False
            before = caches.generation(workspace_id)
            attrs = caches.attribute_write(conn, workspace_id)
            conn.execute(f"DELETE FROM memory_records WHERE seq = {p}", (row[0],))
            conn.execute(f"DELETE FROM memory_follows WHERE follows = {p}", (row[0],))  # `seq` cascades
            conn.execute(f"DELETE FROM freshness_queue WHERE record_id = {p}", (record_id,))
            conn.execute(
                f"DELETE FROM review_entries WHERE target_id = {p} OR related_record_id = {p}",
                (record_id, record_id),
            )
            after = caches.bump(conn, workspace_id)
        seq = int(row[0])
        caches.apply(workspace_id, before, after, removed=[seq], removed_vectors=[seq])
        caches.attributes.apply(workspace_id, *attrs, removed=[seq])
        return True

    def purge_expired(self, now: str) -> int:
        """Delete session records whose TTL has passed (they are already invisible to reads)."""
        rows = self.db.conn.execute(
            "SELECT workspace_id, id FROM memory_records WHERE scope = 'session'"
            f" AND ttl_expires_at <= {self.dialect.p}",
            (now,),
        ).fetchall()
        for row in rows:
            self.delete(row[0], row[1])
        return len(rows)

    def workspaces(self) -> list[str]:
        """Every workspace that holds records."""
        return [r[0] for r in self.caches.plain().execute("SELECT DISTINCT workspace_id FROM memory_records")]


def _previous(conn: Any, d: Dialect, record: MemoryRecord) -> int | None:
    """The seq of the record the same agent wrote just before, if within the follow window."""
    p = d.p
    row = conn.execute(
        f"SELECT seq, created_at FROM memory_records WHERE workspace_id = {p} AND agent_id = {p}"
        f" AND scope = {p} AND session_id IS NOT DISTINCT FROM {p} ORDER BY seq DESC LIMIT 1",
        (record.workspace_id, record.agent_id, record.scope, record.session_id),
    ).fetchone()
    if row is None:
        return None
    gap = datetime.fromisoformat(record.created_at) - datetime.fromisoformat(row[1])
    return int(row[0]) if abs(gap.total_seconds()) <= FOLLOW_WINDOW_SECONDS else None


def _write_side_tables(conn: Any, d: Dialect, seq: int, tags: list[str], entities: set[str]) -> None:
    p = d.p
    conn.execute(f"DELETE FROM memory_tags WHERE seq = {p}", (seq,))
    conn.execute(f"DELETE FROM memory_entities WHERE seq = {p}", (seq,))
    conn.executemany(
        f"INSERT INTO memory_tags VALUES ({p}, {p}) ON CONFLICT DO NOTHING", [(seq, t) for t in tags]
    )
    conn.executemany(
        f"INSERT INTO memory_entities VALUES ({p}, {p}) ON CONFLICT DO NOTHING", [(seq, e) for e in entities]
    )
