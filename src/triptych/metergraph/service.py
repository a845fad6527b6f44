"""The Metergraph services over one store, built from settings: what every door (MCP, REST, CLI) uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from triptych.metergraph.columns import ColumnProjection
from triptych.metergraph.ingest import IngestService
from triptych.metergraph.keys import KeyService
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.ratelimit import RateLimiter
from triptych.metergraph.settings import MetergraphSettings, load_metergraph_settings
from triptych.metergraph.store import SqliteTelemetryStore, TelemetryStore
from triptych.metergraph.tools import MetergraphTool, build_tools
from triptych.metergraph.traces import TraceService
from triptych.metergraph.usage import UsageService
from triptych.metergraph.workspace import WorkspaceService

DB_FILE = "metergraph.db"
COLUMNS_DIR = "metergraph.columns"


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Metergraph:
    settings: MetergraphSettings
    store: TelemetryStore
    keys: KeyService
    ingest: IngestService
    workspace: WorkspaceService
    usage: UsageService
    traces: TraceService
    tools: list[MetergraphTool]
    columns: ColumnProjection | None  # the embedded engine's metadata projection

    @classmethod
    def open(
        cls,
        data_dir: Path,
        settings: MetergraphSettings | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> Metergraph:
        settings = settings or load_metergraph_settings()
        sqlite = SqliteTelemetryStore(data_dir / DB_FILE)
        store: TelemetryStore = sqlite
        columns: ColumnProjection | None = None
        if settings.clickhouse_url:
            from triptych.metergraph.clickhouse_store import ClickHouseTelemetryStore

            # Calls and rollups in ClickHouse; keys, sessions, routes and batch records stay in SQLite.
            store = ClickHouseTelemetryStore(
                settings.clickhouse_url, sqlite, settings.clickhouse_retention_days
            )
        else:
            # Metadata aggregates scan a columnar projection of the calls, loaded on first use; only one
            # process at a time maintains it (the others scan SQL).
            columns = ColumnProjection(data_dir / COLUMNS_DIR, sqlite)
            sqlite.columns = columns
        pricer = Pricer()
        workspace = WorkspaceService(store, clock)
        usage = UsageService(store, clock)
        traces = TraceService(store, clock)
        limiter = RateLimiter(settings.agent_rate_per_minute)
        return cls(
            settings,
            store,
            KeyService(store, settings),
            IngestService(store, pricer, settings.max_rows, clock=lambda: clock().timestamp()),
            workspace,
            usage,
            traces,
            [replace(t, handler=limiter.wrap(t.handler)) for t in build_tools(workspace, usage, traces)],
            columns,
        )

    def close(self) -> None:
        if self.columns is not None:
            self.columns.close()  # first: its catch-up thread reads through the store
        self.store.close()
