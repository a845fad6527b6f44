"""Agent-memory recall: candidate generation (one first-stage store call: BM25 and dense, inside the
caller's view), ranking (fusion, conversation context, entity graph, session boost) and the reads beside
it (list, get, facets). Split from ``memory.py`` (issue 29); ``MemoryService`` delegates here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from triptych.core.auth import Principal
from triptych.core.bounds import MAX_OFFSET
from triptych.core.search import rrf
from triptych.metronix.attributes import Visibility
from triptych.metronix.entities import extract_entities
from triptych.metronix.errors import DocumentNotFound, InvalidParams
from triptych.metronix.memory_model import MemoryRecord, RankingRow
from triptych.metronix.memory_rules import (
    MAX_TOP_K,
    MCP_DEFAULTS,
    RECORD_HINT,
    DoorDefaults,
    MemoryContext,
    kind_arg,
    optional_agent_arg,
    scope_arg,
    statuses_arg,
    tags_arg,
)

# First-stage fusion, tuned on LoCoMo (bench/locomo.py, experiments phase; recall@10 of the plain
# format 0.485 -> 0.646 together): a small RRF constant keeps how far ahead the first hits are; BM25
# counts twice because exact words (names, places, objects) carry most of what an agent asks its
# memory for; a record gains CONTEXT_WEIGHT of the best relevance among the records up to
# CONTEXT_HOPS writes away in its conversation, since an answer often sits a turn or two after the
# one that matches the question's words.
MEMORY_RRF_K = 5
KEYWORD_WEIGHT = 2.0
CONTEXT_WEIGHT = 0.7
CONTEXT_HOPS = 2


class MemoryRecall:
    def __init__(self, ctx: MemoryContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.embedder = ctx.embedder
        # The query embedding runs here while the keyword search runs in the caller's thread.
        self._embedding = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memory-embed")

    def close(self) -> None:
        """Stop the embedding worker threads."""
        self._embedding.shutdown(wait=True)

    def list_records(
        self,
        principal: Principal,
        *,
        workspace_id: str | None,
        agent_id: str | None,
        scope: str | None = None,
        tags: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        status: Sequence[str] | None = None,
        kind: str | None = None,
        defaults: DoorDefaults = MCP_DEFAULTS,
        session_id: str | None = None,
        source_types: list[str] | None = None,
    ) -> dict[str, Any]:
        """``agent_id`` None lists every agent's records (the REST doors' whole-workspace view; the MCP
        tools require it); ``session_id`` lists that session's live records, whichever agent wrote them."""
        max_limit = defaults.max_list_limit
        workspace = self.ctx.workspace(principal, workspace_id)
        agent = optional_agent_arg(agent_id)
        if session_id is not None:
            if not session_id.strip():
                raise InvalidParams("session_id must not be empty", details={"field": "session_id"})
            agent, scope = None, "session"
        if not 1 <= limit <= max_limit:
            raise InvalidParams(
                f"limit must be between 1 and {max_limit}, got {limit}", details={"field": "limit"}
            )
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidParams(f"offset must be 0 to {MAX_OFFSET:,}", details={"field": "offset"})
        view = Visibility(
            workspace_id=workspace,
            agent_id=agent,
            statuses=statuses_arg(status, defaults.statuses),
            scope=scope_arg(scope, None, required=False),
            tags=tuple(tags_arg(tags)),
            session_id=session_id,
            kind=kind_arg(kind),
            source_types=tuple(dict.fromkeys(source_types or ())),
            now=self.ctx.now_iso(),
        )
        records, total = self.store.list_records(view, limit, offset)
        self._touch(records)
        return {
            "records": [
                {
                    "id": r.id,
                    "content": r.content,
                    "agent_id": r.agent_id,
                    "scope": r.scope,
                    "tags": r.tags,
                    "importance_score": r.importance_score,
                    "content_hash": r.content_hash,
                    "created_at": r.created_at,
                    "status": r.status,
                    "kind": r.kind,
                    "session_id": r.session_id,
                    "source_type": r.source_type,
                    "metadata": r.metadata,
                }
                for r in records
            ],
            "count": len(records),
            "total": total,
            "limit": limit,
            "offset": offset,
        }

    def facets(self, principal: Principal, workspace_id: str | None) -> dict[str, list[str]]:
        """The kinds and source types present in the workspace (for filter drop-downs)."""
        workspace = self.ctx.workspace(principal, workspace_id)
        kinds, source_types = self.store.facets(workspace, self.ctx.now_iso())
        return {"kinds": kinds, "source_types": source_types}

    def get_record(self, principal: Principal, workspace_id: str | None, record_id: str) -> dict[str, Any]:
        workspace = self.ctx.workspace(principal, workspace_id)
        record = self.ctx.live(workspace, record_id)
        if record is None:
            raise DocumentNotFound(
                f"Memory record not found: {record_id}", hint=RECORD_HINT, details={"record_id": record_id}
            )
        return {
            **record.contract(),
            "verification_state": record.verification_state,
            "superseded_by": record.superseded_by,
        }

    def search(
        self,
        principal: Principal,
        *,
        workspace_id: str | None,
        query: str,
        agent_id: str | None,
        scope: str | None = None,
        tags: list[str] | None = None,
        session_id: str | None = None,
        top_k: int = 5,
        status: Sequence[str] | None = None,
        kind: str | None = None,
        defaults: DoorDefaults = MCP_DEFAULTS,
    ) -> dict[str, Any]:
        """``agent_id`` None searches every agent's records (REST only; the MCP tool requires it)."""
        started = time.perf_counter()
        workspace = self.ctx.workspace(principal, workspace_id)
        agent = optional_agent_arg(agent_id)
        if not query or not query.strip():
            raise InvalidParams("query must not be empty", details={"field": "query"})
        if not 1 <= top_k <= MAX_TOP_K:
            raise InvalidParams(
                f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}", details={"field": "top_k"}
            )
        statuses = statuses_arg(status, defaults.statuses)
        view = Visibility(
            workspace_id=workspace,
            agent_id=agent,
            statuses=statuses,
            scope=scope_arg(scope, None, required=False),
            tags=tuple(tags_arg(tags)),
            kind=kind_arg(kind),
            exclude_statuses=defaults.search_excludes if status is None else (),
            now=self.ctx.now_iso(),
        )
        self.ctx.model_guard.check()
        with self.store.snapshot():
            results = self._rank(view, query, session_id, top_k)
        self._touch([r for r, _ in results])
        return {
            "results": [{"record": record.contract(), **scores} for record, scores in results],
            "count": len(results),
            "latency_ms": round((time.perf_counter() - started) * 1000, 2),
        }

    def _rank(
        self, view: Visibility, query: str, session_id: str | None, top_k: int
    ) -> list[tuple[MemoryRecord, dict[str, Any]]]:
        pool = max(50, top_k * 5)
        pending = self._embedding.submit(self.embedder.embed, [query])
        # One store call for the first stage: the keyword search runs while the query embeds.
        keyword, dense = self.store.first_stage(view, query, lambda: pending.result()[0], pool)
        if not dense and not keyword:
            return []
        first = rrf([[s for s, _ in dense], [s for s, _ in keyword]], [1.0, KEYWORD_WEIGHT], MEMORY_RRF_K)
        # Each record's best first-stage score among the records up to CONTEXT_HOPS writes before or after
        # it in its conversation (visibility is checked later, only for those that rank).
        context = self.store.context(view.workspace_id, first, CONTEXT_HOPS)
        relevance = {
            seq: (first.get(seq, 0.0) + CONTEXT_WEIGHT * context.get(seq, 0.0)) / (1.0 + CONTEXT_WEIGHT)
            for seq in first.keys() | context.keys()
        }
        ranked = sorted(relevance, key=lambda s: (-relevance[s], s))
        candidates = self._visible_head(view, ranked, first, max(top_k * 4, 20))
        # Ranking reads a few columns of each candidate; only the records returned are read whole.
        rows = self.store.ranking_rows(view.workspace_id, candidates)
        graph = _graph_scores(query, candidates, rows)
        now = self.ctx.clock()
        s = self.ctx.settings
        scored = []
        for seq in candidates:
            row = rows.get(seq)
            if row is None:
                continue
            boost = _session_boost(row.session_id, row.updated_at, session_id, now)
            total = (
                s.dense_weight * relevance[seq]
                + s.graph_weight * graph.get(seq, 0.0)
                + s.session_weight * boost
            )
            scored.append((total, row, boost))
        scored.sort(key=lambda item: (-item[0], -item[1].importance_score, item[1].created_at))
        top = scored[:top_k]
        records = self.store.by_seqs([row.seq for _, row, _ in top], view.workspace_id)
        keyword_scores = dict(keyword)
        top_bm25 = max(keyword_scores.values(), default=0.0) or 1.0
        cosine = dict(dense)
        return [
            (
                records[row.seq],
                {
                    "score": round(total, 4),
                    "dense_score": round(relevance[row.seq], 4),
                    "graph_score": round(graph.get(row.seq, 0.0), 4),
                    "session_boost": round(boost, 4),
                    "keyword_score": round(max(keyword_scores.get(row.seq, 0.0), 0.0) / top_bm25, 4),
                    "context_score": round(context.get(row.seq, 0.0), 4),
                    "cosine": round(cosine[row.seq], 4) if row.seq in cosine else None,
                    "rank": i + 1,
                },
            )
            for i, (total, row, boost) in enumerate(top)
            if row.seq in records  # deleted since it ranked
        ]

    def _visible_head(
        self, view: Visibility, ranked: list[int], first: dict[int, float], need: int
    ) -> list[int]:
        """The first ``need`` of ``ranked`` the view may see. First-stage hits passed its filters
        already; records that only context brought in are checked here, a slice at a time."""
        head: list[int] = []
        start = 0
        while len(head) < need and start < len(ranked):
            chunk = ranked[start : start + 2 * need]
            start += len(chunk)
            fresh = [seq for seq in chunk if seq not in first]
            visible = self.store.visible_subset(view, fresh) if fresh else set()
            head.extend(seq for seq in chunk if seq in first or seq in visible)
        return head[:need]

    def _touch(self, records: list[MemoryRecord]) -> None:
        sessions = [r for r in records if r.scope == "session"]
        if sessions:
            self.store.touch(
                sessions[0].workspace_id, [r.seq for r in sessions], self.ctx.ttl("session") or ""
            )

    # -- freshness -------------------------------------------------------------------------


