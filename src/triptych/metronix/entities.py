"""Entities a memory mentions: the nodes of the memory graph.

Two records are linked when they mention the same entity: a ticket id (``MTRNIX-303``), an @handle,
a URL, a capitalised name (``Caroline``, ``New York``) or a tag. Entities are lower-cased keys with a
kind prefix, so ``ticket:mtrnix-303`` and ``name:mtrnix`` never collide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from triptych.core.search import STOPWORDS

_TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,15}-\d{1,7}\b")
_HANDLE = re.compile(r"(?<![\w@])@[A-Za-z0-9_][A-Za-z0-9_.-]{0,38}")
_URL = re.compile(r"https?://[^\s<>\"')\]]+")
_NAME = re.compile(r"\b[A-Z][a-z]+(?:[ -][A-Z][a-z]+)*\b")
# Capitalised words that are rarely names: sentence starters and calendar words.
_NOT_NAMES = frozenset(
    """user users agent i im ive id ill yes no ok okay hey hi hello thanks thank please sure well oh so also
    but and or the a an this that these those there here what when where who why how it its my our your
    monday tuesday wednesday thursday friday saturday sunday january february march april may june july
    august september october november december today tomorrow yesterday""".split()
)


def extract_entities(text: str, tags: Iterable[str] = ()) -> set[str]:
    found: set[str] = set()
    for match in _TICKET.findall(text):
        found.add("ticket:" + match.lower())
    for match in _HANDLE.findall(text):
        found.add("handle:" + match[1:].lower().rstrip("."))
    for match in _URL.findall(text):
        found.add("url:" + match.lower().rstrip(".,;:"))
    scrubbed = _URL.sub(" ", _TICKET.sub(" ", text))
    for match in _NAME.findall(scrubbed):
        words = [
            w for w in re.split(r"[ -]", match) if w.lower() not in _NOT_NAMES and w.lower() not in STOPWORDS
        ]
        if words:
            found.add("name:" + " ".join(words).lower())
    for tag in tags:
        if tag.strip():
            found.add("tag:" + tag.strip().lower())
    return found
