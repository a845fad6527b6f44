"""Knowledge-base rows written straight into PostgreSQL for benchmarks: what ``put_document`` writes, with
COPY and without the HNSW index maintained row by row (a chunk at a time with its HNSW insert would take
most of an hour at 100,000 chunks on these cores). The caller builds the index once afterwards."""

from __future__ import annotations

from typing import Any

import numpy as np

from triptych.core.keyword_index import document_terms
from triptych.metronix.knowledge_model import NewDocument, body_hash, keyword_columns

NOW = "2026-12-01T00:00:00+00:00"
COPY_CHUNKS = (
    "COPY kb_chunks (document_id, workspace_id, ordinal, text, embedding) FROM STDIN (FORMAT BINARY)"
)


def add_workspace(conn: Any, workspace_id: str) -> None:
    conn.execute(
        "INSERT INTO kb_workspaces (id, created_at, generation) VALUES (%s, %s, 1)", (workspace_id, NOW)
    )


def insert_document(conn: Any, document: NewDocument) -> int:
    """The document's row; returns its id."""
    row = conn.execute(
        "INSERT INTO kb_documents (workspace_id, doc_label, title, content, source_type, url, date,"
        " metadata, content_hash, body_hash, created_at, updated_at)"
        " VALUES (%s,%s,%s,%s,%s,NULL,NULL,'{}',%s,%s,%s,%s) RETURNING id",
        (document.workspace_id, document.doc_label, document.title, document.content, document.source_type,
         document.content_hash, body_hash(document.content), NOW, NOW),
    ).fetchone()  # fmt: skip
    assert row is not None
    return int(row[0])


def add_document(conn: Any, document: NewDocument) -> None:
    """One document and its chunks (its workspace row exists)."""
    document_id = insert_document(conn, document)
    with conn.cursor().copy(COPY_CHUNKS) as copy:
        copy.set_types(["int8", "text", "int4", "text", "vector"])
        for ordinal, (text, vector) in enumerate(zip(document.chunks, document.embeddings, strict=True)):
            copy.write_row(
                (document_id, document.workspace_id, ordinal, text, np.asarray(vector, dtype=np.float32))
            )


COPY_CHUNKS_WITH_TERMS = (
    "COPY kb_chunks (id, document_id, workspace_id, ordinal, text, embedding, term_length)"
    " FROM STDIN (FORMAT BINARY)"
)


def add_document_with_postings(conn: Any, document: NewDocument, first_id: int) -> int:
    """``add_document`` with the BM25 postings a write stores (``pg_keywords``), chunk ids chosen here
    from ``first_id`` so the postings go in by COPY too; returns the next free id. The caller moves the
    identity sequence past the last id (``finish_ids``)."""
    document_id = insert_document(conn, document)
    postings: list[tuple[str, int, str, float, float]] = []
    with conn.cursor().copy(COPY_CHUNKS_WITH_TERMS) as copy:
        copy.set_types(["int8", "int8", "text", "int4", "text", "vector", "float4"])
        for ordinal, (text, vector) in enumerate(zip(document.chunks, document.embeddings, strict=True)):
            chunk_id = first_id + ordinal
            weighted, length = document_terms(keyword_columns(document.title, text))
            copy.write_row(
                (chunk_id, document_id, document.workspace_id, ordinal, text,
                 np.asarray(vector, dtype=np.float32), length)
            )  # fmt: skip
            postings += [(document.workspace_id, chunk_id, t, w, length) for t, w in weighted.items()]
    with conn.cursor().copy(
        "COPY kb_chunk_terms (workspace_id, chunk_id, term, weight, length) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.set_types(["text", "int8", "text", "float4", "float4"])
        for posting in postings:
            copy.write_row(posting)
    return first_id + len(document.chunks)


def finish_ids(conn: Any) -> None:
    conn.execute("SELECT setval(pg_get_serial_sequence('kb_chunks', 'id'), (SELECT max(id) FROM kb_chunks))")


def set_aside_term_indexes(conn: Any) -> list[str]:
    """Drop the postings table's constraints and indexes before a bulk COPY (maintained row by row
    they would cost more than the load); returns the statements that put them back."""
    restore = [
        f"ALTER TABLE kb_chunk_terms ADD CONSTRAINT {name} {definition}"
        for name, definition in conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'kb_chunk_terms'::regclass AND contype IN ('p', 'f') ORDER BY contype DESC"
        )
    ]
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'kb_chunk_terms'"
        " AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = 'kb_chunk_terms'::regclass)"
    ).fetchall()
    restore += [str(definition) for _, definition in indexes]
    for name, _ in indexes:
        conn.execute(f"DROP INDEX {name}")
    for statement in restore:
        if statement.startswith("ALTER TABLE"):
            conn.execute(f"ALTER TABLE kb_chunk_terms DROP CONSTRAINT {statement.split()[5]}")
    return restore
