"""Agent-memory writes and lifecycle: store (one and a batch, with dedup), update, delete, the freshness
checks each write runs (duplicates, contradictions, refinements, filed for review) and their recovery
after a crash, and re-embedding. Split from ``memory.py`` (issue 29); ``MemoryService`` delegates here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from triptych.core.auth import Principal
from triptych.core.embed import reembed
from triptych.core.errors import TriptychError
from triptych.metronix.access import require_write
from triptych.metronix.attributes import Visibility
from triptych.metronix.entities import extract_entities
from triptych.metronix.errors import DocumentNotFound, InvalidParams
from triptych.metronix.freshness import detect_contradiction, judge_repeat
from triptych.metronix.memory_model import DuplicateContent, Filing, MemoryRecord
from triptych.metronix.memory_rules import (
    MAX_BATCH,
    MAX_BATCH_DELETE,
    RECORD_HINT,
    MemoryContext,
    agent_arg,
    content_arg,
    content_hash,
    importance_arg,
    kind_arg,
    reachable,
    scope_arg,
    tags_arg,
)

log = logging.getLogger(__name__)

DECISION_SIMILARITY_MARGIN = 0.05


class MemoryLifecycle:
    def __init__(self, ctx: MemoryContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.embedder = ctx.embedder

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every memory record with the configured model; returns how many were re-embedded."""
        done = reembed(self.embedder, self.store.iter_contents(), self.store.replace_embeddings, progress)
        self.store.set_embedding_model(self.embedder.name, self.embedder.dim)
        self.ctx.model_guard.clear()
        return done

    def store_record(
        self,
        principal: Principal,
        *,
        workspace_id: str | None,
        content: str,
        agent_id: str,
        scope: str | None = "per_agent",
        tags: list[str] | None = None,
        importance_score: float = 0.5,
        source_type: str = "",
        session_id: str | None = None,
        kind: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        workspace = self.ctx.workspace(principal, workspace_id)
        require_write(principal)
        text = content_arg(content)
        agent = agent_arg(agent_id)
        scope_name = scope_arg(scope, session_id) or "per_agent"
        clean_tags = tags_arg(tags)
        importance_arg(importance_score)
        kind_name = kind_arg(kind) or "fact"
        # One reading of the workspace's counters serves the whole call (with the twin lookup).
        with self.store.snapshot():
            if scope_name != "session":  # a session duplicate still slides its TTL, in ``insert``
                # Agents store the same fact again and again; the answer needs no embedding then.
                twin = self.store.find_duplicate(workspace, agent, scope_name, None, content_hash(text))
                if twin is not None:
                    return {"id": twin.id, "content_hash": twin.content_hash, "deduped": True}
            self.ctx.model_guard.check()
            vector = self.embedder.embed([text])[0]
            return self._insert(
                workspace, text, vector, agent=agent, scope=scope_name, tags=clean_tags,
                importance=importance_score, source_type=source_type, session_id=session_id,
                kind=kind_name, metadata=metadata or {},
            )  # fmt: skip

    def _insert(
        self,
        workspace: str,
        text: str,
        vector: Any,
        *,
        agent: str,
        scope: str,
        tags: list[str],
        importance: float,
        source_type: str,
        session_id: str | None,
        kind: str,
        metadata: dict[str, Any],
    ) -> dict[str, Any]:
        now = self.ctx.now_iso()
        record = MemoryRecord(
            id=str(uuid.uuid4()),
            workspace_id=workspace,
            agent_id=agent,
            scope=scope,
            session_id=session_id if scope == "session" else None,
            kind=kind,
            content=text,
            content_hash=content_hash(text),
            tags=tags,
            importance_score=importance,
            source_type=source_type or "",
            metadata=metadata,
            status="active",
            created_at=now,
            updated_at=now,
            ttl_expires_at=self.ctx.ttl(scope),
        )
        # The freshness check runs before the write: it needs only the vector and the text (the new
        # record cannot be among its neighbours). A check that files nothing then leaves nothing to
        # queue and dequeue (two statements fewer, each a round trip on a server engine); one that
        # files, or fails, is queued with the write, so a crash before its filing commits re-runs it.
        entities = extract_entities(text, tags)
        filing: Filing | None = None
        checked = False
        try:
            filing = self._freshness(record, vector, self._neighbours(record, vector))
            checked = True
        except Exception:
            log.exception("freshness check of %s failed; it stays queued", record.id)
        stored, deduped = self.store.insert(
            record, vector, entities, enqueue=not checked or filing is not None
        )
        if not deduped and filing is not None:
            self.store.reviews.finish_check(stored, filing)
        return {"id": stored.id, "content_hash": stored.content_hash, "deduped": deduped}

    def batch_store(
        self,
        principal: Principal,
        *,
        workspace_id: str | None,
        records: list[dict[str, Any]],
        agent_id: str,
        scope: str | None = "per_agent",
        importance_score: float = 0.5,
        source_type: str = "",
        session_id: str | None = None,
        kind: str | None = None,
    ) -> dict[str, Any]:
        workspace = self.ctx.workspace(principal, workspace_id)
        require_write(principal)
        agent = agent_arg(agent_id)
        scope_name = scope_arg(scope, session_id) or "per_agent"
        if not records:
            raise InvalidParams("records must hold at least one record", details={"field": "records"})
        if len(records) > MAX_BATCH:
            raise InvalidParams(
                f"at most {MAX_BATCH} records per batch, got {len(records)}", details={"field": "records"}
            )
        importance_arg(importance_score)
        default_kind = kind_arg(kind) or "fact"
        self.ctx.model_guard.check()
        prepared: list[tuple[int, str, list[str], dict[str, Any]] | tuple[int, TriptychError]] = []
        for i, item in enumerate(records):
            try:
                if not isinstance(item, dict):
                    raise InvalidParams("each record must be an object {content, tags?}")
                unknown = set(item) - {"content", "tags", "metadata"}
                if unknown:
                    raise InvalidParams(f"unknown field {sorted(unknown)[0]!r} in record")
                tags = item.get("tags")
                if tags is not None and not (
                    isinstance(tags, list) and all(isinstance(t, str) for t in tags)
                ):
                    raise InvalidParams("tags must be a list of strings")
                content = item.get("content")
                if not isinstance(content, str):
                    raise InvalidParams("content must be a string")
                metadata = item.get("metadata") or {}
                if not isinstance(metadata, dict):
                    raise InvalidParams("metadata must be an object")
                prepared.append((i, content_arg(content), tags_arg(tags), metadata))
            except TriptychError as exc:
                prepared.append((i, exc))
        texts = [p[1] for p in prepared if len(p) == 4]
        vectors = iter(self.embedder.embed(texts)) if texts else iter(())
        results: list[dict[str, Any]] = []
        stored = deduped = 0
        # Sequential, in order: a duplicate inside the batch dedups against the earlier one.
        for entry in prepared:
            if len(entry) == 2:
                results.append(
                    {"id": None, "content_hash": None, "deduped": False, "error": entry[1].message}
                )
                continue
            _, text, tags, metadata = entry
            try:
                result = self._insert(
                    workspace, text, next(vectors), agent=agent, scope=scope_name, tags=tags,
                    importance=importance_score, source_type=source_type, session_id=session_id,
                    kind=default_kind, metadata=metadata,
                )  # fmt: skip
            except TriptychError as exc:
                results.append({"id": None, "content_hash": None, "deduped": False, "error": exc.message})
                continue
            results.append({**result, "error": None})
            deduped += result["deduped"]
            stored += not result["deduped"]
        return {"stored": stored, "deduped": deduped, "results": results}

    def delete(
        self, principal: Principal, workspace_id: str | None, record_id: str, caller_agent: str | None = None
    ) -> dict[str, Any]:
        """``caller_agent``: the connection's agent (``X-Agent-Id``), whose partition bounds the call."""
        workspace = self.ctx.workspace(principal, workspace_id)
        require_write(principal)
        if not record_id or not record_id.strip():
            raise InvalidParams("record_id must not be empty", details={"field": "record_id"})
        record = reachable(self.ctx.live(workspace, record_id), caller_agent)
        if record is None:
            return {"success": True, "found": False}
        if record.scope == "session":
            raise InvalidParams(
                "session-scoped records are managed by the session lifecycle (they expire), not memory_delete",
                hint="Let the session TTL expire it, or store the fact with scope per_agent or global",
                details={"record_id": record_id},
            )
        found = self.store.delete(workspace, record_id)
        return {"success": True, "found": found}

    def delete_many(
        self, principal: Principal, workspace_id: str | None, record_ids: list[str]
    ) -> dict[str, list[str]]:
        """Delete persistent records by id, each on its own; ids not stored in the workspace (or naming
        session records, which expire instead) come back in ``not_found``."""
        workspace = self.ctx.workspace(principal, workspace_id)
        require_write(principal)
        if not 1 <= len(record_ids) <= MAX_BATCH_DELETE:
            raise InvalidParams(
                f"record_ids must hold 1 to {MAX_BATCH_DELETE} ids, got {len(record_ids)}",
                details={"field": "record_ids"},
            )
        deleted: list[str] = []
        not_found: list[str] = []
        for record_id in dict.fromkeys(record_ids):
            record = self.ctx.live(workspace, record_id) if record_id.strip() else None
            if record is not None and record.scope != "session" and self.store.delete(workspace, record_id):
                deleted.append(record_id)
            else:
                not_found.append(record_id)
        return {"deleted": deleted, "not_found": not_found}

    def update(
        self,
        principal: Principal,
        *,
        workspace_id: str | None,
        record_id: str,
        content: str | None = None,
        tags: list[str] | None = None,
        importance_score: float | None = None,
        kind: str | None = None,
        caller_agent: str | None = None,
    ) -> dict[str, Any]:
        workspace = self.ctx.workspace(principal, workspace_id)
        require_write(principal)
        record = reachable(self.ctx.live(workspace, record_id), caller_agent) if record_id else None
        if record is None:
            raise DocumentNotFound(
                f"Memory record not found: {record_id}", hint=RECORD_HINT, details={"record_id": record_id}
            )
        changes: dict[str, Any] = {}
        vector = None
        entities = None
        if content is not None:
            text = content_arg(content)
            if text != record.content:
                changes["content"] = text
                changes["content_hash"] = content_hash(text)
                self.ctx.model_guard.check()
                vector = self.embedder.embed([text])[0]
                entities = extract_entities(text, tags if tags is not None else record.tags)
        if tags is not None:
            clean = tags_arg(tags)
            if clean != record.tags:
                changes["tags"] = clean
        if importance_score is not None:
            importance_arg(importance_score)
            if importance_score != record.importance_score:
                changes["importance_score"] = importance_score
        if kind is not None and kind_arg(kind) != record.kind:
            changes["kind"] = kind
        if not changes:
            return {"id": record.id, "content_hash": record.content_hash, "updated_fields": []}
        try:
            updated = self.store.update(record, changes, vector, entities, enqueue=vector is not None)
        except DuplicateContent as exc:
            raise InvalidParams(
                "another record of this agent and scope already has this content",
                hint="Delete one of the two records, or change the content",
                details={"field": "content"},
            ) from exc
        if vector is not None:
            self._check(updated, vector)
        fields = [f for f in ("content", "tags", "importance_score", "kind") if f in changes]
        return {"id": updated.id, "content_hash": updated.content_hash, "updated_fields": fields}

    # -- reads ---------------------------------------------------------------------------

    def _check(self, record: MemoryRecord, vector: Any = None) -> None:
        """Run the freshness checks for a record whose check is queued: file what they find and dequeue
        the check in one transaction."""
        try:
            filing = self._freshness(record, vector)
        except Exception:
            # The check stays queued and is retried at the next start.
            log.exception("freshness check of %s failed", record.id)
            return
        self.store.reviews.finish_check(record, filing)

    def _neighbours(self, record: MemoryRecord, vector: Any) -> list[tuple[int, float]]:
        """The active records nearest ``vector`` that the record's agent sees (6: the record itself is
        usually among them once stored)."""
        view = Visibility(
            workspace_id=record.workspace_id,
            agent_id=record.agent_id,
            statuses=("active",),
            session_id=record.session_id if record.scope == "session" else None,
            now=self.ctx.now_iso(),
        )
        return self.store.dense_search(view, vector, 6)

    def _freshness(
        self, record: MemoryRecord, vector: Any = None, found: list[tuple[int, float]] | None = None
    ) -> Filing | None:
        if found is None:
            if vector is None:
                vector = self.store.vectors(record.workspace_id, [record.seq]).get(record.seq)
            if vector is None:
                return None
            found = self._neighbours(record, vector)
        neighbours = [(s, sim) for s, sim in found if s != record.seq][:5]
        neighbours = [(s, sim) for s, sim in neighbours if sim >= self.ctx.settings.contradiction_floor]
        if not neighbours:
            return None
        others = self.store.by_seqs([s for s, _ in neighbours], record.workspace_id)
        s = self.ctx.settings
        for seq, similarity in neighbours:
            other = others.get(seq)
            if other is None:
                continue
            contradiction = detect_contradiction(other.content, record.content)
            if contradiction is not None:
                confidence = round(min(1.0, contradiction.confidence * (0.5 + similarity / 2)), 4)
                return Filing(
                    "possible_contradiction", other.id, confidence, "conflicted", link="contradicts"
                )
        best_seq, best_similarity = neighbours[0]
        best = others.get(best_seq)
        if best is None:
            return None
        repeat = judge_repeat(
            best.content,
            record.content,
            best_similarity,
            threshold=s.reconciler_threshold,
            decision_threshold=s.decision_threshold,
            margin=DECISION_SIMILARITY_MARGIN,
        )
        if repeat is None:
            return None
        return Filing(repeat.reason, best.id, repeat.confidence, "review_needed")

    def run_pending_checks(self) -> int:
        """Checks a crash interrupted (queued with their write, never completed); run at start."""
        done = 0
        for workspace, record_id in self.store.reviews.pending_checks(limit=10_000):
            record = self.store.get(workspace, record_id)
            if record is None:
                self.store.reviews.check_done(record_id)
                continue
            self._check(record)
            done += 1
        return done

    # -- review queue -------------------------------------------------------------------------
