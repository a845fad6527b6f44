"""Where a server-mode worker saves the knowledge base's in-process indexes, and what a saved file must
match to be read back (docs/decisions/0236-server-mode-reads-its-saved-indexes.md).

A workspace the memory budget forgot is saved on its way out (``VectorIndex._evicted``, ``KeywordIndex``'s
save after a build), as on the embedded engine. Its next search, on this worker or on another worker of
the same machine, maps the files back instead of asking PostgreSQL, when they match the workspace as the
database has it now: the same generation (bumped by every write of any worker, and by a re-embedding),
chunk count, highest chunk id and embedding model. Anything else (another worker wrote since) leaves the
files unused until the next save, and PostgreSQL answers meanwhile.

The files are a cache of one database: they live under a directory named by an id that database keeps
(``kb_meta``'s ``instance``), so a data directory pointed at another database never reads them.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from triptych.core.keyword_files import KeywordFingerprint
from triptych.core.pg import PgDatabase, one
from triptych.core.vector_files import Fingerprint
from triptych.metronix.store import TOKENIZER

Extent = tuple[str | None, int, int, int, int]  # model, dim, generation, chunk count, highest chunk id

# One statement, so the figures are of one state of the workspace whatever commits meanwhile; the count
# and the highest id are read from the workspace's index alone.
EXTENT = """
    SELECT (SELECT value FROM kb_meta WHERE key = 'embedding_model'),
           (SELECT value FROM kb_meta WHERE key = 'embedding_dim'),
           (SELECT generation FROM kb_workspaces WHERE id = %(ws)s),
           count(*), coalesce(max(id), 0)
    FROM kb_chunks WHERE workspace_id = %(ws)s
"""


def saved_dir(root: Path, db: PgDatabase) -> Path:
    """``root``'s directory for the indexes of the database ``db`` connects to (its id made once)."""
    with db.transaction() as conn:
        conn.execute(
            "INSERT INTO kb_meta (key, value) VALUES ('instance', %s) ON CONFLICT (key) DO NOTHING",
            (uuid.uuid4().hex,),
        )
        instance = str(one(conn.execute("SELECT value FROM kb_meta WHERE key = 'instance'").fetchone())[0])
    return root / f"pg-{instance}"


class SavedExtents:
    """The fingerprints the saved files of a workspace are checked against, read in one round trip and
    kept per generation: a search tells ``seen`` the generation it read, so checking a workspace's
    vector and keyword files costs one statement, not one per file."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        self._extents: dict[str, Extent] = {}
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def seen(self, workspace_id: str, generation: int) -> None:
        """A search read ``generation`` for the workspace just now."""
        with self._lock:
            self._seen[workspace_id] = generation

    def read(self, workspace_id: str) -> int:
        """The workspace's generation, read with the rest of its extent in one statement, which is kept
        for the check of its saved files that follows (a search of a workspace the worker does not hold:
        one round trip instead of two)."""
        generation = self._query(workspace_id)[2]
        self.seen(workspace_id, generation)
        return generation

    def extent(self, workspace_id: str) -> Extent:
        with self._lock:
            known = self._extents.get(workspace_id)
            if known is not None and known[2] == self._seen.get(workspace_id):
                return known
        return self._query(workspace_id)

    def _query(self, workspace_id: str) -> Extent:
        """The workspace's extent as the database has it now, kept."""
        with self.db.connection() as conn:
            row = one(conn.execute(EXTENT, {"ws": workspace_id}).fetchone())
        found: Extent = (
            None if row[0] is None else str(row[0]),
            int(row[1] or 0),
            int(row[2] or 0),
            int(row[3]),
            int(row[4]),
        )
        with self._lock:
            self._extents[workspace_id] = found
        return found

    def vectors(self, workspace_id: str) -> Fingerprint | None:
        """What a saved vector index of the workspace must match now (None: no model recorded yet)."""
        model, dim, generation, count, max_id = self.extent(workspace_id)
        return None if model is None else Fingerprint(model, dim, generation, count, max_id)

    def keywords(self, workspace_id: str) -> KeywordFingerprint:
        """What a saved keyword index of the workspace must match now."""
        _, _, generation, count, max_id = self.extent(workspace_id)
        return KeywordFingerprint(TOKENIZER, generation, count, max_id)
