"""The Hadron URN grammar: parsing, composing and validating URNs, locs and slugs.

Two grammars coexist. The server emits the flat v2 form

    hrn:<type>:<root>[:<atom>...][#data]

and still accepts the v1 hierarchy form (``hrn:memory:acme.com::specs``), in which ``::``
separates path segments and a single ``:`` joins the atoms inside one. The legacy ``urn:``
scheme is read forever and always written back as ``hrn:``.

An atom is 1-64 characters of ``[A-Za-z0-9._-]`` that start and end alphanumeric. Reading
is case-lenient so existing mixed-case URNs keep resolving; the lower-case and
reserved-word rules apply when a slug is created or renamed.

The behaviour is pinned by the language-neutral conformance corpus that every
implementation runs (``urn-corpus.json``); every failure raises :class:`UrnError`, whose
``reason`` is that corpus's stable reason code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CANONICAL_SCHEME",
    "DISPLAY_URN_TYPES",
    "LEGACY_SCHEME",
    "MAX_ATOM_LEN",
    "RESERVED_SLUGS",
    "URN_TYPES",
    "V2_URN_TYPES",
    "DisplayUrn",
    "NodeUrnParts",
    "ParsedNodeRevUrnV2",
    "ParsedUrn",
    "ParsedUrnV2",
    "RowUrn",
    "UrnError",
    "UrnInput",
    "agent_slug_from_urn",
    "assert_fully_qualified_urn",
    "compose_app_run_urn_v2",
    "compose_data_fragment_v2",
    "compose_edge_urn",
    "compose_installed_agent_urn",
    "compose_node_rev_urn_v2",
    "compose_node_urn",
    "compose_secret_urn_v2",
    "compose_urn_v2",
    "derive_slug_from_name",
    "format_canonical_urn",
    "format_urn",
    "has_scheme_prefix",
    "is_flat_v2",
    "is_parser_canonical",
    "is_valid_slug",
    "legacy_memory_urn_to_canonical",
    "normalize_scheme",
    "normalize_urn_for_lookup",
    "parse_display_urn",
    "parse_for_row",
    "parse_node_rev_urn_v2",
    "parse_urn",
    "parse_urn_input",
    "parse_urn_v2",
    "split_node_urn",
    "to_parser_canonical",
    "validate_org_slug",
    "validate_urn_type_from_input",
    "validate_user_handle",
    "validate_user_slug",
]


class UrnError(ValueError):
    """A URN, loc or slug broke the grammar; ``reason`` is the corpus's stable reason code.

    ``urn-not-qualified`` is the one code the corpus does not name: it marks the API-boundary
    refusal of :func:`assert_fully_qualified_urn` and :func:`split_node_urn`.
    """

    def __init__(
        self, reason: str, value: str, offending_segment: str | None = None, message: str | None = None
    ) -> None:
        if message is None:
            message = f"{reason}: {value!r}"
            if offending_segment is not None and offending_segment != value:
                message += f" (at {offending_segment!r})"
        super().__init__(message)
        self.reason = reason
        self.value = value
        self.offending_segment = offending_segment

    def __reduce__(self) -> tuple[type[UrnError], tuple[str, str, str | None, str]]:
        # The default reduce would replay only the message into __init__.
        return (type(self), (self.reason, self.value, self.offending_segment, str(self)))


# ─── Registry ────────────────────────────────────────────────────────────────

CANONICAL_SCHEME = "hrn"
LEGACY_SCHEME = "urn"
MAX_ATOM_LEN = 64

_CORE_TYPES = (
    "agent", "app", "app-user", "ai-config", "asset", "edge", "license", "memory", "node", "org",
    "platform", "reference", "secret", "session", "subscription", "usage", "user",
)  # fmt: skip
_NODE_KINDS = ("abstract", "partial", "parent", "plan", "prompt", "record", "task", "review")
_NODE_ROLES = ("chat", "chat-message", "config", "conversation", "event", "goal", "stage")
_NODE_PARTS = ("condition", "data")

URN_TYPES: frozenset[str] = frozenset((*_CORE_TYPES, *_NODE_KINDS, *_NODE_ROLES, *_NODE_PARTS))
# Every type whose URN addresses a node; the last path segment of one is a free-form loc.
_NODE_URN_TYPES = frozenset(("node", *_NODE_KINDS, *_NODE_ROLES, *_NODE_PARTS))
# Types whose owner (position 0, or an author inside the path) may be a user written `@handle`.
_OWNER_NAMESPACED_TYPES = _NODE_URN_TYPES | {"app", "agent", "memory", "edge", "secret"}
# Optional `<marker>:` words inside a v1 path segment; they never change what is addressed.
_TYPE_MARKERS = frozenset(("app", "agent", "memory"))
_ROLE_MARKERS = frozenset(("system", "app-mem", "app-user", "group-mem", "priv", "anon"))
# `loc` is no longer a type but stays reserved so it can never be confused with one.
RESERVED_SLUGS: frozenset[str] = URN_TYPES | _ROLE_MARKERS | {"loc"}

V2_URN_TYPES: frozenset[str] = frozenset((
    "org", "user", "mem", "agent", "app", "node", "edge", "asset", "secret", "apprun", "noderev",
    "appkey", "aiconf", "tool", "server", "userapikey", "agentschedule", "agentwebhook", "license",
    "subscription", "usage", "reference", "session", "platform",
))  # fmt: skip
# v2 turned node data from a type of its own into a fragment of its parent.
_V2_FRAGMENTS = frozenset(("data",))
_V2_FRAGMENT_PARENTS = frozenset(("node", "apprun"))
# Allowed number of atoms after the root, as (min, max); other types leave it open.
_V2_ARITY: dict[str, tuple[int, int | None]] = {
    "secret": (1, 1),  # <root>:<name>
    "apprun": (2, 2),  # <root>:<app>:<run-id>
    "noderev": (3, None),  # <root>:<mem>:<loc...>:<rev>
    "node": (2, None),  # <root>:<mem>:<loc...>
    "edge": (2, None),
}
# v2 type words with a v1 equivalent; v2-only types (apprun, noderev, ...) have none, so the v1
# parser keeps refusing them rather than returning a half-mapped result.
_V2_TO_V1_TYPE = {
    "mem": "memory", "org": "org", "user": "user", "agent": "agent", "app": "app",
    "node": "node", "edge": "edge", "asset": "asset", "secret": "secret",
}  # fmt: skip

_ATOM = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_SCHEME_PREFIX = re.compile(r"(?:hrn|urn):")
_PREFIXED = re.compile(r"(hrn|urn):([a-z][a-z0-9-]*):(.+)")
_LOC_PREFIX = re.compile(r"(?:(?:urn|hrn):)?loc:", re.IGNORECASE | re.ASCII)
_EMBEDDED_LOC = re.compile(r"(?:^|::)loc:")
_SECRET_USER_ROOT = re.compile(r"user:([A-Za-z0-9._-]+)")


# ─── Atoms and slugs ─────────────────────────────────────────────────────────


def _check_atom(value: str, atom: str) -> None:
    if not atom:
        raise UrnError("invalid-segment-shape", value, atom)
    if len(atom) > MAX_ATOM_LEN:
        raise UrnError("slug-too-long", value, atom)
    if not _ATOM.fullmatch(atom):
        raise UrnError("invalid-charset", value, atom)


def validate_user_slug(slug: str) -> None:
    """Check a slug at create/rename time: atom shape, not a reserved word, lower case."""
    _check_atom(slug, slug)
    # Checked before case so that `Agent` is reported as the reserved word it is.
    if slug.lower() in RESERVED_SLUGS:
        raise UrnError("reserved-word-slug", slug, slug)
    if slug != slug.lower():
        raise UrnError("slug-not-lowercase", slug, slug)


def is_valid_slug(slug: str) -> bool:
    """Whether :func:`validate_user_slug` accepts ``slug``."""
    try:
        validate_user_slug(slug)
    except UrnError:
        return False
    return True


def validate_org_slug(slug: str) -> None:
    """Check a new organization root: a bare, dotted (domain-like) slug."""
    # Renames rewrite every URN under an org by prefix, which is only safe if the root has no `:`.
    if has_scheme_prefix(slug) or ":" in slug:
        raise UrnError("org-urn-not-bare", slug, slug)
    validate_user_slug(slug)
    # Org roots and user handles share one principal pool; the dot keeps the two disjoint.
    if "." not in slug:
        raise UrnError("org-root-not-dotted", slug, slug)


def validate_user_handle(handle: str) -> None:
    """Check a new user handle: a slug without a dot, so it can never collide with an org root."""
    validate_user_slug(handle)
    if "." in handle:
        raise UrnError("handle-has-dot", handle, handle)


def derive_slug_from_name(name: str) -> str:
    """Turn a display name into a lower-case slug atom (reserved words are not checked)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower()).strip("._-")
    if len(slug) > MAX_ATOM_LEN:
        slug = slug[:MAX_ATOM_LEN].rstrip("._-")
    if not slug:
        raise UrnError("empty-derived-slug", name, name)
    return slug


