"""Hadron search persistence: an in-process BM25 index per memory that follows a log of changed nodes,
node vectors in an in-process index per memory (exact, then HNSW from 20,000 vectors), structural
filters pushed into SQL, and search scopes.

Filters run inside the query, never after truncation, so ``limit`` is honest: the memory set, object
type, runnability and subtree are SQL conditions, and the ``where`` predicate is a SQL function over
the node's ``properties``/``data`` (the same compiled predicate ``hadron_find_objects`` uses, so both
tools agree on every operator and cast).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from triptych.core.db import Database
from triptych.core.keyword_index import Changes, Document, KeywordIndex
from triptych.core.partitions import WriteGate
from triptych.core.pg import NativeDatabase
from triptych.core.regex import LinearPattern
from triptych.core.search import Vector, VectorIndex
from triptych.hadron import write_keys
from triptych.hadron.dialect import POSTGRES, SQLITE, Dialect, EngineStore
from triptych.hadron.domain.model import NodeRecord, Scope
from triptych.hadron.domain.where import Predicate
from triptych.hadron.sealing import PREFIX as SEALED_PREFIX
from triptych.hadron.store import _NODE_COLUMNS, NodeCodec, _node

RUNNABLE_TYPES = ("action",)
# BM25 column weights (name, description, content, tags), as the FTS5 index used them before issue 20.
COLUMN_WEIGHTS = (4.0, 2.0, 1.0, 1.0)
# Candidates a filtered search ranks before it falls back to ranking every match.
FILTER_WIDTH = 200
# The fields a regex search looks in, best first: a match in the first scores 1.0, the second 0.67, the last 0.33.
REGEX_FIELDS = ("name", "description", "content")


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """Structural filters of a node search, all applied inside the query."""

    memory_ids: tuple[str, ...]
    object_type: str | None = None
    runnable: bool | None = None
    subtree: tuple[str, str] | None = None  # (memory id, parent loc): strict descendants
    where: Predicate | None = None

    @property
    def structural(self) -> bool:
        """True when anything narrows the memories' nodes beyond the memory set itself."""
        return any(x is not None for x in (self.object_type, self.runnable, self.subtree, self.where))


def _conditions(f: NodeFilter, d: Dialect, alias: str = "n") -> tuple[str, list[Any]]:
    p = d.p
    among, params = d.one_of(f"{alias}.memory_id", f.memory_ids)
    sql = [f"{alias}.deleted_at IS NULL", among]
    if f.object_type is not None:
        sql.append(f"{alias}.object_type = {p}")
        params.append(f.object_type)
    if f.runnable is not None:
        runnable, types = d.one_of(f"{alias}.node_type", RUNNABLE_TYPES)
        sql.append(f"({runnable}) = {p}")
        params += [*types, bool(f.runnable)]
    if f.subtree is not None:
        memory_id, loc = f.subtree
        sql.append(f"{alias}.memory_id = {p} AND {alias}.loc > {p} AND {alias}.loc < {p}")
        params += [memory_id, loc + ":", loc + ";"]
    if f.where is not None:
        sql.append(f"hadron_where({alias}.properties, {alias}.data)")
    return " AND ".join(sql), params


def _where_function(predicate: Predicate) -> Callable[[str | None, str | None], int]:
    def test(properties: str | None, data: str | None) -> int:
        try:
            props = json.loads(properties) if properties else {}
            bag = json.loads(data) if data else None
            return int(predicate(props, bag))
        except (ValueError, TypeError):
            return 0

    return test


# Each memory's last entry in ``node_text_changes``, and the log's oldest entry (``NodeKeywords.log``).
Log = tuple[dict[str, int], int | None]


