"""Where Git-backed memories keep their bookkeeping: the source of a memory (URL, branch, the commit
last synced) and, per synced file, the node it became, its blob SHA and the node revision the sync
left (a later revision means the node was edited in Hadron since: a conflict the next sync reports).

Same database as the graph (its own migration component, ``hadron-git``), so a sync writes nodes
and bookkeeping in one transaction. ``GitSql`` holds the SQL of both engines, ``SqliteGitStore`` and
``PostgresGitStore`` their schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from triptych.hadron import pg_schema, sqlite_schema, write_keys
from triptych.hadron.dialect import POSTGRES, SQLITE, EngineStore
from triptych.hadron.store import utcnow

COMPONENT = "hadron-git"


@dataclass(frozen=True, slots=True)
class GitSource:
    memory_id: str
    url: str
    branch: str | None
    commit: str | None
    synced_at: str | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class TrackedFile:
    path: str
    node_id: str
    blob: str
    revision: int


class GitStore(Protocol):
    def atomic(self, *tenants: str) -> object: ...
    def source(self, memory_id: str) -> GitSource | None: ...
    def sources(self) -> list[GitSource]: ...
    def attach(self, memory_id: str, url: str, branch: str | None) -> None: ...
    def detach(self, memory_id: str) -> bool: ...
    def files(self, memory_id: str) -> dict[str, TrackedFile]: ...
    def put_files(self, memory_id: str, files: Sequence[TrackedFile]) -> None: ...
    def drop_files(self, memory_id: str, paths: Sequence[str]) -> None: ...
    def files_of_nodes(self, node_ids: Sequence[str]) -> dict[str, tuple[str, TrackedFile]]: ...
    def drop_nodes(self, memory_id: str, node_ids: Sequence[str]) -> None: ...
    def synced(self, memory_id: str, commit: str | None, error: str | None) -> None: ...


class GitSql(EngineStore):
    """The SQL both engines run."""

    def source(self, memory_id: str) -> GitSource | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT memory_id, url, branch, commit_sha, synced_at, last_error FROM git_sources WHERE memory_id = {p}",
            (memory_id,),
        ).fetchone()
        return GitSource(*row) if row else None

    def sources(self) -> list[GitSource]:
        rows = self.conn.execute(
            "SELECT memory_id, url, branch, commit_sha, synced_at, last_error FROM git_sources ORDER BY attached_at, memory_id"
        ).fetchall()
        return [GitSource(*r) for r in rows]

    def attach(self, memory_id: str, url: str, branch: str | None) -> None:
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.execute(
                f"INSERT INTO git_sources (memory_id, url, branch, attached_at) VALUES ({self.dialect.marks(4)}) "
                "ON CONFLICT (memory_id) DO UPDATE SET url = excluded.url, branch = excluded.branch, "
                "last_error = NULL",
                (memory_id, url, branch, utcnow()),
            )

    def detach(self, memory_id: str) -> bool:
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.execute(f"DELETE FROM git_files WHERE memory_id = {p}", (memory_id,))
            return bool(
                tx.execute(f"DELETE FROM git_sources WHERE memory_id = {p}", (memory_id,)).rowcount > 0
            )

    def files(self, memory_id: str) -> dict[str, TrackedFile]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT path, node_id, blob, revision FROM git_files WHERE memory_id = {p}", (memory_id,)
        ).fetchall()
        return {r[0]: TrackedFile(r[0], r[1], r[2], r[3]) for r in rows}

    def put_files(self, memory_id: str, files: Sequence[TrackedFile]) -> None:
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.executemany(
                f"INSERT INTO git_files VALUES ({self.dialect.marks(5)}) ON CONFLICT (memory_id, path) DO UPDATE SET "
                "node_id = excluded.node_id, blob = excluded.blob, revision = excluded.revision",
                [(memory_id, f.path, f.node_id, f.blob, f.revision) for f in files],
            )

    def drop_files(self, memory_id: str, paths: Sequence[str]) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.executemany(
                f"DELETE FROM git_files WHERE memory_id = {p} AND path = {p}",
                [(memory_id, path) for path in paths],
            )

    def files_of_nodes(self, node_ids: Sequence[str]) -> dict[str, tuple[str, TrackedFile]]:
        """node id -> (memory id, tracked file) for the nodes that came from a file."""
        out: dict[str, tuple[str, TrackedFile]] = {}
        for start in range(0, len(node_ids), 500):
            chunk = node_ids[start : start + 500]
            among, params = self.dialect.one_of("node_id", chunk)
            rows = self.conn.execute(
                f"SELECT memory_id, path, node_id, blob, revision FROM git_files WHERE {among}", params
            ).fetchall()
            out.update({r[2]: (r[0], TrackedFile(r[1], r[2], r[3], r[4])) for r in rows})
        return out

    def drop_nodes(self, memory_id: str, node_ids: Sequence[str]) -> None:
        """Forget the files of ``node_ids``, nodes that came from ``memory_id``'s repository."""
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.executemany(f"DELETE FROM git_files WHERE node_id = {p}", [(n,) for n in node_ids])

    def synced(self, memory_id: str, commit: str | None, error: str | None) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            if commit is not None:
                tx.execute(
                    f"UPDATE git_sources SET commit_sha = {p}, synced_at = {p}, last_error = NULL WHERE memory_id = {p}",
                    (commit, utcnow(), memory_id),
                )
            else:
                tx.execute(
                    f"UPDATE git_sources SET last_error = {p} WHERE memory_id = {p}", (error, memory_id)
                )


class SqliteGitStore(GitSql):
    dialect = SQLITE
    schema = ((COMPONENT, sqlite_schema.GIT),)


class PostgresGitStore(GitSql):
    dialect = POSTGRES
    schema = ((COMPONENT, pg_schema.GIT),)
