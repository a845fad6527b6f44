"""What the services need from a telemetry engine: the calls, their retained content and rollups.

``sqlite_call_store.SqliteCallStore`` (embedded default) and ``clickhouse_call_store.ClickHouseCallStore``
(server mode) implement it, and ``tests/metergraph/store_contract/`` proves both give the same answers.
Services read calls only through these methods; a new read over calls is a new method here, written once
in the contract suite and implemented by both engines. Bookkeeping (keys, routes, batch records) is the
``metadata_store.MetadataStore``'s; a call store records each ingest batch in the metadata store it was
opened with, in the same transaction where the two share a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from triptych.metergraph.call_model import AggRow, CallBatch, CallFilter, Content
from triptych.metergraph.import_events import ImportKey


class CallStore(Protocol):
    # Days calls are kept (``MetergraphSettings.retention_days``); None: kept for good.
    retention_days: int | None

    def close(self) -> None: ...
    def purge_expired(self, now: datetime) -> int:
        """Drop what the retention window no longer covers; how many calls went (0 where the engine
        expires rows itself)."""
        ...

    def insert_batch(
        self, workspace: str, source: str, calls: CallBatch, contents: Sequence[Content | None],
        batch: dict[str, Any], now_iso: str, import_keys: Sequence[ImportKey | None] | None = None,
    ) -> None:  # fmt: skip
        """Store the calls (rows whose import identity is already stored are left out) with their
        content, and the batch's record (``MetadataStore.record_batch``): all or nothing on one engine,
        the record after the calls across two."""
        ...

    def rebuild_rollups(self) -> None: ...
    def aggregate_rollups(
        self, table: str, f: CallFilter, bucket_from: int, bucket_to: int, dims: Sequence[str],
        bucket_per_day: int,
    ) -> dict[tuple[Any, ...], AggRow]:  # fmt: skip
        """Rollup rows of ``table`` in buckets [bucket_from, bucket_to) grouped by ``dims``."""
        ...

    def aggregate_raw(
        self, f: CallFilter, dims: Sequence[str], meta_key: str | None
    ) -> dict[tuple[Any, ...], AggRow]:
        """Calls grouped by ``dims`` and, when given, one metadata key's (class, value): the class is
        'v' (an eligible string), 'i' (present, not eligible) or 'm' (missing)."""
        ...

    def trace_page(
        self, f: CallFilter, trace_filter_envs: Sequence[str] | None, cursor: tuple[int, int] | None,
        limit: int,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Trace summaries newest first, each with its ``position`` (newest matching call), after
        ``cursor``; a trace with a span outside ``trace_filter_envs`` is left out."""
        ...

    def trace_summaries(self, f: CallFilter, keys: Sequence[str]) -> list[dict[str, Any]]: ...
    def sample_calls(self, f: CallFilter, slices: Sequence[tuple[int, int]]) -> list[str]: ...
    def trace_spans(self, workspace: str, trace_key: str, limit: int) -> list[dict[str, Any]]: ...
    def route_calls(self, f: CallFilter) -> dict[str, dict[str, Any]]:
        """Per route with matching calls: ``{"route", "calls", "replay_eligible_calls", "last_ms"}``."""
        ...

    def count_calls(self, workspace: str) -> int: ...
    def raw_calls(self, workspace: str) -> list[dict[str, Any]]:
        """Every stored call row of a workspace in id order (tests and operators; never an agent door)."""
        ...

    def raw_content(self, workspace: str) -> list[dict[str, Any]]: ...
    # Workload classification and analysis (content-free but for ``retained_calls``).
    def workload_features(self, f: CallFilter) -> list[dict[str, Any]]: ...
    def replay_eligible_by_route(self, f: CallFilter) -> dict[str, int]: ...
    def retained_calls(self, f: CallFilter, limit: int) -> list[dict[str, Any]]: ...