# ─── Scheme and bare-form helpers ────────────────────────────────────────────


def has_scheme_prefix(value: str) -> bool:
    """Whether ``value`` starts with ``hrn:`` or the legacy ``urn:``."""
    return _SCHEME_PREFIX.match(value) is not None


def normalize_scheme(value: str) -> str:
    """Rewrite a leading legacy ``urn:`` to ``hrn:``; anything else passes through."""
    return CANONICAL_SCHEME + value[3:] if value.startswith(f"{LEGACY_SCHEME}:") else value


def normalize_urn_for_lookup(bare: str) -> str:
    """Collapse the v1 ``::`` hierarchy to the single-colon form that storage is keyed on."""
    return bare.replace("::", ":")


def legacy_memory_urn_to_canonical(bare_legacy: str) -> str:
    """Lift a bare single-colon memory URN to the ``::`` hierarchy, keeping ``<role>:<id>`` whole."""
    parts = bare_legacy.split(":")
    marker_at = next((i for i in reversed(range(len(parts))) if parts[i] in _ROLE_MARKERS), None)
    if marker_at is None:
        return "::".join(parts)
    role = ":".join(parts[marker_at:])
    return "::".join((*parts[:marker_at], role))


def agent_slug_from_urn(agent_urn: str) -> str:
    """The agent's slug path: its bare URN without the leading org, in single-colon form."""
    return normalize_urn_for_lookup(agent_urn).partition(":")[2]