class NodeKeywords:
    """BM25 per memory over name, description, content and tags (``core.keyword_index``: FTS5's porter
    stems and formula with Lucene's IDF, the memory's own statistics), kept current by the
    ``node_text_changes`` log.

    The IDF is Lucene's ``log(1 + (N - n + 0.5) / (n + 0.5))``, positive for every matching term: with
    FTS5's own, a term in half or more of a memory's nodes was worth 1e-6, so in a memory of one or two
    nodes an exact title match scored 0.0 and any ``minScore`` dropped it (issue 28).

    Before a search, the memory's index applies the memory's log entries newer than the last one it saw:
    the changed rows are read again and replace their old postings, whichever process wrote them. Loading
    reads the memory's last entry first, so a write racing the load is applied once more (harmlessly)
    rather than missed. An index older than the log's horizon (it keeps 50,000 entries) reloads.
    """

    def __init__(self, db: Database | NativeDatabase, dialect: Dialect) -> None:
        self.db = db
        self.dialect = dialect
        self.index = KeywordIndex(self._documents, idf="smooth")

    def _documents(self, memory_id: str) -> list[Document]:
        rows = self.db.conn.execute(
            "SELECT rowid, name, description, content, tags FROM nodes "
            f"WHERE memory_id = {self.dialect.p} AND deleted_at IS NULL",
            (memory_id,),
        ).fetchall()
        return [_document(r) for r in rows]

    def log(self, memory_ids: Sequence[str]) -> Log:
        """Each memory's last entry in the log, and the log's oldest: where each memory's index can be
        brought up to, in one read for the memories of one search.

        Per memory, not the log's global head: writes to two memories commit concurrently on a server
        engine (docs/decisions/0171), so an entry of memory A numbered before B's may commit after it,
        and an index brought up to B's number would skip it for good. Writes to one memory queue (its
        lock), so *its* entries commit in the order of their numbers: an index that has read the
        memory's entries up to N has read every one before N."""
        heads: dict[str, int] = {}
        oldest: int | None = None
        ids = list(dict.fromkeys(memory_ids))
        for i in range(0, max(len(ids), 1), 500):
            part = ids[i : i + 500]
            # One b-tree probe per memory (node_text_changes_by_memory), and one for the oldest entry.
            probe = f", (SELECT max(seq) FROM node_text_changes WHERE memory_id = {self.dialect.p})"
            probes = probe * len(part)
            row = self.db.conn.execute(
                f"SELECT (SELECT min(seq) FROM node_text_changes){probes}", part
            ).fetchone()
            oldest = row[0]
            # A memory with no entry left (none written, or all pruned) is current up to just before the
            # oldest entry: any change of it the log dropped came before that.
            floor = int(oldest) - 1 if oldest is not None else 0
            heads.update(
                (m, int(head) if head is not None else floor) for m, head in zip(part, row[1:], strict=True)
            )
        return heads, oldest

    def current(self, memory_id: str, log: Log | None = None) -> int:
        """The memory's index brought up to its last entry in the log (``log``: read once for the
        memories of one search; else now); returns the generation to search at."""
        heads, oldest = log if log is not None and memory_id in log[0] else self.log([memory_id])
        head = heads[memory_id]
        if self.index.generation(memory_id) > head:
            # Cached past the memory's last entry: an entry committed below the floor above (a write
            # held open while the log pruned past it). Rare; reload rather than skip it.
            self.index.forget(memory_id)

        def changes(seen: int) -> Changes | None:
            if oldest is not None and oldest > seen + 1:
                return None  # entries were pruned since: the log cannot bring it up to date
            return self._changes(memory_id, seen, head)

        self.index.follow(memory_id, head, changes)
        return head

    def _changes(self, memory_id: str, seen: int, head: int) -> Changes:
        """The memory's nodes logged after ``seen`` up to ``head``: each removed, and re-added as it is
        now if it is live in the memory."""
        conn = self.db.conn
        p = self.dialect.p
        changed = sorted(
            {
                int(r[0])
                for r in conn.execute(
                    f"SELECT node_rowid FROM node_text_changes WHERE memory_id = {p} AND seq > {p} AND seq <= {p}",
                    (memory_id, seen, head),
                )
            }
        )
        live: list[Document] = []
        for i in range(0, len(changed), 5000):
            among, params = self.dialect.one_of("rowid", changed[i : i + 5000])
            live += [
                _document(r)
                for r in conn.execute(
                    f"SELECT rowid, name, description, content, tags FROM nodes WHERE {among} "
                    f"AND memory_id = {p} AND deleted_at IS NULL",
                    (*params, memory_id),
                )
            ]
        return live, changed

    def search(
        self, memory_id: str, text: str, k: int | None, log: Log | None = None
    ) -> list[tuple[int, float]]:
        return self.index.search(memory_id, self.current(memory_id, log), text, k)


