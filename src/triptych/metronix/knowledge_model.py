"""The knowledge base's records as both engines' stores read and write them: documents, chunk hits, a
retriever's candidates, and the row shapes both engines' SQL uses (``knowledge_sql``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from triptych.core.search import Vector

# A workspace with this many chunks loads its indexes in the background after a start, and its searches
# answer without them meanwhile (saying so); a smaller one loads in the search, in well under a second.
BACKGROUND_LOAD_CHUNKS = 20_000

# BM25 column weights: the title counts twice as much as the body (as bm25(chunks_fts, 0, 2, 1) did).
TITLE_WEIGHT = 2.0
BODY_WEIGHT = 1.0


def body_hash(content: str) -> str:
    """What makes two documents identical for search: their text, whatever their label or title."""
    return hashlib.sha256(content.encode()).hexdigest()


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    workspace_id: str
    doc_label: str
    title: str | None
    content: str
    source_type: str
    url: str | None
    date: str | None
    metadata: dict[str, Any]
    content_hash: str
    created_at: str
    updated_at: str
    chunk_count: int = 0


@dataclass(frozen=True, slots=True)
class NewDocument:
    workspace_id: str
    doc_label: str
    title: str | None
    content: str
    source_type: str
    url: str | None
    date: str | None
    metadata: dict[str, Any]
    content_hash: str
    chunks: list[str] = field(default_factory=list)
    embeddings: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))


# Labels of identical documents listed with a search result (the count is what matters past that).
MAX_DUPLICATE_LABELS = 20


@dataclass(frozen=True, slots=True)
class ChunkHit:
    chunk_id: int
    doc_label: str
    title: str | None
    text: str
    source_type: str
    url: str | None
    date: str | None
    body_hash: str
    # The labels of the workspace's documents with this text, in label order, when the store read them
    # with the hit (PostgreSQL: one round trip fewer); None: ask ``labels_by_body``.
    same_text: tuple[str, ...] | None = None


# A document row as both engines write it (``document_values``) and read it back (``document_from_row``).
DOCUMENT_COLUMNS = (
    "workspace_id, doc_label, title, content, source_type, url, date, metadata, content_hash, body_hash,"
    " created_at, updated_at"
)
DOCUMENT_FIELDS = (
    "workspace_id", "doc_label", "title", "content", "source_type", "url", "date", "content_hash", "created_at",
    "updated_at",
)  # fmt: skip
# The columns ``chunk_hit_from_row`` reads, with chunks as ``c`` and documents as ``d``.
CHUNK_HIT_COLUMNS = "c.id, c.text, d.doc_label, d.title, d.source_type, d.url, d.date, d.body_hash"


def document_values(doc: NewDocument, created: str, now: str) -> tuple[Any, ...]:
    """``DOCUMENT_COLUMNS`` of ``doc``, first stored at ``created`` and written at ``now``."""
    return (doc.workspace_id, doc.doc_label, doc.title, doc.content, doc.source_type, doc.url, doc.date,
            json.dumps(doc.metadata), doc.content_hash, body_hash(doc.content), created, now)  # fmt: skip


def document_from_row(row: Any) -> DocumentRecord:
    """A ``DocumentRecord`` of a row read by column name (with its ``chunk_count``), on either engine."""
    return DocumentRecord(
        **{name: row[name] for name in DOCUMENT_FIELDS},
        metadata=json.loads(row["metadata"]),
        chunk_count=int(row["chunk_count"]),
    )


def chunk_hit_from_row(row: Any, same_text: Sequence[str] | None = None) -> ChunkHit:
    """A ``ChunkHit`` of a row of ``CHUNK_HIT_COLUMNS``, read by name, on either engine."""
    return ChunkHit(
        chunk_id=int(row["id"]),
        doc_label=row["doc_label"],
        title=row["title"],
        text=row["text"],
        source_type=row["source_type"],
        url=row["url"],
        date=row["date"],
        body_hash=row["body_hash"],
        same_text=None if same_text is None else tuple(same_text),
    )


@dataclass(frozen=True, slots=True)
class Candidates:
    """One retriever's candidates (chunk id, score; best first) and how it answered: what a search
    reports in ``retrieval`` (docs/decisions/0131-search-says-how-it-answered.md)."""

    hits: list[tuple[int, float]]
    method: str


def keyword_columns(title: str | None, text: str) -> list[tuple[str, float]]:
    return [(title or "", TITLE_WEIGHT), (text, BODY_WEIGHT)]