# ─── The pre-v1 input surface ────────────────────────────────────────────────

_LEGACY_INPUT = re.compile(r"(?:hrn|urn):(org|memory|mem|agent|app|node|edge|user):(.+)")
_LOC_INPUT = re.compile(r"loc:(.+)")


@dataclass(frozen=True, slots=True)
class UrnInput:
    """A tool argument split into its type word and bare value (``unknown`` when unprefixed)."""

    type: str
    value: str


def parse_urn_input(value: str) -> UrnInput:
    """Split ``hrn:<type>:`` / ``urn:<type>:`` / ``loc:`` off a tool argument; never raises."""
    if m := _LEGACY_INPUT.fullmatch(value):
        # v2 spells memory `mem`; callers dispatch on the v1 word.
        return UrnInput(_V2_TO_V1_TYPE.get(m[1], m[1]), m[2])
    if m := _LOC_INPUT.fullmatch(value):
        return UrnInput("loc", m[1])
    return UrnInput("unknown", value)


def format_urn(urn_type: str, value: str) -> str:
    """Prefix a bare value with ``hrn:<type>:`` as is, without validating it."""
    return f"{CANONICAL_SCHEME}:{urn_type}:{value}"


def validate_urn_type_from_input(value: str, expected: str) -> str | None:
    """An error message when a tool argument names a different type than ``expected``, else None.

    Unprefixed values are accepted as any type, and a ``loc:`` value is accepted as a node.
    """
    parsed = parse_urn_input(value)
    if parsed.type in ("unknown", expected) or (parsed.type == "loc" and expected == "node"):
        return None
    return f"Expected {expected} URN (hrn:{expected}:...), got hrn:{parsed.type}:..."


