"""Node abstracts: one row per node (summary, content hash, how it was made), in their own migration
component (``hadron-abstracts``). ``AbstractStore`` is the engine-neutral interface; ``AbstractSql`` holds
the SQL of both engines, ``SqliteAbstractStore`` and ``PostgresAbstractStore`` their schemas."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from triptych.hadron import pg_schema, sqlite_schema, write_keys
from triptych.hadron.dialect import POSTGRES, SQLITE, EngineStore

COMPONENT = "hadron-abstracts"


@dataclass(frozen=True, slots=True)
class Abstract:
    node_id: str
    text: str
    content_hash: str
    method: str  # "extractive" or "llm:<model>"
    updated_at: str


class AbstractStore(Protocol):
    def put(self, memory_id: str, abstract: Abstract) -> None: ...
    def delete(self, memory_id: str, node_ids: Sequence[str]) -> None: ...
    def get(self, node_ids: Sequence[str]) -> dict[str, Abstract]: ...
    def live_nodes(self, memory_id: str) -> Iterator[tuple[str, str, str | None, Abstract]]: ...


_COLUMNS = "node_id, abstract, content_hash, method, updated_at"


class AbstractSql(EngineStore):
    """The SQL both engines run."""

    def put(self, memory_id: str, abstract: Abstract) -> None:
        """The abstract of a node of ``memory_id`` (its write key)."""
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.execute(
                f"INSERT INTO node_abstracts ({_COLUMNS}) VALUES ({self.dialect.marks(5)}) ON CONFLICT (node_id) DO UPDATE "
                "SET abstract = excluded.abstract, content_hash = excluded.content_hash, "
                "method = excluded.method, updated_at = excluded.updated_at",
                (
                    abstract.node_id,
                    abstract.text,
                    abstract.content_hash,
                    abstract.method,
                    abstract.updated_at,
                ),
            )

    def delete(self, memory_id: str, node_ids: Sequence[str]) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.memory(memory_id)) as tx:
            tx.executemany(f"DELETE FROM node_abstracts WHERE node_id = {p}", [(n,) for n in node_ids])

    def get(self, node_ids: Sequence[str]) -> dict[str, Abstract]:
        out: dict[str, Abstract] = {}
        ids = list(node_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            among, params = self.dialect.one_of("node_id", chunk)
            rows = self.conn.execute(
                f"SELECT {_COLUMNS} FROM node_abstracts WHERE {among}", params
            ).fetchall()
            out.update({r[0]: Abstract(*r) for r in rows})
        return out

    def live_nodes(self, memory_id: str) -> Iterator[tuple[str, str, str | None, Abstract]]:
        """Every live node of the memory that has an abstract, as (id, loc, content, abstract), in loc order."""
        p = self.dialect.p
        cursor = self.conn.execute(
            "SELECT n.id, n.loc, n.content, a.node_id, a.abstract, a.content_hash, a.method, a.updated_at "
            "FROM nodes n JOIN node_abstracts a ON a.node_id = n.id "
            f"WHERE n.memory_id = {p} AND n.deleted_at IS NULL ORDER BY n.loc",
            (memory_id,),
        )
        for row in cursor:
            yield row[0], row[1], row[2], Abstract(*row[3:])


class SqliteAbstractStore(AbstractSql):
    dialect = SQLITE
    schema = ((COMPONENT, sqlite_schema.ABSTRACTS),)


class PostgresAbstractStore(AbstractSql):
    dialect = POSTGRES
    schema = ((COMPONENT, pg_schema.ABSTRACTS),)
