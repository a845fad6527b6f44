"""Node listings: the next sibling (hadron_next_node) and the tree under a loc (hadron_list_nodes), with
the implicit folders a loc tree holds where nothing is written. Split from ``nodes.py`` (issue 29);
``NodeService`` hands these calls here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from triptych.hadron.domain.loc import NodeRef, node_urn, parent_loc
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.errors import NotFound
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.node_context import NodeJob
from triptych.hadron.services.selection import SessionState

MAX_TREE = 2000  # entries one hadron_list_nodes answer holds


@dataclass(frozen=True, slots=True)
class Folder:
    """A loc in a listing that nodes live under but no node occupies (an implicit folder)."""

    loc: str
    seq: None = None


class NodeTree(NodeJob):
    def next_node(
        self, caller: HadronCaller, state: SessionState, parent: str, current: str | None
    ) -> tuple[Memory, NodeRecord | None]:
        ref = self.nodes.parse_ref(parent)
        mem = self.nodes.memory_of(caller, state, ref)
        children = self.graph.children(mem.id, ref.loc)
        if current is None:
            return mem, children[0] if children else None
        cur = self.nodes.parse_ref(current)
        cur_loc = cur.loc if ":" in cur.loc or cur.memory else f"{ref.loc}:{cur.loc}"
        for index, child in enumerate(children):
            if child.loc == cur_loc:
                return mem, children[index + 1] if index + 1 < len(children) else None
        raise NotFound("node", node_urn(mem.root, mem.slug, cur_loc))

    def tree(
        self, caller: HadronCaller, state: SessionState, parent: str | None, memory: str | None, depth: int
    ) -> tuple[Memory, str, list[tuple[int, NodeRecord | Folder]]]:
        """The tree under ``parent`` (the memory's root without one) to ``depth`` levels, children in
        seq then loc order, at most 2,000 entries. A loc that something lives under but no node occupies
        (``tasks`` when only ``tasks:nightly-digest`` was written) is listed as an implicit ``Folder``
        at its place, at every depth, as the memory's loc tree has it."""
        if parent:
            ref = self.nodes.parse_ref(parent)
            mem = self.nodes.memory_of(caller, state, ref, memory)
            root = ref.loc
        else:
            mem = self.nodes.memory_of(caller, state, NodeRef(""), memory)
            root = ""
        branches = self.graph.branch_locs(mem.id, root)
        if root and not branches and self.graph.node_by_loc(mem.id, root) is None:
            raise NotFound("node", node_urn(mem.root, mem.slug, root))
        folders = self._implicit_folders(mem.id, root, branches, depth)
        out: list[tuple[int, NodeRecord | Folder]] = []

        def walk(loc: str, level: int) -> None:
            entries: list[NodeRecord | Folder] = [*self.graph.children(mem.id, loc), *folders.get(loc, ())]
            entries.sort(key=lambda e: (e.seq is None, e.seq or 0, e.loc))
            for entry in entries:
                if len(out) >= MAX_TREE:
                    return
                out.append((level, entry))
                if level < depth:
                    walk(entry.loc, level + 1)

        walk(root, 1)
        return mem, root, out

    def _implicit_folders(
        self, memory_id: str, root: str, branches: Sequence[str], depth: int
    ) -> dict[str, list[Folder]]:
        """The implicit folders within ``depth`` levels of ``root``, by the loc they sit under."""
        base = len(root.split(":")) if root else 0
        candidates: set[str] = set()
        for branch in branches:
            atoms = branch.split(":") if branch else []
            # Every ancestor of a parent loc, below the root and no deeper than the listing reaches.
            for end in range(base + 1, min(len(atoms), base + depth) + 1):
                candidates.add(":".join(atoms[:end]))
        live = self.graph.live_locs(memory_id, sorted(candidates))
        folders: dict[str, list[Folder]] = {}
        for loc in sorted(candidates - set(live)):
            folders.setdefault(parent_loc(loc), []).append(Folder(loc))
        return folders