# ─── The canonical parser ────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class ParsedUrn:
    """A parsed URN. ``type`` is the v1 type word, whichever grammar the input used."""

    type: str
    path_segments: tuple[str, ...]
    # The input after the rewrites the parser can do alone; keeps a v2 input's own type word.
    parser_canonical: str
    input_form: str
    parser_rewrites: tuple[str, ...]
    # Whether only the resolver (which sees the data) can tell the canonical form.
    needs_resolver_canonicalization: bool


def parse_urn(value: str) -> ParsedUrn:
    """Parse a v1 URN, or a flat v2 URN of a type that has a v1 equivalent.

    The v1 grammar is tried first so that every input v1 accepts keeps its v1 reading.
    """
    try:
        return _parse_urn_v1(value)
    except UrnError:
        flat = _flat_v2_as_parsed_urn(value)
        if flat is None:
            raise
        return flat


def is_parser_canonical(value: str) -> bool:
    """Whether ``value`` parses and is already in canonical form, with nothing rewritten."""
    try:
        parsed = parse_urn(value)
    except UrnError:
        return False
    return parsed.parser_canonical == value and not parsed.parser_rewrites


def to_parser_canonical(value: str) -> str:
    """The canonical form of ``value``; raises :class:`UrnError` when it does not parse."""
    return parse_urn(value).parser_canonical


def _parse_urn_v1(value: str) -> ParsedUrn:
    if _LOC_PREFIX.match(value):
        raise UrnError("loc-segment-rejected", value)
    m = _PREFIXED.fullmatch(value)
    if m is None:
        raise UrnError("malformed-grammar", value)
    scheme, urn_type, path = m[1], m[2], m[3]
    if urn_type not in URN_TYPES:
        raise UrnError("unknown-type", value)
    if _EMBEDDED_LOC.search(path):
        raise UrnError("loc-segment-rejected", value)
    if path.endswith("::"):
        raise UrnError("trailing-double-colon", value)
    segments = path.split("::")
    if "" in segments:
        raise UrnError("empty-segment", value)
    if urn_type == "secret" and (root := _SECRET_USER_ROOT.fullmatch(segments[0])):
        # A secret may name its user owner `user:<handle>`; `@<handle>` is the same owner.
        segments[0] = f"@{root[1]}"
    for index, segment in enumerate(segments):
        _check_segment_atoms(value, urn_type, segment, index, len(segments))

    rewrites = ["legacy-urn-scheme"] if scheme == LEGACY_SCHEME else []
    segments, stripped = _strip_type_markers(urn_type, segments)
    if stripped:
        rewrites.append("type-marker-optionality")
    _check_segment_shapes(value, urn_type, segments)
    if urn_type == "secret":
        _check_secret_shape(value, segments)
    else:
        _check_reserved_words(value, urn_type, segments)
    segments, collapsed = _collapse_self_install(urn_type, segments)
    if collapsed:
        rewrites.append("source-install-memory")

    # A node URN may name a node under any of its roles, and a single-atom install slot on an
    # agent may be a shortened path; neither can be settled without the data.
    needs_resolver = urn_type == "node" or (
        urn_type == "agent" and len(segments) >= 3 and ":" not in segments[-1]
    )
    return ParsedUrn(
        type=urn_type,
        path_segments=tuple(segments),
        parser_canonical=f"{CANONICAL_SCHEME}:{urn_type}:{'::'.join(segments)}",
        input_form=value,
        parser_rewrites=tuple(rewrites),
        needs_resolver_canonicalization=needs_resolver,
    )


def _author_tail(urn_type: str) -> int | None:
    """How many trailing segments of this type can never hold an ``@handle`` author."""
    if urn_type == "agent":
        return 1
    if urn_type == "memory":
        return 2
    if urn_type == "edge" or urn_type in _NODE_URN_TYPES:
        return 3
    return None


def _check_segment_atoms(value: str, urn_type: str, segment: str, index: int, total: int) -> None:
    atoms = segment.split(":")
    handle_at = 1 if index >= 1 and len(atoms) >= 2 and atoms[0] in _TYPE_MARKERS else 0
    if index == 0:
        handle_ok = True
    else:
        # Inside the path an `@handle` is an author prefix, so a slug must follow it.
        tail = _author_tail(urn_type)
        handle_ok = tail is not None and index <= total - tail and len(atoms) >= handle_at + 2
    handle_ok = handle_ok and urn_type in _OWNER_NAMESPACED_TYPES
    for j, atom in enumerate(atoms):
        if handle_ok and j == handle_at and atom.startswith("@"):
            atom = atom[1:]
            if not atom:
                raise UrnError("invalid-segment-shape", value, segment)
        _check_atom(value, atom)


