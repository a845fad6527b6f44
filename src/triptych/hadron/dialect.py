"""What Hadron's SQL says differently on each engine, once, and the base every store class builds on.

Each store aggregate (tenancy, graph, search, team, actions, abstracts, git, locks) writes its SQL once, in
an engine-neutral class (``GraphSql``, ``TeamSql``...) in the SQL SQLite 3.35+ and PostgreSQL share; the
class named after each engine (``SqliteGraphStore``, ``PostgresGraphStore``) subclasses it, never the other
engine's class, and adds only what is truly that engine's: its handle, its DDL (``sqlite_schema`` and
``pg_schema``) and the operations one engine does its own way (SQLite's registered SQL functions,
PostgreSQL's ``NOTIFY``). The few fragments the shared SQL spells per engine come from its ``Dialect``,
the way ``metergraph/call_filters.py`` builds one WHERE for two engines.

``core.dialect.Dialect`` gives the placeholders (``p``, ``marks``: ``?`` on SQLite, ``%s`` on PostgreSQL)
and lists of values (``one_of``: ``IN (?, ...)`` on SQLite, one array parameter ``= ANY(%s)`` on
PostgreSQL); each engine's handle sends the statements as written (``sqlite3``; psycopg through
``core.pg.NativeDatabase``, docs/decisions/0290). Hadron's statements add:

- ``insertion_order``: what breaks a tie of timestamps in insertion order;
- ``indexed``: SQLite's ``INDEXED BY`` planner hint, nothing on PostgreSQL.

A literal ``%`` in a statement that takes parameters is ``%%`` on PostgreSQL (psycopg's rule); Hadron's
statements hold none (a LIKE pattern is a parameter).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import ClassVar

from triptych.core import dialect as core
from triptych.core.db import Database
from triptych.core.pg import NativeConnection, NativeDatabase


@dataclass(frozen=True, slots=True)
class Dialect(core.Dialect):
    # What breaks a tie of timestamps in the order rows were inserted: SQLite's implicit rowid, an
    # identity column ``n`` on PostgreSQL (in commit order among the writes of one memory, which queue).
    insertion_order: str
    # Whether the engine takes SQLite's ``INDEXED BY`` planner hint.
    index_hints: bool

    @classmethod
    def of(cls, base: core.Dialect, insertion_order: str, index_hints: bool) -> Dialect:
        """``base``'s spellings with Hadron's."""
        shared = {f.name: getattr(base, f.name) for f in fields(base)}
        return cls(**shared, insertion_order=insertion_order, index_hints=index_hints)

    def indexed(self, table: str, index: str) -> str:
        """``table`` read through ``index`` where the engine's planner needs telling."""
        return f"{table} INDEXED BY {index}" if self.index_hints else table


SQLITE = Dialect.of(core.SQLITE, insertion_order="rowid", index_hints=True)
POSTGRES = Dialect.of(core.POSTGRES, insertion_order="n", index_hints=False)


def dialect_of(db: Database | NativeDatabase) -> Dialect:
    """The dialect of the engine ``db`` runs on (for SQL outside a store class: ``sealing``)."""
    return POSTGRES if isinstance(db, NativeDatabase) else SQLITE


class EngineStore:
    """A store over one database handle: a ``core.db.Database`` (SQLite) or the ``NativeDatabase`` every
    Hadron store of a server-mode process shares, so one service call's writes are one transaction."""

    dialect: ClassVar[Dialect]
    # The engine's migration components this store owns, applied in order when it opens: (name, scripts).
    schema: ClassVar[tuple[tuple[str, list[str]], ...]] = ()

    def __init__(self, db: Database | NativeDatabase) -> None:
        self.db = db
        for component, scripts in self.schema:
            db.migrate(component, scripts)

    @property
    def conn(self) -> sqlite3.Connection | NativeConnection:
        return self.db.conn

    @contextmanager
    def atomic(self, *tenants: str) -> Iterator[sqlite3.Connection | NativeConnection]:
        """One transaction; nested calls join the outer one. ``tenants``: the write keys (``write_keys``)
        of what the transaction writes: on PostgreSQL it then waits only for writes to those tenants
        (``NativeDatabase.lock_statement``, docs/decisions/0171 and 0180); without any, for every
        Hadron write (a store-wide write); ``write_keys.ROWS`` alone takes no tenant's key (a single-row
        write). A nested call naming a tenant its outer transaction does not hold is a programming error
        (the outer one names every tenant up front, taken in one fixed order: one taken later could
        deadlock). SQLite has one writer either way."""
        conn = self.conn
        names = tuple(t for t in tenants if t)  # ``write_keys.ROWS`` names no tenant
        if conn.in_transaction:
            if names and isinstance(self.db, NativeDatabase):
                held = self.db.held_tenants()
                missing = sorted(set(names) - set(held)) if held is not None else []
                if missing:
                    raise RuntimeError(
                        f"write to {missing} inside a transaction that locked only {list(held or ())}"
                    )
            yield conn
            return
        if isinstance(self.db, NativeDatabase):
            with self.db.transaction(names if tenants else None) as tx:
                yield tx
            return
        with self.db.transaction() as tx:
            yield tx
