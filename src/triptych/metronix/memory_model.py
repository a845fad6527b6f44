"""Agent memory's records as the service and every store engine see them, and their pure conversions.

Split from ``memory_store.py`` (issue 16) so each store job (records, review queue and audit events,
cache counters) and each engine shares one definition of what a record, a review entry and a filing are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from triptych.metronix.attributes import Attributes

STATUSES = ("active", "candidate", "stale", "superseded", "archived", "conflicted", "review_needed")
SCOPES = ("global", "per_agent", "session")
KINDS = ("fact", "preference", "pinned")
# How BM25 weighs a record's columns (FTS5 used the same weights before memory migration 5).
CONTENT_WEIGHT, TAGS_WEIGHT = 1.0, 0.5


class DuplicateContent(Exception):
    """An update would give a record the content another record of its agent and scope has."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    id: str
    workspace_id: str
    agent_id: str
    scope: str
    session_id: str | None
    kind: str
    content: str
    content_hash: str
    tags: list[str]
    importance_score: float
    source_type: str
    metadata: dict[str, Any]
    status: str
    created_at: str
    updated_at: str
    ttl_expires_at: str | None = None
    verification_state: str | None = None
    superseded_by: str | None = None
    seq: int = 0

    def contract(self) -> dict[str, Any]:
        """The record as the contract's ``memory_search`` shows it (plus kind and updated_at)."""
        return {
            "id": self.id,
            "workspace_id": self.workspace_id,
            "agent_id": self.agent_id,
            "scope": self.scope,
            "source_type": self.source_type,
            "content": self.content,
            "tags": self.tags,
            "importance_score": self.importance_score,
            "ttl_expires_at": self.ttl_expires_at,
            "content_hash": self.content_hash,
            "created_at": self.created_at,
            "session_id": self.session_id,
            "metadata": self.metadata,
            "status": self.status,
            "kind": self.kind,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class Filing:
    """What a freshness check files: a review entry, the target's new status, and a link to record."""

    reason: str
    related_id: str | None
    confidence: float
    status: str | None
    link: str | None = None  # a ``memory_links`` kind ("contradicts")


@dataclass(frozen=True, slots=True)
class Resolution:
    """How a review entry is resolved: the target's new status and verification state, the record it
    is merged into (if any), who resolved it, and the audit event's payload."""

    status: str
    verification_state: str
    superseded_by: str | None
    actor: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReviewEntry:
    id: str
    workspace_id: str
    target_id: str
    target_kind: str
    reason: str
    related_record_id: str | None
    content: str
    confidence: float
    created_at: str

    def contract(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workspace_id": self.workspace_id,
            "target_id": self.target_id,
            "target_kind": self.target_kind,
            "reason": self.reason,
            "related_record_id": self.related_record_id,
            "content": self.content,
            "confidence": self.confidence,
            "created_at": self.created_at,
        }


class RankingRow(NamedTuple):
    seq: int
    id: str
    session_id: str | None
    updated_at: str
    importance_score: float
    created_at: str
    entities: frozenset[str]
    links: frozenset[str] = frozenset()  # the record ids it is explicitly related to (``memory_links``)


# The record's fields stored as they are, under the same name in a database row, in ``MemoryRecord`` and
# in ``Attributes`` (tags and metadata are JSON text in the row and the cache; the workspace is the
# cache's key).
PLAIN_FIELDS = (
    "id", "agent_id", "scope", "session_id", "kind", "content", "content_hash", "importance_score",
    "source_type", "status", "created_at", "updated_at", "ttl_expires_at", "verification_state",
    "superseded_by",
)  # fmt: skip


def record_from_row(row: Any) -> MemoryRecord:
    """The record of a ``memory_records`` row (read by column name, on either engine)."""
    return MemoryRecord(
        **{name: row[name] for name in PLAIN_FIELDS},
        workspace_id=row["workspace_id"],
        tags=json.loads(row["tags"]),
        metadata=json.loads(row["metadata"]),
        seq=row["seq"],
    )


def record_from_attributes(workspace_id: str, a: Attributes) -> MemoryRecord:
    """The record as ``record_from_row`` reads it from the database, from the attribute cache."""
    return MemoryRecord(
        **{name: getattr(a, name) for name in PLAIN_FIELDS},
        workspace_id=workspace_id,
        tags=list(a.tag_list),
        metadata=json.loads(a.metadata),
        seq=a.seq,
    )


def record_attributes(record: MemoryRecord, seq: int, entities: set[str]) -> Attributes:
    """What the attribute cache holds of ``record`` once stored as ``seq``."""
    plain = {name: getattr(record, name) for name in PLAIN_FIELDS}
    return Attributes(
        **{**plain, "importance_score": float(record.importance_score)},
        seq=seq,
        tags=frozenset(record.tags),
        entities=frozenset(entities),
        metadata=json.dumps(record.metadata),
        tag_list=tuple(record.tags),
    )


def stored_fields(record: MemoryRecord) -> dict[str, Any]:
    """The ``Attributes`` fields of what ``update`` writes of ``record`` (the columns its UPDATE sets)."""
    return {
        "content": record.content,
        "content_hash": record.content_hash,
        "tags": frozenset(record.tags),
        "tag_list": tuple(record.tags),
        "importance_score": float(record.importance_score),
        "kind": record.kind,
        "status": record.status,
        "verification_state": record.verification_state,
        "superseded_by": record.superseded_by,
        "updated_at": record.updated_at,
    }


def review_from_row(row: Any) -> ReviewEntry:
    return ReviewEntry(
        id=row["id"],
        workspace_id=row["workspace_id"],
        target_id=row["target_id"],
        target_kind=row["target_kind"],
        reason=row["reason"],
        related_record_id=row["related_record_id"] or None,
        content=row["content"],
        confidence=row["confidence"],
        created_at=row["created_at"],
    )


def keyword_document(content: str, tags: Sequence[str]) -> list[tuple[str, float]]:
    """A record as the keyword index sees it: its content and its tags, weighted."""
    return [(content, CONTENT_WEIGHT), (" ".join(tags), TAGS_WEIGHT)]


def dedup_key(workspace_id: str, agent_id: str, scope: str, session_id: str | None, content_hash: str) -> str:
    return "\x1f".join([workspace_id, agent_id, scope, session_id or "", content_hash])


def record_workspace(record: MemoryRecord, *args: Any, **kwargs: Any) -> str:
    """The partition a write of ``record`` holds the write gate of (``gated_by``)."""
    return record.workspace_id


def named_workspace(workspace_id: str, *args: Any, **kwargs: Any) -> str:
    """The partition a write to ``workspace_id`` holds the write gate of (``gated_by``)."""
    return workspace_id