def regex_hit(rowid: Any, points: Any) -> tuple[int, float]:
    """A regex match as every engine returns it: (rowid, score), ``points`` counted down ``REGEX_FIELDS``
    from its length (the best field matched)."""
    return int(rowid), round(int(points) / len(REGEX_FIELDS), 2)


def _document(row: Sequence[Any]) -> Document:
    rowid, name, description, content, tags = row
    if content and content.startswith(SEALED_PREFIX):
        content = ""  # an encrypted memory's content is sealed (sealing.py): its ciphertext has no words
    texts = (name or "", description or "", content or "", tags or "")
    return int(rowid), list(zip(texts, COLUMN_WEIGHTS, strict=True))


class SearchStore(Protocol):
    """What the search, scope and embedding services need; ``SqliteSearchStore`` (embedded) and
    ``PostgresSearchStore`` (server mode) implement it."""

    index: VectorIndex | None

    def nodes_by_rowid(self, rowids: Sequence[int]) -> dict[int, NodeRecord]: ...
    def survey(self, f: NodeFilter, limit: int) -> list[int]: ...
    def keyword(self, f: NodeFilter, query: str, limit: int) -> list[tuple[int, float]]: ...
    def regex(self, f: NodeFilter, pattern: LinearPattern, limit: int) -> list[tuple[int, float]]: ...
    def filter_rowids(self, f: NodeFilter, rowids: Sequence[int]) -> set[int]: ...
    def all_rowids(self, f: NodeFilter, memory_id: str) -> list[int]: ...
    def vector_count(self, memory_id: str) -> int: ...
    def vector(self, memory_id: str, query: Vector, k: int) -> list[tuple[int, float]]: ...
    def vector_subset(
        self, memory_id: str, query: Vector, rowids: Sequence[int], k: int
    ) -> list[tuple[int, float]]: ...
    def embedding_hashes(self, node_ids: Sequence[str]) -> dict[str, str | None]: ...
    def put_embeddings(self, rows: Sequence[tuple[str, Vector | None, str | None, str, str]]) -> None: ...
    def delete_embeddings(self, node_ids: Sequence[str]) -> None: ...
    def nodes_matching(
        self, memory_ids: Sequence[str], columns: Sequence[str], needle: str, exact_id: bool, limit: int
    ) -> list[NodeRecord]: ...
    def live_locs_in(self, memory_ids: Sequence[str], loc: str) -> set[str]: ...
    def add_scope(self, scope: Scope) -> None: ...
    def update_scope(self, scope: Scope) -> None: ...
    def delete_scope(self, scope_id: str, at: str) -> None: ...
    def scope(self, scope_id: str) -> Scope | None: ...
    def scope_named(self, owner_type: str, owner_id: str, name: str) -> Scope | None: ...
    def scopes_of(self, owner_type: str, owner_id: str) -> list[Scope]: ...


