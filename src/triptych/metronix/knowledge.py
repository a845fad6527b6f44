"""The knowledge-base service: store, get, hybrid search and status, with every rule in one place.

Tools and REST handlers call these methods with a ``Principal``; workspace grants and the write
permission are checked here, before any data access.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from triptych.core.auth import Principal
from triptych.core.embed import Embedder, ModelGuard, reembed
from triptych.core.errors import IngestionFailed, StorageUnavailable, TriptychError
from triptych.core.search import convex
from triptych.metronix.access import require_write, resolve_workspace
from triptych.metronix.chunking import chunk_text
from triptych.metronix.errors import DocumentNotFound, InvalidParams
from triptych.metronix.store import MAX_DUPLICATE_LABELS, ChunkHit, KnowledgeStore, NewDocument

log = logging.getLogger(__name__)

MAX_CONTENT_CHARS = 5_000_000
# Chunks embedded between two progress reports: a few seconds' work, far above a batch's size.
EMBED_SLICE = 64
# The largest request body /mcp reads: a metronix_store of MAX_CONTENT_CHARS characters, each escaped
# as \uXXXX (6 bytes; clients that send ASCII-only JSON do), still fits, so a document over the limit
# is refused in-band by the rule above, in the contract's error shape, not by the transport.
MAX_REQUEST_BYTES = 32 * 1024 * 1024
MAX_LABEL_CHARS = 512


def content_hash(title: str | None, content: str, metadata: dict[str, Any]) -> str:
    payload = json.dumps([title, content, metadata], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


def embedding_text(title: str | None, chunk: str) -> str:
    # The title gives a chunk its context ("Results" alone says little about what was studied).
    return f"{title}\n{chunk}" if title else chunk


def new_label() -> str:
    return "MEM-" + secrets.token_hex(4).upper()


@dataclass(frozen=True, slots=True)
class StoreResult:
    doc_label: str
    chunks_stored: int
    unchanged: bool


class KnowledgeService:
    def __init__(
        self,
        store: KnowledgeStore,
        embedder: Embedder,
        default_workspace: str = "default",
        chunk_tokens: int = 200,
        candidates: int = 100,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.default_workspace = default_workspace
        self.chunk_tokens = chunk_tokens
        self.candidates = candidates
        # The query is embedded while the keyword side runs: onnxruntime releases the GIL, so on two
        # cores the two overlap instead of adding up.
        self._query_embedding = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kb-query-embed")
        # Nothing is read here: the model is adopted and compared on the first call that embeds.
        self._model_guard = ModelGuard(
            embedder, store.embedding_model, "the index was built", adopt=self._adopt_model
        )

    def close(self) -> None:
        """Stop the query-embedding threads, joined (an embedding in flight finishes first). The store is
        its owner's to close, after this."""
        self._query_embedding.shutdown(wait=True, cancel_futures=True)

    def _adopt_model(self) -> None:
        """An index that never recorded a model, or holds no chunk, takes the configured one."""
        stored = self.store.embedding_model()
        model = (self.embedder.name, self.embedder.dim)
        if stored is None or (stored != model and self.store.count_chunks() == 0):
            self.store.set_embedding_model(*model)

    def workspace(self, principal: Principal, requested: str | None) -> str:
        return resolve_workspace(principal, requested, self.default_workspace)

    # -- writes ------------------------------------------------------------------

    def store_document(
        self,
        principal: Principal,
        workspace_id: str | None,
        content: str,
        title: str | None = None,
        doc_label: str | None = None,
        metadata: dict[str, Any] | None = None,
        source_type: str | None = None,
        skip_unchanged: bool = False,
        on_chunks: Callable[[int, int], None] | None = None,
    ) -> StoreResult:
        """Chunk, embed and store a document. ``on_chunks(done, total)`` is told as its chunks are embedded
        (``kb import``'s progress inside a long file)."""
        workspace = self.workspace(principal, workspace_id)
        require_write(principal)
        if not content or not content.strip():
            raise InvalidParams("content must not be empty", details={"field": "content"})
        if len(content) > MAX_CONTENT_CHARS:
            raise InvalidParams(
                f"content is {len(content):,} characters; the limit of one document is {MAX_CONTENT_CHARS:,}",
                hint="Split the document into parts, each stored with its own doc_label",
                details={"field": "content", "limit_chars": MAX_CONTENT_CHARS, "content_chars": len(content)},
            )
        if doc_label is not None and (not doc_label.strip() or len(doc_label) > MAX_LABEL_CHARS):
            raise InvalidParams(
                f"doc_label must be 1-{MAX_LABEL_CHARS} non-blank characters", details={"field": "doc_label"}
            )
        self._model_guard.check()
        label = doc_label or new_label()
        meta = dict(metadata or {})
        digest = content_hash(title, content, meta)
        if skip_unchanged and self.store.document_hash(workspace, label) == digest:
            existing = self.store.get_document(workspace, label)
            return StoreResult(label, existing.chunk_count if existing else 0, unchanged=True)
        chunks = [c.text for c in chunk_text(content, self.chunk_tokens)]
        if not chunks:
            raise InvalidParams("content has no text to index", details={"field": "content"})
        texts = [embedding_text(title, c) for c in chunks]
        try:
            if on_chunks is None:
                vectors = self.embedder.embed(texts)
            else:  # in slices, so a long document's progress shows while it is embedded
                parts = []
                for start in range(0, len(texts), EMBED_SLICE):
                    parts.append(self.embedder.embed(texts[start : start + EMBED_SLICE]))
                    on_chunks(min(start + EMBED_SLICE, len(texts)), len(texts))
                vectors = np.concatenate(parts)
        except TriptychError:
            raise
        except Exception as exc:
            log.exception("embedding failed for %s", label)
            raise IngestionFailed(f"embedding failed for {label}: {exc}") from exc
        if vectors.shape != (len(chunks), self.embedder.dim) or not np.isfinite(vectors).all():
            raise IngestionFailed(
                f"the embedding model returned vectors of shape {vectors.shape} for {len(chunks)} chunks "
                f"(expected dimension {self.embedder.dim}); nothing was stored"
            )
        source = (
            source_type
            or _str(meta.get("source_type"))
            or (label.split(":", 1)[0] if ":" in label else "manual")
        )
        doc = NewDocument(
            workspace_id=workspace,
            doc_label=label,
            title=title,
            content=content,
            source_type=source,
            url=_str(meta.get("url")),
            date=_str(meta.get("date")),
            metadata=meta,
            content_hash=digest,
            chunks=chunks,
            embeddings=vectors,
        )
        try:
            stored = self.store.put_document(doc)
        except StorageUnavailable:
            raise  # says which folder and what to do; INGESTION_FAILED would only say it failed
        except Exception as exc:
            log.exception("storing %s failed", label)
            raise IngestionFailed(f"storing {label} failed: {exc}") from exc
        return StoreResult(label, stored, unchanged=False)

    def delete_document(self, principal: Principal, workspace_id: str | None, doc_label: str) -> bool:
        workspace = self.workspace(principal, workspace_id)
        require_write(principal)
        return self.store.delete_document(workspace, doc_label)

    # -- reads -------------------------------------------------------------------

    def get(self, principal: Principal, workspace_id: str | None, doc_label: str) -> dict[str, Any]:
        workspace = self.workspace(principal, workspace_id)
        if not doc_label or not doc_label.strip():
            raise InvalidParams("doc_label must not be empty", details={"field": "doc_label"})
        doc = self.store.get_document(workspace, doc_label)
        if doc is None:
            raise DocumentNotFound(f"Document not found: {doc_label}", details={"doc_label": doc_label})
        return {
            "doc_label": doc.doc_label,
            "title": doc.title,
            "content": doc.content,
            "source_type": doc.source_type,
            "timestamp": doc.date or doc.updated_at[:10],
            "metadata": doc.metadata,
        }

    def search(
        self, principal: Principal, workspace_id: str | None, query: str, top_k: int = 10
    ) -> dict[str, Any]:
        started = time.perf_counter()
        workspace = self.workspace(principal, workspace_id)
        if not query or not query.strip():
            raise InvalidParams("query must not be empty", details={"field": "query"})
        if not 1 <= top_k <= 50:
            raise InvalidParams(f"top_k must be between 1 and 50, got {top_k}", details={"field": "top_k"})
        self._model_guard.check()
        results, retrieval = self.hybrid_with_retrieval(workspace, query, top_k)
        return {
            "results": results,
            "count": len(results),
            "latency_ms": round((time.perf_counter() - started) * 1000),
            "retrieval": retrieval,
        }

    def hybrid(self, workspace: str, query: str, top_k: int) -> list[dict[str, Any]]:
        return self.hybrid_with_retrieval(workspace, query, top_k)[0]

    def hybrid_with_retrieval(
        self, workspace: str, query: str, top_k: int
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """BM25 and dense candidates from the workspace only, fused; one result per distinct text; and
        how each side answered (``retrieval``: docs/decisions/0131-search-says-how-it-answered.md).

        A document is represented by its best chunk, and documents with identical text by the best of
        them: the others' labels go in ``duplicate_labels``, so five copies of one file take one place in
        ``top_k``, not five. Right after a start, a large workspace's indexes load in the background and
        the search answers from the side that is ready (``"loading"`` names the other).
        """
        n = max(self.candidates, top_k * 5)
        pending = self._query_embedding.submit(self.embedder.embed, [query])
        # Both sides answer as of one read of the workspace's generation: one round trip on a server
        # engine, and the two candidate lists describe the same state of the workspace.
        generation = self.store.generation(workspace)
        keyword_side = self.store.keyword_candidates(workspace, query, n, generation)
        vector = pending.result()[0]
        # With the keyword side still loading, the vectors are loaded in the search rather than answer
        # with nothing (seconds at 100,000 chunks, against a minute for the keyword index).
        loading = keyword_side.method == "loading"
        dense_side = self.store.dense_candidates(workspace, vector, n, generation, wait=loading)
        retrieval = {"dense": dense_side.method, "keyword": keyword_side.method}
        keyword, dense = keyword_side.hits, dense_side.hits
        fused = convex([dense, keyword], [0.5, 0.5])
        dense_scores = dict(dense)
        keyword_scores = dict(keyword)
        # Ties go to the chunk both retrievers found.
        ranked = sorted(
            fused, key=lambda i: (fused[i], (i in dense_scores) + (i in keyword_scores)), reverse=True
        )
        best: list[ChunkHit] = []
        seen_labels: set[str] = set()
        seen_bodies: set[str] = set()
        # Hydrate a window at a time until top_k distinct texts are in (or the candidates run out).
        window = top_k * 4
        for start in range(0, len(ranked), window):
            ids = ranked[start : start + window]
            hits = self.store.chunk_hits(workspace, ids)
            for chunk_id in ids:
                hit = hits.get(chunk_id)
                if hit is None or hit.doc_label in seen_labels:  # deleted meanwhile, or already in
                    continue
                seen_labels.add(hit.doc_label)
                if hit.body_hash in seen_bodies:
                    continue
                seen_bodies.add(hit.body_hash)
                best.append(hit)
                if len(best) == top_k:
                    break
            if len(best) == top_k:
                break
        unread = [hit.body_hash for hit in best if hit.same_text is None]
        same_text = self.store.labels_by_body(workspace, unread) if unread else {}
        results = [
            {
                "doc_label": hit.doc_label,
                "title": hit.title,
                "content": hit.text,
                "source_type": hit.source_type,
                "score": round(fused[hit.chunk_id], 4),
                "url": hit.url,
                "date": hit.date,
                "dense_score": _round(dense_scores.get(hit.chunk_id)),
                "keyword_score": _round(keyword_scores.get(hit.chunk_id)),
                "duplicate_labels": [
                    label
                    for label in (
                        hit.same_text if hit.same_text is not None else same_text.get(hit.body_hash, [])
                    )
                    if label != hit.doc_label
                ][:MAX_DUPLICATE_LABELS],
            }
            for hit in best
        ]
        return results, retrieval

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every stored chunk with the configured model; returns how many were re-embedded."""
        batches = (
            [(chunk_id, embedding_text(title, text)) for chunk_id, title, text in batch]
            for batch in self.store.iter_chunks()
        )
        done = reembed(self.embedder, batches, self.store.replace_embeddings, progress)
        self.store.set_embedding_model(self.embedder.name, self.embedder.dim)
        self._model_guard.clear()
        return done

    def status(self, principal: Principal, workspace_id: str | None) -> dict[str, Any]:
        workspace = self.workspace(principal, workspace_id)
        total = self.store.count_documents(workspace)
        return {
            "status": "healthy" if total else "initializing",
            "documents": {"total": total},
            "last_sync": self.store.last_sync(workspace),
            "embedding_model": self.embedder.name,
        }


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
