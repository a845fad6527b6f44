"""Agent memory's reads, shared by both engines' stores: records by id and seq, listing and facets inside a
``Visibility`` (tenancy and every filter inside each query), and the first stage of search (BM25 and
dense, post-filtered against the attribute cache). Split from ``memory_store.py`` (issue 29).

The SQL here is written once, in the SQL SQLite and PostgreSQL share, with the spellings that differ
(placeholders, lists of values) from the store's ``dialect`` (``metronix/dialect.py``); each engine runs
it as written. What an engine does its own way lives in its store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.core.search import Vector
from triptych.metronix.attributes import Visibility
from triptych.metronix.dialect import Dialect
from triptych.metronix.memory_caches import Counters, MemoryCaches
from triptych.metronix.memory_model import (
    MemoryRecord,
    RankingRow,
    dedup_key,
    record_from_attributes,
    record_from_row,
)

# Filters this selective (fewer than 1 visible record in this many of the workspace's nearest) are
# served from the materialised visible set instead of widening the post-filtered probe further.
MAX_PROBE = 4096

COLUMNS = (
    "r.seq, r.id, r.workspace_id, r.agent_id, r.scope, r.session_id, r.kind, r.content, r.content_hash, \
r.tags, r.importance_score, r.source_type, r.metadata, r.status, r.verification_state, r.superseded_by, \
r.ttl_expires_at, r.created_at, r.updated_at"
)

Hits = list[tuple[int, float]]


class FirstStage(NamedTuple):
    """A search's candidates: the BM25 and the dense top hits, each best first, visible ones only."""

    keyword: Hits
    dense: Hits


def visibility_where(view: Visibility, d: Dialect) -> tuple[str, list[Any]]:
    """The WHERE clause of everything ``view`` may see; every filter applies here, inside the query (the
    attribute cache's ``Visibility.admits`` restates it)."""
    # Without an agent (the REST whole-workspace view) the agent term goes, rather than becoming
    # `<agent> IS NULL OR ...`, which would keep the planner off the (workspace, agent) index.
    p = d.p
    agent = "" if view.agent_id is None else f"r.agent_id = {p} AND "
    clauses = [
        f"r.workspace_id = {p}",
        f"(r.scope = 'global' OR ({agent}(r.scope = 'per_agent' OR (r.scope = 'session'"
        f" AND r.ttl_expires_at > {p} AND (CAST({p} AS TEXT) IS NULL OR r.session_id = {p})))))",
    ]
    params: list[Any] = [view.workspace_id]
    if view.agent_id is not None:
        params.append(view.agent_id)
    params.extend((view.now, view.session_id, view.session_id))
    lists = []
    if view.statuses is not None:
        # An empty list selects nothing (``IN ()`` on SQLite; ``= ANY('{}')`` on PostgreSQL).
        lists.append(d.one_of("r.status", view.statuses) if view.statuses else ("0 = 1", []))
    if view.exclude_statuses:
        lists.append(d.none_of("r.status", view.exclude_statuses))
    for clause, values in lists:
        clauses.append(clause)
        params.extend(values)
    if view.scope is not None:
        clauses.append(f"r.scope = {p}")
        params.append(view.scope)
    if view.kind is not None:
        clauses.append(f"r.kind = {p}")
        params.append(view.kind)
    if view.source_types:
        clause, values = d.one_of("r.source_type", view.source_types)
        clauses.append(clause)
        params.extend(values)
    for tag in view.tags:
        clauses.append(f"EXISTS (SELECT 1 FROM memory_tags t WHERE t.seq = r.seq AND t.tag = {p})")
        params.append(tag)
    return " AND ".join(clauses), params


