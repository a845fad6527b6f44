"""Which engine Hadron's stores run on: ``hadron.db`` in the data directory (the embedded default) or
the PostgreSQL database ``TRIPTYCH_DATABASE_URL`` names (server mode). The services get the stores
through their protocols and never learn which.

Each store protocol has one class per engine (``SqliteGraphStore``, ``PostgresGraphStore``...), both
subclasses of the aggregate's engine-neutral SQL (``GraphSql``...; ``dialect.py``), never of each other.

**The write lock lives here, and only here.** On PostgreSQL every Hadron write transaction first takes
the advisory lock ``WRITE_LOCK`` (``NativeDatabase(write_lock=...)``, opened once in ``_open_postgres``),
at one of two levels (``NativeDatabase.lock_statement``, docs/decisions/0171 and 0180): a write holds the
store's key shared and the key of each tenant it touches (``write_keys``: a memory, an App's team, a root,
an organization's members, an owner's scopes), all taken in one statement in one fixed order, so writes
to different tenants run at once and two to one tenant queue; a single-row write (``write_keys.ROWS``)
holds the store's key shared only; sealing and key rotation, which span every encrypted memory, hold it
exclusively. What relies on it: each memory's entries in ``node_text_changes`` are numbered in its commit
order, so a worker whose BM25 has read a memory's entries up to N has seen every change of that memory
before N (``NodeKeywords`` follows each memory by its own last entry, never the log's global head); and
the stores' read-then-write steps (a memory's vector generation, a name free in an App, a lock's holder)
see no concurrent writer of what they read. A Channel's ``seq`` is taken under its host memory's key and
its row's lock, so a Channel's messages commit in seq order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase, PgDatabase
from triptych.hadron import pg_schema
from triptych.hadron.abstract_store import AbstractStore, PostgresAbstractStore, SqliteAbstractStore
from triptych.hadron.action_store import ActionRunStore, PostgresActionRunStore, SqliteActionRunStore
from triptych.hadron.git_store import GitStore, PostgresGitStore, SqliteGitStore
from triptych.hadron.graph_store import GraphSql, PostgresGraphStore, SqliteGraphStore
from triptych.hadron.lock_store import LockStore, PostgresLockStore, SqliteLockStore
from triptych.hadron.search_store import PostgresSearchStore, SearchSql, SqliteSearchStore
from triptych.hadron.store import TenancyStore, open_database
from triptych.hadron.team_store import PostgresTeamStore, SqliteTeamStore, TeamSql
from triptych.hadron.tenancy_store import PostgresTenancyStore, SqliteTenancyStore

# PostgreSQL's migration component of the tenancy, graph, search and selection tables (SQLite's: "main").
PG_COMPONENT = "hadron"
# The advisory lock every Hadron write transaction takes: shared with the keys of the tenants it writes
# (``write_keys``), exclusively for the few writes that span the store (sealing, key rotation).
WRITE_LOCK = "hadron"


@dataclass
class Stores:
    """Every Hadron store of one process, over one database handle (``db``): on PostgreSQL the one
    ``NativeDatabase`` they share, so a service call's writes to several stores are one transaction."""

    db: Database | NativeDatabase
    tenancy: TenancyStore
    # The aggregates' SQL classes: the surface sets their codec (sealing.py) whichever engine runs them.
    graph: GraphSql
    search: SearchSql
    team: TeamSql
    actions: ActionRunStore
    abstracts: AbstractStore
    git: GitStore
    locks: LockStore
    pg: PgDatabase | None = None

    @property
    def engine(self) -> str:
        return "postgresql" if self.pg is not None else "sqlite"

    def close(self) -> None:
        # The search index's graph builds first (bounded): a build left running would add to a usearch
        # graph, and read numpy buffers, of an index already gone (decision 0420).
        busy = self.search.stop()
        if isinstance(self.db, Database):
            self.db.close(spare=busy)  # a thread still inside a query keeps its connection (0390)
        else:
            self.db.close()
        if self.pg is not None:
            self.pg.close()


def open_stores(path: Path, database_url: str | None, dim: int | None, model: str | None) -> Stores:
    """The stores over ``path`` (``hadron.db``), or over ``database_url`` when it is set."""
    if database_url:
        return _postgres(database_url, dim, model)
    db = open_database(path)
    return Stores(
        db,
        SqliteTenancyStore(db),
        SqliteGraphStore(db),
        SqliteSearchStore(db, dim, model),
        SqliteTeamStore(db),
        SqliteActionRunStore(db),
        SqliteAbstractStore(db),
        SqliteGitStore(db),
        SqliteLockStore(db),
    )


def _open_postgres(pg: PgDatabase) -> NativeDatabase:
    """Hadron's handle on ``pg``, migrated: one per process, shared by every Hadron store so that the
    writes of one service call (graph, team, search) join one transaction, each under ``WRITE_LOCK``."""
    db = NativeDatabase(pg, write_lock=WRITE_LOCK)
    db.migrate(PG_COMPONENT, pg_schema.HADRON)
    return db


def _postgres(url: str, dim: int | None, model: str | None) -> Stores:
    pg = PgDatabase(url)
    try:
        db = _open_postgres(pg)  # first: the other components' foreign keys point at its tables
        return Stores(
            db,
            PostgresTenancyStore(db),
            PostgresGraphStore(db),
            PostgresSearchStore(db, dim, model),
            PostgresTeamStore(db),
            PostgresActionRunStore(db),
            PostgresAbstractStore(db),
            PostgresGitStore(db),
            PostgresLockStore(db),
            pg,
        )
    except BaseException:
        pg.close()
        raise
