"""The agent-memory service: scoped records, dedup, hybrid search, lifecycle and the freshness checks.

Every rule of the Metronix memory contract lives here, once; the MCP tools and the REST routes call
these methods with a ``Principal`` and plain arguments.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from triptych.core.auth import Principal
from triptych.core.db import MAX_OFFSET
from triptych.core.embed import Embedder, ModelGuard, reembed
from triptych.core.errors import TriptychError
from triptych.core.search import rrf
from triptych.metronix.access import require_write, resolve_workspace, valid_agent_id
from triptych.metronix.attributes import Visibility
from triptych.metronix.entities import extract_entities
from triptych.metronix.errors import DocumentNotFound, InvalidParams
from triptych.metronix.freshness import detect_contradiction, judge_repeat
from triptych.metronix.memory_model import (
    KINDS,
    SCOPES,
    STATUSES,
    DuplicateContent,
    Filing,
    MemoryRecord,
    RankingRow,
    Resolution,
)
from triptych.metronix.memory_store import MemoryStore

log = logging.getLogger(__name__)

MAX_CONTENT = 100_000
MAX_TAGS = 50
MAX_TAG_CHARS = 100
NOTES_CAP = 1024
MAX_BATCH = 100  # records per memory_batch_store call
MAX_TOP_K = 50
MAX_BATCH_DELETE = 500  # ids per REST batch-delete call, as upstream
REVIEW_REASONS = ("possible_duplicate", "possible_contradiction", "low_confidence_decision")
# REST search shows everything an inspector may want except the two terminal statuses.
REST_EXCLUDED = ("archived", "superseded")


@dataclass(frozen=True, slots=True)
class DoorDefaults:
    """What a caller gets for a filter it leaves out: the MCP tools and the REST inspector differ, as
    upstream (REST shows every status and lists up to 200 at a time)."""

    statuses: tuple[str, ...] | None  # None: every status
    max_list_limit: int
    search_excludes: tuple[str, ...]


MCP_DEFAULTS = DoorDefaults(statuses=("active",), max_list_limit=100, search_excludes=())
REST_DEFAULTS = DoorDefaults(statuses=None, max_list_limit=200, search_excludes=REST_EXCLUDED)
DECISION_SIMILARITY_MARGIN = 0.05
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
RECORD_HINT = "Check the record id; memory_list and memory_search return ids"
REVIEW_HINT = "The entry may have been resolved already; memory_review_list shows the pending ones"


@dataclass(frozen=True, slots=True)
class MemorySettings:
    session_ttl: int = 14_400
    dense_weight: float = 0.6
    graph_weight: float = 0.3
    session_weight: float = 0.1
    reconciler_threshold: float = 0.85
    decision_threshold: float = 0.7
    contradiction_floor: float = 0.5  # neighbours less similar than this are not compared at all


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _now() -> datetime:
    return datetime.now(UTC)


class MemoryService:
    """Reads nothing on construction: the embedding model is recorded (for an empty store) and
    compared on the first call that embeds or searches."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        settings: MemorySettings | None = None,
        default_workspace: str = "default",
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings or MemorySettings()
        self.default_workspace = default_workspace
        # Session TTLs, expiry and the session boost read the time from here.
        self.clock = clock
        # The query embedding runs here while the keyword search runs in the caller's thread.
        self._embedding = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memory-embed")
        self._model_guard = ModelGuard(
            embedder,
            store.embedding_model,
            "the memory records were embedded",
            hint="Run `triptych reindex` to re-embed the stored chunks and memory records with the"
            " configured model; listing, deleting and reviewing records work meanwhile",
            adopt=self._adopt_model,
        )

    def _adopt_model(self) -> None:
        """A store that never recorded a model records the configured one."""
        if self.store.embedding_model() is None:
            self.store.set_embedding_model(self.embedder.name, self.embedder.dim)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every memory record with the configured model; returns how many were re-embedded."""
        done = reembed(self.embedder, self.store.iter_contents(), self.store.replace_embeddings, progress)
        self.store.set_embedding_model(self.embedder.name, self.embedder.dim)
        self._model_guard.clear()
        return done

    def close(self) -> None:
        """Stop the embedding worker threads (the store's connections belong to its database)."""
        self._embedding.shutdown(wait=True)

    # -- argument rules --------------------------------------------------------------

    def _workspace(self, principal: Principal, requested: str | None) -> str:
        return resolve_workspace(principal, requested, self.default_workspace)

    def _live(self, workspace: str, record_id: str) -> MemoryRecord | None:
        """The record, unless it does not exist or its session TTL has passed (then it is gone)."""
        record = self.store.get(workspace, record_id)
        if record is None or (
            record.ttl_expires_at is not None and record.ttl_expires_at <= _iso(self.clock())
        ):
            return None
        return record

    @staticmethod
    def _agent(agent_id: str | None) -> str:
        valid = valid_agent_id(agent_id)
        if not agent_id:
            raise InvalidParams("agent_id is required", details={"field": "agent_id"})
        if valid is None or valid != agent_id:
            raise InvalidParams(
                f"agent_id {agent_id!r} is not valid: use 1-64 characters from A-Z a-z 0-9 . _ -",
                details={"field": "agent_id"},
            )
        return valid

    @staticmethod
    def _reachable(record: MemoryRecord | None, caller_agent: str | None) -> MemoryRecord | None:
        """The record, unless a connection that names its agent asks for another agent's partition (then it
        answers as if the record did not exist: partitions do not leak through ids)."""
        if record is None or caller_agent is None or record.scope == "global":
            return record
        return record if record.agent_id == caller_agent else None

    @classmethod
    def _optional_agent(cls, agent_id: str | None) -> str | None:
        """None (no agent: the whole workspace) or a valid agent id."""
        return None if agent_id is None else cls._agent(agent_id)

    @staticmethod
    def _scope(scope: str | None, session_id: str | None, required: bool = True) -> str | None:
        if scope is None and not required:
            return None
        if scope == "":
            raise InvalidParams(
                f"scope must be one of {', '.join(SCOPES)}, not empty", details={"field": "scope"}
            )
        scope = scope or "per_agent"
        if scope not in SCOPES:
            raise InvalidParams(
                f"scope must be one of {', '.join(SCOPES)}, got {scope!r}", details={"field": "scope"}
            )
        if required and scope == "session" and not session_id:
            raise InvalidParams(
                "session_id is required when scope is 'session'", details={"field": "session_id"}
            )
        return scope

    @staticmethod
    def _content(content: str | None) -> str:
        text = (content or "").strip()
        if not text:
            raise InvalidParams("content must not be empty", details={"field": "content"})
        if len(text) > MAX_CONTENT:
            raise InvalidParams(
                f"content is longer than {MAX_CONTENT} characters", details={"field": "content"}
            )
        return text

    @staticmethod
    def _tags(tags: list[str] | None) -> list[str]:
        clean = list(dict.fromkeys(t.strip() for t in (tags or []) if t and t.strip()))
        if len(clean) > MAX_TAGS or any(len(t) > MAX_TAG_CHARS for t in clean):
            raise InvalidParams(
                f"at most {MAX_TAGS} tags of at most {MAX_TAG_CHARS} characters", details={"field": "tags"}
            )
        return clean

    @staticmethod
    def _kind(kind: str | None) -> str | None:
        if kind is not None and kind not in KINDS:
            raise InvalidParams(
                f"kind must be one of {', '.join(KINDS)}, got {kind!r}", details={"field": "kind"}
            )
        return kind

    @staticmethod
    def _statuses(status: Sequence[str] | None, default: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if status is None:
            return default
        if "all" in status:
            if len(status) > 1:
                raise InvalidParams(
                    "'all' cannot be combined with other statuses", details={"field": "status"}
                )
            return None
        unknown = [s for s in status if s not in STATUSES]
        if unknown or not status:
            raise InvalidParams(
                f"unknown status {unknown[0] if unknown else '(empty list)'!r}; valid: {', '.join(STATUSES)}, all",
                details={"field": "status"},
            )
        return tuple(dict.fromkeys(status))

    def _ttl(self, scope: str) -> str | None:
        if scope != "session":
            return None
        return _iso(self.clock() + timedelta(seconds=self.settings.session_ttl))

    # -- writes ------------------------------------------------------------------------

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
        workspace = self._workspace(principal, workspace_id)
        require_write(principal)
        text = self._content(content)
        agent = self._agent(agent_id)
        scope_name = self._scope(scope, session_id) or "per_agent"
        clean_tags = self._tags(tags)
        if not 0.0 <= importance_score <= 1.0:
            raise InvalidParams(
                "importance_score must be between 0.0 and 1.0", details={"field": "importance_score"}
            )
        kind_name = self._kind(kind) or "fact"
        # One reading of the workspace's counters serves the whole call (with the twin lookup).
        with self.store.snapshot():
            if scope_name != "session":  # a session duplicate still slides its TTL, in ``insert``
                # Agents store the same fact again and again; the answer needs no embedding then.
                twin = self.store.find_duplicate(workspace, agent, scope_name, None, content_hash(text))
                if twin is not None:
                    return {"id": twin.id, "content_hash": twin.content_hash, "deduped": True}
            self._model_guard.check()
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
        now = _iso(self.clock())
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
            ttl_expires_at=self._ttl(scope),
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
        workspace = self._workspace(principal, workspace_id)
        require_write(principal)
        agent = self._agent(agent_id)
        scope_name = self._scope(scope, session_id) or "per_agent"
        if not records:
            raise InvalidParams("records must hold at least one record", details={"field": "records"})
        if len(records) > MAX_BATCH:
            raise InvalidParams(
                f"at most {MAX_BATCH} records per batch, got {len(records)}", details={"field": "records"}
            )
        if not 0.0 <= importance_score <= 1.0:
            raise InvalidParams(
                "importance_score must be between 0.0 and 1.0", details={"field": "importance_score"}
            )
        default_kind = self._kind(kind) or "fact"
        self._model_guard.check()
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
                prepared.append((i, self._content(content), self._tags(tags), metadata))
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
        workspace = self._workspace(principal, workspace_id)
        require_write(principal)
        if not record_id or not record_id.strip():
            raise InvalidParams("record_id must not be empty", details={"field": "record_id"})
        record = self._reachable(self._live(workspace, record_id), caller_agent)
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
        workspace = self._workspace(principal, workspace_id)
        require_write(principal)
        if not 1 <= len(record_ids) <= MAX_BATCH_DELETE:
            raise InvalidParams(
                f"record_ids must hold 1 to {MAX_BATCH_DELETE} ids, got {len(record_ids)}",
                details={"field": "record_ids"},
            )
        deleted: list[str] = []
        not_found: list[str] = []
        for record_id in dict.fromkeys(record_ids):
            record = self._live(workspace, record_id) if record_id.strip() else None
            if record is not None and record.scope != "session" and self.store.delete(workspace, record_id):
                deleted.append(record_id)
            else:
                not_found.append(record_id)
        return {"deleted": deleted, "not_found": not_found}

    def facets(self, principal: Principal, workspace_id: str | None) -> dict[str, list[str]]:
        """The kinds and source types present in the workspace (for filter drop-downs)."""
        workspace = self._workspace(principal, workspace_id)
        kinds, source_types = self.store.facets(workspace, _iso(self.clock()))
        return {"kinds": kinds, "source_types": source_types}

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
        workspace = self._workspace(principal, workspace_id)
        require_write(principal)
        record = self._reachable(self._live(workspace, record_id), caller_agent) if record_id else None
        if record is None:
            raise DocumentNotFound(
                f"Memory record not found: {record_id}", hint=RECORD_HINT, details={"record_id": record_id}
            )
        changes: dict[str, Any] = {}
        vector = None
        entities = None
        if content is not None:
            text = self._content(content)
            if text != record.content:
                changes["content"] = text
                changes["content_hash"] = content_hash(text)
                self._model_guard.check()
                vector = self.embedder.embed([text])[0]
                entities = extract_entities(text, tags if tags is not None else record.tags)
        if tags is not None:
            clean = self._tags(tags)
            if clean != record.tags:
                changes["tags"] = clean
        if importance_score is not None:
            if not 0.0 <= importance_score <= 1.0:
                raise InvalidParams(
                    "importance_score must be between 0.0 and 1.0", details={"field": "importance_score"}
                )
            if importance_score != record.importance_score:
                changes["importance_score"] = importance_score
        if kind is not None and self._kind(kind) != record.kind:
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
        workspace = self._workspace(principal, workspace_id)
        agent = self._optional_agent(agent_id)
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
            statuses=self._statuses(status, defaults.statuses),
            scope=self._scope(scope, None, required=False),
            tags=tuple(self._tags(tags)),
            session_id=session_id,
            kind=self._kind(kind),
            source_types=tuple(dict.fromkeys(source_types or ())),
            now=_iso(self.clock()),
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

    def get_record(self, principal: Principal, workspace_id: str | None, record_id: str) -> dict[str, Any]:
        workspace = self._workspace(principal, workspace_id)
        record = self._live(workspace, record_id)
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
        workspace = self._workspace(principal, workspace_id)
        agent = self._optional_agent(agent_id)
        if not query or not query.strip():
            raise InvalidParams("query must not be empty", details={"field": "query"})
        if not 1 <= top_k <= MAX_TOP_K:
            raise InvalidParams(
                f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}", details={"field": "top_k"}
            )
        statuses = self._statuses(status, defaults.statuses)
        view = Visibility(
            workspace_id=workspace,
            agent_id=agent,
            statuses=statuses,
            scope=self._scope(scope, None, required=False),
            tags=tuple(self._tags(tags)),
            kind=self._kind(kind),
            exclude_statuses=defaults.search_excludes if status is None else (),
            now=_iso(self.clock()),
        )
        self._model_guard.check()
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
        keyword = self.store.keyword_search(view, query, pool)
        dense = self.store.dense_search(view, pending.result()[0], pool)
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
        graph = self._graph_scores(query, candidates, rows, view.workspace_id)
        now = self.clock()
        s = self.settings
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

    def _graph_scores(
        self, query: str, candidates: list[int], rows: dict[int, RankingRow], workspace_id: str
    ) -> dict[int, float]:
        """Entity overlap with the query, plus one hop from the three strongest first-stage hits."""
        entities = {seq: row.entities for seq, row in rows.items()}
        ids = {seq: row.id for seq, row in rows.items()}
        links = self.store.links(candidates, workspace_id)
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
                and (own & entities.get(other, frozenset()) or links.get(seq, set()) & seed_ids)
            ]
            hop = len(neighbours) / max(len([o for o in seeds if o != seq]), 1)
            scores[seq] = max(direct, 0.5 * hop)
        return scores

    def _touch(self, records: list[MemoryRecord]) -> None:
        sessions = [r for r in records if r.scope == "session"]
        if sessions:
            self.store.touch(sessions[0].workspace_id, [r.seq for r in sessions], self._ttl("session") or "")

    # -- freshness -------------------------------------------------------------------------

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
            now=_iso(self.clock()),
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
        neighbours = [(s, sim) for s, sim in neighbours if sim >= self.settings.contradiction_floor]
        if not neighbours:
            return None
        others = self.store.by_seqs([s for s, _ in neighbours], record.workspace_id)
        s = self.settings
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

    def review_list(
        self,
        principal: Principal,
        workspace_id: str | None,
        reason: str | None = None,
        record_id: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> dict[str, Any]:
        workspace = self._workspace(principal, workspace_id)
        if reason is not None and reason not in REVIEW_REASONS:
            raise InvalidParams(
                f"reason must be one of {', '.join(REVIEW_REASONS)}, got {reason!r}",
                details={"field": "reason"},
            )
        if not 1 <= limit <= 100:
            raise InvalidParams(f"limit must be between 1 and 100, got {limit}", details={"field": "limit"})
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidParams(f"offset must be 0 to {MAX_OFFSET:,}", details={"field": "offset"})
        entries, total = self.store.reviews.list_reviews(workspace, reason, record_id, limit, offset)
        return {
            "entries": [e.contract() for e in entries],
            "count": len(entries),
            "total": total,
            "limit": limit,
            "offset": offset,
        }

    def review_resolve(
        self,
        principal: Principal,
        workspace_id: str | None,
        review_id: str,
        action: str,
        notes: str | None = None,
        actor: str = "mcp_caller",
    ) -> dict[str, Any]:
        workspace = self._workspace(principal, workspace_id)
        require_write(principal)
        superseded_by = None
        if action == "keep":
            status, state = "active", "keep_resolved"
        elif action == "archive":
            status, state = "archived", "archived_via_review"
        elif action == "discard":
            status, state = "archived", "discarded_via_review"
        elif action.startswith("merge_into:"):
            superseded_by = action.split(":", 1)[1].strip()
            if not superseded_by:
                raise InvalidParams(
                    "merge_into needs a record id: merge_into:<record_id>", details={"field": "action"}
                )
            status, state = "superseded", "merged_via_review"
        else:
            raise InvalidParams(
                f"unknown action {action!r}: use keep, archive, discard or merge_into:<record_id>",
                details={"field": "action"},
            )
        review = self.store.reviews.get_review(workspace, review_id)
        if review is None:
            raise DocumentNotFound(
                f"Review entry not found: {review_id}", hint=REVIEW_HINT, details={"review_id": review_id}
            )
        record = self.store.get(workspace, review.target_id)
        if record is None:
            raise DocumentNotFound(
                f"Memory record not found: {review.target_id}", details={"record_id": review.target_id}
            )
        if superseded_by is not None:
            if superseded_by == record.id:
                raise InvalidParams("a record cannot be merged into itself", details={"field": "action"})
            if self.store.get(workspace, superseded_by) is None:
                raise InvalidParams(
                    f"merge_into target {superseded_by!r} is not a record of this workspace",
                    details={"field": "action"},
                )
        capped = notes[:NOTES_CAP] if notes else None
        payload = {
            "review_id": review.id,
            "reason": review.reason,
            "action": action,
            "old_status": record.status,
            "new_status": status,
            "notes": capped,
            "related_record_id": review.related_record_id,
        }
        event_id = self.store.reviews.resolve_review(
            review, record, Resolution(status, state, superseded_by, actor, payload)
        )
        if event_id is None:
            raise DocumentNotFound(
                f"Review entry not found: {review_id}", hint=REVIEW_HINT, details={"review_id": review_id}
            )
        return {
            "success": True,
            "review_id": review.id,
            "target_id": record.id,
            "action": action,
            "old_status": record.status,
            "new_status": status,
            "superseded_by": superseded_by,
            "machine_event_id": event_id,
        }


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
