"""Which engine Hadron's stores run on: ``hadron.db`` in the data directory (the embedded default) or
the PostgreSQL database ``TRIPTYCH_DATABASE_URL`` names (server mode). The services get the stores
through their protocols and never learn which.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triptych.core.db import Database
from triptych.core.errors import StorageUnavailable
from triptych.core.pg import PgDatabase, PortableDatabase, redacted
from triptych.hadron import pg_store
from triptych.hadron.abstract_store import AbstractStore, SqliteAbstractStore
from triptych.hadron.action_store import ActionRunStore, SqliteActionRunStore
from triptych.hadron.git_store import GitStore, SqliteGitStore
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
    )


# The team, action-run, abstract and git stores' PostgreSQL twins: (module, class) under triptych.hadron.
TWINS = {
    "team": ("pg_team_store", "PgTeamStore"),
    "actions": ("pg_action_store", "PgActionRunStore"),
    "abstracts": ("pg_abstract_store", "PgAbstractStore"),
    "git": ("pg_git_store", "PgGitStore"),
}


def _twin(url: str, part: str) -> Any:
    module, name = TWINS[part]
    try:
        return getattr(importlib.import_module(f"triptych.hadron.{module}"), name)
    except (ImportError, AttributeError):
        raise StorageUnavailable(
            f"Hadron cannot run on the PostgreSQL database {redacted(url)}: this build has no PostgreSQL "
            f"store for its {part} tables (triptych.hadron.{module}.{name})",
            hint="Unset TRIPTYCH_DATABASE_URL to keep Hadron in the data directory, or install a build "
            "whose Hadron runs on PostgreSQL",
            details={"reason": "engine_unsupported", "missing": f"{module}.{name}"},
        ) from None


def _postgres(url: str, dim: int | None, model: str | None) -> Stores:
    pg = PgDatabase(url)
    try:
        db = pg_store.open_database(pg)  # first: the other components' foreign keys point at its tables
        twins = {part: _twin(url, part)(db) for part in TWINS}
        return Stores(
            db,
            SqliteTenancyStore(db),
            SqliteGraphStore(db),
            pg_store.PgSearchStore(db, dim, model),
            twins["team"],
            twins["actions"],
            twins["abstracts"],
            twins["git"],
            pg,
        )
    except BaseException:
        pg.close()
        raise
