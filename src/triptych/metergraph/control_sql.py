"""The one dialect helper of Metergraph's stores on SQLite and PostgreSQL: the control stores (incidents,
webhooks, reports and analysis runs, workloads, import sync) and the metadata store (keys, routes, batch
records, import identities). Their SQL is written once, in what SQLite 3.35+ and PostgreSQL share, and each
engine's store sends it as written (``sqlite3``; psycopg through ``core.pg.NativeDatabase``): the spellings
that differ come from the store's ``Dialect``. (The call stores, on SQLite and ClickHouse, build their
WHERE through ``call_filters.py``'s dialect instead: their values are typed ClickHouse parameters.)

``core.dialect.Dialect`` gives the placeholders (``p``, ``marks``, ``named``) and lists of values
(``one_of``: one array parameter on PostgreSQL); Metergraph's statements add:

- ``greatest``: SQLite's two-argument ``MAX(a, b)`` is PostgreSQL's ``GREATEST(a, b)``.
- ``skip_locked``: PostgreSQL's claimers pass over the rows another transaction is claiming (SQLite has
  one writer, and no such clause).
- ``lock``: a lock scoped to one key (a workspace's numbering, one import-sync stream), held to the end
  of the write transaction. SQLite needs none (``BEGIN IMMEDIATE`` already makes one writer at a time);
  on PostgreSQL it is a transaction advisory lock, so only writers of the same key wait for each other.
- ``limit``: no clause for ``-1`` (all rows: PostgreSQL refuses a negative limit).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol

from triptych.core import dialect as core


class Connection(Protocol):
    """What the stores need of a connection: ``sqlite3.Connection`` and ``core.pg.NativeConnection``."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...
    def executemany(self, sql: str, parameters: Any, /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Dialect(core.Dialect):
    greatest_function: str
    scoped_locks: bool

    @classmethod
    def of(cls, base: core.Dialect, greatest_function: str, scoped_locks: bool) -> Dialect:
        """``base``'s spellings with Metergraph's."""
        shared = {f.name: getattr(base, f.name) for f in fields(base)}
        return cls(**shared, greatest_function=greatest_function, scoped_locks=scoped_locks)

    def greatest(self, *expressions: str) -> str:
        return f"{self.greatest_function}({', '.join(expressions)})"

    def skip_locked(self, alias: str) -> str:
        """The tail of a claiming SELECT: rows another transaction is claiming are left to it."""
        return f" FOR UPDATE OF {alias} SKIP LOCKED" if self.scoped_locks else ""

    def lock(self, conn: Connection, scope: str, key: str) -> None:
        """Inside a write transaction: hold the lock of ``key`` in ``scope`` until it ends."""
        if self.scoped_locks:
            conn.execute(
                f"SELECT pg_advisory_xact_lock(hashtext({self.p}), hashtext({self.p}))", (scope, key)
            )

    def limit(self, limit: int) -> tuple[str, list[int]]:
        """``LIMIT`` of a bound and its parameter, or nothing for ``-1`` (all rows)."""
        return (f" LIMIT {self.p}", [limit]) if limit >= 0 else ("", [])


SQLITE = Dialect.of(core.SQLITE, greatest_function="MAX", scoped_locks=False)
POSTGRES = Dialect.of(core.POSTGRES, greatest_function="GREATEST", scoped_locks=True)
