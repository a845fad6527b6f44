"""Synthesized answers with citations: retrieval over the knowledge base, then an upstream LLM or,
without one, an extractive answer built only from the retrieved sentences (it never invents text).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import httpx

from triptych.core.auth import Principal
from triptych.core.errors import Unavailable
from triptych.core.search import keyword_terms
from triptych.metronix.chunking import split_sentences
from triptych.metronix.errors import InvalidParams
from triptych.metronix.knowledge import KnowledgeService

EXTRACTIVE_MODEL = "triptych-extractive"
RAG_MODEL = "triptych-rag"
HISTORY_TURNS = 3
# A citation marker: [2], [2][3] (what the prompt asks for) or [2, 3] (what models also write). Only
# the passages an answer cites this way are listed in ``citations`` (decision 0064).
_CITATION = re.compile(r"\[\s*(\d{1,3}(?:\s*,\s*\d{1,3})*)\s*\]")

SYSTEM_PROMPT = (
    "You answer questions using only the numbered passages below. Cite every claim with the passage "
    "number in square brackets, like [1] or [2][3]. If the passages do not contain the answer, say that "
    "you do not know. Never use outside knowledge.\n\nPassages:\n{passages}"
)


class UpstreamError(
    Unavailable,
    code="UPSTREAM_ERROR",
    status=502,
    hint="Check TRIPTYCH_LLM_URL / TRIPTYCH_LLM_MODEL and the upstream server's log",
):
    """The upstream LLM failed; ``status`` is what the client gets (502 or 504)."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Passage:
    number: int
    doc_label: str
    title: str | None
    url: str | None
    content: str

    def citation(self) -> dict[str, Any]:
        return {"index": self.number, "doc_label": self.doc_label, "title": self.title, "url": self.url}


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def retrieval_query(messages: list[dict[str, Any]]) -> str:
    """The last user message, preceded by a short window of the conversation for context."""
    users = [
        i for i, m in enumerate(messages) if m.get("role") == "user" and text_of(m.get("content")).strip()
    ]
    if not users:
        raise InvalidParams("messages must contain a user message with text", details={"field": "messages"})
    last = users[-1]
    window = [
        text_of(m.get("content"))
        for m in messages[max(0, last - HISTORY_TURNS) : last]
        if m.get("role") != "system"
    ]
    # The question itself counts most: it goes last and again first, so BM25 and the embedding both see it.
    question = text_of(messages[last].get("content")).strip()
    return " ".join([question, *window[-HISTORY_TURNS:], question]) if window else question


def cited_numbers(text: str) -> set[int]:
    """The passage numbers an answer's citation markers name."""
    return {int(n) for marker in _CITATION.findall(text) for n in marker.split(",")}


def cited(text: str, passages: list[Passage]) -> list[dict[str, Any]]:
    """The passages the answer cites, in passage order: none when it cites none (an answer that says it
    does not know, or an upstream that ignored the instruction), never every passage retrieved."""
    numbers = cited_numbers(text)
    return [p.citation() for p in passages if p.number in numbers]


def extractive_answer(question: str, passages: list[Passage], sentences: int = 3) -> str:
    """The best-matching sentences of the passages, verbatim, each with its citation: at most
    ``sentences``, each sharing at least half as many of the question's terms as the best one."""
    terms = set(keyword_terms(question))
    scored: list[tuple[float, int, int, int, str]] = []
    for passage in passages:
        for position, sentence in enumerate(split_sentences(passage.content)):
            words = set(keyword_terms(sentence))
            overlap = len(terms & words)
            if overlap:
                # Earlier passages rank higher in retrieval; keep that as a tie-breaker.
                score = overlap / (len(terms) or 1) - 0.01 * passage.number
                scored.append((score, overlap, passage.number, position, sentence))
    if not scored:
        if not passages:
            return "I could not find anything about this in the knowledge base."
        first = passages[0]
        return f"{split_sentences(first.content)[0]} [{first.number}]"
    # A sentence sharing one word of the question next to one sharing three is noise: the first answer
    # of the README's example quoted a benchmark note about "the only machine" after the one that
    # said who descales the espresso machine.
    most = max(s[1] for s in scored)
    best = sorted((s for s in scored if 2 * s[1] >= most), key=lambda s: -s[0])[:sentences]
    best.sort(key=lambda s: (s[2], s[3]))  # read in document order
    return " ".join(f"{sentence} [{number}]" for _, _, number, _, sentence in best)


@dataclass(frozen=True, slots=True)
class Retrieved:
    query: str
    passages: list[Passage]
    workspace_id: str
    empty_workspace: bool  # the workspace holds no document at all (not: nothing matched)


