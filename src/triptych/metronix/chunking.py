"""Split documents into chunks that keep sentences whole.

Sentences are packed greedily into chunks of at most ``max_tokens`` (estimated); a chunk ends at a
paragraph break when it is already half full, so chunks follow the document's own structure. Only a
single sentence longer than the limit is cut, at word boundaries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A sentence ends at . ! ? (optionally followed by closing quotes or brackets) and white space, when
# the next character starts a sentence. Common abbreviations and initials don't end one.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = frozenset(
    "e.g i.e etc vs al fig figs dr mr mrs ms prof st no approx eq ref refs resp cf inc ltd jr sr".split()
)
_PARAGRAPH = re.compile(r"\n\s*\n")
_WORD = re.compile(r"\S+")


def estimate_tokens(text: str) -> int:
    """WordPiece-like token estimate: about 1.3 tokens a word, punctuation included."""
    words = len(_WORD.findall(text))
    return int(words * 1.3) + 1 if words else 0


def split_sentences(text: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        candidate = text[start : match.start()].rstrip()
        last_word = candidate.rsplit(None, 1)[-1] if candidate.split() else ""
        stem = last_word.rstrip(".!?\"')]").lower()
        # "et al." or "e.g." or an initial like "J." is not the end of a sentence.
        if stem in _ABBREVIATIONS or (len(stem) == 1 and stem.isalpha()):
            continue
        pieces.append(text[start : match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        pieces.append(tail)
    return [p for p in pieces if p]


def _cut_long(sentence: str, max_tokens: int) -> list[str]:
    words = sentence.split()
    # estimate_tokens() rounds up, so leave a token of room.
    per_piece = max(1, int((max_tokens - 1) / 1.3))
    return [" ".join(words[i : i + per_piece]) for i in range(0, len(words), per_piece)]


@dataclass(frozen=True, slots=True)
class Chunk:
    ordinal: int
    text: str


def chunk_text(text: str, max_tokens: int = 200) -> list[Chunk]:
    """The chunks of ``text``, in order; an empty or blank text has none."""
    chunks: list[str] = []
    current: list[str] = []
    current_tokens = 0

    def flush() -> None:
        nonlocal current, current_tokens
        if current:
            chunks.append(" ".join(current))
        current, current_tokens = [], 0

    for paragraph in _PARAGRAPH.split(text):
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        if current_tokens >= max_tokens // 2:
            flush()
        for sentence in split_sentences(paragraph):
            tokens = estimate_tokens(sentence)
            if tokens > max_tokens:
                flush()
                chunks.extend(_cut_long(sentence, max_tokens))
                continue
            if current_tokens + tokens > max_tokens:
                flush()
            current.append(sentence)
            current_tokens += tokens
    flush()
    return [Chunk(i, body) for i, body in enumerate(chunks)]
