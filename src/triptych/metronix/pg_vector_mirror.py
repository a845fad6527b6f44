"""A worker's in-process mirror of the knowledge base's vectors on PostgreSQL: the embedded engine's
``VectorIndex`` (usearch HNSW) per workspace, loaded off the request path and caught up by difference
after other workers' writes (whole after a re-embedding), while pgvector's index answers meanwhile.
The store (``pg_store``) decides when the mirror serves; this module keeps it current. Split from
``pg_store.py`` (issue 29).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from triptych.core.partitions import STOP_WAIT
from triptych.core.pg import PgDatabase, one
from triptych.core.search import PATCH_LIMIT, Vector, VectorIndex
from triptych.core.vector_files import Fingerprint, VectorFiles
from triptych.metronix.pg_vectors import PgVectors

log = logging.getLogger(__name__)


class VectorMirror:
    def __init__(
        self,
        db: PgDatabase,
        vectors: PgVectors,
        files: Path | None = None,
        describe: Callable[[str], Fingerprint | None] | None = None,
    ) -> None:
        """``files`` and ``describe``: where the index saves what the budget forgets and each graph it
        builds, and what a saved file must match to be read back (``pg_saved``)."""
        self.db = db
        self.vectors = vectors
        saved = VectorFiles(files) if files is not None and describe is not None else None
        self.index = VectorIndex(vectors.dim, self.load, saved, describe if saved is not None else None)
        self._refreshing: dict[str, threading.Thread] = {}
        # Per mirrored workspace: the re-embedding it was last loaded whole after, and at which generation.
        # A partition older than that load (read back from files a stale search matched) may predate the
        # re-embedding, so only one as new is caught up by difference.
        self._epochs: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._closed = False  # ``close`` began: no refresh starts

    def apply(
        self, workspace_id: str, before: int, added: list[tuple[int, Vector]], removed: list[int]
    ) -> None:
        """Hand this worker's committed write to its vector mirror. A mirror behind ``before`` (another
        worker wrote meanwhile) is left as it is: its next catch-up by difference brings this write
        along with theirs, where applying would drop it and cost a whole reload and graph build."""
        if self.index.generation(workspace_id) < before:
            return
        self.index.apply(workspace_id, before, before + 1, added=added, removed=removed)

    def admit(self, workspace_id: str) -> bool:
        """Whether to load the workspace's mirror, not resident (``MemoryBudget.admit``; the load's end
        is reported when its thread ends): no while it is loading already."""
        with self._lock:
            if workspace_id in self._refreshing:
                return False
        return self.index.admit(workspace_id)

    def refresh_in_background(self, workspace_id: str) -> None:
        """Load the workspace's mirror off the request path, once at a time per workspace. A thread is in
        ``_refreshing`` from before it starts until it has reported its load's end (``_refresh_thread``),
        so an admission made meanwhile is ended by it, never left to ``LOAD_HOLD``."""
        with self._lock:
            if self._closed:
                self.index.loaded(workspace_id)
                return
            if workspace_id in self._refreshing:
                return
            thread = threading.Thread(
                target=self._refresh_thread,
                args=(workspace_id,),
                name=f"kb-mirror-{workspace_id}",
                daemon=True,
            )
            self._refreshing[workspace_id] = thread
            thread.start()

    def _refresh_thread(self, workspace_id: str) -> None:
        try:
            self._refresh(workspace_id)
        finally:
            with self._lock:
                self._refreshing.pop(workspace_id, None)
                self.index.loaded(workspace_id)

    def finish(self, workspace_id: str) -> None:
        """Wait for the workspace's background refresh, if one runs (a start's warm-up: one at a time)."""
        with self._lock:
            running = self._refreshing.get(workspace_id)
        if running is not None:
            running.join()

    def _refresh(self, workspace_id: str) -> None:
        """Bring the mirror up to the database: by difference when one is cached and no re-embedding
        happened since (another worker's writes then cost a read of the workspace's ids and of the new
        vectors, and the graph is patched, not rebuilt), else by loading the workspace whole."""
        if self._closed:
            return
        cached = self.index.cached(workspace_id)
        try:
            with self.db.connection() as conn, conn.transaction():
                # One snapshot: a write committing meanwhile would be in the rows but not in the
                # generation, and be applied twice.
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                state = conn.execute(
                    "SELECT (SELECT generation FROM kb_workspaces WHERE id = %s),"
                    " (SELECT value FROM kb_meta WHERE key = 'vectors_epoch')",
                    (workspace_id,),
                ).fetchone()
                generation, epoch = int(one(state)[0] or 0), str(one(state)[1] or "")
                loaded = self._epochs.get(workspace_id)
                whole = not (
                    cached and cached[1] and loaded and loaded[0] == epoch and cached[0] >= loaded[1]
                )
                if cached is not None and not whole:
                    # Within a workspace chunk ids grow in commit order (its writes hold the workspace
                    # row while they take ids), so what is new since the cached generation is above
                    # its last id; anything else (an id below it the mirror lacks) means load whole.
                    known, top = set(cached[1]), max(cached[1])
                    present, _ = self.vectors.copy(conn, workspace_id, after=0, with_vectors=False)
                    whole = any(i <= top and i not in known for i in present)
                    newer = sum(1 for i in present if i > top)
                    # A large difference patched into the graph would hold the index's lock, which every
                    # search takes, for seconds: load whole instead (pgvector serves while it builds).
                    whole = whole or newer + len(known) - (len(present) - newer) > PATCH_LIMIT
                if whole or cached is None:
                    ids, matrix = self.vectors.copy(conn, workspace_id, after=0)
                    self.index.install(workspace_id, generation, ids, matrix)
                    self._epochs[workspace_id] = (epoch, generation)
                    whole = True
                else:
                    new_ids, matrix = self.vectors.copy(conn, workspace_id, after=top)
        except Exception:  # pgvector's index keeps serving; the next search retries
            log.warning("loading the vectors of workspace %s failed", workspace_id, exc_info=True)
            return
        if whole:  # saved now, off the request path (a graph is saved when its build ends)
            if not self._closed:
                self.index.persist(workspace_id)
            return
        assert cached is not None
        removed = known.difference(present)
        added = list(zip(new_ids, matrix, strict=True))
        self.index.apply(workspace_id, cached[0], generation, added=added, removed=removed)

    def wait_ready(self, workspace_id: str, timeout: float = 600.0) -> bool:
        """Wait until the workspace's mirror is loaded and its graph built (benchmarks and tests)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            running = self._refreshing.get(workspace_id)
        if running is not None:
            running.join(timeout)
        return self.index.wait_ready(workspace_id, max(0.0, deadline - time.monotonic()))

    def load(self, workspace_id: str) -> tuple[list[int], Vector]:
        # ``sync``'s loader: used only if a search finds the mirror dropped between its check and its read.
        with self.db.connection() as conn:
            return self.vectors.copy(conn, workspace_id, after=0)

    def close(self) -> list[threading.Thread]:
        """Start no refresh, stop the index (a refresh's install then starts no graph build, and one in
        flight ends at its next batch), wait for the refreshes in flight (each holds a pooled
        connection), then leave the process's memory budget now, not when collected. Returns the threads
        still at work after the bounded waits (normally none)."""
        with self._lock:
            self._closed = True
            running = list(self._refreshing.values())
        deadline = time.monotonic() + STOP_WAIT
        busy = self.index.stop()
        for thread in running:
            thread.join(max(0.0, deadline - time.monotonic()))
        busy += [thread for thread in running if thread.is_alive()]
        self.index.clear()
        return busy
