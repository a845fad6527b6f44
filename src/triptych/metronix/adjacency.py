"""Conversation adjacency of memory records, cached in process per workspace.

``memory_follows`` links each record to the one the same agent wrote just before it (same scope and
session, within the follow window). Search reads the links of every first-stage hit and of their
neighbours; from SQL that was two ``IN (...)`` queries of a few hundred seqs, 2.3 ms of a 17 ms search at
10,000 records. The cache is a dict of neighbour sets kept coherent by the workspace's generation
(``core.partitions``), like the vector and keyword indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from triptych.core.partitions import PartitionCache


@dataclass
class _Links:
    neighbours: dict[int, set[int]] = field(default_factory=dict)
    generation: int = -1

    def link(self, later: int, earlier: int) -> None:
        self.neighbours.setdefault(later, set()).add(earlier)
        self.neighbours.setdefault(earlier, set()).add(later)

    def drop(self, seq: int) -> None:
        for other in self.neighbours.pop(seq, set()):
            self.neighbours.get(other, set()).discard(seq)


# A linked record's memory in the index (its dict slot and set of neighbours), measured with tracemalloc.
LINKED_BYTES = 250


class AdjacencyIndex(PartitionCache[_Links]):
    """(later, earlier) links per workspace, loaded by ``loader(workspace)``."""

    kind = "links"

    def _measure(self, part: _Links) -> int:
        return len(part.neighbours) * LINKED_BYTES

    def __init__(self, loader: Callable[[str], Iterable[tuple[int, int]]]) -> None:
        super().__init__()
        self._loader = loader

    def _load(self, key: str, generation: int) -> _Links:
        part = _Links(generation=generation)
        for later, earlier in self._loader(key):
            part.link(later, earlier)
        return part

    def apply(
        self,
        key: str,
        before: int,
        after: int,
        added: Iterable[tuple[int, int]] = (),
        removed: Iterable[int] = (),
    ) -> None:
        """This process's own committed write (``PartitionCache._update``)."""

        def change(part: _Links) -> None:
            for seq in removed:
                part.drop(seq)
            for later, earlier in added:
                part.link(later, earlier)

        self._update(key, before, after, change)

    def neighbours(self, key: str, generation: int, seqs: Sequence[int]) -> dict[int, set[int]]:
        """Each seq's neighbours (the record it follows and those that follow it); seqs without any
        are left out."""
        part = self.sync(key, generation)
        with self._lock:
            return {seq: set(found) for seq in seqs if (found := part.neighbours.get(seq))}

    def lend(self, key: str, generation: int, scores: Mapping[int, float], hops: int) -> dict[int, float]:
        """For every record up to ``hops`` links away from a scored one, the best score among those
        records (a record lends to its neighbours, never to itself). Walks the cached links in place."""
        part = self.sync(key, generation)
        lent: dict[int, float] = {}
        with self._lock:
            links = part.neighbours
            for seq, score in scores.items():
                level, seen = [seq], {seq}
                for _ in range(hops):
                    reached = []
                    for node in level:
                        for other in links.get(node, ()):
                            if other not in seen:
                                seen.add(other)
                                reached.append(other)
                                if score > lent.get(other, 0.0):
                                    lent[other] = score
                    level = reached
        return lent
