"""Which engine Hadron's stores run on: ``hadron.db`` in the data directory (the embedded default) or
the PostgreSQL database ``TRIPTYCH_DATABASE_URL`` names (server mode). The services get the stores
through their protocols and never learn which.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from triptych.core.db import Database
from triptych.core.pg import PgDatabase, PortableDatabase
from triptych.hadron import pg_store
from triptych.hadron.abstract_store import AbstractStore, SqliteAbstractStore
from triptych.hadron.action_store import ActionRunStore, SqliteActionRunStore
from triptych.hadron.git_store import GitStore, SqliteGitStore
from triptych.hadron.lock_store import LockStore, PgLockStore, SqliteLockStore
from triptych.hadron.pg_abstract_store import PgAbstractStore
from triptych.hadron.pg_action_store import PgActionRunStore
from triptych.hadron.pg_git_store import PgGitStore
from triptych.hadron.pg_team_store import PgTeamStore
from triptych.hadron.search_store import SqliteSearchStore
from triptych.hadron.store import SqliteGraphStore, SqliteTenancyStore, TenancyStore, open_database
from triptych.hadron.team_store import SqliteTeamStore


@dataclass
class Stores:
    """Every Hadron store of one process, over one database handle (``db``): on PostgreSQL the one
    ``PortableDatabase`` they share, so a service call's writes to several stores are one transaction."""

    db: Database | PortableDatabase
    tenancy: TenancyStore
    # The concrete classes: both engines run them (the search store's PostgreSQL twin is a subclass),
    # and the surface sets their codec (sealing.py).
    graph: SqliteGraphStore
    search: SqliteSearchStore
    team: SqliteTeamStore
    actions: ActionRunStore
    abstracts: AbstractStore
    git: GitStore
    locks: LockStore
    pg: PgDatabase | None = None

    @property
    def engine(self) -> str:
        return "postgresql" if self.pg is not None else "sqlite"

    def close(self) -> None:
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


def _postgres(url: str, dim: int | None, model: str | None) -> Stores:
    pg = PgDatabase(url)
    try:
        db = pg_store.open_database(pg)  # first: the other components' foreign keys point at its tables
        return Stores(
            db,
            SqliteTenancyStore(db),
            SqliteGraphStore(db),
            pg_store.PgSearchStore(db, dim, model),
            PgTeamStore(db),
            PgActionRunStore(db),
            PgAbstractStore(db),
            PgGitStore(db),
            PgLockStore(db),
            pg,
        )
    except BaseException:
        pg.close()
        raise
