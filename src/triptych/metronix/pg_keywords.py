"""The knowledge base's BM25 ranking computed by PostgreSQL, for a workspace whose in-process keyword index
is not resident in this worker (after an eviction by the memory budget, or before it loads at a start):
the same ranking as ``core.keyword_index`` (FTS5's porter stems, per-column weights summed into one term
frequency, Lucene's smooth IDF, k1 1.2, b 0.75, the workspace's own counts), from postings every write
stores with its chunks (docs/decisions/0191-keyword-ranking-in-sql.md).

``kb_chunk_terms`` (knowledge_schema_pg.py) holds, per workspace, term and chunk, the chunk's weighted term
frequency and its length in tokens (repeated per row, so a query reads one index range per term and joins
nothing); ``kb_chunks.term_length`` the length of every chunk. A chunk without a length (written before
the table existed, or copied in by ``triptych migrate``) marks its workspace not ready: such workspaces are
filled once, in the background, under their row lock (``fill``); until then their searches take the
in-process path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from psycopg import Connection
from psycopg.rows import TupleRow

from triptych.core.keyword_index import K1, B, document_terms
from triptych.core.pg import PgDatabase
from triptych.core.search import keyword_terms, stems
from triptych.metronix.knowledge_model import keyword_columns

log = logging.getLogger(__name__)

Conn = Connection[TupleRow]
Posting = tuple[int, str, float, float]  # chunk id, stem, weighted frequency, the chunk's length

# One query: the workspace's counts, each query term's document frequency, and every matching chunk's
# score, best first, ties by id (``KeywordIndex.search``'s order). Both scans read indexes only
# (``kb_chunks_by_workspace`` carries ``term_length``, the postings' key their weight and length: decision
# 0440). The two CTEs are computed once each (MATERIALIZED): inlined, the counts' aggregate could land on
# the inner side of a nested loop over the postings when the planner expects few rows, and run again for
# every posting (measured: 167 times, 334,000 buffers, at 8,000 chunks).
RANK = """
    WITH stats AS MATERIALIZED (
        SELECT count(*)::float8 AS n, coalesce(sum(term_length), 0)::float8 AS total
        FROM kb_chunks WHERE workspace_id = %(ws)s
    ), df AS MATERIALIZED (
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
    """Whether every chunk of the workspace has its postings (from the small partial index of those
    without)."""
    with db.connection() as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM kb_chunks WHERE workspace_id = %s AND term_length IS NULL)",
            (workspace_id,),
        ).fetchone()
    return row is not None and not row[0]


def copy_postings(conn: Conn, workspace_id: str, rows: Sequence[Posting]) -> None:
    """Inside a write's transaction: posting rows of chunks it inserted (their ``term_length`` is set)."""
    if rows:
        with conn.cursor().copy(
            "COPY kb_chunk_terms (workspace_id, chunk_id, term, weight, length) FROM STDIN"
        ) as copy:
            for chunk_id, term, weight, length in rows:
                copy.write_row((workspace_id, chunk_id, term, weight, length))


def write(conn: Conn, workspace_id: str, chunk_ids: Sequence[int]) -> None:
    """Inside a write's transaction: the postings and lengths of the chunks it inserted, read back as
    the keyword index reads them."""
    if not chunk_ids:
        return
    rows = conn.execute(
        "SELECT c.id, d.title, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
        " WHERE c.id = ANY(%s) ORDER BY c.id",
        (list(chunk_ids),),
    ).fetchall()
    _store(conn, workspace_id, rows)


def _store(conn: Conn, workspace_id: str, rows: Sequence[TupleRow]) -> None:
    lengths: list[tuple[float, int]] = []
    postings: list[Posting] = []
    for row in rows:
        weighted, length = document_terms(keyword_columns(row[1], str(row[2])))
        lengths.append((length, int(row[0])))
        postings += [(int(row[0]), term, weight, length) for term, weight in weighted.items()]
    with conn.cursor() as cursor:
        cursor.executemany("UPDATE kb_chunks SET term_length = %s WHERE id = %s", lengths)
    copy_postings(conn, workspace_id, postings)


def fill(db: PgDatabase, workspace_id: str) -> bool:
    """Store the postings of a workspace written before they existed, holding its row (its writers
    wait meanwhile; another worker filling it too finds it ready and stops). True if it filled."""
    with db.transaction() as conn:
        conn.execute("SELECT 1 FROM kb_workspaces WHERE id = %s FOR UPDATE", (workspace_id,))
        found = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM kb_chunks WHERE workspace_id = %s AND term_length IS NULL)",
            (workspace_id,),
        ).fetchone()
        if found is None or not found[0]:
            return False
        conn.execute("DELETE FROM kb_chunk_terms WHERE workspace_id = %s", (workspace_id,))
        rows = conn.execute(
            "SELECT c.id, d.title, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.document_id"
            " WHERE c.workspace_id = %s ORDER BY c.id",
            (workspace_id,),
        ).fetchall()
        _store(conn, workspace_id, rows)
    return True


def fill_all(db: PgDatabase, stopping: threading.Event | None = None) -> None:
    """``fill`` every workspace not ready (a start after an upgrade, or after ``triptych migrate``), until
    ``stopping`` is set: the store is closing, and the next start fills the rest. A workspace's fill is
    one transaction, so one cut short would only be rolled back: the check is between two."""
    with db.connection() as conn:
        pending = [
            str(r[0])
            for r in conn.execute("SELECT DISTINCT workspace_id FROM kb_chunks WHERE term_length IS NULL")
        ]
    for workspace_id in pending:
        if stopping is not None and stopping.is_set():
            return
        try:
            fill(db, workspace_id)
        except Exception:  # the in-process path keeps answering; the next start tries again
            log.warning("storing the keyword postings of workspace %s failed", workspace_id, exc_info=True)
