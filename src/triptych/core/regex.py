"""Callers' regular expressions, matched in linear time (RE2), so no pattern can stall the server.

Python's ``re`` backtracks: ``(a+)+$`` against 25 characters took 6 s and held the GIL, so every
other request waited. RE2 (``google-re2``) guarantees time linear in the text and refuses the
constructs that need backtracking. What differs from Python's ``re`` (documented in docs/hadron.md):
no backreferences (``\\1``), no lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``), no atomic groups or
possessive quantifiers, no conditionals; ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII-only; a counted
repetition is at most ``{1000}``; ``\\Z`` is spelled ``\\z``.
"""

from __future__ import annotations

from typing import Any

import re2

# A compiled program larger than this is refused rather than grown (RE2's own default is 8 MiB too,
# stated here so the bound is ours).
MAX_PROGRAM_BYTES = 8 << 20


class RegexRefused(ValueError):
    """The pattern is not valid RE2 syntax, or compiles to a program over the size bound."""


class LinearPattern:
    """A compiled RE2 pattern; ``search`` and ``count`` take time linear in the text."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        options = re2.Options()
        options.log_errors = False  # a refused pattern is the caller's mistake, not a server log line
        options.max_mem = MAX_PROGRAM_BYTES
        try:
            self._compiled: Any = re2.compile(pattern, options)
        except re2.error as exc:
            raise RegexRefused(_reason(exc)) from None
        except UnicodeEncodeError:
            raise RegexRefused("the pattern holds a lone surrogate, which is not text") from None
        self.pattern = pattern

    def search(self, text: str | None) -> bool:
        if not text:
            return text == "" and self._compiled.search("") is not None
        try:
            return self._compiled.search(text) is not None
        except UnicodeEncodeError:
            return False  # stored text never holds a lone surrogate; nothing to match in one

    def finditer(self, text: str) -> Any:
        """The non-overlapping matches in ``text`` (``re.Match``-like: ``start``, ``end``, ``group``)."""
        try:
            return list(self._compiled.finditer(text))
        except UnicodeEncodeError:
            return []

    def count(self, text: str) -> int:
        """How many non-overlapping matches ``text`` holds."""
        try:
            return sum(1 for _ in self._compiled.finditer(text))
        except UnicodeEncodeError:
            return 0


def _reason(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else exc
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if "too large" in text or "out of memory" in text:
        return f"{text} (the pattern compiles to more than {MAX_PROGRAM_BYTES >> 20} MiB)"
    return text