def _strip_type_markers(urn_type: str, segments: list[str]) -> tuple[list[str], bool]:
    # On a secret the marker says whether an app or a memory owns it, so it is not optional.
    if urn_type == "secret":
        return segments, False
    last = len(segments) - 1
    out: list[str] = []
    for i, segment in enumerate(segments):
        marker, sep, rest = segment.partition(":")
        keep = i == 0 or (i == last and urn_type in _NODE_URN_TYPES)
        out.append(rest if sep and marker in _TYPE_MARKERS and not keep else segment)
    return out, out != segments


def _check_segment_shapes(value: str, urn_type: str, segments: list[str]) -> None:
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        atom_count = segment.count(":") + 1
        if i == 0:
            ok = atom_count == 1
        else:
            ok = atom_count <= 3 or (i == last and urn_type in _NODE_URN_TYPES)
        if not ok:
            raise UrnError("invalid-segment-shape", value, segment)


def _check_secret_shape(value: str, segments: list[str]) -> None:
    # <owner>::[app:<slug>::|memory:<slug>::]<name>
    if len(segments) > 3:
        raise UrnError("invalid-segment-shape", value, segments[3])
    if len(segments) == 3:
        atoms = segments[1].split(":")
        if len(atoms) != 2 or atoms[0] not in ("app", "memory"):
            raise UrnError("invalid-segment-shape", value, segments[1])


def _check_reserved_words(value: str, urn_type: str, segments: list[str]) -> None:
    last = len(segments) - 1
    is_node = urn_type in _NODE_URN_TYPES
    # A role marker (`system`, `priv:<id>`, ...) names a memory's role, so it may only open the
    # segment that holds the role: a memory's last one, or the one just before a node's loc.
    role_slot = None
    if urn_type == "memory" and len(segments) >= 3:
        role_slot = last
    elif is_node and len(segments) >= 4:
        role_slot = last - 1
    for i, segment in enumerate(segments):
        if is_node and i == last:
            continue
        for j, atom in enumerate(segment.split(":")):
            word = atom.lower()
            if word in RESERVED_SLUGS and not (i == role_slot and j == 0 and word in _ROLE_MARKERS):
                raise UrnError("reserved-word-slug", value, atom)


def _collapse_self_install(urn_type: str, segments: list[str]) -> tuple[list[str], bool]:
    # `<org>::<org>:<slug>` (an org installing its own memory/agent) is just `<org>::<slug>`.
    if urn_type not in ("memory", "agent") or len(segments) < 2:
        return segments, False
    owner = segments[0]
    end = len(segments) - 1 if urn_type == "memory" else len(segments)
    for i in range(1, end):
        atoms = segments[i].split(":")
        if len(atoms) == 2 and atoms[0] == owner:
            return [*segments[:i], atoms[1], *segments[i + 1 :]], True
    return segments, False


def _flat_v2_as_parsed_urn(value: str) -> ParsedUrn | None:
    try:
        v2 = parse_urn_v2(value)
    except UrnError:
        return None
    urn_type = _V2_TO_V1_TYPE.get(v2.type)
    if urn_type is None:
        return None
    if v2.fragment is not None:
        # v1 spelled `<node>#data` as the `data` type over the same path; dispatch on that.
        if v2.fragment not in _NODE_PARTS:
            return None
        urn_type = v2.fragment
    return ParsedUrn(
        type=urn_type,
        path_segments=(v2.root, *v2.segments),
        parser_canonical=v2.canonical,
        input_form=value,
        parser_rewrites=("legacy-urn-scheme",) if value.startswith(f"{LEGACY_SCHEME}:") else (),
        needs_resolver_canonicalization=False,
    )


# ─── Composition (v1) ────────────────────────────────────────────────────────