def _graph_scores(query: str, candidates: list[int], rows: dict[int, RankingRow]) -> dict[int, float]:
    """Entity overlap with the query, plus one hop from the three strongest first-stage hits."""
    entities = {seq: row.entities for seq, row in rows.items()}
    ids = {seq: row.id for seq, row in rows.items()}
    links = {seq: row.links for seq, row in rows.items()}
    wanted = extract_entities(query)
    seeds = candidates[:3]
    seed_ids = {ids[s] for s in seeds if s in ids}
    scores: dict[int, float] = {}
    for seq in candidates:
        own = entities.get(seq, frozenset())
        direct = len(wanted & own) / len(wanted) if wanted else 0.0
        neighbours = [
            other
            for other in seeds
            if other != seq
            and (own & entities.get(other, frozenset()) or links.get(seq, frozenset()) & seed_ids)
        ]
        hop = len(neighbours) / max(len([o for o in seeds if o != seq]), 1)
        scores[seq] = max(direct, 0.5 * hop)
    return scores


def _session_boost(
    record_session: str | None, updated_at: str, session_id: str | None, now: datetime
) -> float:
    """Same-session records get 0.5 plus up to 0.5 for recency (half-life one hour)."""
    if not session_id or record_session != session_id:
        return 0.0
    try:
        age = (now - datetime.fromisoformat(updated_at)).total_seconds()
    except ValueError:
        return 0.5
    return 0.5 + 0.5 * math.pow(0.5, max(age, 0.0) / 3600.0)