class MemoryReads:
    """The read half of a memory store (each engine's store is one of these and a ``MemoryWrites``)."""

    db: Database | NativeDatabase
    dialect: Dialect
    caches: MemoryCaches

    def find_duplicate(
        self, workspace_id: str, agent_id: str, scope: str, session_id: str | None, content_hash: str
    ) -> MemoryRecord | None:
        """The record ``insert`` would dedup to, if one is stored (a read; the constraint decides)."""
        key = dedup_key(workspace_id, agent_id, scope, session_id, content_hash)
        pinned = self.caches.pinned_map()
        if pinned is None or workspace_id in pinned:
            row = self.db.conn.execute(
                f"SELECT {COLUMNS} FROM memory_records r WHERE dedup_key = {self.dialect.p}", (key,)
            ).fetchone()
            return None if row is None else record_from_row(row)
        # In a snapshot that has not read this workspace's counters yet: both in one statement (the
        # store call's first read: the rest of the call then asks the database nothing before writing).
        p = self.dialect.p
        row = self.db.conn.execute(
            f"SELECT g.generation AS g_generation, g.attributes AS g_attributes, {COLUMNS}"
            f" FROM (SELECT 1 AS one) AS o LEFT JOIN memory_generations g ON g.workspace_id = {p}"
            f" LEFT JOIN memory_records r ON r.dedup_key = {p}",
            (workspace_id, key),
        ).fetchone()
        self.caches.settle(workspace_id, (int(row["g_generation"] or 0), int(row["g_attributes"] or 0)))
        return None if row["id"] is None else record_from_row(row)

    def get(self, workspace_id: str, record_id: str) -> MemoryRecord | None:
        row = self.db.conn.execute(
            f"SELECT {COLUMNS} FROM memory_records r WHERE r.workspace_id = {self.dialect.p}"
            f" AND r.id = {self.dialect.p}",
            (workspace_id, record_id),
        ).fetchone()
        return None if row is None else record_from_row(row)

    def by_seqs(self, seqs: Sequence[int], workspace_id: str | None = None) -> dict[int, MemoryRecord]:
        """The records of ``seqs``; with ``workspace_id``, those of that workspace, from the attribute
        cache (no query: inside ``snapshot()`` a search asks the database only for its counters)."""
        if workspace_id is not None:
            cached = self.caches.attributes.rows(
                workspace_id, self.caches.read_counters(workspace_id)[1], seqs
            )
            return {seq: record_from_attributes(workspace_id, a) for seq, a in cached.items()}
        if not seqs:
            return {}
        clause, params = self.dialect.one_of("r.seq", seqs)
        rows = self.db.conn.execute(f"SELECT {COLUMNS} FROM memory_records r WHERE {clause}", params)
        return {int(r["seq"]): record_from_row(r) for r in rows}

    def ranking_rows(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, RankingRow]:
        """What ranking reads of each candidate, links included: no content, tags or metadata to decode."""
        rows = self.caches.attributes.rows(workspace_id, self.caches.read_counters(workspace_id)[1], seqs)
        return {
            seq: RankingRow(
                seq, a.id, a.session_id, a.updated_at, a.importance_score, a.created_at, a.entities, a.links
            )
            for seq, a in rows.items()
        }

    def list_records(self, view: Visibility, limit: int, offset: int) -> tuple[list[MemoryRecord], int]:
        where, params = visibility_where(view, self.dialect)
        total = int(
            self.db.conn.execute(f"SELECT count(*) FROM memory_records r WHERE {where}", params).fetchone()[0]
        )
        rows = self.db.conn.execute(
            f"SELECT {COLUMNS} FROM memory_records r WHERE {where} ORDER BY r.created_at DESC, r.seq DESC"
            f" LIMIT {self.dialect.p} OFFSET {self.dialect.p}",
            (*params, limit, offset),
        ).fetchall()
        return [record_from_row(r) for r in rows], total

    def facets(self, workspace_id: str, now: str) -> tuple[list[str], list[str]]:
        """The distinct kinds and source types of the workspace's live records (expired sessions aside)."""
        p = self.dialect.p
        live = f"workspace_id = {p} AND (ttl_expires_at IS NULL OR ttl_expires_at > {p})"
        kinds = self.db.conn.execute(
            f"SELECT DISTINCT kind FROM memory_records WHERE {live} ORDER BY kind", (workspace_id, now)
        ).fetchall()
        sources = self.db.conn.execute(
            f"SELECT DISTINCT source_type FROM memory_records WHERE {live} AND source_type != ''"
            " ORDER BY source_type",
            (workspace_id, now),
        ).fetchall()
        return [r[0] for r in kinds], [r[0] for r in sources]

    def visible_seqs(self, view: Visibility) -> list[int]:
        where, params = visibility_where(view, self.dialect)
        return [
            int(r[0])
            for r in self.db.conn.execute(f"SELECT r.seq FROM memory_records r WHERE {where}", params)
        ]

    def visible_subset(
        self, view: Visibility, seqs: Sequence[int], attributes: int | None = None
    ) -> set[int]:
        """Which of ``seqs`` the view may see, every filter applied (from the attribute cache, as of
        the ``attributes`` generation the caller read, else the current one)."""
        if not seqs:
            return set()
        workspace = view.workspace_id
        generation = self.caches.read_counters(workspace)[1] if attributes is None else attributes
        return self.caches.attributes.visible(workspace, generation, seqs, view)

    # -- the first stage of search ----------------------------------------------------------------

    def first_stage(
        self, view: Visibility, query: str, embedding: Callable[[], Vector], limit: int
    ) -> FirstStage:
        """A search's one first-stage call: the ``limit`` best keyword hits, then (``embedding()`` is
        awaited only now, so the caller's query embedding overlaps the keyword search) the ``limit``
        nearest records, both among the records ``view`` may see, against one reading of the counters."""
        counters = self.caches.read_counters(view.workspace_id)
        keyword = self._keyword(view, query, limit, counters)
        return FirstStage(keyword, self._dense(view, embedding(), limit, counters))

    def dense_search(self, view: Visibility, query: Vector, limit: int) -> Hits:
        """The ``limit`` records nearest ``query`` among those the view may see."""
        return self._dense(view, query, limit, self.caches.read_counters(view.workspace_id))

    def keyword_search(self, view: Visibility, query: str, limit: int) -> Hits:
        """BM25 top ``limit`` among visible records, post-filtered the same way as ``dense_search``."""
        return self._keyword(view, query, limit, self.caches.read_counters(view.workspace_id))

    def _dense(self, view: Visibility, query: Vector, limit: int, counters: Counters) -> Hits:
        """Ranks the whole workspace (one GEMV, or the HNSW graph) and keeps the visible records among the
        first ``4 * limit``, widening while too few survive. Exact for the exact index: a visible record
        outside the probe ranks below every record inside it. Selecting the visible set in SQL first
        cost 42 ms at 10,000 records; this costs about 1 ms when most records are visible."""
        workspace, index = view.workspace_id, self.caches.index
        generation, attributes = counters

        def exact(seqs: list[int]) -> Hits:
            return index.search_subset(workspace, generation, query, seqs, limit) if seqs else []

        return self._post_filtered(
            view,
            limit,
            attributes,
            lambda probe: index.search(workspace, generation, query, probe),
            # The HNSW graph (above 20,000 vectors) may return fewer than asked: only the size says
            # whether the workspace is exhausted.
            lambda hits, probe: probe >= index.size(workspace, generation),
            exact,
        )

    def _keyword(self, view: Visibility, query: str, limit: int, counters: Counters) -> Hits:
        workspace, keywords = view.workspace_id, self.caches.keywords
        generation, attributes = counters

        def exact(seqs: list[int]) -> Hits:
            # A selective filter: rank every match (cheap in memory), keep the visible ones.
            allowed = set(seqs)
            hits = keywords.search(workspace, generation, query, None)
            return [(s, score) for s, score in hits if s in allowed][:limit]

        return self._post_filtered(
            view,
            limit,
            attributes,
            lambda probe: keywords.search(workspace, generation, query, probe),
            lambda hits, probe: len(hits) < probe,
            exact,
        )

    def _post_filtered(
        self,
        view: Visibility,
        limit: int,
        attributes: int,
        ranked: Callable[[int], Hits],
        exhausted: Callable[[Hits, int], bool],
        exact: Callable[[list[int]], Hits],
    ) -> Hits:
        """The first ``limit`` visible hits of a workspace-wide ranking: probe ``4 * limit`` hits, widen
        ×4 while too few are visible and the ranking is not ``exhausted``, and past ``MAX_PROBE`` rank
        the materialised visible set with ``exact``."""
        probe = 4 * limit
        while probe <= MAX_PROBE:
            hits = ranked(probe)
            visible = self.visible_subset(view, [s for s, _ in hits], attributes)
            found = [(s, score) for s, score in hits if s in visible]
            if len(found) >= limit or exhausted(hits, probe):
                return found[:limit]
            probe *= 4
        return exact(self.visible_seqs(view))

    def vectors(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, Vector]:
        return self.caches.index.vectors(workspace_id, self.caches.read_counters(workspace_id)[0], seqs)

    def adjacent(self, workspace_id: str, seqs: Sequence[int]) -> dict[int, set[int]]:
        """Each seq's conversation neighbours: the record it follows and the records that follow it."""
        generation = self.caches.read_counters(workspace_id)[0]
        return self.caches.adjacency.neighbours(workspace_id, generation, seqs)

    def context(self, workspace_id: str, scores: dict[int, float], hops: int) -> dict[int, float]:
        """Scores lent along conversation links (``AdjacencyIndex.lend``)."""
        generation = self.caches.read_counters(workspace_id)[0]
        return self.caches.adjacency.lend(workspace_id, generation, scores, hops)

    def entities(self, seqs: Sequence[int]) -> dict[int, set[str]]:
        return self._grouped("SELECT seq, entity FROM memory_entities WHERE {}", seqs)

    def links(self, seqs: Sequence[int], workspace_id: str | None = None) -> dict[int, set[str]]:
        """Each seq's explicitly related record ids; with ``workspace_id``, from the attribute cache."""
        if workspace_id is not None:
            rows = self.caches.attributes.rows(workspace_id, self.caches.read_counters(workspace_id)[1], seqs)
            return {seq: set(a.links) for seq, a in rows.items() if a.links}
        return self._grouped("SELECT seq, related_id FROM memory_links WHERE {}", seqs)

    def _grouped(self, query: str, seqs: Sequence[int]) -> dict[int, set[str]]:
        found: dict[int, set[str]] = {}
        if seqs:
            clause, params = self.dialect.one_of("seq", seqs)
            for seq, value in self.db.conn.execute(query.format(clause), params):
                found.setdefault(int(seq), set()).add(value)
        return found

    # -- the embedding model and re-embedding -----------------------------------------------------

    def embedding_model(self) -> tuple[str, int] | None:
        rows = dict(self.caches.plain().execute("SELECT key, value FROM memory_meta").fetchall())
        if "embedding_model" not in rows:
            return None
        return rows["embedding_model"], int(rows["embedding_dim"])

    def count_records(self) -> int:
        return int(self.db.conn.execute("SELECT count(*) FROM memory_records").fetchone()[0])

    def iter_contents(self, batch: int = 256) -> Iterator[list[tuple[int, str]]]:
        """Every record's (seq, content), a batch at a time, in seq order."""
        last = 0
        while True:
            rows = (
                self.caches.plain()
                .execute(
                    f"SELECT seq, content FROM memory_records WHERE seq > {self.dialect.p} ORDER BY seq"
                    f" LIMIT {self.dialect.p}",
                    (last, batch),
                )
                .fetchall()
            )
            if not rows:
                return
            yield [(int(seq), content) for seq, content in rows]
            last = int(rows[-1][0])
