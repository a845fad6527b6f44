"""Which engine holds Metergraph's control data: the data directory's SQLite files (embedded, one
machine), or with ``TRIPTYCH_DATABASE_URL`` set the PostgreSQL database's ``metergraph`` schema, shared
by every worker of every machine (decision record 0160). Keys, routes and batch records are the metadata
store's (``metadata_store.py``), on the same database in server mode (``service.py`` opens it there).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metergraph.control_pg import close_control_database, open_control_database
from triptych.metergraph.import_sync_store import (
    ImportSyncStore,
    PostgresImportSyncStore,
    SqliteImportSyncStore,
)
from triptych.metergraph.incident_store import IncidentStore, PostgresIncidentStore, SqliteIncidentStore
from triptych.metergraph.incidents import DB_FILE as INCIDENTS_FILE
from triptych.metergraph.report_store import PostgresReportStore, ReportStore, SqliteReportStore
from triptych.metergraph.workload_store import PostgresWorkloadStore, SqliteWorkloadStore, WorkloadStore

ANALYSIS_FILE = "metergraph-analysis.db"


@contextmanager
def control_database(database_url: str | None) -> Iterator[NativeDatabase | None]:
    """Metergraph's PostgreSQL handle for a command's duration, or None (embedded)."""
    db = open_control_database(database_url) if database_url else None
    try:
        yield db
    finally:
        if db is not None:
            close_control_database(db)


def incident_store(data_dir: Path, pg: NativeDatabase | None) -> IncidentStore:
    """Incidents (and, sharing their database, webhook endpoints and deliveries)."""
    return PostgresIncidentStore(pg) if pg is not None else SqliteIncidentStore(data_dir / INCIDENTS_FILE)


@dataclass
class ControlStores:
    """Metergraph's control stores other than the telemetry store's metadata, on one engine."""

    pg: NativeDatabase | None  # server mode: the database they share, closed last
    incidents: IncidentStore
    reports: ReportStore
    workloads: WorkloadStore
    import_sync: ImportSyncStore

    @classmethod
    def open(cls, data_dir: Path, database_url: str | None, metadata: Database) -> ControlStores:
        """On PostgreSQL when ``database_url`` is set; else in the data directory (workloads and import
        sync in the telemetry store's SQLite metadata file ``metadata``, as before)."""
        if not database_url:
            return cls(
                None,
                SqliteIncidentStore(data_dir / INCIDENTS_FILE),
                SqliteReportStore(data_dir / ANALYSIS_FILE),
                SqliteWorkloadStore(metadata),
                SqliteImportSyncStore(metadata),
            )
        pg = open_control_database(database_url)
        try:
            return cls(
                pg,
                PostgresIncidentStore(pg),
                PostgresReportStore(pg),
                PostgresWorkloadStore(pg),
                PostgresImportSyncStore(pg),
            )
        except BaseException:
            close_control_database(pg)
            raise

    @property
    def engine(self) -> str:
        return "postgres" if self.pg is not None else "sqlite"

    def close(self) -> None:
        """After the services using the stores are closed."""
        self.reports.close()
        self.incidents.close()
        if self.pg is not None:
            close_control_database(self.pg)
