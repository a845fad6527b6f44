"""A node's abstract: a short summary kept with the hash of the content it summarises, so a reader (and
hadron_validate) can tell when the content moved on. The default is extractive: the leading sentences of
the body, Markdown markup dropped, bounded in sentences and characters."""

from __future__ import annotations

import hashlib
import re

MAX_SENTENCES = 3
MAX_CHARS = 300

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_MARKUP = [
    (re.compile(r"^\s{0,3}#{1,6}\s*", re.M), ""),  # heading marks
    (re.compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+", re.M), ""),  # list markers
    (re.compile(r"^\s{0,3}>\s?", re.M), ""),  # quotes
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # links and images keep their text
    (re.compile(r"[*_`]{1,3}"), ""),  # emphasis and inline code marks
]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def plain(content: str) -> str:
    text = _FENCE.sub(" ", content)
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    # A heading or list item without final punctuation still ends a sentence.
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(line if line[-1] in ".!?:;" else line + "." for line in lines)


def extractive(content: str, max_sentences: int = MAX_SENTENCES, max_chars: int = MAX_CHARS) -> str:
    """The leading sentences of ``content`` (at most ``max_sentences``, at most ``max_chars``)."""
    sentences = _SENTENCE_END.split(plain(content))
    out = ""
    for sentence in sentences[:max_sentences]:
        candidate = f"{out} {sentence}".strip()
        if len(candidate) > max_chars:
            if not out:  # one long first sentence: cut at a word boundary
                cut = candidate[: max_chars - 1].rsplit(" ", 1)[0]
                out = cut.rstrip(",;:") + "…"
            break
        out = candidate
    return out
