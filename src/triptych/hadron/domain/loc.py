"""Locs (a node's address inside a memory), the URNs the server writes, and the references it reads.

Every URN the server composes is composed here, and every reference it is given (``hrn:``/``urn:``
prefixed or bare) is taken apart here; tools and services never write ``hrn:`` themselves. The
grammar itself (v1, v2 and legacy forms, checked against the reference corpus) is ``domain/urn.py``.

A loc is 1-32 atoms joined by ``:``; each atom is 1-64 characters of ``[A-Za-z0-9._-]`` that
start and end alphanumeric (the URN grammar's atom). A memory is addressed as ``hrn:mem:<root>:<slug>``
(``<root>`` an org domain or a user handle); a node as ``hrn:node:<root>:<slug>:<loc...>``. The v1
``::`` forms and the legacy ``urn:`` scheme are read too; the server only writes the v2 form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from triptych.hadron.domain.urn import (
    MAX_ATOM_LEN,
    UrnError,
    normalize_scheme,
    parse_urn,
    split_node_urn,
)

MAX_LOC_ATOMS = 32
_ATOM = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_ID = re.compile(r"[0-9a-f]{32}")
_PREFIX = re.compile(r"(?:hrn|urn):([a-z][a-z0-9-]*):")
_NODE_TYPES = frozenset(
    ("node", "abstract", "partial", "parent", "plan", "prompt", "record", "task", "review", "chat",
     "chat-message", "config", "conversation", "event", "goal", "stage", "data", "condition")
)  # fmt: skip


def check_loc(loc: str, field: str = "loc") -> str:
    """Return ``loc`` when every atom is well formed, else raise ``UrnError`` naming the bad atom."""
    if loc.startswith("loc:"):
        loc = loc[4:]
    if not loc:
        raise UrnError("empty-segment", loc, message=f"{field} is empty")
    atoms = loc.split(":")
    if len(atoms) > MAX_LOC_ATOMS:
        raise UrnError("invalid-segment-shape", loc, message=f"{field} has more than {MAX_LOC_ATOMS} atoms")
    for atom in atoms:
        if not atom:
            raise UrnError("empty-segment", loc, message=f"{field} {loc!r} has an empty atom")
        if len(atom) > MAX_ATOM_LEN:
            raise UrnError("slug-too-long", loc, atom, message=f"{field} atom {atom!r} is over 64 characters")
        if not _ATOM.fullmatch(atom):
            raise UrnError(
                "invalid-charset",
                loc,
                atom,
                message=f"{field} atom {atom!r} must be [A-Za-z0-9._-], starting and ending alphanumeric",
            )
    return loc


def parent_loc(loc: str) -> str:
    """The loc one level up; the empty string for a root-level node."""
    return loc.rpartition(":")[0]


def leaf(loc: str) -> str:
    return loc.rpartition(":")[2]


def is_id(value: str) -> bool:
    return _ID.fullmatch(value) is not None


def is_urn(value: str) -> bool:
    return _PREFIX.match(value) is not None


# The URNs the server writes: the flat v2 form. Roots, slugs and locs were checked when they were
# stored, so composing them does not check again (it runs for every node a read returns).


def org_urn(root: str) -> str:
    return f"hrn:org:{root}"


def user_urn(handle: str) -> str:
    return f"hrn:user:{handle}"


def app_urn(root: str, slug: str) -> str:
    return f"hrn:app:{root}:{slug}"


def memory_urn(root: str, slug: str) -> str:
    return f"hrn:mem:{root}:{slug}"


def node_urn(root: str, slug: str, loc: str) -> str:
    """A node's URN; with ``loc`` empty, the prefix every node URN of that memory starts with."""
    return f"hrn:node:{root}:{slug}:{loc}"


def agent_urn(root: str, app_slug: str, slug: str) -> str:
    """An agent installed in an App (issue 14)."""
    return f"hrn:agent:{root}:{app_slug}:{slug}"


def worker_urn(root: str, app_slug: str, slug: str) -> str:
    """A worker cast in an App, by its name's slug (issue 14)."""
    return f"hrn:worker:{root}:{app_slug}:{slug}"


def ai_config_urn(root: str, app_slug: str, name: str) -> str:
    return f"hrn:aiconfig:{root}:{app_slug}:{name}"


def split_app_member_urn(ref: str, type_word: str) -> tuple[str, str, str] | None:
    """``hrn:<type>:<root>:<app>:<slug>`` (an agent or a worker) as ``(root, app, slug)``; None for
    anything else."""
    value = ref.strip()
    if urn_type(value) != type_word:
        return None
    parts = strip_urn_prefix(value, type_word).split(":")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def urn_type(value: str) -> str | None:
    """The type word of an ``hrn:``/``urn:`` reference (``org``, ``mem``, ...), None for a bare one."""
    m = _PREFIX.match(value.strip())
    return m[1] if m else None


