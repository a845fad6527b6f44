"""Knowledge-base rows written straight into PostgreSQL for benchmarks: what ``put_document`` writes, with
COPY and without the HNSW index maintained row by row (a chunk at a time with its HNSW insert would take
most of an hour at 100,000 chunks on these cores). The caller builds the index once afterwards."""

from __future__ import annotations

from typing import Any

import numpy as np

from triptych.metronix.knowledge_model import NewDocument, body_hash

NOW = "2026-12-01T00:00:00+00:00"
COPY_CHUNKS = (
    "COPY kb_chunks (document_id, workspace_id, ordinal, text, embedding) FROM STDIN (FORMAT BINARY)"
)


def add_workspace(conn: Any, workspace_id: str) -> None:
    conn.execute(
        "INSERT INTO kb_workspaces (id, created_at, generation) VALUES (%s, %s, 1)", (workspace_id, NOW)
    )


def add_document(conn: Any, document: NewDocument) -> None:
    """One document and its chunks (its workspace row exists)."""
    row = conn.execute(
        "INSERT INTO kb_documents (workspace_id, doc_label, title, content, source_type, url, date,"
        " metadata, content_hash, body_hash, created_at, updated_at)"
        " VALUES (%s,%s,%s,%s,%s,NULL,NULL,'{}',%s,%s,%s,%s) RETURNING id",
        (document.workspace_id, document.doc_label, document.title, document.content, document.source_type,
         document.content_hash, body_hash(document.content), NOW, NOW),
    ).fetchone()  # fmt: skip
    assert row is not None
    with conn.cursor().copy(COPY_CHUNKS) as copy:
        copy.set_types(["int8", "text", "int4", "text", "vector"])
        for ordinal, (text, vector) in enumerate(zip(document.chunks, document.embeddings, strict=True)):
            copy.write_row(
                (row[0], document.workspace_id, ordinal, text, np.asarray(vector, dtype=np.float32))
            )
