"""The file layout of a Git-backed memory: which file is which node, and what a file says.

Pure rules, no I/O (docs/hadron.md, "Git-backed memories", is the user's copy):

- Only ``*.md`` files are nodes. A path maps to a loc by its directories and its stem:
  ``guides/setup/install.md`` -> ``guides:setup:install``; ``guides/index.md`` is the node of the
  directory itself (``guides``). Hidden files and directories (a ``.`` first), the root
  ``README.md``/``index.md`` and paths whose atoms are not valid loc atoms are skipped (reported).
- A file may open with YAML front matter between ``---`` lines. ``title``, ``type``,
  ``description``, ``tags`` and ``seq`` fill the node's name, nodeType, description, tags and seq;
  every other key goes to the node's ``data``. The Markdown body is the node's ``content``.
- A node without ``title`` is named after the last atom of its loc.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import yaml

from triptych.hadron.domain.loc import check_loc, leaf
from triptych.hadron.domain.urn import UrnError

SUFFIX = ".md"
INDEX = "index.md"
ROOT_SKIPPED = frozenset(("README.md", "readme.md", INDEX))
FIELD_KEYS = ("title", "type", "description", "tags", "seq")
# libyaml's safe loader parses front matter ~10x faster than the pure-Python one (a 10,000-file sync).
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LayoutError(ValueError):
    """A file that cannot become a node (its front matter is not a YAML mapping, a field has the wrong
    type); the whole sync is refused, because skipping it would delete its node."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FileNode:
    """What a file says about its node."""

    loc: str
    name: str
    node_type: str
    description: str | None
    tags: list[str]
    seq: int | None
    data: dict[str, Any] | None
    content: str | None


def loc_for(path: str) -> tuple[str | None, str | None]:
    """``(loc, None)`` for a node file, ``(None, reason)`` for a file that is skipped."""
    if not path.endswith(SUFFIX):
        return None, "not a Markdown file"
    parts = path.split("/")
    if any(p.startswith(".") for p in parts):
        return None, "hidden"
    if len(parts) == 1 and parts[0] in ROOT_SKIPPED:
        return None, "the repository's own page"
    atoms = parts[:-1] if parts[-1] == INDEX else [*parts[:-1], parts[-1][: -len(SUFFIX)]]
    try:
        return check_loc(":".join(atoms), "path"), None
    except UrnError as exc:
        return None, str(exc)


def path_for(loc: str, is_dir: bool) -> str:
    """The file a node is written to: ``a/b.md``, or ``a/b/index.md`` for a node with children."""
    atoms = loc.split(":")
    return "/".join(atoms) + "/" + INDEX if is_dir else "/".join(atoms) + SUFFIX


def _plain(value: Any) -> Any:
    # YAML reads dates as date objects; the node's data is JSON.
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


def parse(path: str, loc: str, text: str) -> FileNode:
    """The node a file describes; ``LayoutError`` when it cannot."""
    front: dict[str, Any] = {}
    body = text
    if text.startswith("---\n") or text.startswith("---\r\n"):
        lines = text.splitlines(keepends=True)
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
        if end is None:
            raise LayoutError(path, "the front matter is not closed by a '---' line")
        try:
            loaded = yaml.load("".join(lines[1:end]), Loader=_LOADER)
        except yaml.YAMLError as exc:
            raise LayoutError(
                path, f"the front matter is not valid YAML ({exc.__class__.__name__})"
            ) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise LayoutError(path, "the front matter must be a YAML mapping")
        front = json.loads(json.dumps(loaded or {}, default=_plain))
        body = "".join(lines[end + 1 :])
    title = front.pop("title", None)
    node_type = front.pop("type", None)
    description = front.pop("description", None)
    tags = front.pop("tags", None)
    seq = front.pop("seq", None)
    for key, value, kind in (
        ("title", title, str),
        ("type", node_type, str),
        ("description", description, str),
    ):
        if value is not None and not isinstance(value, kind):
            raise LayoutError(path, f"front matter '{key}' must be a string")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise LayoutError(path, "front matter 'tags' must be a list of strings")
    if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool)):
        raise LayoutError(path, "front matter 'seq' must be an integer")
    content = body.lstrip("\r\n")
    return FileNode(
        loc=loc,
        name=(title or "").strip() or leaf(loc),
        node_type=node_type or "info",
        description=description,
        tags=list(tags or []),
        seq=seq,
        data=front or None,
        content=content or None,
    )


def render(
    name: str,
    loc: str,
    node_type: str,
    description: str | None,
    tags: list[str],
    seq: int | None,
    data: dict[str, Any] | None,
    content: str | None,
) -> str:
    """The file of a node (the inverse of ``parse``): front matter when there is any, then the body."""
    front: dict[str, Any] = dict(data or {})
    for key in FIELD_KEYS:
        front.pop(key, None)  # a data key named like a field would not come back as data
    if name != leaf(loc):
        front["title"] = name
    if node_type != "info":
        front["type"] = node_type
    if description:
        front["description"] = description
    if tags:
        front["tags"] = tags
    if seq is not None:
        front["seq"] = seq
    head = "---\n" + yaml.safe_dump(front, sort_keys=True, allow_unicode=True) + "---\n" if front else ""
    return head + (content or "")
