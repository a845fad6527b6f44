"""The filterable attributes of memory records, cached in process per workspace.

Search decides which of a few hundred first-stage hits a caller may see, and reads a few columns of
its candidates to rank them. From SQL that was three lookups of 50-200 seqs per search (1.5-2 ms at
10,000 records, most of it on the path after the query embedding). Here each record's scope, agent,
session, status, kind, TTL, tags and entities sit in a dict, kept coherent by the workspace's
attribute generation (``core.partitions``): every write that changes one of them bumps it, including
the status changes and TTL slides that leave the vector and keyword indexes alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from triptych.core.partitions import PartitionCache
from triptych.metronix.store import utcnow

# What a write changes of a record, as ``Attributes`` fields (``AttributeIndex.apply(changes=...)``).
Fields = Mapping[str, Any]


class Attributes(NamedTuple):
    seq: int
    id: str
    agent_id: str
    scope: str
    session_id: str | None
    status: str
    kind: str
    ttl_expires_at: str | None
    importance_score: float
    created_at: str
    updated_at: str
    tags: frozenset[str]
    entities: frozenset[str]
    source_type: str = ""
    # The rest of the record, so search hydrates its results and reads their links without a query
    # (a round trip each on a server engine); ``metadata`` as stored (JSON text: each read decodes its
    # own copy), ``tag_list`` in the record's order.
    content: str = ""
    content_hash: str = ""
    metadata: str = "{}"
    verification_state: str | None = None
    superseded_by: str | None = None
    tag_list: tuple[str, ...] = ()
    links: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Visibility:
    """Which records a caller sees: its workspace, its agent's view and the filters of the call."""

    workspace_id: str
    agent_id: str | None  # None: every agent's records (the REST doors' whole-workspace view)
    statuses: tuple[str, ...] | None  # None: every status
    scope: str | None = None
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    kind: str | None = None
    now: str = field(default_factory=utcnow)
    exclude_statuses: tuple[str, ...] = ()
    source_types: tuple[str, ...] = ()  # empty: any source type

    def admits(self, a: Attributes) -> bool:
        """Whether the record may be seen: the rule of ``memory_store_reads.visibility_where``, restated."""
        # Global records are the workspace's; the rest are their agent's, and session records only while
        # their TTL runs (and only the session asked for, when one is).
        if a.scope != "global":
            if self.agent_id is not None and a.agent_id != self.agent_id:
                return False
            if a.scope == "session":
                if a.ttl_expires_at is None or a.ttl_expires_at <= self.now:
                    return False
                if self.session_id is not None and a.session_id != self.session_id:
                    return False
            elif a.scope != "per_agent":
                return False
        if self.statuses is not None and a.status not in self.statuses:
            return False
        if a.status in self.exclude_statuses:
            return False
        if self.scope is not None and a.scope != self.scope:
            return False
        if self.kind is not None and a.kind != self.kind:
            return False
        if self.source_types and a.source_type not in self.source_types:
            return False
        return all(tag in a.tags for tag in self.tags)


# A row's memory besides its content and metadata text (its tuple, dict slot, id, hash, dates, tag and
# entity sets), measured with tracemalloc over 5,000 typical records: what the memory budget counts.
ROW_BYTES = 1700


def row_bytes(row: Attributes) -> int:
    return ROW_BYTES + len(row.content) + len(row.metadata)


@dataclass
class _Table:
    rows: dict[int, Attributes] = field(default_factory=dict)
    generation: int = -1
    size: int = 0  # ``row_bytes`` summed, kept by every change


class AttributeIndex(PartitionCache[_Table]):
    """Per workspace, each record's ``Attributes``, loaded by ``loader(workspace)``. It holds each
    record's content too, so it joins the process's memory budget (core/partitions.MemoryBudget)."""

    kind = "attributes"

    def __init__(self, loader: Callable[[str], Iterable[Attributes]]) -> None:
        super().__init__()
        self._loader = loader

    def _load(self, key: str, generation: int) -> _Table:
        rows = {a.seq: a for a in self._loader(key)}
        return _Table(rows=rows, generation=generation, size=sum(map(row_bytes, rows.values())))

    def _measure(self, part: _Table) -> int:
        return part.size

    def apply(
        self,
        key: str,
        before: int,
        after: int,
        put: Iterable[Attributes] = (),
        removed: Iterable[int] = (),
        changes: Mapping[int, Fields] | None = None,
        links: Iterable[tuple[int, str]] = (),
    ) -> None:
        """This process's own committed write (``PartitionCache._update``): whole rows to put, seqs
        removed, some fields of existing rows changed, or (seq, related id) links added."""

        def replace(table: _Table, seq: int, row: Attributes | None) -> None:
            old = table.rows.pop(seq, None)
            table.size -= row_bytes(old) if old is not None else 0
            if row is not None:
                table.rows[seq] = row
                table.size += row_bytes(row)

        def change(table: _Table) -> None:
            for seq in removed:
                replace(table, seq, None)
            for row in put:
                replace(table, row.seq, row)
            for seq, fields in (changes or {}).items():
                current = table.rows.get(seq)
                if current is not None:
                    replace(table, seq, current._replace(**fields))
            for seq, related in links:
                current = table.rows.get(seq)
                if current is not None:
                    replace(table, seq, current._replace(links=current.links | {related}))

        self._update(key, before, after, change)

    def visible(self, key: str, generation: int, seqs: Sequence[int], rule: Visibility) -> set[int]:
        table = self.sync(key, generation)
        rows = table.rows
        return {seq for seq in seqs if (a := rows.get(seq)) is not None and rule.admits(a)}

    def rows(self, key: str, generation: int, seqs: Sequence[int]) -> dict[int, Attributes]:
        table = self.sync(key, generation)
        rows = table.rows
        return {seq: a for seq in seqs if (a := rows.get(seq)) is not None}
