"""Agent memory's in-process caches and what keeps them coherent, whatever the engine.

Split from ``memory_store.py`` (issue 29): the vector, keyword, adjacency and attribute indexes of each
workspace, their loaders (read from the records), the two counters that say how current each is
(``memory_counters``), the per-thread snapshot of those counters a search reads once, and the hand-over
of a committed write to every index (the change logs of ``PartitionCache.apply``). Each engine's store
owns one ``MemoryCaches`` over its database and ``dialect``; the SQL here runs on both engines,
its placeholders the dialect's (``metronix/dialect.py``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from triptych.core.db import Database
from triptych.core.keyword_index import Document, KeywordIndex
from triptych.core.partitions import PartitionCache, WriteGate
from triptych.core.pg import NativeDatabase
from triptych.core.search import Vector, VectorIndex
from triptych.metronix.adjacency import AdjacencyIndex
from triptych.metronix.attributes import AttributeIndex, Attributes
from triptych.metronix.dialect import Dialect
from triptych.metronix.memory_counters import WorkspaceCounters
from triptych.metronix.memory_model import PLAIN_FIELDS, MemoryRecord, keyword_document, record_attributes

Counters = tuple[int, int]  # (generation, attributes) of one workspace


class MemoryCaches:
    def __init__(self, db: Database | NativeDatabase, dialect: Dialect, dim: int, gate: WriteGate) -> None:
        self.db = db
        self.dialect = dialect
        self.gate = gate
        self.counters = WorkspaceCounters(db, dialect)
        self._snapshots = threading.local()
        self.index = VectorIndex(dim, self._load_vectors)
        self.keywords = KeywordIndex(self._load_documents)
        self.adjacency = AdjacencyIndex(self._load_links)
        self.attributes = AttributeIndex(self._load_attributes)

    # -- counters ------------------------------------------------------------------------

    # Two counters per workspace: ``generation`` for the vector, keyword and adjacency caches (new text,
    # new rows), ``attributes`` for the attribute cache (every change to a record).

    def generation(self, workspace_id: str) -> int:
        return self.counters.get(workspace_id, "generation")

    def bump(self, conn: Any, workspace_id: str) -> int:
        return self.counters.bump(conn, workspace_id, "generation")

    def attribute_write(self, conn: Any, workspace_id: str) -> tuple[int, int]:
        """Inside a write transaction: the attribute generation before it and after bumping it."""
        before = self.counters.get(workspace_id, "attributes")
        return before, self.counters.bump(conn, workspace_id, "attributes")

    def read_counters(self, workspace_id: str) -> Counters:
        """Both counters in one read, for a read, once this process's write in progress has reached the
        caches (``WriteGate.settle``). A search that reads them together and passes them down never asks
        a cache for a generation newer than its first look (a concurrent write of this process may commit
        meanwhile, and a cache asked for it before the write applies it would reload). Inside
        ``snapshot()`` the first read of a workspace serves the rest."""
        pinned = self.pinned_map()
        if pinned is not None and workspace_id in pinned:
            return pinned[workspace_id]
        counters = self.counters.both(workspace_id)
        self.settle(workspace_id, counters)
        return counters

    def settle(self, workspace_id: str, counters: Counters) -> None:
        """Wait for this process's write in progress, then pin ``counters`` if a snapshot is open."""
        self.gate.settle(lambda: self._lagging(workspace_id, counters), workspace_id)
        pinned = self.pinned_map()
        if pinned is not None:
            pinned[workspace_id] = counters

    def pinned_map(self) -> dict[str, Counters] | None:
        """This thread's open snapshot (None outside one)."""
        pinned: dict[str, Counters] | None = getattr(self._snapshots, "counters", None)
        return pinned

    @contextmanager
    def snapshot(self, pinned: Mapping[str, Counters] | None = None) -> Iterator[None]:
        """The reads of this thread inside the block share one reading of the counters: one search
        ranks against one generation of every cache, and asks the database once instead of at each
        step (a round trip each on a server engine). Caches newer than that reading still serve
        (``PartitionCache.sync``). ``pinned``: readings another thread's snapshot made (``pinned()``),
        shared with a helper thread of the same call."""
        outer = self.pinned_map()
        if outer is None:
            self._snapshots.counters = dict(pinned or {})
        try:
            yield
        finally:
            if outer is None:
                self._snapshots.counters = None

    def pinned(self) -> dict[str, Counters]:
        """The counters this thread's snapshot has read so far (for ``snapshot(pinned)``)."""
        return dict(self.pinned_map() or {})

    def _lagging(self, workspace_id: str, counters: Counters) -> bool:
        generation, attributes = counters
        return (
            any(cache.generation(workspace_id) < generation for cache in self._text_caches())
            or self.attributes.generation(workspace_id) < attributes
        )

    def _text_caches(self) -> tuple[PartitionCache[Any], ...]:
        return (self.index, self.keywords, self.adjacency)

    # -- committed writes to the caches --------------------------------------------------------

    def apply(
        self,
        workspace_id: str,
        before: int,
        after: int,
        vectors: Sequence[tuple[int, Vector]] = (),
        documents: Sequence[Document] = (),
        links: Sequence[tuple[int, int]] = (),
        removed: Sequence[int] = (),
        removed_vectors: Sequence[int] = (),
    ) -> None:
        """Hand this process's committed write to every in-process index. Each one must see the new
        generation, even when the write changes nothing of its own, or it would reload."""
        self.index.apply(workspace_id, before, after, added=vectors, removed=removed_vectors)
        self.keywords.apply(workspace_id, before, after, added=documents, removed=removed)
        self.adjacency.apply(workspace_id, before, after, added=links, removed=removed)

    def inserted(
        self,
        record: MemoryRecord,
        vec: Vector,
        entities: set[str],
        seq: int,
        previous: int | None,
        after: int,
        attrs_after: int,
        before: int | None = None,
        attrs_before: int | None = None,
    ) -> None:
        """Hand a committed insert to the caches (counters before it: one less than after, by default)."""
        self.apply(
            record.workspace_id,
            after - 1 if before is None else before,
            after,
            vectors=[(seq, vec)],
            documents=[(seq, keyword_document(record.content, record.tags))],
            links=[(seq, previous)] if previous is not None else [],
        )
        self.attributes.apply(
            record.workspace_id,
            attrs_after - 1 if attrs_before is None else attrs_before,
            attrs_after,
            put=[record_attributes(record, seq, entities)],
        )

    def stop(self) -> list[threading.Thread]:
        """Stop every cache's background work (the vector graphs' builds) and wait for it, bounded: a
        build left running would add to a usearch graph, and read numpy buffers, of a store already gone.
        Loads after this raise ``Stopped``. Returns the threads still at work (normally none)."""
        busy: list[threading.Thread] = []
        for cache in (*self._text_caches(), self.attributes):
            busy += cache.stop()
        return busy

    def clear(self) -> None:
        """Leave the process's memory budget now (after ``stop``), not when collected."""
        for cache in (*self._text_caches(), self.attributes):
            cache.clear()

    def warm(self, workspaces: Sequence[str]) -> None:
        """Load every cache of ``workspaces``."""
        for workspace in workspaces:
            generation, attributes = self.counters.both(workspace)
            for cache in self._text_caches():
                cache.sync(workspace, generation)
            self.attributes.sync(workspace, attributes)

    # -- loaders (a whole workspace, when a cache is cold or another worker moved its counter) ----------

    def plain(self) -> Any:
        """A cursor yielding tuples: hot queries of many small rows skip building ``sqlite3.Row``s."""
        cursor = self.db.conn.cursor()
        cursor.row_factory = None
        return cursor

    def _load_attributes(self, workspace_id: str) -> list[Attributes]:
        entities = self._workspace_pairs(
            "SELECT e.seq, e.entity FROM memory_records r JOIN memory_entities e ON e.seq = r.seq"
            f" WHERE r.workspace_id = {self.dialect.p}",
            workspace_id,
        )
        links = self._workspace_pairs(
            "SELECT l.seq, l.related_id FROM memory_records r JOIN memory_links l ON l.seq = r.seq"
            f" WHERE r.workspace_id = {self.dialect.p}",
            workspace_id,
        )
        rows = self.plain().execute(
            f"SELECT seq, tags, metadata, {', '.join(PLAIN_FIELDS)} FROM memory_records WHERE workspace_id = {self.dialect.p}",
            (workspace_id,),
        )
        found = []
        for seq, tags_json, metadata, *plain in rows:
            tags = json.loads(tags_json)
            found.append(
                Attributes(
                    **dict(zip(PLAIN_FIELDS, plain, strict=True)),
                    seq=int(seq),
                    tags=frozenset(tags),
                    entities=frozenset(entities.get(int(seq), ())),
                    metadata=metadata,
                    tag_list=tuple(tags),
                    links=frozenset(links.get(int(seq), ())),
                )
            )
        return found

    def _workspace_pairs(self, query: str, workspace_id: str) -> dict[int, set[str]]:
        pairs: dict[int, set[str]] = {}
        for seq, value in self.plain().execute(query, (workspace_id,)):
            pairs.setdefault(int(seq), set()).add(value)
        return pairs

    def _load_vectors(self, workspace_id: str) -> tuple[list[int], Vector]:
        rows = self.db.conn.execute(
            f"SELECT seq, embedding FROM memory_records WHERE workspace_id = {self.dialect.p} ORDER BY seq",
            (workspace_id,),
        ).fetchall()
        if not rows:
            return [], np.zeros((0, self.index.dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
        return [int(r[0]) for r in rows], matrix

    def _load_links(self, workspace_id: str) -> list[tuple[int, int]]:
        rows = self.plain().execute(
            "SELECT f.seq, f.follows FROM memory_records r JOIN memory_follows f ON f.seq = r.seq"
            f" JOIN memory_records e ON e.seq = f.follows WHERE r.workspace_id = {self.dialect.p}",
            (workspace_id,),
        )
        return [(int(later), int(earlier)) for later, earlier in rows]

    def _load_documents(self, workspace_id: str) -> list[Document]:
        rows = self.plain().execute(
            f"SELECT seq, content, tags FROM memory_records WHERE workspace_id = {self.dialect.p} ORDER BY seq",
            (workspace_id,),
        )
        return [(int(seq), keyword_document(content, json.loads(tags))) for seq, content, tags in rows]
