"""Git-backed memories: one sync from the repository (``hadron_sync_graph``) and the mirror of moves.

A sync fetches the source into a local bare cache (``<data dir>/hadron-git/<memory id>.git``),
lists the commit's tree and compares each file's blob SHA with the one the previous sync recorded,
so only new and changed files are read. Then, in one transaction, the repository wins: new files
create nodes, changed files overwrite their nodes (a node also edited in Hadron since the last sync
is reported as a conflict), a file renamed with its content intact moves its node (the id, and so
every edge, survives), and a removed file soft-deletes its node. Nodes created in Hadron that no
file ever described are left alone. Every revision a sync writes names the commit SHA. Any failure
(an unreachable or corrupt repository, a file that cannot be parsed) leaves the memory as it was.

A move that touches a Git-backed memory is mirrored after it commits: the moved nodes' files are
removed from the source memory's repository and written to the destination's, in one commit per
repository. Best-effort, as the contract says: a repository that cannot be pushed to leaves the
database authoritative, and the error is kept on the source (``triptych hadron source list``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from triptych.hadron import gitrepo, write_keys
from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain import gitlayout
from triptych.hadron.domain.loc import node_urn
from triptych.hadron.domain.model import Memory, NodeRecord
from triptych.hadron.errors import GitSyncFailed, HadronError, NoGitSource
from triptych.hadron.git_store import GitSource, GitStore, TrackedFile
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import GraphStore, new_id, utcnow

log = logging.getLogger(__name__)

LIST_CAP = 200  # per list in a report: a 10,000-file first sync reports counts, not 10,000 locs


@dataclass
class SyncReport:
    memory: Memory
    url: str
    commit: str
    previous: str | None
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    renamed: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    unchanged: int = 0
    ignored: int = 0  # files that are not Markdown

    def as_dict(self) -> dict[str, Any]:
        def capped(items: Sequence[Any]) -> list[Any]:
            return list(items[:LIST_CAP])

        return {
            "memoryUrn": self.memory.urn,
            "source": self.url,
            "commit": self.commit,
            "previousCommit": self.previous,
            "counts": {
                "created": len(self.created),
                "updated": len(self.updated),
                "deleted": len(self.deleted),
                "renamed": len(self.renamed),
                "conflicts": len(self.conflicts),
                "skipped": len(self.skipped),
                "unchanged": self.unchanged,
                "ignored": self.ignored,
            },
            "created": capped(self.created),
            "updated": capped(self.updated),
            "deleted": capped(self.deleted),
            "renamed": capped(self.renamed),
            "conflicts": capped(self.conflicts),
            "skipped": capped(self.skipped),
        }


class GitSyncService:
    def __init__(
        self,
        graph: GraphStore,
        access: AccessPolicy,
        selections: SelectionService,
        store: GitStore,
        workdir: Path,
        embedded: Callable[[Memory, Sequence[NodeRecord]], None] | None = None,
        guard: Callable[[Memory, str, bool], None] | None = None,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.graph = graph
        self.access = access
        self.selections = selections
        self.store = store
        self.workdir = workdir
        self.embedded = embedded
        # Refuses a loc that is a Channel's protected address (NodeService.guard); such files are skipped.
        self.guard = guard
        self.clock = clock
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, memory_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(memory_id, threading.Lock())

    # ── the tool ───────────────────────────────────────────────────────────

    def sync(self, caller: HadronCaller, state: SessionState, memory_ref: str | None) -> SyncReport:
        """hadron_sync_graph: the caller needs write access to the memory."""
        require_identity(caller)
        memory = (
            self.access.read_memory(caller, memory_ref)[0]
            if memory_ref
            else self.selections.active_memory(caller, state)
        )
        self.access.write_memory(caller, memory)
        return self.sync_memory(memory, caller.actor)

    def sync_memory(self, memory: Memory, actor: str) -> SyncReport:
        source = self.store.source(memory.id)
        if source is None:
            raise NoGitSource(
                f"{memory.urn} is not backed by a Git repository", details={"memoryUrn": memory.urn}
            )
        with self._lock(memory.id):
            try:
                return self._sync(memory, source, actor)
            except GitSyncFailed as exc:
                self.store.synced(memory.id, None, exc.message)
                raise

    def _sync(self, memory: Memory, source: GitSource, actor: str) -> SyncReport:
        cache = self.workdir / f"{memory.id}.git"
        details = {"memoryUrn": memory.urn, "source": source.url}
        try:
            commit = gitrepo.fetch(cache, source.url, source.branch)
            files = gitrepo.tree(cache, commit)
        except gitrepo.GitError as exc:
            raise GitSyncFailed(f"cannot read {source.url}: {exc}", details=details) from None
        report = SyncReport(memory, source.url, commit, source.commit)
        wanted: dict[str, str] = {}  # path -> loc
        by_loc: dict[str, str] = {}
        for path in sorted(files):
            loc, reason = gitlayout.loc_for(path)
            if loc is None:
                if path.endswith(gitlayout.SUFFIX):
                    report.skipped.append({"path": path, "reason": str(reason)})
                else:
                    report.ignored += 1
            elif loc in by_loc:
                report.skipped.append({"path": path, "reason": f"same loc as {by_loc[loc]}"})
            elif (refused := self._refused(memory, loc)) is not None:
                report.skipped.append({"path": path, "reason": refused})
            else:
                wanted[path], by_loc[loc] = loc, path
        tracked = self.store.files(memory.id)
        added = [p for p in wanted if p not in tracked]
        changed = [p for p in wanted if p in tracked and tracked[p].blob != files[p]]
        removed = [p for p in tracked if p not in wanted]
        report.unchanged = len(wanted) - len(added) - len(changed)
        # A removed file whose content reappears at exactly one new path was renamed.
        by_blob: dict[str, list[str]] = {}
        for path in added:
            by_blob.setdefault(files[path], []).append(path)
        renames: dict[str, str] = {}  # new path -> old path
        for path in removed:
            candidates = by_blob.get(tracked[path].blob)
            if candidates:
                renames[candidates.pop(0)] = path
        try:
            texts = gitrepo.blobs(cache, [files[p] for p in added + changed])
        except gitrepo.GitError as exc:
            raise GitSyncFailed(f"cannot read {source.url}: {exc}", details=details) from None
        written: list[NodeRecord] = []
        now = self.clock()
        reason = f"git {commit}"
        try:
            with self.graph.atomic(write_keys.memory(memory.id)):
                keep: list[TrackedFile] = []
                for path in sorted(added + changed):
                    try:
                        text = texts[files[path]].decode("utf-8")
                    except UnicodeDecodeError:
                        raise gitlayout.LayoutError(path, "the file is not UTF-8 text") from None
                    parsed = gitlayout.parse(path, wanted[path], text)
                    old = renames.get(path)
                    entry = tracked.get(old or path)
                    node = self._apply(memory, path, parsed, entry, old, actor, now, reason, report)
                    written.append(node)
                    keep.append(TrackedFile(path, node.id, files[path], node.revision))
                gone = [p for p in removed if p not in renames.values()]
                self._delete(memory, [tracked[p] for p in gone], actor, now, reason, report)
                self.store.drop_files(memory.id, removed)
                self.store.put_files(memory.id, keep)
                self.store.synced(memory.id, commit, None)
        except gitlayout.LayoutError as exc:
            raise GitSyncFailed(
                f"{exc}; nothing was synced", details={**details, "commit": commit, "path": exc.path}
            ) from None
        if self.embedded is not None and written:
            self.embedded(memory, written)
        return report

    def _refused(self, memory: Memory, loc: str) -> str | None:
        if self.guard is None:
            return None
        try:
            self.guard(memory, loc, False)
        except HadronError as exc:
            return f"{exc.code}: {exc.message}"
        return None

    def _apply(
        self,
        memory: Memory,
        path: str,
        parsed: gitlayout.FileNode,
        entry: TrackedFile | None,
        old_path: str | None,
        actor: str,
        now: str,
        reason: str,
        report: SyncReport,
    ) -> NodeRecord:
        loc = parsed.loc
        existing = self.graph.node_by_id(entry.node_id) if entry is not None else None
        if existing is not None and existing.memory_id != memory.id:
            existing = None  # moved to another memory since: the file describes a new node here
        occupant = self.graph.node_by_loc(memory.id, loc)
        if existing is None and occupant is not None:
            existing = occupant
            report.conflicts.append(
                {
                    "loc": loc,
                    "path": path,
                    "reason": "a node made in Hadron held this loc; the file replaced it",
                }
            )
        elif existing is not None and occupant is not None and occupant.id != existing.id:
            self.graph.soft_delete([occupant.id], now)
            self.graph.add_revisions(
                [(replace(occupant, deleted_at=now, revision=occupant.revision + 1), f"{reason} {path}")],
                "sync_delete",
                actor,
                full=False,
            )
            report.conflicts.append(
                {"loc": loc, "path": path, "reason": "another node held this loc; the repository's file won"}
            )
        if (
            existing is not None
            and entry is not None
            and existing.revision != entry.revision
            and existing.id == entry.node_id
        ):
            report.conflicts.append(
                {
                    "loc": loc,
                    "path": path,
                    "reason": "edited in Hadron since the last sync; the repository's version won",
                    "overwrittenRevision": existing.revision,
                }
            )
        if existing is None:
            node = NodeRecord(
                id=new_id(), memory_id=memory.id, loc=loc, name=parsed.name, node_type=parsed.node_type,
                object_type=None, description=parsed.description, content=parsed.content, seq=parsed.seq,
                tags=parsed.tags, properties={}, data=parsed.data, llm_model=None, ai_agent=None, revision=1,
                created_at=now, updated_at=now, created_by=actor, updated_by=actor,
            )  # fmt: skip
            self.graph.insert_node(node)
            self.graph.add_revision(node, "sync_create", actor, f"{reason} {path}")
            report.created.append(loc)
            return node
        if existing.loc != loc:
            self.graph.relocate([(existing.id, memory.id, loc, existing.name)], actor, now)
            moved = self.graph.node_by_id(existing.id)
            assert moved is not None
            self.graph.add_revisions(
                [(moved, f"{reason} {old_path or existing.loc} -> {path}")], "sync_rename", actor, full=False
            )
            report.renamed.append({"from": existing.loc, "to": loc})
            existing = moved
        fields: dict[str, Any] = {
            "name": parsed.name, "node_type": parsed.node_type, "description": parsed.description,
            "content": parsed.content, "seq": parsed.seq, "tags": parsed.tags, "data": parsed.data,
        }  # fmt: skip
        if all(getattr(existing, k) == v for k, v in fields.items()):
            return existing
        node = replace(existing, **fields, revision=existing.revision + 1, updated_at=now, updated_by=actor)
        self.graph.update_node(node)
        self.graph.add_revision(node, "sync_update", actor, f"{reason} {path}")
        if old_path is None:
            report.updated.append(loc)
        return node

    def _delete(
        self,
        memory: Memory,
        entries: Sequence[TrackedFile],
        actor: str,
        now: str,
        reason: str,
        report: SyncReport,
    ) -> None:
        doomed = [
            n for n in (self.graph.node_by_id(e.node_id) for e in entries) if n and n.memory_id == memory.id
        ]
        if not doomed:
            return
        self.graph.soft_delete([n.id for n in doomed], now)
        self.graph.add_revisions(
            [(replace(n, deleted_at=now, revision=n.revision + 1, updated_at=now), reason) for n in doomed],
            "sync_delete",
            actor,
            full=False,
        )
        report.deleted.extend(n.loc for n in doomed)

    # ── mirroring moves ────────────────────────────────────────────────────

    def mirror_move(
        self, src: Memory, dst: Memory, moves: Sequence[tuple[str, str, str]], actor: str
    ) -> None:
        """After a committed move of ``(node id, old loc, new loc)``: remove the moved nodes' files from
        the source memory's repository and write them to the destination's. Never raises."""
        sources = {m.id: s for m in (src, dst) if (s := self.store.source(m.id)) is not None}
        if not sources:
            return
        ids = [nid for nid, _, _ in moves]
        tracked = self.store.files_of_nodes(ids)
        new_locs = [new for _, _, new in moves]
        label = f"{node_urn(src.root, src.slug, moves[0][1])} -> {node_urn(dst.root, dst.slug, moves[0][2])}"
        plans: dict[str, tuple[dict[str, str], list[str]]] = {mid: ({}, []) for mid in sources}
        if src.id in sources:
            plans[src.id][1].extend(t.path for mid, t in tracked.values() if mid == src.id)
        written: dict[str, str] = {}  # path -> node id
        if dst.id in sources:
            for nid, _, new in moves:
                node = self.graph.node_by_id(nid)
                if node is None:
                    continue
                is_dir = any(other.startswith(new + ":") for other in new_locs)
                path = gitlayout.path_for(new, is_dir)
                plans[dst.id][0][path] = gitlayout.render(
                    node.name,
                    node.loc,
                    node.node_type,
                    node.description,
                    node.tags,
                    node.seq,
                    node.data,
                    node.content,
                )
                written[path] = nid
        for memory_id, (writes, removes) in plans.items():
            source = sources[memory_id]
            with self._lock(memory_id):
                try:
                    pushed = gitrepo.push_change(
                        self.workdir / f"{memory_id}.work",
                        source.url,
                        source.branch,
                        writes,
                        [p for p in removes if p not in writes],
                        f"hadron: move {label} (by {actor})",
                    )
                except gitrepo.GitError as exc:
                    log.warning("mirroring a move to %s failed: %s", source.url, exc)
                    self.store.synced(memory_id, None, f"mirroring a move failed: {exc}")
                    continue
            if memory_id == src.id:  # only once the files left the repository: else a sync re-mints them
                self.store.drop_nodes(src.id, [nid for nid, (mid, _) in tracked.items() if mid == src.id])
            if pushed is None or memory_id != dst.id:
                continue
            _, shas = pushed
            keep = []
            for path, nid in written.items():
                node = self.graph.node_by_id(nid)
                if node is not None and path in shas:
                    keep.append(TrackedFile(path, nid, shas[path], node.revision))
            self.store.put_files(dst.id, keep)
