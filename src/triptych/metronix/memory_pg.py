"""Agent memory's hot write on PostgreSQL: a new record, its side tables and both cache counters in one
statement, sent with its write lock as one round trip (``NativeDatabase.batched``).

The engine-neutral ``MemoryWrites.insert`` (``memory_store_writes``) takes 14 statements; on SQLite each
costs microseconds, on PostgreSQL each is a round trip to another process (milliseconds on a busy machine),
so ``PostgresMemoryStore`` folds them into one data-modifying ``WITH``: what it writes is exactly what
the neutral path writes.
A dedup-key conflict inserts nothing (every part hangs off the inserted row) and returns no row; the
caller then takes the neutral path, which finds the twin and slides its TTL as before.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from triptych.core.pg import NativeDatabase
from triptych.core.search import Vector
from triptych.metronix.memory_model import MemoryRecord
from triptych.metronix.store import utcnow

# The neutral path's steps, in its order: the record this one follows (read before the insert; the
# statement's snapshot does not see its own row), the row, its adjacency link within the window, tags,
# entities, the freshness check queued, and both counters bumped (writers of the workspace hold its lock,
# so each counter's value before is the value after minus one).
INSERT_RECORD = b"""
WITH prev AS (
    SELECT seq, created_at FROM memory_records
    WHERE workspace_id = %(workspace)s AND agent_id = %(agent)s AND scope = %(scope)s AND SESSION_MATCH
    ORDER BY seq DESC LIMIT 1
), ins AS (
    INSERT INTO memory_records (id, workspace_id, agent_id, scope, session_id, kind, content, content_hash,
        tags, importance_score, source_type, metadata, status, ttl_expires_at, created_at, updated_at,
        embedding, dedup_key)
    VALUES (%(id)s, %(workspace)s, %(agent)s, %(scope)s, %(session)s, %(kind)s, %(content)s, %(hash)s,
        %(tags_json)s, %(importance)s, %(source)s, %(metadata)s, %(status)s, %(ttl)s, %(created)s,
        %(updated)s, %(embedding)s, %(key)s)
    ON CONFLICT (dedup_key) DO NOTHING
    RETURNING seq
), fol AS (
    INSERT INTO memory_follows (seq, follows)
    SELECT ins.seq, prev.seq FROM ins, prev
    WHERE abs(extract(epoch FROM (%(created)s::timestamptz - prev.created_at::timestamptz))) <= %(window)s
    RETURNING follows
), tag AS (
    INSERT INTO memory_tags SELECT ins.seq, t FROM ins, unnest(%(tags)s::text[]) AS t ON CONFLICT DO NOTHING
), ent AS (
    INSERT INTO memory_entities SELECT ins.seq, e FROM ins, unnest(%(entities)s::text[]) AS e
    ON CONFLICT DO NOTHING
), queued AS (
    INSERT INTO freshness_queue SELECT %(id)s, %(workspace)s, %(enqueued)s FROM ins WHERE %(enqueue)s
    ON CONFLICT (record_id) DO UPDATE
    SET workspace_id = excluded.workspace_id, enqueued_at = excluded.enqueued_at
), counters AS (
    INSERT INTO memory_generations (workspace_id, generation, attributes) SELECT %(workspace)s, 1, 1 FROM ins
    ON CONFLICT (workspace_id) DO UPDATE SET generation = memory_generations.generation + 1,
        attributes = memory_generations.attributes + 1
    RETURNING generation, attributes
)
SELECT ins.seq, (SELECT follows FROM fol), counters.generation, counters.attributes FROM ins, counters
"""


# ``IS NOT DISTINCT FROM`` cannot be an index condition: the planner then sorted all of an agent's
# records to find the last one (9 ms per write at 8,000 records). One text per case, each on the index.
INSERT_BY_SESSION = {
    True: INSERT_RECORD.replace(b"SESSION_MATCH", b"session_id = %(session)s"),
    False: INSERT_RECORD.replace(b"SESSION_MATCH", b"session_id IS NULL"),
}


class Inserted(NamedTuple):
    seq: int
    follows: int | None
    generation: int  # both counters after the write (each was one less before it)
    attributes: int


def insert_record(
    db: NativeDatabase,
    record: MemoryRecord,
    vec: Vector,
    key: str,
    entities: set[str],
    enqueue: bool,
    window_seconds: float,
) -> Inserted | None:
    """Insert ``record`` as ``MemoryWrites.insert`` would, in one round trip; None if a record with
    its dedup key exists (nothing was written)."""
    params: dict[str, Any] = {
        "id": record.id,
        "workspace": record.workspace_id,
        "agent": record.agent_id,
        "scope": record.scope,
        "session": record.session_id,
        "kind": record.kind,
        "content": record.content,
        "hash": record.content_hash,
        "tags_json": json.dumps(record.tags),
        "importance": record.importance_score,
        "source": record.source_type,
        "metadata": json.dumps(record.metadata),
        "status": record.status,
        "ttl": record.ttl_expires_at,
        "created": record.created_at,
        "updated": record.updated_at,
        "embedding": vec.tobytes(),
        "key": key,
        "window": window_seconds,
        "tags": list(record.tags),
        "entities": sorted(entities),
        "enqueue": enqueue,
        "enqueued": utcnow(),
    }

    rows = db.batched(INSERT_BY_SESSION[record.session_id is not None], params, tenant=record.workspace_id)
    if not rows:
        return None
    seq, follows, generation, attributes = rows[0]
    return Inserted(int(seq), None if follows is None else int(follows), int(generation), int(attributes))


# ``touch`` in one statement: the TTL slide and the attribute counter's bump (``touch`` bumps it even
# when no row matched, as the neutral path does).
TOUCH = b"""
WITH touched AS (
    UPDATE memory_records SET ttl_expires_at = %(ttl)s
    WHERE workspace_id = %(workspace)s AND scope = 'session' AND seq = ANY(%(seqs)s)
    RETURNING seq
), counters AS (
    INSERT INTO memory_generations (workspace_id, generation, attributes) VALUES (%(workspace)s, 0, 1)
    ON CONFLICT (workspace_id) DO UPDATE SET attributes = memory_generations.attributes + 1
    RETURNING attributes
)
SELECT (SELECT coalesce(array_agg(seq), '{}') FROM touched), counters.attributes FROM counters
"""


def touch(
    db: NativeDatabase, workspace_id: str, seqs: list[int], ttl_expires_at: str
) -> tuple[list[int], int]:
    """Slide the TTL of the workspace's session records among ``seqs`` as ``SqliteMemoryStore.touch``
    does, in one round trip: (the seqs touched, the attribute counter after the write)."""
    rows = db.batched(
        TOUCH, {"ttl": ttl_expires_at, "workspace": workspace_id, "seqs": seqs}, tenant=workspace_id
    )
    touched, attributes = rows[0]
    return [int(seq) for seq in touched], int(attributes)
