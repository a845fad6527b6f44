"""Mentions in a chat message: ``@worker-name``, ``@handle``, a multiword name by its slug
(``@mary-jane``). Names written as Markdown code (inline code, fenced or indented code blocks) are
literal text and mention nobody; an e-mail address is not a mention either."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# Not preceded by a word character, '@' or a path/URL character: keeps a@b.com and //@x out.
_MENTION = re.compile(r"(?<![\w@/.+-])@([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def slug(name: str) -> str:
    """A name as it is mentioned: lower case, runs of anything else than letters and digits as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _prose(body: str) -> str:
    """The message without its Markdown code: fenced blocks, indented blocks and inline code spans."""
    kept: list[str] = []
    fence: str | None = None
    previous_blank = True
    in_indented = False
    for line in body.splitlines():
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            previous_blank = False
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)[0] * len(opened.group(1))
            continue
        indented = line.startswith(("    ", "\t")) and line.strip() != ""
        # An indented code block starts after a blank line (or at the top) and runs while indented.
        if indented and (previous_blank or in_indented):
            in_indented = True
            continue
        in_indented = False
        previous_blank = line.strip() == ""
        kept.append(line)
    return _INLINE_CODE.sub(" ", "\n".join(kept))


def extract(body: str) -> list[str]:
    """The mention tokens of a message, lower-cased, in order of first appearance."""
    seen: list[str] = []
    for match in _MENTION.finditer(_prose(body)):
        token = match.group(1).lower()
        if token not in seen:
            seen.append(token)
    return seen
