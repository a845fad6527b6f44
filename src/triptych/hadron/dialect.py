"""What Hadron's SQL says differently on each engine, once, and the base every store class builds on.

Each store aggregate (tenancy, graph, search, team, actions, abstracts, git, locks) writes its SQL once, in
an engine-neutral class (``GraphSql``, ``TeamSql``...) in the SQL SQLite 3.35+ and PostgreSQL share; the
class named after each engine (``SqliteGraphStore``, ``PostgresGraphStore``) subclasses it, never the other
engine's class, and adds only what is truly that engine's: its handle, its DDL (``sqlite_schema`` and
``pg_schema``) and the operations one engine does its own way (SQLite's registered SQL functions,
PostgreSQL's ``NOTIFY``). The few fragments the shared SQL spells per engine come from its ``Dialect``,
the way ``metergraph/call_filters.py`` builds one WHERE for two engines.

Placeholders are ``?`` on both: on PostgreSQL the ``core.pg.PortableDatabase`` handle sends them as
server-side parameters.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

from triptych.core.db import Database
from triptych.core.pg import PortableConnection, PortableDatabase


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    # What breaks a tie of timestamps in the order rows were inserted: SQLite's implicit rowid, an
    # identity column ``n`` on PostgreSQL (in commit order among the writes of one memory, which queue).
    insertion_order: str
    # Whether the engine takes SQLite's ``INDEXED BY`` planner hint.
    index_hints: bool

    def indexed(self, table: str, index: str) -> str:
        """``table`` read through ``index`` where the engine's planner needs telling."""
        return f"{table} INDEXED BY {index}" if self.index_hints else table


SQLITE = Dialect("sqlite", insertion_order="rowid", index_hints=True)
POSTGRES = Dialect("postgresql", insertion_order="n", index_hints=False)


class EngineStore:
    """A store over one database handle: a ``core.db.Database`` (SQLite) or the ``PortableDatabase`` every
    Hadron store of a server-mode process shares, so one service call's writes are one transaction."""

    dialect: ClassVar[Dialect]
    # The engine's migration components this store owns, applied in order when it opens: (name, scripts).
    schema: ClassVar[tuple[tuple[str, list[str]], ...]] = ()

    def __init__(self, db: Database | PortableDatabase) -> None:
        self.db = db
        for component, scripts in self.schema:
            db.migrate(component, scripts)

    @property
    def conn(self) -> sqlite3.Connection | PortableConnection:
        return self.db.conn

    @contextmanager
    def atomic(self, *tenants: str) -> Iterator[sqlite3.Connection | PortableConnection]:
        """One transaction; nested calls join the outer one. ``tenants``: the write keys (``write_keys``)
        of what the transaction writes: on PostgreSQL it then waits only for writes to those tenants
        (``PortableDatabase.lock_statement``, docs/decisions/0171 and 0180); without any, for every
        Hadron write (a store-wide write); ``write_keys.ROWS`` alone takes no tenant's key (a single-row
        write). A nested call naming a tenant its outer transaction does not hold is a programming error
        (the outer one names every tenant up front, taken in one fixed order: one taken later could
        deadlock). SQLite has one writer either way."""
        conn = self.conn
        names = tuple(t for t in tenants if t)  # ``write_keys.ROWS`` names no tenant
        if conn.in_transaction:
            if names and isinstance(self.db, PortableDatabase):
                held = self.db.held_tenants()
                missing = sorted(set(names) - set(held)) if held is not None else []
                if missing:
                    raise RuntimeError(
                        f"write to {missing} inside a transaction that locked only {list(held or ())}"
                    )
            yield conn
            return
        if isinstance(self.db, PortableDatabase):
            with self.db.transaction(names if tenants else None) as tx:
                yield tx
            return
        with self.db.transaction() as tx:
            yield tx