def format_canonical_urn(urn_type: str, bare_value: str) -> str:
    """Canonical ``hrn:<type>:...`` for a stored bare value in single-colon or ``::`` form."""
    if not bare_value.strip():
        raise UrnError("empty-bare-value", bare_value)
    if has_scheme_prefix(bare_value):
        raise UrnError("already-prefixed-bare-value", bare_value, bare_value)
    # Once a `::` is present, the remaining single colons join atoms on purpose (e.g. `org:slug`).
    hierarchy = bare_value if "::" in bare_value else bare_value.replace(":", "::")
    return to_parser_canonical(f"{CANONICAL_SCHEME}:{urn_type}:{hierarchy}")


def _compose_in_memory(urn_type: str, memory_urn: str, loc: str) -> str:
    memory = format_canonical_urn("memory", memory_urn).removeprefix(f"{CANONICAL_SCHEME}:memory:")
    # The loc is appended as one segment so its atoms are never read as hierarchy levels.
    return f"{CANONICAL_SCHEME}:{urn_type}:{memory}::{loc}"


def compose_node_urn(memory_urn: str, loc: str) -> str:
    """``hrn:node:<memory>::<loc>`` from a memory URN (any accepted form) and a loc."""
    return _compose_in_memory("node", memory_urn, loc)


def compose_edge_urn(memory_urn: str, loc: str) -> str:
    """``hrn:edge:<memory>::<loc>`` from a memory URN (any accepted form) and an edge loc."""
    return _compose_in_memory("edge", memory_urn, loc)


def _owner_and_slug(urn: str, urn_type: str) -> tuple[str, str]:
    if not urn:
        raise UrnError("empty-bare-value", urn, message=f"the {urn_type} URN is empty")
    prefix = f"{CANONICAL_SCHEME}:{urn_type}:"
    bare = normalize_scheme(urn)
    if bare.startswith(prefix):
        bare = bare[len(prefix) :]
    elif has_scheme_prefix(urn):
        raise UrnError("malformed-grammar", urn, message=f"expected an {prefix} URN, got {urn!r}")
    parts = bare.split("::") if "::" in bare else bare.split(":")
    if len(parts) != 2:
        raise UrnError(
            "invalid-segment-shape", urn, message=f"expected an <org>::<slug> {urn_type} URN, got {urn!r}"
        )
    return parts[0], parts[1]


def compose_installed_agent_urn(app_urn: str, agent_urn: str) -> str:
    """The URN of an agent installed in an app: ``hrn:agent:<org>::<app>::<author-org>:<agent>``.

    Both inputs must be two-segment (``<org>::<slug>``) URNs; an org installing its own agent
    collapses to ``<org>::<app>::<agent>``.
    """
    app_org, app = _owner_and_slug(app_urn, "app")
    author_org, agent = _owner_and_slug(agent_urn, "agent")
    return to_parser_canonical(f"{CANONICAL_SCHEME}:agent:{app_org}::{app}::{author_org}:{agent}")


# ─── Qualification at the API boundary ───────────────────────────────────────

_MIN_SEGMENTS = {"org": 1, "memory": 2, "agent": 2, "app": 2, "node": 3, "edge": 3, "user": 1}


@dataclass(frozen=True, slots=True)
class NodeUrnParts:
    """A node URN split into its bare ``<org>:<memory>`` URN and the loc inside that memory."""

    memory_urn: str
    loc: str


def assert_fully_qualified_urn(value: str, expected: str) -> None:
    """Refuse (``urn-not-qualified``) a URN too short or of the wrong type to name an ``expected``.

    Only the shape is checked, not the full grammar. Callers filter out plain ids first.
    """
    if expected not in _MIN_SEGMENTS:
        raise UrnError("unknown-type", expected, expected)
    minimum = _MIN_SEGMENTS[expected]
    refusal = UrnError(
        "urn-not-qualified",
        value,
        message=f"URN {value!r} is not fully qualified: expected a {expected} URN with at least "
        f"{minimum} hierarchy segment{'s' if minimum > 1 else ''}",
    )
    path = value
    if m := _PREFIXED.fullmatch(value):
        # `mem` is the v2 word for memory; node kinds and roles all name a node.
        prefix_type = "memory" if m[2] == "mem" else m[2]
        if prefix_type != expected and not (expected == "node" and prefix_type in _NODE_URN_TYPES):
            raise refusal
        path = m[3]
    elif has_scheme_prefix(value):
        raise refusal
    if ":::" in path:
        raise refusal
    segments = path.split("::") if "::" in path else path.split(":")
    if "" in segments or len(segments) < minimum:
        raise refusal


