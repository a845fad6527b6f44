"""The one dialect helper of Metergraph's control stores (incidents, webhooks, reports and analysis runs,
workloads, import sync): their SQL is written once, in what SQLite 3.35+ and PostgreSQL share, and the
few places the engines differ ask the store's ``Dialect``.

- ``greatest``: SQLite's two-argument ``MAX(a, b)`` is PostgreSQL's ``GREATEST(a, b)``.
- ``skip_locked``: PostgreSQL's claimers pass over the rows another transaction is claiming (SQLite has
  one writer, and no such clause).
- ``lock``: a lock scoped to one key (a workspace's numbering, one import-sync stream), held to the end
  of the write transaction. SQLite needs none (``BEGIN IMMEDIATE`` already makes one writer at a time);
  on PostgreSQL it is a transaction advisory lock, so only writers of the same key wait for each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Connection(Protocol):
    """What the stores need of a connection: ``sqlite3.Connection`` and ``core.pg.PortableConnection``."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...
    def executemany(self, sql: str, parameters: Any, /) -> Any: ...


@dataclass(frozen=True)
class Dialect:
    name: str
    greatest_function: str
    scoped_locks: bool

    def greatest(self, *expressions: str) -> str:
        return f"{self.greatest_function}({', '.join(expressions)})"

    def skip_locked(self, alias: str) -> str:
        """The tail of a claiming SELECT: rows another transaction is claiming are left to it."""
        return f" FOR UPDATE OF {alias} SKIP LOCKED" if self.scoped_locks else ""

    def lock(self, conn: Connection, scope: str, key: str) -> None:
        """Inside a write transaction: hold the lock of ``key`` in ``scope`` until it ends."""
        if self.scoped_locks:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(?), hashtext(?))", (scope, key))


SQLITE = Dialect("sqlite", "MAX", scoped_locks=False)
POSTGRES = Dialect("postgres", "GREATEST", scoped_locks=True)


def limit_clause(limit: int) -> str:
    """``LIMIT ?`` for a bound, nothing for ``-1`` (all rows: PostgreSQL refuses a negative limit)."""
    return " LIMIT ?" if limit >= 0 else ""


def limit_params(limit: int) -> list[int]:
    return [limit] if limit >= 0 else []
