"""The knowledge base's keyword change log on PostgreSQL (``kb_keyword_changes``): each write logs the chunk
ids it added and removed under the generation it gave its workspace, in its own transaction, so another
worker's in-process BM25 copy (``core.keyword_index``) applies just those instead of reloading the
workspace; a re-embedding logs an empty entry per workspace so the copies step over its generation. Split
from ``pg_store.py`` (issue 29).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection
from psycopg.rows import TupleRow

from triptych.core.keyword_index import Changes
from triptych.core.pg import PgDatabase
from triptych.metronix.knowledge_model import keyword_columns

# Writes of one workspace the log keeps: a worker further behind reloads the workspace.
KEYWORD_LOG_KEEP = 1000

Conn = Connection[TupleRow]


def record(conn: Any, workspace_id: str, generation: int, added: list[int], removed: list[int]) -> None:
    """A write's entry, in the write's transaction, the log pruned now and then."""
    conn.execute(
        "INSERT INTO kb_keyword_changes VALUES (%s, %s, %s, %s)",
        (workspace_id, generation, added, removed),
    )
    prune(conn, [(workspace_id, generation)])


def record_steps(conn: Conn, bumped: Sequence[tuple[str, int]]) -> None:
    """An empty entry per workspace whose generation a write that changed no text stepped (a
    re-embedding), so keyword indexes step over it."""
    with conn.cursor() as cursor:
        cursor.executemany("INSERT INTO kb_keyword_changes VALUES (%s, %s, '{}', '{}')", list(bumped))
    prune(conn, bumped)


def prune(conn: Conn, written: Sequence[tuple[str, int]]) -> None:
    """After writes that gave these workspaces these generations: every hundredth generation drops
    the entries older than the last ``KEYWORD_LOG_KEEP``. Every write steps a generation by exactly
    one (documents, and re-embeddings through ``record_steps``), so no hundredth is skipped."""
    due = [(w, g - KEYWORD_LOG_KEEP) for w, g in written if g % 100 == 0]
    if due:
        with conn.cursor() as cursor:
            cursor.executemany(
                "DELETE FROM kb_keyword_changes WHERE workspace_id = %s AND generation <= %s", due
            )


def changes(db: PgDatabase, workspace_id: str, seen: int, generation: int) -> Changes | None:
    """What the writes after ``seen`` up to ``generation`` did to the workspace's chunks (None if the
    log misses one of them). Writes to a workspace hold its row, so generations commit in order and
    every entry up to ``generation`` is visible once ``generation`` is. Added chunks are read as
    they are now: one a later write removed is simply absent (that write's entry removes it again)."""
    with db.connection() as conn:
        entries = conn.execute(
            "SELECT added, removed FROM kb_keyword_changes"
            " WHERE workspace_id = %s AND generation > %s AND generation <= %s",
            (workspace_id, seen, generation),
        ).fetchall()
        if len(entries) != generation - seen:
            return None
        added = sorted({int(i) for a, _ in entries for i in a})
        rows = conn.execute(
            "SELECT c.id, d.title, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
            " WHERE c.workspace_id = %s AND c.id = ANY(%s) ORDER BY c.id",
            (workspace_id, added),
        ).fetchall()
    removed = {int(i) for _, r in entries for i in r}
    return [(int(r[0]), keyword_columns(r[1], str(r[2]))) for r in rows], removed