def empty_workspace_answer(workspace_id: str) -> str:
    """What an empty knowledge base answers, instead of "nothing found": how to fill it or pick another."""
    return (
        f"The knowledge base of workspace {workspace_id!r} holds no documents yet, so there is nothing to "
        f"answer from. Import some with `triptych kb import PATH --workspace {workspace_id}` (or the "
        "metronix_store tool), or ask another workspace with the X-Workspace-Id header (with auth on, one "
        "your token grants; without the header the token's first granted workspace answers)."
    )


class LlmClient:
    """An OpenAI-compatible upstream ``/chat/completions``."""

    def __init__(self, url: str, model: str, api_key: str | None, timeout: float) -> None:
        self.url = url.rstrip("/") + (
            "" if url.rstrip("/").endswith("/chat/completions") else "/chat/completions"
        )
        self.model = model
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        # One pooled client: building one per call costs a TLS context and a new connection each time.
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout)
        return self._client

    def _body(self, messages: list[dict[str, Any]], extra: dict[str, Any], stream: bool) -> dict[str, Any]:
        return {**extra, "model": self.model, "messages": messages, "stream": stream}

    async def complete(self, messages: list[dict[str, Any]], extra: dict[str, Any]) -> str:
        try:
            response = await self.client.post(
                self.url, json=self._body(messages, extra, False), headers=self.headers
            )
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"the upstream LLM did not answer within {self.timeout:.0f} s", 504) from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"the upstream LLM could not be reached: {exc}") from exc
        if response.status_code >= 400:
            raise UpstreamError(
                f"the upstream LLM answered HTTP {response.status_code}: {response.text[:300]}"
            )
        try:
            return str(response.json()["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError("the upstream LLM returned a malformed completion") from exc

    async def stream(self, messages: list[dict[str, Any]], extra: dict[str, Any]) -> AsyncIterator[str]:
        body = self._body(messages, extra, True)
        try:
            async with self.client.stream("POST", self.url, json=body, headers=self.headers) as response:
                if response.status_code >= 400:
                    detail = (await response.aread()).decode(errors="replace")[:300]
                    raise UpstreamError(f"the upstream LLM answered HTTP {response.status_code}: {detail}")
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        delta = json.loads(data)["choices"][0].get("delta", {}).get("content")
                    except (ValueError, KeyError, IndexError, TypeError) as exc:
                        raise UpstreamError("the upstream LLM streamed a malformed chunk") from exc
                    if delta:
                        yield str(delta)
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"the upstream LLM did not answer within {self.timeout:.0f} s", 504) from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(f"the upstream LLM could not be reached: {exc}") from exc


class AnswerService:
    def __init__(self, knowledge: KnowledgeService, llm: LlmClient | None, passages: int = 5) -> None:
        self.knowledge = knowledge
        self.llm = llm
        self.passages = passages

    def models(self) -> list[str]:
        return ([RAG_MODEL] if self.llm else []) + [EXTRACTIVE_MODEL]

    def uses_llm(self, requested_model: str | None) -> bool:
        return self.llm is not None and requested_model != EXTRACTIVE_MODEL

    def model_name(self, requested_model: str | None) -> str:
        if self.uses_llm(requested_model):
            assert self.llm is not None
            return f"{RAG_MODEL}/{self.llm.model}"
        return EXTRACTIVE_MODEL

    async def retrieve(
        self, principal: Principal, workspace_id: str | None, messages: list[dict[str, Any]]
    ) -> Retrieved:
        """The passages for the conversation's question, from the workspace the caller chose (the
        ``X-Workspace-Id`` header) or, without one, its default (the token's first grant when auth is on)."""
        query = retrieval_query(messages)
        workspace = self.knowledge.workspace(principal, workspace_id)
        hits = await anyio.to_thread.run_sync(self.knowledge.hybrid, workspace, query, self.passages)
        passages = [
            Passage(i + 1, h["doc_label"], h["title"], h["url"], h["content"]) for i, h in enumerate(hits)
        ]
        empty = not passages and not await anyio.to_thread.run_sync(
            self.knowledge.store.count_documents, workspace
        )
        return Retrieved(query, passages, workspace, empty)

    def prompt(self, messages: list[dict[str, Any]], passages: list[Passage]) -> list[dict[str, Any]]:
        listing = (
            "\n\n".join(
                f"[{p.number}] {p.title or p.doc_label} ({p.doc_label})\n{p.content}" for p in passages
            )
            or "(no passages were found)"
        )
        conversation = [m for m in messages if m.get("role") in ("user", "assistant")][
            -(2 * HISTORY_TURNS + 1) :
        ]
        return [{"role": "system", "content": SYSTEM_PROMPT.format(passages=listing)}, *conversation]


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def now() -> int:
    return int(time.time())
