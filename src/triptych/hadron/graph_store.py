"""Graph persistence: nodes, edges and revisions. The SQL is written once (``GraphSql``) for both engines;
``SqliteGraphStore`` and ``PostgresGraphStore`` run it and migrate their engine's edge component
(``hadron-edges``); the tables themselves are the "main"/"hadron" component opened with the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from triptych.hadron import pg_schema, sqlite_schema, write_keys
from triptych.hadron.dialect import POSTGRES, SQLITE, EngineStore
from triptych.hadron.domain.model import EdgeRecord, NodeRecord, Revision
from triptych.hadron.store import _NODE_COLUMNS, NodeCodec, _chunks, _json, _node, _node_values

_EDGE_COLUMNS = (
    "id, source_id, loc, name, description, target_id, target_memory_id, target_loc, target_ref, "
    "is_runnable, position, priority, condition_json, data_json"
)
_EDGE_WIDTH = len(_EDGE_COLUMNS.split(", "))
_EDGE_COLUMNS_OF_E = ", ".join(f"e.{c}" for c in _EDGE_COLUMNS.split(", "))  # joined with its source node
EDGE_COMPONENT = "hadron-edges"


def _edge(row: Sequence[Any]) -> EdgeRecord:
    return EdgeRecord(
        id=row[0], source_id=row[1], loc=row[2], name=row[3], description=row[4], target_id=row[5],
        target_memory_id=row[6], target_loc=row[7], target_ref=row[8], is_runnable=bool(row[9]),
        position=row[10], priority=row[11], condition=json.loads(row[12]) if row[12] is not None else None,
        data=json.loads(row[13]) if row[13] is not None else None,
    )  # fmt: skip


def _upper(loc: str) -> str:
    # Every descendant loc starts with `<loc>:`; ';' sorts right after ':', so this is a range scan.
    return loc + ";"


class GraphSql(EngineStore):
    """The graph SQL both engines run."""

    # Seals the nodes of encrypted memories on write and opens them on read (sealing.py); None: clear.
    codec: NodeCodec | None = None

    def node_by_loc(self, memory_id: str, loc: str) -> NodeRecord | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = {p} AND loc = {p} AND deleted_at IS NULL",
            (memory_id, loc),
        ).fetchone()
        return self._read(row) if row else None

    def node_by_id(self, node_id: str) -> NodeRecord | None:
        row = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE id = {self.dialect.p} AND deleted_at IS NULL",
            (node_id,),
        ).fetchone()
        return self._read(row) if row else None

    def _read(self, row: Sequence[Any]) -> NodeRecord:
        node = _node(row)
        return self.codec.open(node) if self.codec is not None else node

    def _seal(self, node: NodeRecord) -> NodeRecord:
        return self.codec.seal(node) if self.codec is not None else node

    def insert_node(self, node: NodeRecord) -> None:
        node = self._seal(node)
        with self.atomic(write_keys.memory(node.memory_id)) as tx:
            tx.execute(
                f"INSERT INTO nodes ({_NODE_COLUMNS}, parent_loc) VALUES ({self.dialect.marks(21)})",
                (*_node_values(node), node.loc.rpartition(":")[0]),
            )

    def update_node(self, node: NodeRecord) -> None:
        values = _node_values(self._seal(node))
        columns = _NODE_COLUMNS.split(", ")[1:]
        p = self.dialect.p
        assignments = ", ".join(f"{c} = {p}" for c in columns)
        with self.atomic(write_keys.memory(node.memory_id)) as tx:
            tx.execute(
                f"UPDATE nodes SET {assignments}, parent_loc = {p} WHERE id = {p}",
                (*values[1:], node.loc.rpartition(":")[0], node.id),
            )

    def replace_edges(self, source_id: str, edges: Sequence[EdgeRecord]) -> None:
        with self.atomic() as tx:
            tx.execute(f"DELETE FROM edges WHERE source_id = {self.dialect.p}", (source_id,))
            tx.executemany(
                f"INSERT INTO edges ({_EDGE_COLUMNS}) VALUES ({self.dialect.marks(_EDGE_WIDTH)})",
                [_edge_values(e) for e in edges],
            )

    def upsert_edge(self, edge: EdgeRecord) -> EdgeRecord:
        p = self.dialect.p
        with self.atomic() as tx:
            row = tx.execute(
                f"SELECT {_EDGE_COLUMNS} FROM edges WHERE source_id = {p} AND loc = {p}",
                (edge.source_id, edge.loc),
            ).fetchone()
            if row is not None:
                return _edge(row)
            position = tx.execute(
                f"SELECT COALESCE(MAX(position), -1) + 1 FROM edges WHERE source_id = {p}", (edge.source_id,)
            ).fetchone()[0]
            edge = replace(edge, position=position)
            tx.execute(
                f"INSERT INTO edges ({_EDGE_COLUMNS}) VALUES ({self.dialect.marks(_EDGE_WIDTH)})",
                _edge_values(edge),
            )
        return edge

    def nodes_at(self, memory_ids: Sequence[str], loc: str) -> list[NodeRecord]:
        """The live nodes at ``loc`` in any of ``memory_ids`` (a bare loc read across memories)."""
        out: list[NodeRecord] = []
        for chunk in _chunks(list(memory_ids)):
            among, params = self.dialect.one_of("memory_id", chunk)
            rows = self.conn.execute(
                f"SELECT {_NODE_COLUMNS} FROM nodes WHERE loc = {self.dialect.p} AND deleted_at IS NULL "
                f"AND {among} ORDER BY memory_id",
                (loc, *params),
            ).fetchall()
            out.extend(self._read(r) for r in rows)
        return out

    def edge_by_id(self, edge_id: str) -> EdgeRecord | None:
        """An edge whose source node is live (an edge of a deleted node is gone with it)."""
        row = self.conn.execute(
            f"SELECT {_EDGE_COLUMNS_OF_E} FROM edges e JOIN nodes n ON n.id = e.source_id "
            f"WHERE e.id = {self.dialect.p} AND n.deleted_at IS NULL",
            (edge_id,),
        ).fetchone()
        return _edge(row) if row else None

    def edges_at(self, memory_id: str, loc: str) -> list[EdgeRecord]:
        """The edges with loc ``loc`` whose live source node is in ``memory_id`` (an edge URN's candidates)."""
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT {_EDGE_COLUMNS_OF_E} FROM edges e JOIN nodes n ON n.id = e.source_id "
            f"WHERE e.loc = {p} AND n.memory_id = {p} AND n.deleted_at IS NULL ORDER BY n.loc, e.id",
            (loc, memory_id),
        ).fetchall()
        return [_edge(r) for r in rows]

    def update_edge(self, edge: EdgeRecord) -> None:
        """Rewrite one edge's fields (its source and position stay)."""
        columns = _EDGE_COLUMNS.split(", ")[2:]
        values = _edge_values(edge)[2:]
        p = self.dialect.p
        assignments = ", ".join(f"{c} = {p}" for c in columns)
        with self.atomic() as tx:
            tx.execute(f"UPDATE edges SET {assignments} WHERE id = {p}", (*values, edge.id))

    def edges_from(self, source_ids: Sequence[str]) -> dict[str, list[EdgeRecord]]:
        out: dict[str, list[EdgeRecord]] = {}
        for chunk in _chunks(list(source_ids)):
            among, params = self.dialect.one_of("source_id", chunk)
            rows = self.conn.execute(
                f"SELECT {_EDGE_COLUMNS} FROM edges WHERE {among} ORDER BY source_id, position", params
            ).fetchall()
            for row in rows:
                out.setdefault(row[1], []).append(_edge(row))
        return out

    def add_revision(self, node: NodeRecord, operation: str, actor: str, reason: str | None) -> None:
        self.add_revisions([(node, reason)], operation, actor)

    def add_revisions(
        self, items: Sequence[tuple[NodeRecord, str | None]], operation: str, actor: str, *, full: bool = True
    ) -> None:
        """One revision per node; ``full`` snapshots every field, else only the address (moves, deletes)."""
        columns = _NODE_COLUMNS.split(", ")
        rows = []
        for node, reason in items:
            if full:
                snapshot = dict(zip(columns, _node_values(self._seal(node)), strict=True))
            else:
                snapshot = {"id": node.id, "memory_id": node.memory_id, "loc": node.loc, "name": node.name}
            rows.append((node.id, node.revision, operation, actor, node.updated_at, reason, _json(snapshot)))
        with self.atomic() as tx:
            tx.executemany(
                "INSERT INTO node_revisions (node_id, revision, operation, actor, at, reason, snapshot) "
                f"VALUES ({self.dialect.marks(7)})",
                rows,
            )

    def revisions(self, node_id: str, limit: int = 20) -> list[Revision]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT node_id, revision, operation, actor, at, reason FROM node_revisions WHERE node_id = {p} "
            f"ORDER BY id DESC LIMIT {p}",
            (node_id, limit),
        ).fetchall()
        return [Revision(*r) for r in rows]

    def children(self, memory_id: str, parent: str, limit: int = 1000) -> list[NodeRecord]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = {p} AND parent_loc = {p} "
            f"AND deleted_at IS NULL ORDER BY seq IS NULL, seq, loc LIMIT {p}",
            (memory_id, parent, limit),
        ).fetchall()
        return [self._read(r) for r in rows]

    def branch_locs(self, memory_id: str, parent: str) -> list[str]:
        """The distinct parent locs of the live nodes at or below ``parent`` ("": the whole memory), in
        order: every loc under which something lives, whether or not a node sits there."""
        p = self.dialect.p
        if not parent:
            rows = self.conn.execute(
                f"SELECT DISTINCT parent_loc FROM nodes WHERE memory_id = {p} AND deleted_at IS NULL "
                "ORDER BY parent_loc",
                (memory_id,),
            ).fetchall()
        else:
            # A range on the (memory_id, parent_loc) index: the parent itself, then `<parent>:...`.
            rows = self.conn.execute(
                f"SELECT DISTINCT parent_loc FROM nodes WHERE memory_id = {p} AND deleted_at IS NULL "
                f"AND parent_loc >= {p} AND parent_loc < {p} ORDER BY parent_loc",
                (memory_id, parent, _upper(parent)),
            ).fetchall()
        return [r[0] for r in rows if r[0] == parent or r[0].startswith(parent + ":") or not parent]

    def subtree(self, memory_id: str, loc: str) -> list[NodeRecord]:
        """The node at ``loc`` (if live) and every live descendant, parents before children."""
        root = self.node_by_loc(memory_id, loc)
        # A range on the (memory_id, loc) index; an OR with the root's equality would scan the memory.
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = {p} AND deleted_at IS NULL "
            f"AND loc > {p} AND loc < {p} ORDER BY length(loc), loc",
            (memory_id, loc + ":", _upper(loc)),
        ).fetchall()
        return ([root] if root else []) + [self._read(r) for r in rows]

    def live_locs(self, memory_id: str, locs: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for chunk in _chunks(list(locs)):
            among, params = self.dialect.one_of("loc", chunk)
            rows = self.conn.execute(
                f"SELECT loc, id FROM nodes WHERE memory_id = {self.dialect.p} AND deleted_at IS NULL "
                f"AND {among}",
                (memory_id, *params),
            ).fetchall()
            out.update({r[0]: r[1] for r in rows})
        return out

    def count_descendants(self, memory_id: str, loc: str) -> int:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT COUNT(*) FROM nodes WHERE memory_id = {p} AND deleted_at IS NULL AND loc > {p} AND loc < {p}",
            (memory_id, loc + ":", _upper(loc)),
        ).fetchone()
        return int(row[0])

    def relocate(self, moves: Sequence[tuple[str, str, str, str]], actor: str, at: str) -> None:
        """Apply ``(node_id, memory_id, loc, name)`` moves and point edges at their new addresses."""
        p = self.dialect.p
        with self.atomic() as tx:
            tx.executemany(
                f"UPDATE nodes SET memory_id = {p}, loc = {p}, parent_loc = {p}, name = {p}, "
                f"revision = revision + 1, updated_at = {p}, updated_by = {p} WHERE id = {p}",
                [(m, loc, loc.rpartition(":")[0], name, at, actor, nid) for nid, m, loc, name in moves],
            )
            tx.executemany(
                f"UPDATE edges SET target_memory_id = {p}, target_loc = {p} WHERE target_id = {p}",
                [(m, loc, nid) for nid, m, loc, _ in moves],
            )

    def retarget_dangling(self, source_ids: Sequence[str], src: str, old: str, dst: str, new: str) -> int:
        """Edges of moved nodes whose unresolved target lay inside the moved subtree follow it."""
        changed = 0
        p = self.dialect.p
        with self.atomic() as tx:
            for chunk in _chunks(list(source_ids)):
                among, params = self.dialect.one_of("source_id", chunk)
                cursor = tx.execute(
                    f"UPDATE edges SET target_memory_id = {p}, target_loc = {p} || substr(target_loc, {p}) "
                    f"WHERE {among} AND target_id IS NULL AND target_memory_id = {p} "
                    f"AND (target_loc = {p} OR (target_loc > {p} AND target_loc < {p}))",
                    (dst, new, len(old) + 1, *params, src, old, old + ":", _upper(old)),
                )
                changed += cursor.rowcount
        return changed

    def soft_delete(self, node_ids: Sequence[str], at: str) -> None:
        p = self.dialect.p
        with self.atomic() as tx:
            tx.executemany(
                f"UPDATE nodes SET deleted_at = {p}, revision = revision + 1, updated_at = {p} WHERE id = {p}",
                [(at, at, nid) for nid in node_ids],
            )

    def hard_delete(self, node_ids: Sequence[str]) -> None:
        with self.atomic() as tx:
            for chunk in _chunks(list(node_ids)):
                for table, column in (
                    ("edges", "source_id"),
                    ("node_embeddings", "node_id"),
                    ("nodes", "id"),
                ):
                    among, params = self.dialect.one_of(column, chunk)
                    tx.execute(f"DELETE FROM {table} WHERE {among}", params)

    def incoming_edges(self, node_ids: Sequence[str]) -> list[tuple[EdgeRecord, str]]:
        """Edges targeting any of ``node_ids``, each with its source node's memory id."""
        out: list[tuple[EdgeRecord, str]] = []
        for chunk in _chunks(list(node_ids)):
            among, params = self.dialect.one_of("e.target_id", chunk)
            rows = self.conn.execute(
                f"SELECT {_EDGE_COLUMNS_OF_E}, n.memory_id FROM edges e JOIN nodes n ON n.id = e.source_id "
                f"WHERE {among}",
                params,
            ).fetchall()
            out.extend((_edge(r), r[_EDGE_WIDTH]) for r in rows)
        return out

    def delete_edges(self, edge_ids: Sequence[str]) -> None:
        with self.atomic() as tx:
            tx.executemany(f"DELETE FROM edges WHERE id = {self.dialect.p}", [(e,) for e in edge_ids])

    def objects(self, memory_id: str, object_type: str) -> list[NodeRecord]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = {p} AND object_type = {p} "
            "AND deleted_at IS NULL ORDER BY created_at, id",
            (memory_id, object_type),
        ).fetchall()
        return [self._read(r) for r in rows]

    def memory_nodes(self, memory_id: str) -> Iterator[NodeRecord]:
        cursor = self.conn.execute(
            f"SELECT {_NODE_COLUMNS} FROM nodes WHERE memory_id = {self.dialect.p} AND deleted_at IS NULL "
            "ORDER BY loc",
            (memory_id,),
        )
        for row in cursor:
            yield self._read(row)

    def failed_embeddings(self, memory_id: str) -> list[tuple[str, str, str | None]]:
        rows = self.conn.execute(
            "SELECT n.id, n.loc, e.error FROM node_embeddings e JOIN nodes n ON n.id = e.node_id "
            f"WHERE n.memory_id = {self.dialect.p} AND n.deleted_at IS NULL AND e.status = 'failed' "
            "ORDER BY n.loc",
            (memory_id,),
        ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]


def _edge_values(e: EdgeRecord) -> tuple[Any, ...]:
    return (
        e.id, e.source_id, e.loc, e.name, e.description, e.target_id, e.target_memory_id, e.target_loc,
        e.target_ref, int(e.is_runnable), e.position, e.priority,
        _json(e.condition) if e.condition is not None else None, _json(e.data) if e.data is not None else None,
    )  # fmt: skip


class SqliteGraphStore(GraphSql):
    dialect = SQLITE
    schema = ((EDGE_COMPONENT, sqlite_schema.EDGES),)


class PostgresGraphStore(GraphSql):
    dialect = POSTGRES
    schema = ((EDGE_COMPONENT, pg_schema.EDGES),)
