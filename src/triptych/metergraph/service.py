"""The Metergraph services over one store, built from settings: what every door (MCP, REST, CLI) uses."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from triptych.core.db import Database
from triptych.core.embed import Embedder
from triptych.metergraph.analysis import AnalysisService
from triptych.metergraph.analysis_replay import ProviderReplayer
from triptych.metergraph.analysis_runner import AnalysisRunner
from triptych.metergraph.analysis_sources import Replayer, StoreWorkloads, WorkloadSource
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.columns import ColumnProjection
from triptych.metergraph.control_stores import ANALYSIS_FILE, ControlStores
from triptych.metergraph.detectors import IncidentSettings, load_incident_settings
from triptych.metergraph.import_sync import ImportSyncService
from triptych.metergraph.incidents import IncidentService
from triptych.metergraph.ingest import IngestService
from triptych.metergraph.keys import KeyService
from triptych.metergraph.links import AppLinks, public_base
from triptych.metergraph.metadata_store import MetadataStore, SqliteMetadataStore
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.providers import Providers, ProviderSettings
from triptych.metergraph.ratelimit import RateLimiter
from triptych.metergraph.replay import ReplayService
from triptych.metergraph.report_store import ReportStore
from triptych.metergraph.reports import ReportService
from triptych.metergraph.settings import MetergraphSettings, load_metergraph_settings
from triptych.metergraph.sqlite_call_store import SqliteCallStore
from triptych.metergraph.sqlite_schema import open_database
from triptych.metergraph.tools import MetergraphTool, build_tools
from triptych.metergraph.traces import TraceService
from triptych.metergraph.usage import UsageService
from triptych.metergraph.webhooks import WebhookService, WebhookSettings, load_webhook_settings
from triptych.metergraph.workloads import WorkloadService
from triptych.metergraph.workspace import WorkspaceService

DB_FILE = "metergraph.db"
COLUMNS_DIR = "metergraph.columns"
ANALYSIS_DB_FILE = ANALYSIS_FILE


def utc_now() -> datetime:
    return datetime.now(UTC)


class ClassificationRunDocuments:
    """Classification runs as the run tools list them (``AnalysisService.classification_runs``)."""

    def __init__(self, workloads: WorkloadService) -> None:
        self.workloads = workloads

    def runs(self, workspace: str, limit: int) -> list[dict[str, Any]]:
        return [self.workloads.run_document(r) for r in self.workloads.store.runs(workspace, limit)]

    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None:
        row = self.workloads.store.run(workspace, run_id)
        return None if row is None else self.workloads.run_document(row)


@dataclass
class Metergraph:
    settings: MetergraphSettings
    calls: CallStore
    metadata: MetadataStore
    keys: KeyService
    ingest: IngestService
    workspace: WorkspaceService
    usage: UsageService
    traces: TraceService
    tools: list[MetergraphTool]
    columns: ColumnProjection | None  # the embedded engine's metadata projection
    report_store: ReportStore
    reports: ReportService
    analysis: AnalysisService
    pricer: Pricer
    providers: Providers
    replay: ReplayService
    workloads: WorkloadService
    incidents: IncidentService
    links: AppLinks
    import_sync: ImportSyncService
    webhooks: WebhookService
    control: ControlStores
    # The data directory's metergraph file (the embedded engine's calls; the metadata, workloads and
    # import sync unless they are on PostgreSQL), closed once its background threads are stopped.
    sqlite: Database

    @classmethod
    def open(
        cls,
        data_dir: Path,
        settings: MetergraphSettings | None = None,
        clock: Callable[[], datetime] = utc_now,
        provider_settings: ProviderSettings | None = None,
        replayer: Replayer | None = None,
        embedder: Callable[[], Embedder | None] = lambda: None,
        workload_source: WorkloadSource | None = None,
        incident_settings: IncidentSettings | None = None,
        links: AppLinks | None = None,
        webhook_settings: WebhookSettings | None = None,
        database_url: str | None = None,
    ) -> Metergraph:
        """``replayer`` replaces the provider replay in analysis runs; ``embedder`` (called when a run
        scores) gives the semantic-similarity check its model; ``workload_source`` defaults to the saved
        classification, else one workload per route. With ``database_url`` (``TRIPTYCH_DATABASE_URL``)
        keys, sessions, routes and batch records and the control data (incidents, webhooks, reports and
        runs, workloads, import sync) are in that PostgreSQL database, shared by every worker of every
        machine; else in the data directory."""
        settings = settings or load_metergraph_settings()
        # The server passes its host and port (surface.py); elsewhere only MG_PUBLIC_URL makes links.
        links = links or AppLinks(public_base(settings.public_url, "", 0))
        db = open_database(data_dir / DB_FILE)
        control = ControlStores.open(data_dir, database_url, db)
        metadata: MetadataStore
        if control.pg is not None:
            from triptych.metergraph.postgres_metadata_store import PostgresMetadataStore

            # Keys, routes and batch records in the control stores' schema of the same database.
            metadata = PostgresMetadataStore(control.pg)
        else:
            metadata = SqliteMetadataStore(db)
        store: CallStore
        columns: ColumnProjection | None = None
        if settings.clickhouse_url:
            from triptych.metergraph.clickhouse_call_store import ClickHouseCallStore

            # Calls and rollups in ClickHouse.
            shared = control.pg.pg if control.pg is not None else None  # the schema lock across machines
            store = ClickHouseCallStore(
                settings.clickhouse_url, metadata, data_dir, settings.retention_days, shared
            )
        else:
            sqlite = SqliteCallStore(db, metadata, settings.retention_days)
            sqlite.folder.pending_rows = settings.rollup_fold_rows
            sqlite.folder.idle_s = settings.rollup_fold_idle_ms / 1000
            # Metadata aggregates scan a columnar projection of the calls, loaded on first use; only one
            # process at a time maintains it (the others scan SQL).
            columns = ColumnProjection(data_dir / COLUMNS_DIR, sqlite)
            sqlite.columns = columns
            store = sqlite
        pricer = Pricer()
        providers = Providers(provider_settings)
        replay = ReplayService(store, metadata, pricer, providers, clock)
        # The calls workloads are classified from are read through the telemetry engine's store.
        workloads = WorkloadService(control.workloads, store, clock, links.analysis)
        # Replay, and analysis runs (which replay), need a configured provider.
        workspace = WorkspaceService(
            store,
            metadata,
            clock,
            lambda name: (
                (name == "metergraph_replay_trace" and not replay.available)
                or (name == "metergraph_start_analysis" and not analysis.available())
            ),
        )
        usage = UsageService(store, clock)
        traces = TraceService(store, metadata, clock, workloads.match, workloads.classifications)
        incidents = IncidentService(
            store, control.incidents, incident_settings or load_incident_settings(), clock, metadata
        )
        # Incident webhooks: endpoints and the outbox live in the incidents' database, written by its saves.
        webhooks = WebhookService(
            incidents.store.db, data_dir, webhook_settings or load_webhook_settings(), clock
        )
        incidents.store.outbox = webhooks.outbox
        incidents.store.outbox_committed = webhooks.committed
        limiter = RateLimiter(settings.agent_rate_per_minute)
        report_store = control.reports
        reports = ReportService(report_store, clock, links)
        runner = AnalysisRunner(
            workload_source or StoreWorkloads(store, metadata, workloads),
            replayer or ProviderReplayer(replay),
            pricer,
            embedder,
        )
        analysis = AnalysisService(
            report_store, reports, runner, clock, links,
            available=lambda: replayer is not None or replay.available,
            classification_runs=ClassificationRunDocuments(workloads),
        )  # fmt: skip
        tools = build_tools(workspace, usage, traces, replay, workloads, reports, analysis, incidents)
        return cls(
            settings,
            store,
            metadata,
            KeyService(metadata, settings),
            IngestService(
                store,
                metadata,
                pricer,
                settings.max_rows,
                clock=lambda: clock().timestamp(),
                on_batch=incidents.note_batch,
                on_refused=incidents.note_failure,
            ),
            workspace,
            usage,
            traces,
            [replace(t, handler=limiter.wrap(t.handler)) for t in tools],
            columns,
            report_store,
            reports,
            analysis,
            pricer,
            providers,
            replay,
            workloads,
            incidents,
            links,
            # Import-sync streams and leases are in one place every worker (and, on PostgreSQL, every
            # machine) shares, so all see one holder per stream.
            ImportSyncService(
                control.import_sync,
                clock=lambda: clock().timestamp(),
                lease_seconds=settings.import_lease_seconds,
            ),
            webhooks,
            control,
            db,
        )

    def close(self) -> list[threading.Thread]:
        """Stop the background work, then close the stores (decision 0420). The columns' catch-up and the
        rollup fold read the metergraph file: each is waited for at most ``STOP_WAIT``, and one still at
        work keeps its connection (decision 0450). Returns those threads, normally none."""
        self.analysis.close()  # first: a running analysis reads through both stores
        # First too: the catch-up reads through the calls store.
        busy = self.columns.close() if self.columns is not None else []
        self.webhooks.close()  # before the incidents' file it reads
        self.incidents.close()  # so does the detectors' ticker
        self.providers.close()
        if isinstance(self.calls, SqliteCallStore):
            busy += self.calls.stop()  # the rollup fold writes through the file
        # The file's first close: the stores sharing it close it again, and every close leaves the
        # connections of the threads still at work open (``Database.close``).
        self.sqlite.close(spare=busy)
        self.calls.close()
        self.metadata.close()
        self.control.close()  # after the metadata store, which may use its database
        return busy
