"""hadron_replace_text: search-and-replace text across many nodes in one call (the live server's twin of
GraphQL ``searchReplaceInNodes``).

The selection is a union of ``nodeIds`` (ids or fully qualified URNs) and ``memoryIds`` (every live node
of each), which ``prefix`` narrows to a loc and its descendants (on ``:`` boundaries; it needs
``memoryIds``, a loc being unique only within a memory). A node ref naming nothing the caller may read
is listed in ``unavailable``; a memory the caller cannot read fails the call (``[memory_not_found]``).

Matching is literal by default, global, optionally case-insensitive; ``regex`` takes an RE2 pattern
(linear time: no pattern can stall the server) and a replacement with ``$1``, ``$<name>``, ``$&`` and
``$$``. ``dryRun`` counts without writing and needs read access only. A real run needs write access to
every memory it changes (with their locks) and writes every changed node, its revision (with
``reason``) and its re-embedding in one transaction: all of it or none. Nodes on a Channel's address
are written only by the channel tools, so they are left out of the selection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from triptych.core.regex import LinearPattern, RegexRefused
from triptych.hadron import write_keys
from triptych.hadron.access import require_identity
from triptych.hadron.domain.loc import (
    is_id,
    is_other_than_node_urn,
    node_urn,
    parse_node_ref,
    require_qualified_node,
)
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import BadInput, LocProtected
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import NodeService, urn_error

TEXT_FIELDS = ("content", "name", "description", "tags")
# Fields of the live server's enum that Triptych's nodes do not store as writable text.
UNSTORED_FIELDS = {
    "alias": "Triptych's nodes have no alias",
    "abstract": "abstracts are derived from the content on every write (replace in content instead)",
}
MAX_SCAN_NODES = 10_000
MAX_TEXT_CHARS = 10_000
_DOLLAR = re.compile(r"\$(?:(\$)|(&)|(\d{1,2})|<([A-Za-z_][A-Za-z0-9_]*)>)")


@dataclass(frozen=True, slots=True)
class ReplaceRequest:
    old: str
    new: str
    fields: tuple[str, ...]
    node_refs: tuple[str, ...] = ()
    memory_refs: tuple[str, ...] = ()
    prefix: str | None = None
    regex: bool = False
    case_insensitive: bool = False
    dry_run: bool = False
    reason: str | None = None


@dataclass
class ReplaceResult:
    dry_run: bool
    scanned: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return len(self.results)

    @property
    def replacements(self) -> int:
        return sum(r["replacements"] for r in self.results)


def _literal(text: str) -> str:
    """``text`` as an RE2 pattern matching it literally (every non-alphanumeric by its code point)."""
    return "".join(c if c.isalnum() and c.isascii() else f"\\x{{{ord(c):x}}}" for c in text)


class Replacer:
    """Counts and applies one request's replacement to a text (literal, or RE2 with ``$`` references)."""

    def __init__(self, request: ReplaceRequest) -> None:
        self.new = request.new
        self.regex = request.regex
        self.literal = None if request.regex or request.case_insensitive else request.old
        if self.literal is None:
            source = request.old if request.regex else _literal(request.old)
            try:
                self.pattern = LinearPattern(("(?i)" if request.case_insensitive else "") + source)
            except RegexRefused as exc:
                raise BadInput(
                    f"oldText is not a usable RE2 pattern: {exc}", details={"field": "oldText"}
                ) from exc

    def apply(self, text: str) -> tuple[str, int]:
        if self.literal is not None:
            count = text.count(self.literal)
            return (text.replace(self.literal, self.new) if count else text), count
        parts: list[str] = []
        last = count = 0
        for match in self.pattern.finditer(text):
            parts += [text[last : match.start()], self._expand(match) if self.regex else self.new]
            last = match.end()
            count += 1
        if not count:
            return text, 0
        parts.append(text[last:])
        return "".join(parts), count

    def _expand(self, match: Any) -> str:
        def one(m: re.Match[str]) -> str:
            if m[1]:
                return "$"
            if m[2]:
                return str(match.group(0))
            try:
                group = match.group(int(m[3])) if m[3] else match.group(m[4])
            except (IndexError, KeyError, ValueError):
                return m[0]  # not a group of the pattern: the text stays as written
            return "" if group is None else str(group)

        return _DOLLAR.sub(one, self.new)