def split_node_urn(value: str) -> NodeUrnParts:
    """Split a fully qualified node URN (either grammar, prefixed or bare) into memory and loc."""
    assert_fully_qualified_urn(value, "node")
    m = _PREFIXED.fullmatch(value)
    path = m[3] if m else value
    parts = path.split("::") if "::" in path else path.split(":")
    return NodeUrnParts(memory_urn=f"{parts[0]}:{parts[1]}", loc=":".join(parts[2:]))


# ─── Per-row migration gate ──────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class RowUrn:
    """A stored URN that passed its row's gate; ``canonical`` is the stored string unchanged."""

    canonical: str
    is_legacy: bool


def parse_for_row(urn: str, *, normalized: bool) -> RowUrn:
    """Check a stored URN with the parser its row calls for.

    A normalized row must already be canonical (only the scheme may differ); a row that was
    never normalized only needs a recognisable prefix.
    """
    if normalized:
        if parse_urn(urn).parser_canonical != normalize_scheme(urn):
            raise UrnError("malformed-grammar", urn)
        return RowUrn(canonical=urn, is_legacy=False)
    if parse_urn_input(urn).type == "unknown":
        raise UrnError("malformed-grammar", urn)
    return RowUrn(canonical=urn, is_legacy=True)


# ─── Display chips ───────────────────────────────────────────────────────────

# Deliberately narrower than the registry: an unregistered kind renders as `unknown`, which keeps
# a missing display registration visible instead of mislabelling the chip.
DISPLAY_URN_TYPES = ("org", "memory", "agent", "app", "node", "user", "apprun")
_DISPLAY = re.compile(rf"(?:hrn|urn):({'|'.join(DISPLAY_URN_TYPES)}):(.+)")


@dataclass(frozen=True, slots=True)
class DisplayUrn:
    """A URN split for rendering as a typed chip; ``full_urn`` always uses ``hrn:``."""

    type: str
    bare_value: str
    full_urn: str


def parse_display_urn(value: str, type_hint: str | None = None) -> DisplayUrn:
    """Split a URN for display: its kind, or ``type_hint`` for a bare value, else ``unknown``.

    Tolerant by design and never raises; validation belongs to :func:`parse_urn`.
    """
    if m := _DISPLAY.fullmatch(value):
        return DisplayUrn(m[1], m[2], f"{CANONICAL_SCHEME}:{m[1]}:{m[2]}")
    try:
        v2: ParsedUrnV2 | None = parse_urn_v2(value)
    except UrnError:
        v2 = None
    if v2 is not None and _V2_TO_V1_TYPE.get(v2.type) in DISPLAY_URN_TYPES:
        # `hrn:mem:...` shows under the memory badge but keeps its own spelling.
        bare = v2.canonical.removeprefix(f"{CANONICAL_SCHEME}:{v2.type}:")
        return DisplayUrn(_V2_TO_V1_TYPE[v2.type], bare, v2.canonical)
    # A hint on a prefixed URN of an unregistered kind would double the prefix and mislabel it.
    if type_hint and not has_scheme_prefix(value):
        return DisplayUrn(type_hint, value, f"{CANONICAL_SCHEME}:{type_hint}:{value}")
    return DisplayUrn("unknown", value, f"{CANONICAL_SCHEME}:unknown:{value}")


# ─── Grammar v2 ──────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class ParsedUrnV2:
    """A flat v2 URN. ``scheme`` is always ``hrn``; ``fragment`` is ``data`` or None."""

    scheme: str
    type: str
    root: str  # the owner: an org domain or a user handle, with no sigil
    segments: tuple[str, ...]
    fragment: str | None = None

    @property
    def canonical(self) -> str:
        fragment = "" if self.fragment is None else f"#{self.fragment}"
        return f"{CANONICAL_SCHEME}:{self.type}:{':'.join((self.root, *self.segments))}{fragment}"