def is_other_than_node_urn(value: str) -> bool:
    """Whether ``value`` is an ``hrn:``/``urn:`` reference of a type that names no node (``hrn:mem:...``)."""
    word = urn_type(value)
    return word is not None and word not in _NODE_TYPES


def strip_urn_prefix(ref: str, *types: str) -> str:
    """``ref`` (trimmed) without a leading ``hrn:<type>:`` or ``urn:<type>:`` of one of ``types``;
    anything else (a bare root, key or id) as it is."""
    value = normalize_scheme(ref.strip())
    for type_word in types:
        value = value.removeprefix(f"hrn:{type_word}:")
    return value


def split_bare_key(bare: str) -> tuple[str, str]:
    """``root:slug`` (or the v1 ``root::slug``) as ``(root, slug)``; ``("", bare)`` without a colon."""
    root, _, slug = bare.replace("::", ":").rpartition(":")
    return root, slug


def app_short_form(bare: str) -> tuple[str, str, bool] | None:
    """``(root, slug, personal)`` of an App written ``<org-root>:<slug>`` (``acme.com:ops``, or v1
    ``acme.com::ops``) or, for a user-owned App, ``@<handle>:<slug>`` (``personal`` True: only a user's
    App matches) or ``<handle>:<slug>``; None when ``bare`` is not two non-empty atoms."""
    root, slug = split_bare_key(bare.strip())
    personal = root.startswith("@")
    root = root.removeprefix("@")
    if not root or not slug or ":" in root:
        return None
    return root, slug, personal


@dataclass(frozen=True, slots=True)
class MemoryKey:
    """A memory named by its root and slug (the two halves of ``hrn:mem:<root>:<slug>``)."""

    root: str
    slug: str

    @property
    def urn(self) -> str:
        return memory_urn(self.root, self.slug)


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A node reference: a loc, optionally inside a named memory (``memory`` None: the active one)."""

    loc: str
    memory: MemoryKey | None = None


def parse_memory_ref(value: str) -> MemoryKey | None:
    """A memory URN in any accepted form (``hrn:mem:``, ``hrn:memory:...::``, ``urn:``, bare
    ``root:slug``), or None when ``value`` is not a URN (then it may be an id)."""
    value = value.strip()
    if is_id(value):
        return None
    m = _PREFIX.match(value)
    if m is None:
        parts = value.replace("::", ":").split(":")
        if len(parts) == 2 and all(_ATOM.fullmatch(p) for p in parts):
            return MemoryKey(parts[0], parts[1])
        raise UrnError("urn-not-qualified", value, message=f"{value!r} is not a memory URN or id")
    if m[1] not in ("mem", "memory"):
        raise UrnError(
            "urn-not-qualified", value, message=f"expected a memory URN (hrn:mem:...), got {value!r}"
        )
    canonical = parse_urn(normalize_scheme(value))
    segments = [s for seg in canonical.path_segments for s in seg.split(":")]
    if len(segments) != 2:
        raise UrnError(
            "urn-not-qualified", value, message=f"memory URN {value!r} must be hrn:mem:<org-or-user>:<slug>"
        )
    return MemoryKey(segments[0], segments[1])


def parse_node_ref(value: str) -> NodeRef:
    """A node URN (v2, v1 or ``urn:``) or a bare loc (``a:b``, ``loc:a:b``) relative to a memory."""
    value = value.strip()
    m = _PREFIX.match(value)
    if m is None:
        return NodeRef(check_loc(value))
    if m[1] not in _NODE_TYPES:
        raise UrnError(
            "urn-not-qualified", value, message=f"expected a node URN (hrn:node:...), got {value!r}"
        )
    normalized = normalize_scheme(value)
    if "::" in normalized:
        parse_urn(normalized)  # the full v1 grammar, for its reason codes
    parts = split_node_urn(normalized)
    root, _, slug = parts.memory_urn.partition(":")
    return NodeRef(check_loc(parts.loc), MemoryKey(root, slug))


def require_qualified_node(value: str) -> NodeRef:
    """A fully qualified node URN; a bare loc is refused with ``urn-not-qualified``."""
    ref = parse_node_ref(value)
    if ref.memory is None:
        raise UrnError(
            "urn-not-qualified",
            value,
            message=f"{value!r} is not a fully qualified node URN (hrn:node:<root>:<memory>:<loc>)",
        )
    return ref
