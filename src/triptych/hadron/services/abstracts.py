"""Node abstracts: written after every committed node write whose content changed, read by
hadron_get_node, survey mode of hadron_find_nodes and hadron_validate (which reports the stale ones).

Extractive by default (``domain.abstract``); with ``TRIPTYCH_LLM_URL`` set, an OpenAI-compatible
``/chat/completions`` writes them, and a failed or empty answer falls back to the extractive abstract
(the write never fails because of its abstract). Encrypted memories get none: an abstract is clear text.
An abstract whose hash no longer matches its node's content is stale: the content was changed by a
writer that does not keep abstracts (a sync, a restore, an older build) or the process stopped between
the node's commit and its abstract's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from triptych.hadron.abstract_store import Abstract, AbstractStore
from triptych.hadron.domain.abstract import MAX_CHARS, content_hash, extractive
from triptych.hadron.domain.loc import node_urn
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.store import utcnow

log = logging.getLogger(__name__)
EXTRACTIVE = "extractive"
MAX_PROMPT_CHARS = 8000
PROMPT = (
    "Write the abstract of the document the user sends: one or two plain sentences, at most "
    f"{MAX_CHARS} characters, saying what it is about. Answer with the abstract only."
)


class LlmSummarizer:
    """Abstracts from an OpenAI-compatible ``/chat/completions`` (``TRIPTYCH_LLM_URL``)."""

    def __init__(self, url: str, model: str, api_key: str | None, timeout: float) -> None:
        base = url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=timeout)

    @property
    def method(self) -> str:
        return f"llm:{self.model}"

    def summarize(self, content: str) -> str:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": content[:MAX_PROMPT_CHARS]},
            ],
        }
        response = self.client.post(self.url, json=body, headers=self.headers)
        response.raise_for_status()
        text = str(response.json()["choices"][0]["message"]["content"] or "")
        return " ".join(text.split())[: MAX_CHARS * 2]

    def close(self) -> None:
        self.client.close()


class AbstractService:
    def __init__(
        self, store: AbstractStore, llm: LlmSummarizer | None = None, clock: Callable[[], str] = utcnow
    ) -> None:
        self.store = store
        self.llm = llm
        self.clock = clock

    def on_write(self, memory: Memory, nodes: Sequence[NodeRecord]) -> None:
        """After a committed write: refresh the abstracts whose content changed. Never raises."""
        try:
            self.refresh(memory, nodes)
        except Exception:  # the node is committed; a stale or missing abstract is what validate reports
            log.exception("writing abstracts in %s failed", memory.urn)

    def refresh(self, memory: Memory, nodes: Sequence[NodeRecord], force: bool = False) -> int:
        """Write the abstracts of ``nodes`` that are missing or stale (all of them with ``force``);
        returns how many were written."""
        if memory.encrypted:
            return 0
        existing = self.store.get([n.id for n in nodes])
        gone = [n.id for n in nodes if not (n.content or "").strip() and n.id in existing]
        if gone:
            self.store.delete(memory.id, gone)
        written = 0
        for node in nodes:
            content = (node.content or "").strip()
            if not content:
                continue
            digest = content_hash(node.content or "")
            old = existing.get(node.id)
            if not force and old is not None and old.content_hash == digest:
                continue
            text, method = self.summarize(content)
            self.store.put(memory.id, Abstract(node.id, text, digest, method, self.clock()))
            written += 1
        return written

    def summarize(self, content: str) -> tuple[str, str]:
        if self.llm is not None:
            try:
                text = self.llm.summarize(content)
                if text:
                    return text, self.llm.method
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                log.warning("LLM abstract failed, writing the extractive one: %s", exc)
        return extractive(content), EXTRACTIVE

    def views(self, nodes: Sequence[NodeRecord]) -> dict[str, dict[str, Any]]:
        """``{node id: {text, contentHash, method, updatedAt, stale}}`` for the nodes that have one."""
        found = self.store.get([n.id for n in nodes])
        out: dict[str, dict[str, Any]] = {}
        for node in nodes:
            abstract = found.get(node.id)
            if abstract is not None:
                out[node.id] = {
                    "text": abstract.text,
                    "contentHash": abstract.content_hash,
                    "method": abstract.method,
                    "updatedAt": abstract.updated_at,
                    "stale": abstract.content_hash != content_hash(node.content or ""),
                }
        return out

    def stale(self, memory: Memory, limit: int) -> list[dict[str, Any]]:
        """Nodes whose abstract's hash no longer matches their content."""
        if memory.encrypted:
            return []
        out: list[dict[str, Any]] = []
        for _, loc, content, abstract in self.store.live_nodes(memory.id):
            if abstract.content_hash == content_hash(content or ""):
                continue
            out.append(
                {
                    "urn": node_urn(memory.root, memory.slug, loc),
                    "abstract": abstract.text,
                    "abstractHash": abstract.content_hash,
                    "contentHash": content_hash(content or ""),
                }
            )
            if len(out) >= limit:
                break
        return out
