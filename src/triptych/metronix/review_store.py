"""Agent memory's review queue, audit events and freshness queue: the ``ReviewStore`` protocol and one
implementation per engine (``SqliteReviewStore``, ``PostgresReviewStore``).

Split from ``memory_store.py`` (issue 16): the job of filing what freshness checks find, resolving it,
recording machine events and tracking queued checks. Its tables live in the memory component's
migrations (``memory_schema_sqlite``, ``memory_schema_pg``), in the same database as the records,
because a filing changes a record's status in the same transaction; the record store hands this one its
database, write gate and caches so those changes reach the caches exactly as a record write does. The
SQL is written once (``ReviewQueue``), its placeholders the store's ``dialect``'s (``metronix/dialect.py``),
and each engine runs it as written; neither engine needs statements of its own today, so the engine
classes differ only in the database and dialect they take.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from triptych.core.db import Database
from triptych.core.partitions import WriteGate, gated, gated_by
from triptych.core.pg import NativeDatabase
from triptych.metronix.dialect import POSTGRES, SQLITE, Dialect
from triptych.metronix.memory_caches import MemoryCaches
from triptych.metronix.memory_model import (
    Filing,
    MemoryRecord,
    Resolution,
    ReviewEntry,
    record_workspace,
    review_from_row,
)
from triptych.metronix.store import utcnow

# The record store's ``writing(workspace_id)``: every write here opens its transaction through it.
Writing = Callable[[str | None], AbstractContextManager[Any]]


class ReviewStore(Protocol):
    """The review queue, audit events and freshness queue, as the memory service uses them (each engine
    implements it; the embedded one is ``SqliteReviewStore``)."""

    def file_review(self, record: MemoryRecord, filing: Filing) -> bool: ...
    def finish_check(self, record: MemoryRecord, filing: Filing | None) -> bool: ...
    def list_reviews(
        self, workspace_id: str, reason: str | None, record_id: str | None, limit: int, offset: int
    ) -> tuple[list[ReviewEntry], int]: ...
    def get_review(self, workspace_id: str, review_id: str) -> ReviewEntry | None: ...
    def resolve_review(
        self, review: ReviewEntry, record: MemoryRecord, resolution: Resolution
    ) -> str | None: ...
    def events(self, workspace_id: str, target_id: str) -> list[dict[str, Any]]: ...
    def pending_checks(self, limit: int = 100) -> list[tuple[str, str]]: ...
    def queued_checks(self) -> int: ...
    def check_done(self, record_id: str) -> None: ...


class ReviewQueue:
    """Both engines' review store: the statements below run on either."""

    def __init__(
        self,
        db: Database | NativeDatabase,
        dialect: Dialect,
        gate: WriteGate,
        caches: MemoryCaches,
        writing: Writing,
    ) -> None:
        self.db = db
        self.dialect = dialect
        self._gate = gate
        self._writing = writing
        self.attributes = caches.attributes
        self._attribute_write = caches.attribute_write

    # -- review queue and audit -----------------------------------------------------------

    def file_review(self, record: MemoryRecord, filing: Filing) -> bool:
        """File a review entry (idempotent per target, related record and reason); True if it is new."""
        return self._file(record, filing, done=False)

    def finish_check(self, record: MemoryRecord, filing: Filing | None) -> bool:
        """A freshness check's outcome: its filing, if any, and the check dequeued, in one transaction.
        True if a new review entry was filed."""
        return self._file(record, filing, done=True)

    @gated_by(record_workspace)
    def _file(self, record: MemoryRecord, filing: Filing | None, done: bool) -> bool:
        p = self.dialect.p
        if filing is None:  # the usual outcome: one statement, no transaction (one round trip, not four)
            if done:
                self.db.conn.execute(f"DELETE FROM freshness_queue WHERE record_id = {p}", (record.id,))
            return False
        created, attrs, changes, linked = False, None, {}, []
        with self._writing(record.workspace_id) as conn:
            if filing is not None:
                cursor = conn.execute(
                    "INSERT INTO review_entries (id, workspace_id, target_id, target_kind, reason,"
                    f" related_record_id, content, confidence, created_at) VALUES ({self.dialect.marks(9)})"
                    " ON CONFLICT DO NOTHING",
                    (
                        "review_" + uuid.uuid4().hex,
                        record.workspace_id,
                        record.id,
                        "memory_record",
                        filing.reason,
                        filing.related_id or "",
                        record.content,
                        round(filing.confidence, 4),
                        utcnow(),
                    ),
                )
                created = bool(cursor.rowcount > 0)
                if created and filing.status is not None:
                    conn.execute(
                        f"UPDATE memory_records SET status = {p} WHERE seq = {p}", (filing.status, record.seq)
                    )
                    attrs = self._attribute_write(conn, record.workspace_id)
                    changes = {record.seq: {"status": filing.status}}
                if filing.link is not None and filing.related_id:
                    added = conn.execute(
                        f"INSERT INTO memory_links VALUES ({p}, {p}, {p}) ON CONFLICT DO NOTHING",
                        (record.seq, filing.related_id, filing.link),
                    ).rowcount
                    if added > 0:  # the attribute cache holds links too
                        linked = [(record.seq, filing.related_id)]
                        attrs = attrs or self._attribute_write(conn, record.workspace_id)
            if done:
                conn.execute(f"DELETE FROM freshness_queue WHERE record_id = {p}", (record.id,))
        if attrs is not None:
            self.attributes.apply(record.workspace_id, *attrs, changes=changes, links=linked)
        return created

    def list_reviews(
        self, workspace_id: str, reason: str | None, record_id: str | None, limit: int, offset: int
    ) -> tuple[list[ReviewEntry], int]:
        p = self.dialect.p
        clauses, params = [f"workspace_id = {p}"], [workspace_id]
        if reason is not None:
            clauses.append(f"reason = {p}")
            params.append(reason)
        if record_id is not None:
            clauses.append(f"(target_id = {p} OR related_record_id = {p})")
            params.extend([record_id, record_id])
        where = " AND ".join(clauses)
        total = int(
            self.db.conn.execute(f"SELECT count(*) FROM review_entries WHERE {where}", params).fetchone()[0]
        )
        rows = self.db.conn.execute(
            f"SELECT * FROM review_entries WHERE {where} ORDER BY created_at, id LIMIT {p} OFFSET {p}",
            (*params, limit, offset),
        ).fetchall()
        return [review_from_row(r) for r in rows], total

    def get_review(self, workspace_id: str, review_id: str) -> ReviewEntry | None:
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT * FROM review_entries WHERE workspace_id = {p} AND id = {p}", (workspace_id, review_id)
        ).fetchone()
        return None if row is None else review_from_row(row)

    @gated_by(lambda review, record, *args, **kwargs: record.workspace_id)
    def resolve_review(self, review: ReviewEntry, record: MemoryRecord, resolution: Resolution) -> str | None:
        """Apply a resolution in one transaction; the machine event id, or None if already resolved."""
        p = self.dialect.p
        status, verification_state, superseded_by = (
            resolution.status,
            resolution.verification_state,
            resolution.superseded_by,
        )
        event_id = "evt_" + secrets.token_hex(12)
        now = utcnow()
        with self._writing(record.workspace_id) as conn:
            gone = conn.execute(f"DELETE FROM review_entries WHERE id = {p}", (review.id,)).rowcount == 0
            if gone:  # a concurrent caller resolved it first
                return None
            conn.execute(
                f"UPDATE memory_records SET status = {p}, verification_state = {p}, superseded_by = {p},"
                f" updated_at = {p}"
                f" WHERE seq = {p}",
                (status, verification_state, superseded_by, now, record.seq),
            )
            attrs = self._attribute_write(conn, record.workspace_id)
            linked = []
            if superseded_by is not None:
                added = conn.execute(
                    f"INSERT INTO memory_links VALUES ({p}, {p}, 'superseded_by') ON CONFLICT DO NOTHING",
                    (record.seq, superseded_by),
                ).rowcount
                linked = [(record.seq, superseded_by)] if added > 0 else []
            conn.execute(
                f"INSERT INTO machine_events VALUES ({p}, {p}, 'freshness_review_resolved', {p}, {p}, {p}, {p})",
                (
                    event_id,
                    review.workspace_id,
                    resolution.actor,
                    record.id,
                    json.dumps(resolution.payload),
                    utcnow(),
                ),
            )
        fields = {
            "status": status,
            "verification_state": verification_state,
            "superseded_by": superseded_by,
            "updated_at": now,
        }
        self.attributes.apply(record.workspace_id, *attrs, changes={record.seq: fields}, links=linked)
        return event_id

    def events(self, workspace_id: str, target_id: str) -> list[dict[str, Any]]:
        p = self.dialect.p
        rows = self.db.conn.execute(
            f"SELECT * FROM machine_events WHERE workspace_id = {p} AND target_id = {p} ORDER BY created_at, id",
            (workspace_id, target_id),
        ).fetchall()
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]

    # -- freshness queue -----------------------------------------------------------------

    def pending_checks(self, limit: int = 100) -> list[tuple[str, str]]:
        p = self.dialect.p
        rows = self.db.conn.execute(
            f"SELECT workspace_id, record_id FROM freshness_queue ORDER BY enqueued_at LIMIT {p}", (limit,)
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def queued_checks(self) -> int:
        """How many freshness checks wait (written, not yet checked): for /metrics."""
        row = self.db.conn.execute("SELECT count(*) FROM freshness_queue").fetchone()
        return int(row[0])

    @gated
    def check_done(self, record_id: str) -> None:
        p = self.dialect.p
        with self._writing(None) as conn:
            conn.execute(f"DELETE FROM freshness_queue WHERE record_id = {p}", (record_id,))


class SqliteReviewStore(ReviewQueue):
    """The embedded engine's review store (``metronix.db``, beside the records)."""

    def __init__(self, db: Database, gate: WriteGate, caches: MemoryCaches, writing: Writing) -> None:
        super().__init__(db, SQLITE, gate, caches, writing)


class PostgresReviewStore(ReviewQueue):
    """Server mode's review store: its writes take the memory store's write lock (``db``'s)."""

    def __init__(self, db: NativeDatabase, gate: WriteGate, caches: MemoryCaches, writing: Writing) -> None:
        super().__init__(db, POSTGRES, gate, caches, writing)
