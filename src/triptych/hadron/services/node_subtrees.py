"""Whole-subtree writes: move (within a memory or across memories) and delete (soft or hard, with the
cross-memory edges a hard delete removes). Both take their memories' keys and read the subtree again
under them, so a subtree changed meanwhile is handled as it now is (docs/decisions/0280). Split from
``nodes.py`` (issue 29); ``NodeService`` hands these calls here.
"""

from __future__ import annotations

from dataclasses import replace

from triptych.hadron import write_keys
from triptych.hadron.domain import schema as schemas
from triptych.hadron.domain.loc import MemoryKey, NodeRef, leaf, node_urn
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.errors import BadInput, Conflict, UrnAlreadyExists
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.node_context import NodeJob
from triptych.hadron.services.selection import SessionState

CHAT_ROOT_TYPES = frozenset(("chat",))


class SubtreeWrites(NodeJob):
    def move(
        self,
        caller: HadronCaller,
        state: SessionState,
        source: str,
        target: str,
        overwrite: bool,
        rename_to_leaf: bool,
    ) -> tuple[Memory, Memory, str, int]:
        src_ref = self.nodes.parse_ref(source)
        src = self.nodes.memory_of(caller, state, src_ref)
        dst_ref = self.nodes.parse_ref(target)
        dst = self.nodes.memory_of(
            caller, state, NodeRef(dst_ref.loc, dst_ref.memory or MemoryKey(src.root, src.slug))
        )
        self.access.write_memory(caller, src)
        self.access.write_memory(caller, dst)
        old, new = src_ref.loc, dst_ref.loc
        self.nodes.check_generic_write(src, old, True)  # a move out of, into or over a Channel's address
        self.nodes.check_generic_write(dst, new, True)
        if src.id == dst.id and (new == old or new.startswith(old + ":")):
            raise BadInput(f"cannot move {old!r} onto itself or under its own subtree")
        cross = src.id != dst.id
        if cross:
            self._check_cross_memory_move(src, dst, self.nodes.subtree_at(src, old))
        now = self.nodes.clock()
        # Both memories' keys, taken in one fixed order: a reverse move waits, never deadlocks.
        with self.graph.atomic(write_keys.memory(src.id), write_keys.memory(dst.id)):
            # The subtree as committed once the keys are held: one moved, grown or deleted meanwhile
            # moves as it now is (or is not found), never as it was read before (docs/decisions/0280).
            subtree = self.nodes.subtree_at(src, old)
            if cross:
                self._check_cross_memory_move(src, dst, subtree)
            moving = {n.id for n in subtree}
            relocated = [(n, new + n.loc[len(old) :]) for n in subtree]
            taken = {
                loc: nid
                for loc, nid in self.graph.live_locs(dst.id, [loc for _, loc in relocated]).items()
                if nid not in moving
            }
            if new in taken and overwrite:
                victim = self.graph.node_by_id(taken.pop(new))
                if victim is not None:
                    self.graph.soft_delete([victim.id], now)
                    self.graph.add_revision(
                        replace(victim, deleted_at=now, revision=victim.revision + 1, updated_at=now),
                        "delete",
                        caller.actor,
                        "overwritten by a move",
                    )
            if taken:
                first = sorted(taken)[:5]
                raise UrnAlreadyExists(
                    f"the move would land on {len(taken)} existing node(s): "
                    + ", ".join(node_urn(dst.root, dst.slug, loc) for loc in first),
                    hint="Pass overwrite: true to replace the node at the target (descendant slots never are)",
                    details={"collisions": [node_urn(dst.root, dst.slug, loc) for loc in first]},
                )
            moves = []
            for node, loc in relocated:
                name = leaf(new) if rename_to_leaf and node.loc == old else node.name
                moves.append((node.id, dst.id, loc, name))
            self.graph.relocate(moves, caller.actor, now)
            self.graph.retarget_dangling([n.id for n in subtree], src.id, old, dst.id, new)
            revisions: list[tuple[NodeRecord, str | None]] = [
                (
                    replace(
                        node, memory_id=dst.id, loc=loc, name=name, revision=node.revision + 1, updated_at=now
                    ),
                    f"from {node_urn(src.root, src.slug, node.loc)}",
                )
                for (node, loc), (_, _, _, name) in zip(relocated, moves, strict=True)
            ]
            self.graph.add_revisions(revisions, "move", caller.actor, full=False)
        if src.id != dst.id:  # re-indexed under the destination memory's policy
            moved = self.graph.subtree(dst.id, new)
            self.nodes.embedded(dst, moved)
        if self.nodes.moved is not None:
            self.nodes.moved(src, dst, [(node.id, node.loc, loc) for node, loc in relocated], caller.actor)
        return src, dst, new, len(subtree)

    def _check_cross_memory_move(self, src: Memory, dst: Memory, subtree: list[NodeRecord]) -> None:
        for memory in (src, dst):
            if memory.encrypted:
                raise BadInput(
                    f"cross-memory moves are refused for encrypted memories ({memory.urn})",
                    details={"reason": "encrypted_memory", "memoryUrn": memory.urn},
                )
        for node in subtree:
            if node.node_type in CHAT_ROOT_TYPES:
                raise BadInput(
                    f"the subtree contains a chat root ({node.loc}); chats are tied to their memory's class",
                    details={"reason": "chat_root", "loc": node.loc},
                )
            problem = schemas.violation(dst.schema, node.object_type, node.properties)
            if problem is not None:
                problem.details["loc"] = node.loc
                problem.details["memoryUrn"] = dst.urn
                raise problem

    def delete(
        self, caller: HadronCaller, state: SessionState, urn: str, hard: bool, recursive: bool, cascade: bool
    ) -> tuple[Memory, str, int, int]:
        """Returns (memory, loc, nodes deleted, cross-memory edges removed)."""
        ref = self.nodes.parse_ref(urn, qualified=True)
        mem = self.nodes.memory_of(caller, state, ref)
        self.nodes.subtree_at(mem, ref.loc)  # not found before not writable, as for every node write
        self.access.write_memory(caller, mem)
        self.nodes.check_generic_write(mem, ref.loc, True)  # a recursive delete containing an address too
        now = self.nodes.clock()
        removed = 0
        # The memory's key only: the cross-memory edges removed are rows of other memories' nodes, but
        # nothing of theirs is numbered or counted (no log entry, generation or revision).
        with self.graph.atomic(write_keys.memory(mem.id)):
            # Read under the key: a node moved out meanwhile (now another memory's, under its key) is
            # not deleted by id, and a child added meanwhile is counted (docs/decisions/0280).
            subtree = self.nodes.subtree_at(mem, ref.loc)
            if len(subtree) > 1 and not recursive:
                raise Conflict(
                    f"{node_urn(mem.root, mem.slug, ref.loc)} has {len(subtree) - 1} descendant(s)",
                    hint="Pass recursive: true to delete the whole subtree",
                    details={"descendants": len(subtree) - 1},
                )
            ids = [n.id for n in subtree]
            if hard:
                idset = set(ids)
                crossing = [e.id for e, source_memory in self.graph.incoming_edges(ids)
                            if source_memory != mem.id and e.source_id not in idset]  # fmt: skip
                outgoing = self.graph.edges_from(ids)
                crossing += [e.id for edges in outgoing.values() for e in edges
                             if e.target_memory_id is not None and e.target_memory_id != mem.id]  # fmt: skip
                if crossing and not cascade:
                    raise Conflict(
                        f"the subtree has {len(crossing)} cross-memory edge(s)",
                        hint="Pass cascadeCrossMemoryEdges: true to remove them with the nodes",
                        details={"crossMemoryEdges": len(crossing)},
                    )
                self.graph.delete_edges(crossing)
                removed = len(crossing)
                gone: list[tuple[NodeRecord, str | None]] = [
                    (replace(n, revision=n.revision + 1, updated_at=now), None) for n in subtree
                ]
                self.graph.add_revisions(gone, "hard_delete", caller.actor, full=False)
                self.graph.hard_delete(ids)
            else:
                self.graph.soft_delete(ids, now)
                soft: list[tuple[NodeRecord, str | None]] = [
                    (replace(n, deleted_at=now, revision=n.revision + 1, updated_at=now), None)
                    for n in subtree
                ]
                self.graph.add_revisions(soft, "delete", caller.actor, full=False)
        return mem, ref.loc, len(ids), removed