@dataclass(frozen=True, slots=True)
class ParsedNodeRevUrnV2:
    """A node revision URN decomposed from its end: the last atom is the revision."""

    scheme: str
    type: str
    root: str
    memory: str
    loc: str  # colon-joined; a loc may have any number of atoms
    rev: str


def _check_v2_arity(value: str, urn_type: str, segments: tuple[str, ...]) -> None:
    low, high = _V2_ARITY.get(urn_type, (0, None))
    if len(segments) < low or (high is not None and len(segments) > high):
        raise UrnError("invalid-segment-shape", value)


def parse_urn_v2(value: str) -> ParsedUrnV2:
    """Parse a strict flat v2 URN; the v1 ``::`` and ``@``/``user:`` forms are refused."""
    core, hashed, fragment = value.partition("#")
    if hashed and fragment not in _V2_FRAGMENTS:
        raise UrnError("invalid-segment-shape", value, f"#{fragment}")
    m = _PREFIXED.fullmatch(core)
    if m is None:
        raise UrnError("malformed-grammar", value)
    urn_type, rest = m[2], m[3]
    if urn_type not in V2_URN_TYPES:
        raise UrnError("unknown-type", value)
    if "::" in rest:
        raise UrnError("malformed-grammar", value)
    atoms = rest.split(":")
    # The atom charset also rules out the `@` sigil and empty atoms.
    for atom in atoms:
        _check_atom(value, atom)
    root, segments = atoms[0], tuple(atoms[1:])
    _check_v2_arity(value, urn_type, segments)
    if hashed and urn_type not in _V2_FRAGMENT_PARENTS:
        raise UrnError("invalid-segment-shape", value, f"#{fragment}")
    return ParsedUrnV2(CANONICAL_SCHEME, urn_type, root, segments, fragment if hashed else None)


def is_flat_v2(value: str) -> bool:
    """Whether ``value`` is a v2 URN already in canonical form (so ``urn:`` is not)."""
    try:
        return parse_urn_v2(value).canonical == value
    except UrnError:
        return False


def compose_urn_v2(urn_type: str, root: str, *segments: str) -> str:
    """``hrn:<type>:<root>[:<atom>...]``; a multi-atom loc is passed as separate atoms."""
    if urn_type not in V2_URN_TYPES:
        raise UrnError("unknown-type", urn_type, urn_type)
    for atom in (root, *segments):
        _check_atom(atom, atom)
    _check_v2_arity(f"{CANONICAL_SCHEME}:{urn_type}:{root}", urn_type, segments)
    return f"{CANONICAL_SCHEME}:{urn_type}:{':'.join((root, *segments))}"


def compose_secret_urn_v2(root: str, name: str) -> str:
    """``hrn:secret:<root>:<name>``."""
    return compose_urn_v2("secret", root, name)


def compose_app_run_urn_v2(root: str, app: str, run_id: str) -> str:
    """``hrn:apprun:<root>:<app>:<run-id>``."""
    return compose_urn_v2("apprun", root, app, run_id)


def compose_node_rev_urn_v2(root: str, memory: str, loc: str, rev: str) -> str:
    """``hrn:noderev:<root>:<memory>:<loc...>:<rev>``; ``loc`` may hold several atoms."""
    return compose_urn_v2("noderev", root, memory, *loc.split(":"), rev)


def compose_data_fragment_v2(parent_urn: str) -> str:
    """The ``#data`` URN of a v2 node or app run, always in ``hrn:`` form."""
    parent = parse_urn_v2(parent_urn)
    if parent.type not in _V2_FRAGMENT_PARENTS or parent.fragment is not None:
        raise UrnError("invalid-segment-shape", parent_urn, parent_urn)
    return f"{parent.canonical}#data"


def parse_node_rev_urn_v2(value: str) -> ParsedNodeRevUrnV2:
    """Parse ``hrn:noderev:...``: the first atom after the root is the memory, the last the rev."""
    parsed = parse_urn_v2(value)
    if parsed.type != "noderev":
        raise UrnError("invalid-segment-shape", value)
    memory, *loc, rev = parsed.segments
    return ParsedNodeRevUrnV2(parsed.scheme, parsed.type, parsed.root, memory, ":".join(loc), rev)