class SearchSql(EngineStore):
    """The search SQL both engines run; each engine's class adds how it evaluates a ``where`` predicate
    and a regex (SQLite: functions registered on the connection; PostgreSQL: Python over the rows the
    other conditions select)."""

    def __init__(
        self, db: Database | NativeDatabase, dim: int | None = None, model: str | None = None
    ) -> None:
        super().__init__(db)
        self.model = model
        self.index = VectorIndex(dim, self._load_vectors) if dim else None
        self.keywords = NodeKeywords(db, self.dialect)
        # Embedding writes and their hand-off to the index, in commit order: per memory on PostgreSQL,
        # whose writers of two memories run at once (docs/decisions/0180); one gate on SQLite's one writer.
        self._gate = WriteGate(keyed=isinstance(db, NativeDatabase))
        # Opens the sealed nodes of encrypted memories (sealing.py), as the graph store does.
        self.codec: NodeCodec | None = None

    def stop(self) -> list[threading.Thread]:
        """End the indexes' background work (the vector graphs' builds), bounded, and forget their
        partitions; returns the threads still at work (normally none). Loads after this raise ``Stopped``."""
        busy = self.index.stop() if self.index is not None else []
        busy += self.keywords.index.stop()
        if self.index is not None:
            self.index.clear()
        self.keywords.index.clear()
        return busy

    def _read(self, row: Sequence[Any]) -> NodeRecord:
        node = _node(row)
        return self.codec.open(node) if self.codec is not None else node

    def _prepare(self, f: NodeFilter) -> Any:
        """The connection a select over ``f`` runs on (an engine may register ``f``'s functions first)."""
        return self.conn

    def _select(
        self,
        f: NodeFilter,
        columns: str,
        tail: str = "",
        tail_params: Sequence[Any] = (),
        limit: int | None = None,
    ) -> list[Sequence[Any]]:
        """``columns`` of the live nodes ``n`` passing ``f`` (its ``where`` included), then ``tail``
        (more conditions, an order), at most ``limit`` rows: the filter applies before the limit."""
        conn = self._prepare(f)
        cond, params = _conditions(f, self.dialect)
        bound = f" LIMIT {self.dialect.p}" if limit is not None else ""
        return list(
            conn.execute(
                f"SELECT {columns} FROM nodes n WHERE {cond}{tail}{bound}",
                (*params, *tail_params, *([limit] if limit is not None else [])),
            ).fetchall()
        )

    # ── node reads ──────────────────────────────────────────────────────

    def nodes_by_rowid(self, rowids: Sequence[int]) -> dict[int, NodeRecord]:
        if not rowids:
            return {}
        among, params = self.dialect.one_of("rowid", rowids)
        rows = self.conn.execute(
            f"SELECT rowid, {_NODE_COLUMNS} FROM nodes WHERE {among} AND deleted_at IS NULL", params
        ).fetchall()
        return {int(r[0]): self._read(tuple(r)[1:]) for r in rows}

    def rowids_of(self, node_ids: Sequence[str]) -> dict[str, int]:
        if not node_ids:
            return {}
        among, params = self.dialect.one_of("id", node_ids)
        rows = self.conn.execute(f"SELECT id, rowid FROM nodes WHERE {among}", params)
        return {r[0]: int(r[1]) for r in rows}

    # ── the four modes ────────────────────────────────────────────────

    def survey(self, f: NodeFilter, limit: int) -> list[int]:
        """Nodes in memory order, then loc order: one indexed range per memory until ``limit``."""
        out: list[int] = []
        for memory_id in f.memory_ids:
            if len(out) >= limit:
                break
            one = NodeFilter((memory_id,), f.object_type, f.runnable, f.subtree, f.where)
            if f.subtree is not None and f.subtree[0] != memory_id:
                continue
            rows = self._select(one, "n.rowid", " ORDER BY n.loc", limit=limit - len(out))
            out.extend(int(r[0]) for r in rows)
        return out

    def keyword(self, f: NodeFilter, query: str, limit: int) -> list[tuple[int, float]]:
        """BM25 over name, description, content and tags (porter-stemmed), filters before truncation.

        Each memory's index answers its own best candidates, filtered: when ``limit`` of them survive
        (or they were all the matches) they are exactly the best survivors. Otherwise every match is
        filtered and ranked. Memories are merged by score.
        """
        hits: list[tuple[int, float]] = []
        log = self.keywords.log(f.memory_ids)  # one read for every memory searched (a round trip on a server)
        for memory_id in f.memory_ids:
            if f.subtree is not None and f.subtree[0] != memory_id:
                continue
            if not f.structural:
                hits += self.keywords.search(memory_id, query, limit, log)
                continue
            one = NodeFilter((memory_id,), f.object_type, f.runnable, f.subtree, f.where)
            width = max(limit * 10, FILTER_WIDTH)
            candidates = self.keywords.search(memory_id, query, width, log)
            keep = self.filter_rowids(one, [r for r, _ in candidates])
            found = [(r, s) for r, s in candidates if r in keep][:limit]
            if len(found) < limit and len(candidates) >= width:
                every = self.keywords.search(memory_id, query, None, log)
                keep = set()
                for i in range(0, len(every), 5000):
                    keep |= self.filter_rowids(one, [r for r, _ in every[i : i + 5000]])
                found = [(r, s) for r, s in every if r in keep][:limit]
            hits += found
        hits.sort(key=lambda x: (-x[1], x[0]))
        return hits[:limit]

    def regex(self, f: NodeFilter, pattern: LinearPattern, limit: int) -> list[tuple[int, float]]:
        """Nodes whose name (score 1.0), description (0.67) or content (0.33) matches, best field first."""
        raise NotImplementedError  # each engine's class

    def filter_rowids(self, f: NodeFilter, rowids: Sequence[int]) -> set[int]:
        """Which of ``rowids`` pass the filter."""
        if not rowids:
            return set()
        among, params = self.dialect.one_of("n.rowid", rowids)
        return {int(r[0]) for r in self._select(f, "n.rowid", f" AND {among}", params)}

    def all_rowids(self, f: NodeFilter, memory_id: str) -> list[int]:
        one = NodeFilter((memory_id,), f.object_type, f.runnable, f.subtree, f.where)
        return [int(r[0]) for r in self._select(one, "n.rowid")]

    # ── vectors ────────────────────────────────────────────────────────

    def generation(self, memory_id: str) -> int:
        row = self.conn.execute(
            f"SELECT generation FROM vector_generations WHERE memory_id = {self.dialect.p}", (memory_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    def vector_count(self, memory_id: str) -> int:
        """Live vectors of the memory (0 without an index: no generation was ever written)."""
        if self.index is None:
            return 0
        generation = self.generation(memory_id)
        return len(self.index.sync(memory_id, generation).ids) if generation else 0

    def _load_vectors(self, memory_id: str) -> tuple[list[int], Vector]:
        p = self.dialect.p
        rows = self.conn.execute(
            "SELECT n.rowid, e.vector FROM node_embeddings e JOIN nodes n ON n.id = e.node_id "
            f"WHERE n.memory_id = {p} AND n.deleted_at IS NULL AND e.status = 'ok' AND e.model = {p} "
            "ORDER BY n.rowid",
            (memory_id, self.model),
        ).fetchall()
        dim = self.index.dim if self.index else 0
        if not rows:
            return [], np.zeros((0, dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim)
        return [int(r[0]) for r in rows], matrix

    def _read_generation(self, memory_id: str) -> int:
        """The memory's vector generation for a search, once this process's embedding write in
        progress has reached the index (``WriteGate.settle``)."""
        generation = self.generation(memory_id)
        index = self.index
        if index is not None:
            self._gate.settle(lambda: index.generation(memory_id) < generation, memory_id)
        return generation

    def vector(self, memory_id: str, query: Vector, k: int) -> list[tuple[int, float]]:
        assert self.index is not None
        return self.index.search(memory_id, self._read_generation(memory_id), query, k)

    def vector_subset(
        self, memory_id: str, query: Vector, rowids: Sequence[int], k: int
    ) -> list[tuple[int, float]]:
        assert self.index is not None
        return self.index.search_subset(memory_id, self._read_generation(memory_id), query, rowids, k)

    def embedding_hashes(self, node_ids: Sequence[str]) -> dict[str, str | None]:
        if not node_ids:
            return {}
        among, params = self.dialect.one_of("node_id", node_ids)
        rows = self.conn.execute(
            f"SELECT node_id, text_hash FROM node_embeddings WHERE model = {self.dialect.p} AND status = 'ok' "
            f"AND {among}",
            (self.model, *params),
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    def _memories_of(self, node_ids: Sequence[str], embedded: bool = False) -> list[str]:
        """The memories ``node_ids`` live in (with ``embedded``: only those of nodes that have an
        embedding row), read before a write so that it can take their keys."""
        among, params = self.dialect.one_of("id", node_ids)
        having = (
            " AND EXISTS (SELECT 1 FROM node_embeddings e WHERE e.node_id = nodes.id)" if embedded else ""
        )
        rows = self.conn.execute(f"SELECT DISTINCT memory_id FROM nodes WHERE {among}{having}", params)
        return sorted(str(r[0]) for r in rows.fetchall())

    def put_embeddings(self, rows: Sequence[tuple[str, Vector | None, str | None, str, str]]) -> None:
        """``(node_id, vector or None, error, text_hash, at)``; a None vector records a failure.

        This process's own write is applied to its cached index incrementally (the triggers bump each
        memory's generation once per row, read before and after inside the transaction); any other
        change makes the next search reload the memory's vectors from the database.
        """
        if not rows:
            return
        dim = self.index.dim if self.index else 0
        values = [
            (
                node_id, self.model or "", dim, vec.astype(np.float32).tobytes() if vec is not None else None,
                "ok" if vec is not None else "failed", error, at, text_hash,
            )
            for node_id, vec, error, text_hash, at in rows
        ]  # fmt: skip
        ids = [r[0] for r in rows]
        p = self.dialect.p
        among, params = self.dialect.one_of("id", ids)
        embedded, embedded_params = self.dialect.one_of("node_id", ids)
        # The keys of the memories the nodes live in (one, from a node write): each memory's generation
        # is read before and after under its key, so the difference is this write's own.
        locked = self._memories_of(ids)
        if not locked:
            return
        with (
            self._gate.writing(locked[0] if len(locked) == 1 else None),
            self.atomic(*(write_keys.memory(m) for m in locked)) as tx,
        ):
            where = {
                r[0]: (r[1], int(r[2]))
                for r in tx.execute(f"SELECT id, memory_id, rowid FROM nodes WHERE {among}", params)
            }
            had = {
                r[0]
                for r in tx.execute(
                    f"SELECT node_id FROM node_embeddings WHERE status = 'ok' AND model = {p} AND {embedded}",
                    (self.model, *embedded_params),
                )
            }
            # A node moved meanwhile to a memory whose key this write does not hold keeps its row (written
            # as before) but no incremental hand-off: that memory's next search sees its generation
            # moved and reloads it.
            memories = sorted({m for m, _ in where.values()} & set(locked))
            before = {m: self.generation(m) for m in memories}
            # Only rows of nodes that exist (read above, in this transaction: a node deleted since the
            # embedding was computed gets none).
            tx.executemany(
                "INSERT INTO node_embeddings (node_id, model, dim, vector, status, error, updated_at, text_hash) "
                f"VALUES ({self.dialect.marks(8)}) "
                "ON CONFLICT (node_id) DO UPDATE SET model = excluded.model, dim = excluded.dim, "
                "vector = excluded.vector, status = excluded.status, error = excluded.error, "
                "updated_at = excluded.updated_at, text_hash = excluded.text_hash",
                [v for v in values if v[0] in where],
            )
            after = {m: self.generation(m) for m in memories}
        if self.index is None:
            return
        for memory_id in memories:
            mine = [
                (node_id, vec) for node_id, vec, *_ in rows if where.get(node_id, ("", 0))[0] == memory_id
            ]
            self.index.apply(
                memory_id,
                before[memory_id],
                after[memory_id],
                added=[(where[n][1], v) for n, v in mine if v is not None],
                removed=[where[n][1] for n, _ in mine if n in had],
            )

    def delete_embeddings(self, node_ids: Sequence[str]) -> None:
        if not node_ids:
            return
        # Every write to a memory without embeddings lands here: no transaction (and no key) when none of
        # its nodes has an embedding row, the usual case.
        memories = self._memories_of(node_ids, embedded=True)
        if not memories:
            return
        with self.atomic(*(write_keys.memory(m) for m in memories)) as tx:
            tx.executemany(
                f"DELETE FROM node_embeddings WHERE node_id = {self.dialect.p}", [(n,) for n in node_ids]
            )

    # ── entity search (hadron_search) ─────────────────────────────────

    def nodes_matching(
        self, memory_ids: Sequence[str], columns: Sequence[str], needle: str, exact_id: bool, limit: int
    ) -> list[NodeRecord]:
        """Live nodes in ``memory_ids`` whose columns contain ``needle`` (case-insensitive), or id match."""
        if not memory_ids:
            return []
        p = self.dialect.p
        among, params = self.dialect.one_of("memory_id", memory_ids)
        tests: list[str] = []
        if exact_id:
            tests.append(f"id = {p}")
            params.append(needle)
        # The pattern is a parameter: the statement holds no literal ``%`` (psycopg would want ``%%``).
        pattern = "%" + needle.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        for column in columns:
            tests.append(f"lower({column}) LIKE {p} ESCAPE '\\'")
            params.append(pattern)
        if not tests:
            return []
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE deleted_at IS NULL AND {among} "
            f"AND ({' OR '.join(tests)}) LIMIT {p}",
            (*params, limit),
        ).fetchall()
        return [self._read(r) for r in rows]

    def live_locs_in(self, memory_ids: Sequence[str], loc: str) -> set[str]:
        if not memory_ids:
            return set()
        among, params = self.dialect.one_of("memory_id", memory_ids)
        rows = self.conn.execute(
            f"SELECT memory_id FROM nodes WHERE loc = {self.dialect.p} AND deleted_at IS NULL AND {among}",
            (loc, *params),
        ).fetchall()
        return {r[0] for r in rows}

    # ── scopes ────────────────────────────────────────────────────────

    _SCOPE = (
        "SELECT id, name, description, owner_type, owner_id, memory_ids, created_by, created_at, updated_at "
        "FROM scopes"
    )

    @staticmethod
    def _scope(row: Sequence[Any]) -> Scope:
        return Scope(
            id=row[0], name=row[1], description=row[2], owner_type=row[3], owner_id=row[4],
            memory_ids=tuple(json.loads(row[5])), created_by=row[6], created_at=row[7], updated_at=row[8],
        )  # fmt: skip

    def add_scope(self, scope: Scope) -> None:
        with self.atomic(write_keys.scopes(scope.owner_type, scope.owner_id)) as tx:
            tx.execute(
                "INSERT INTO scopes (id, name, description, owner_type, owner_id, memory_ids, created_by, "
                f"created_at, updated_at) VALUES ({self.dialect.marks(9)})",
                (
                    scope.id, scope.name, scope.description, scope.owner_type, scope.owner_id,
                    json.dumps(list(scope.memory_ids)), scope.created_by, scope.created_at, scope.updated_at,
                ),
            )  # fmt: skip

    def update_scope(self, scope: Scope) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.scopes(scope.owner_type, scope.owner_id)) as tx:
            tx.execute(
                f"UPDATE scopes SET name = {p}, description = {p}, memory_ids = {p}, updated_at = {p} WHERE id = {p}",
                (
                    scope.name,
                    scope.description,
                    json.dumps(list(scope.memory_ids)),
                    scope.updated_at,
                    scope.id,
                ),
            )

    def delete_scope(self, scope_id: str, at: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:  # one row, by id
            tx.execute(
                f"UPDATE scopes SET deleted_at = {p} WHERE id = {p} AND deleted_at IS NULL", (at, scope_id)
            )

    def scope(self, scope_id: str) -> Scope | None:
        p = self.dialect.p
        row = self.conn.execute(
            self._SCOPE + f" WHERE id = {p} AND deleted_at IS NULL", (scope_id,)
        ).fetchone()
        return self._scope(row) if row else None

    def scope_named(self, owner_type: str, owner_id: str, name: str) -> Scope | None:
        p = self.dialect.p
        row = self.conn.execute(
            self._SCOPE + f" WHERE owner_type = {p} AND owner_id = {p} AND name = {p} AND deleted_at IS NULL",
            (owner_type, owner_id, name),
        ).fetchone()
        return self._scope(row) if row else None

    def scopes_of(self, owner_type: str, owner_id: str) -> list[Scope]:
        p = self.dialect.p
        rows = self.conn.execute(
            self._SCOPE + f" WHERE owner_type = {p} AND owner_id = {p} AND deleted_at IS NULL ORDER BY name",
            (owner_type, owner_id),
        ).fetchall()
        return [self._scope(r) for r in rows]


class SqliteSearchStore(SearchSql):
    """The search store on SQLite: ``where`` and the regex run as SQL functions registered on the
    connection, inside the query."""

    dialect = SQLITE

    def _prepare(self, f: NodeFilter) -> Any:
        conn = self.conn
        assert isinstance(conn, sqlite3.Connection)  # this class runs on a core.db.Database
        if f.where is not None:
            conn.create_function("hadron_where", 2, _where_function(f.where), deterministic=True)
        return conn

    def regex(self, f: NodeFilter, pattern: LinearPattern, limit: int) -> list[tuple[int, float]]:
        """Nodes whose name (score 1.0), description (0.67) or content (0.33) matches, best field first."""
        conn = self._prepare(f)
        conn.create_function("hadron_regex", 1, lambda text: int(text is not None and pattern.search(text)))
        cond, params = _conditions(f, self.dialect)
        points = " ".join(
            f"WHEN hadron_regex(n.{field}) THEN {len(REGEX_FIELDS) - i}"
            for i, field in enumerate(REGEX_FIELDS)
        )
        rows = conn.execute(
            "SELECT rowid, s FROM (SELECT n.rowid AS rowid, n.memory_id AS m, n.loc AS loc, "
            f"CASE {points} ELSE 0 END AS s "
            f"FROM nodes n WHERE {cond}) WHERE s > 0 ORDER BY s DESC, loc LIMIT {self.dialect.p}",
            (*params, limit),
        ).fetchall()
        return [regex_hit(r[0], r[1]) for r in rows]


class PostgresSearchStore(SearchSql):
    """The search store on PostgreSQL: the same SQL, except the two SQLite functions it registers
    (``hadron_where`` over properties/data, ``hadron_regex`` over the text columns), which run here in
    Python over the rows the other conditions select, in the same order, before the limit."""

    dialect = POSTGRES

    def _select(
        self,
        f: NodeFilter,
        columns: str,
        tail: str = "",
        tail_params: Sequence[Any] = (),
        limit: int | None = None,
    ) -> list[Sequence[Any]]:
        if f.where is None:
            return super()._select(f, columns, tail, tail_params, limit)
        cond, params = _conditions(replace(f, where=None), self.dialect)
        rows = self.conn.execute(
            f"SELECT {columns}, n.properties, n.data FROM nodes n WHERE {cond}{tail}", (*params, *tail_params)
        ).fetchall()
        test = _where_function(f.where)  # the embedded engine's SQL function, called here
        kept: list[Sequence[Any]] = []
        for row in rows:
            if test(row[-2], row[-1]):
                kept.append(tuple(row)[:-2])
                if limit is not None and len(kept) >= limit:
                    break
        return kept

    def regex(self, f: NodeFilter, pattern: LinearPattern, limit: int) -> list[tuple[int, float]]:
        """``SearchSql.regex``: the fields tested here, best field first, ties by loc."""

        def score(row: Sequence[Any]) -> int:
            for i, text in enumerate(row[2:]):
                if text is not None and pattern.search(text):
                    return len(REGEX_FIELDS) - i
            return 0

        fields = ", ".join(f"n.{field}" for field in REGEX_FIELDS)
        rows = self._select(f, f"n.rowid, n.loc, {fields}")
        scored = [(int(r[0]), r[1], s) for r in rows if (s := score(r)) > 0]
        scored.sort(key=lambda x: (-x[2], x[1]))
        return [regex_hit(rowid, s) for rowid, _, s in scored[:limit]]
