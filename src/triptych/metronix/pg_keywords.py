"""The knowledge base's BM25 ranking computed by PostgreSQL, for a workspace whose in-process keyword index
is not resident in this worker (after an eviction by the memory budget, or before it loads at a start):
the same ranking as ``core.keyword_index`` (FTS5's porter stems, per-column weights summed into one term
frequency, Lucene's smooth IDF, k1 1.2, b 0.75, the workspace's own counts), from postings every write
stores with its chunks (docs/decisions/0191-keyword-ranking-in-sql.md).

``kb_chunk_terms`` holds, per workspace, term and chunk, the chunk's weighted term frequency and its length
in tokens (repeated per row, so a query reads one index range per term and joins nothing). Workspaces
written before the table existed are filled once, in the background, under their row lock
(``fill``); until then their searches take the in-process path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from psycopg import Connection
from psycopg.rows import TupleRow

from triptych.core.keyword_index import K1, B, document_terms
from triptych.core.pg import PgDatabase
from triptych.core.search import keyword_terms, stems
from triptych.metronix.store import keyword_columns

log = logging.getLogger(__name__)

Conn = Connection[TupleRow]
Posting = tuple[int, str, float, float]  # chunk id, stem, weighted frequency, the chunk's length

MIGRATION = """
    CREATE TABLE kb_chunk_terms (
        workspace_id TEXT NOT NULL,
        term TEXT COLLATE "C" NOT NULL,
        chunk_id BIGINT NOT NULL REFERENCES kb_chunks(id) ON DELETE CASCADE,
        weight REAL NOT NULL,
        length REAL NOT NULL,
        PRIMARY KEY (workspace_id, term, chunk_id)
    );
    CREATE INDEX kb_chunk_terms_by_chunk ON kb_chunk_terms (chunk_id);
    ALTER TABLE kb_chunks ADD COLUMN term_length REAL;
    -- Whether every chunk of the workspace has its postings: true for workspaces this version creates,
    -- false for older ones (and rows copied in by ``triptych migrate``) until ``fill`` has run. With it,
    -- the workspace's chunk count and total length, kept by every write (BM25's N and average length).
    ALTER TABLE kb_workspaces ADD COLUMN terms_ready BOOLEAN NOT NULL DEFAULT false,
        ADD COLUMN term_chunks BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN term_total DOUBLE PRECISION NOT NULL DEFAULT 0;
"""

# One query: the workspace's counts, each query term's document frequency, and every matching chunk's
# score, best first, ties by id (``KeywordIndex.search``'s order).
RANK = """
    WITH stats AS (
        SELECT term_chunks::float8 AS n, term_total AS total FROM kb_workspaces WHERE id = %(ws)s
    ), df AS (
        SELECT term, count(*)::float8 AS matched FROM kb_chunk_terms
        WHERE workspace_id = %(ws)s AND term = ANY(%(terms)s) GROUP BY term
    )
    SELECT t.chunk_id, sum(
        ln(1.0 + (stats.n - df.matched + 0.5) / (df.matched + 0.5)) * t.weight * %(k1p)s
        / (t.weight + %(k1)s * (1.0 - %(b)s + %(b)s * t.length / greatest(stats.total / nullif(stats.n, 0), 1e-9)))
    ) AS score
    FROM kb_chunk_terms t JOIN df ON df.term = t.term CROSS JOIN stats
    WHERE t.workspace_id = %(ws)s AND t.term = ANY(%(terms)s)
    GROUP BY t.chunk_id
    ORDER BY score DESC, t.chunk_id
    LIMIT %(k)s
"""


def query_stems(text: str) -> list[str]:
    """The stems a query ranks by, as ``KeywordIndex.search`` takes them."""
    return list(dict.fromkeys(s for s in stems(keyword_terms(text)).values() if s))


def rank(db: PgDatabase, workspace_id: str, text: str, limit: int) -> list[tuple[int, float]]:
    """The ``limit`` best chunks of the workspace for ``text`` by BM25, best first."""
    terms = query_stems(text)
    if not terms or limit <= 0:
        return []
    params = {"ws": workspace_id, "terms": terms, "k": limit, "k1": K1, "k1p": K1 + 1.0, "b": B}
    with db.connection() as conn:
        rows = conn.execute(RANK, params).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows if float(r[1]) > 0]


def ready(db: PgDatabase, workspace_id: str) -> bool:
    with db.connection() as conn:
        row = conn.execute("SELECT terms_ready FROM kb_workspaces WHERE id = %s", (workspace_id,)).fetchone()
    return bool(row and row[0])


def copy_postings(conn: Conn, workspace_id: str, rows: Sequence[Posting]) -> None:
    """Inside a write's transaction: posting rows of chunks it inserted (their ``term_length`` is set)."""
    if rows:
        with conn.cursor().copy(
            "COPY kb_chunk_terms (workspace_id, chunk_id, term, weight, length) FROM STDIN"
        ) as copy:
            for chunk_id, term, weight, length in rows:
                copy.write_row((workspace_id, chunk_id, term, weight, length))


def count(conn: Conn, workspace_id: str, added: Sequence[float], removed: Sequence[float | None]) -> None:
    """Inside a write holding the workspace's row: its chunk count and total length moved by the lengths
    of the chunks it inserted and deleted (a chunk stored before its length was kept has none: ``fill``
    counts the workspace again before it serves)."""
    gone = [length for length in removed if length is not None]
    conn.execute(
        "UPDATE kb_workspaces SET term_chunks = term_chunks + %s, term_total = term_total + %s WHERE id = %s",
        (len(added) - len(removed), float(sum(added)) - float(sum(gone)), workspace_id),
    )


def fill(db: PgDatabase, workspace_id: str) -> bool:
    """Store the postings of a workspace written before they existed, holding its row (its writers
    wait meanwhile; another worker filling it too finds it ready and stops). True if it filled."""
    with db.transaction() as conn:
        found = conn.execute(
            "SELECT terms_ready FROM kb_workspaces WHERE id = %s FOR UPDATE", (workspace_id,)
        ).fetchone()
        if found is None or found[0]:
            return False
        conn.execute("DELETE FROM kb_chunk_terms WHERE workspace_id = %s", (workspace_id,))
        rows = conn.execute(
            "SELECT c.id, d.title, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
            " WHERE c.workspace_id = %s ORDER BY c.id",
            (workspace_id,),
        ).fetchall()
        lengths: list[tuple[float, int]] = []
        postings: list[Posting] = []
        for row in rows:
            weighted, length = document_terms(keyword_columns(row[1], str(row[2])))
            lengths.append((length, int(row[0])))
            postings += [(int(row[0]), term, weight, length) for term, weight in weighted.items()]
        with conn.cursor() as cursor:
            cursor.executemany("UPDATE kb_chunks SET term_length = %s WHERE id = %s", lengths)
        copy_postings(conn, workspace_id, postings)
        conn.execute(
            "UPDATE kb_workspaces SET terms_ready = true, term_chunks = %s, term_total = %s WHERE id = %s",
            (len(lengths), float(sum(n for n, _ in lengths)), workspace_id),
        )
    return True


def fill_all(db: PgDatabase) -> None:
    """``fill`` every workspace not ready (a start after an upgrade, or after ``triptych migrate``)."""
    with db.connection() as conn:
        pending = [str(r[0]) for r in conn.execute("SELECT id FROM kb_workspaces WHERE NOT terms_ready")]
    for workspace_id in pending:
        try:
            fill(db, workspace_id)
        except Exception:  # the in-process path keeps answering; the next start tries again
            log.warning("storing the keyword postings of workspace %s failed", workspace_id, exc_info=True)