class ReplaceService:
    def __init__(self, nodes: NodeService) -> None:
        self.nodes = nodes
        self.graph = nodes.graph
        self.access = nodes.access
        self.tenancy = nodes.tenancy

    def replace_text(self, caller: HadronCaller, request: ReplaceRequest) -> ReplaceResult:
        require_identity(caller)
        self._check(request)
        replacer = Replacer(request)
        selected, unavailable = self._select(caller, request)
        result = ReplaceResult(request.dry_run, len(selected), unavailable=unavailable)
        changed: list[tuple[Memory, NodeRecord, NodeRecord]] = []
        for memory, node in selected:
            updated, counts = self._replaced(node, request.fields, replacer)
            if not counts:
                continue
            changed.append((memory, node, updated))
            result.results.append({
                "nodeId": node.id, "loc": node.loc, "memoryId": memory.id, "memoryUrn": memory.urn,
                "replacements": sum(counts.values()),
                "fields": [{"field": f, "matches": n} for f, n in counts.items()],
            })  # fmt: skip
        if request.dry_run or not changed:
            return result
        for memory in {m.id: m for m, _, _ in changed}.values():
            self.access.write_memory(caller, memory)  # read-write access and the memory's lock
        now, actor = self.nodes.clock(), caller.actor
        written: dict[str, tuple[Memory, list[NodeRecord]]] = {}
        # Every memory it rewrites, their keys in one fixed order.
        with self.graph.atomic(*(write_keys.memory(m.id) for m, _, _ in changed)):
            for memory, node, _ in changed:
                # Replaced in the node as committed under the keys (docs/decisions/0280): one moved or
                # deleted meanwhile is unavailable, never written back where it was read.
                current = self.nodes.committed(memory, node)
                entry = next(r for r in result.results if r["nodeId"] == node.id)
                updated, counts = self._replaced(current, request.fields, replacer) if current else (node, {})
                if current is None or not counts:
                    result.results.remove(entry)
                    if current is None:
                        result.unavailable.append(node_urn(memory.root, memory.slug, node.loc))
                    continue
                entry["replacements"] = sum(counts.values())
                entry["fields"] = [{"field": f, "matches": n} for f, n in counts.items()]
                updated = replace(updated, revision=current.revision + 1, updated_at=now, updated_by=actor)
                self.graph.update_node(updated)
                self.graph.add_revision(updated, "replace_text", actor, request.reason)
                written.setdefault(memory.id, (memory, []))[1].append(updated)
        for memory, nodes in written.values():
            self.nodes.embedded(memory, nodes)
        return result

    @staticmethod
    def _check(request: ReplaceRequest) -> None:
        if not request.old:
            raise BadInput("oldText must not be empty", details={"field": "oldText"})
        if len(request.old) > MAX_TEXT_CHARS or len(request.new) > MAX_TEXT_CHARS:
            raise BadInput(f"oldText and newText are at most {MAX_TEXT_CHARS} characters")
        if not request.fields:
            raise BadInput("pass at least one field: " + ", ".join(TEXT_FIELDS), details={"field": "fields"})
        for name in request.fields:
            if name in UNSTORED_FIELDS:
                raise BadInput(f"field {name!r} cannot be replaced here: {UNSTORED_FIELDS[name]}",
                               details={"field": "fields", "value": name})  # fmt: skip
        if not request.node_refs and not request.memory_refs:
            raise BadInput("select nodes with nodeIds and/or memoryIds (at least one)")
        if request.prefix is not None and not request.memory_refs:
            raise BadInput("prefix needs memoryIds: a loc is unique only within a memory",
                           details={"field": "prefix"})  # fmt: skip

    def _select(
        self, caller: HadronCaller, request: ReplaceRequest
    ) -> tuple[list[tuple[Memory, NodeRecord]], list[str]]:
        picked: dict[str, tuple[Memory, NodeRecord]] = {}
        unavailable: list[str] = []
        prefix = None
        if request.prefix is not None:
            try:
                prefix = parse_node_ref(request.prefix).loc
            except UrnError as exc:
                raise urn_error(exc) from exc
        for ref in request.memory_refs:
            memory = self.access.read_memory(caller, ref)[0]
            if prefix is not None:
                self._bound(len(picked) + self.graph.count_descendants(memory.id, prefix))
                nodes: Iterable[NodeRecord] = self.graph.subtree(memory.id, prefix)
            else:
                nodes = self.graph.memory_nodes(memory.id)  # read row by row: stops at the bound
            for node in nodes:
                picked[node.id] = (memory, node)
                self._bound(len(picked))
        for ref in request.node_refs:
            hit = self._node(caller, ref)
            if hit is None:
                unavailable.append(ref)
            else:
                picked[hit[1].id] = hit
        self._bound(len(picked))
        kept = []
        for memory, node in picked.values():
            try:
                self.nodes.check_generic_write(memory, node.loc)
            except LocProtected:
                continue
            kept.append((memory, node))
        return kept, unavailable

    @staticmethod
    def _bound(count: int) -> None:
        if count > MAX_SCAN_NODES:
            raise BadInput(
                f"the selection holds more than {MAX_SCAN_NODES} nodes",
                hint="Narrow it with prefix, or select fewer memories",
                details={"max": MAX_SCAN_NODES},
            )

    def _node(self, caller: HadronCaller, ref: str) -> tuple[Memory, NodeRecord] | None:
        value = ref.strip()
        if is_id(value):
            node = self.graph.node_by_id(value)
            memory = self.tenancy.memory(node.memory_id) if node is not None else None
        else:
            if is_other_than_node_urn(value):
                raise BadInput(f"nodeIds takes node ids and node URNs, got {ref!r}", details={"ref": ref})
            try:
                node_ref = require_qualified_node(value)
            except UrnError as exc:
                raise urn_error(exc) from exc
            assert node_ref.memory is not None
            memory = self.tenancy.memory_by_key(node_ref.memory.root, node_ref.memory.slug)
            node = self.graph.node_by_loc(memory.id, node_ref.loc) if memory is not None else None
        if memory is None or node is None or self.access.memory_level(caller, memory) is None:
            return None
        return memory, node

    @staticmethod
    def _replaced(
        node: NodeRecord, fields: Sequence[str], replacer: Replacer
    ) -> tuple[NodeRecord, dict[str, int]]:
        counts: dict[str, int] = {}
        changes: dict[str, Any] = {}
        for name in fields:
            if name == "tags":
                tags, total = [], 0
                for tag in node.tags:
                    text, n = replacer.apply(tag)
                    tags.append(text)
                    total += n
                if total:
                    counts[name], changes["tags"] = total, tags
                continue
            value = getattr(node, name)
            if not value:
                continue
            text, n = replacer.apply(value)
            if n:
                counts[name], changes[name] = n, text
        if "name" in changes and not changes["name"].strip():
            raise BadInput(
                f"the replacement would leave {node.loc!r} without a name", details={"loc": node.loc}
            )
        return replace(node, **changes), counts
