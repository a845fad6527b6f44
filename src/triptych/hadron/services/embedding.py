"""Embedding on write, by the memory's policy, and query vectors for search.

A memory's ``embedding_policy`` decides: ``content`` embeds each written node's name, description, tags
and content (a text hash skips unchanged text); ``none`` embeds nothing and vector search there reports
``no_vector_index``. Encrypted memories are never embedded (a vector leaks its plaintext). A failed
embedding is recorded (``hadron_validate`` reports it) and never fails the write that caused it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from triptych.core.embed import Embedder
from triptych.core.search import Vector
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.search_store import SearchStore
from triptych.hadron.store import utcnow

log = logging.getLogger(__name__)

MAX_TEXT = 4000  # characters; the local model reads 256 tokens anyway
QUERY_CACHE = 1024


def node_text(node: NodeRecord) -> str:
    parts = [node.name, node.description or "", " ".join(node.tags), node.content or ""]
    return "\n".join(p for p in parts if p)[:MAX_TEXT]


def embeds(memory: Memory) -> bool:
    return memory.embedding_policy == "content" and not memory.encrypted


class NodeEmbedder:
    def __init__(
        self, store: SearchStore, embedder: Embedder | None, clock: Callable[[], str] = utcnow
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.clock = clock
        self._queries: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self.embedder is not None and self.store.index is not None

    def on_write(self, memory: Memory, nodes: Sequence[NodeRecord]) -> None:
        """Embed what the memory's policy asks for; drop vectors a memory without a policy must not keep."""
        if not nodes or self.embedder is None:
            return
        if not embeds(memory):
            self.store.delete_embeddings([n.id for n in nodes])
            return
        texts = {n.id: node_text(n) for n in nodes}
        hashes = {i: hashlib.sha1(t.encode()).hexdigest()[:16] for i, t in texts.items()}
        stored = self.store.embedding_hashes(list(texts))
        todo = [i for i in texts if stored.get(i) != hashes[i]]
        if not todo:
            return
        now = self.clock()
        try:
            matrix = self.embedder.embed([texts[i] for i in todo])
        except Exception as exc:  # recorded for hadron_validate; the node write itself stands
            log.warning("embedding %d node(s) failed: %s", len(todo), exc)
            self.store.put_embeddings([(i, None, str(exc)[:500], hashes[i], now) for i in todo])
            return
        self.store.put_embeddings([(i, matrix[k], None, hashes[i], now) for k, i in enumerate(todo)])

    def query_vector(self, text: str) -> Vector:
        """The query's vector, cached: agents repeat queries, and a short text costs ~10 ms to embed."""
        assert self.embedder is not None
        with self._lock:
            cached = self._queries.get(text)
            if cached is not None:
                self._queries.move_to_end(text)
                return cached
        vector: Vector = self.embedder.embed([text])[0]
        with self._lock:
            self._queries[text] = vector
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector
