"""The agent-memory service: scoped records, dedup, hybrid search, lifecycle and the freshness checks.

Every rule of the Metronix memory contract lives once, in the job that owns it: recall
(``memory_recall``), writes and lifecycle (``memory_lifecycle``), review (``memory_review``), with the
argument rules they share in ``memory_rules``. ``MemoryService`` is the one object the MCP tools and the
REST routes call, with a ``Principal`` and plain arguments; it hands each call to its job.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from triptych.core.embed import Embedder, ModelGuard
from triptych.metronix.memory_lifecycle import DECISION_SIMILARITY_MARGIN, MemoryLifecycle
from triptych.metronix.memory_recall import (
    CONTEXT_HOPS,
    CONTEXT_WEIGHT,
    KEYWORD_WEIGHT,
    MEMORY_RRF_K,
    MemoryRecall,
)
from triptych.metronix.memory_review import MemoryReview
from triptych.metronix.memory_rules import (
    MAX_BATCH,
    MAX_BATCH_DELETE,
    MAX_CONTENT,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_TOP_K,
    MCP_DEFAULTS,
    NOTES_CAP,
    REST_DEFAULTS,
    REST_EXCLUDED,
    REVIEW_REASONS,
    DoorDefaults,
    MemoryContext,
    MemorySettings,
    content_hash,
    now,
)
from triptych.metronix.memory_store import MemoryStore

# The names other modules, benchmarks and tests import from here.
__all__ = [
    "CONTEXT_HOPS",
    "CONTEXT_WEIGHT",
    "DECISION_SIMILARITY_MARGIN",
    "KEYWORD_WEIGHT",
    "MAX_BATCH",
    "MAX_BATCH_DELETE",
    "MAX_CONTENT",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "MAX_TOP_K",
    "MCP_DEFAULTS",
    "MEMORY_RRF_K",
    "NOTES_CAP",
    "REST_DEFAULTS",
    "REST_EXCLUDED",
    "REVIEW_REASONS",
    "DoorDefaults",
    "MemoryService",
    "MemorySettings",
    "content_hash",
]


class MemoryService:
    """Reads nothing on construction: the embedding model is recorded (for an empty store) and
    compared on the first call that embeds or searches."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        settings: MemorySettings | None = None,
        default_workspace: str = "default",
        clock: Callable[[], datetime] = now,
    ) -> None:
        guard = ModelGuard(
            embedder,
            store.embedding_model,
            "the memory records were embedded",
            hint="Run `triptych reindex` to re-embed the stored chunks and memory records with the"
            " configured model; listing, deleting and reviewing records work meanwhile",
            adopt=self._adopt_model,
        )
        self.ctx = MemoryContext(
            store, embedder, settings or MemorySettings(), default_workspace, clock, guard
        )
        self.recall = MemoryRecall(self.ctx)
        self.lifecycle = MemoryLifecycle(self.ctx)
        self.review = MemoryReview(self.ctx)
        # Each call goes to its job, with that job's signature (bound once, not wrapped).
        self.store_record = self.lifecycle.store_record
        self.batch_store = self.lifecycle.batch_store
        self.update = self.lifecycle.update
        self.delete = self.lifecycle.delete
        self.delete_many = self.lifecycle.delete_many
        self.run_pending_checks = self.lifecycle.run_pending_checks
        self.reindex = self.lifecycle.reindex
        self.search = self.recall.search
        self.list_records = self.recall.list_records
        self.get_record = self.recall.get_record
        self.facets = self.recall.facets
        self.review_list = self.review.review_list
        self.review_resolve = self.review.review_resolve

    @property
    def store(self) -> MemoryStore:
        return self.ctx.store

    @property
    def embedder(self) -> Embedder:
        return self.ctx.embedder

    @property
    def settings(self) -> MemorySettings:
        return self.ctx.settings

    @property
    def default_workspace(self) -> str:
        return self.ctx.default_workspace

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.ctx.clock

    def _adopt_model(self) -> None:
        """A store that never recorded a model records the configured one."""
        if self.store.embedding_model() is None:
            self.store.set_embedding_model(self.embedder.name, self.embedder.dim)

    def close(self) -> None:
        """Stop the store's graph builds and the embedding worker threads, joined (the store's connections
        belong to its database, closed by its owner after this)."""
        self.store.close()
        self.recall.close()
