"""``metronix_sync``: Triptych as an MCP client of registered sources, their resources ingested as documents.

Each resource becomes the document ``mcp:<source>:<uri>``. Change detection is the document's content
hash: unchanged resources are skipped, changed ones replaced atomically, vanished ones removed, and
``force_full`` re-ingests everything. A source that cannot be reached, times out or answers garbage
fails alone, with its error in ``details``; nothing already ingested from it is touched.
"""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp import Client

from triptych.core.auth import Principal
from triptych.core.mcp_sources import Source, connect, load_sources
from triptych.metronix.access import require_write
from triptych.metronix.errors import InvalidParams
from triptych.metronix.knowledge import KnowledgeService
from triptych.metronix.store import utcnow

log = logging.getLogger(__name__)

MAX_RESOURCES = 100_000
READS_IN_FLIGHT = 8


@dataclass
class SourceReport:
    source: str
    transport: str
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: int = 0
    error: str | None = None


def label_for(source: str, uri: str) -> str:
    return f"mcp:{source}:{uri}"


def _text_of(result: types.ReadResourceResult, mime: str | None) -> str:
    parts: list[str] = []
    for content in result.contents:
        if isinstance(content, types.TextResourceContents):
            parts.append(content.text)
        elif isinstance(content, types.BlobResourceContents):
            kind = content.mime_type or mime or ""
            if not kind.startswith("text/") and kind not in ("application/json", "application/xml"):
                raise ValueError(f"binary resource ({kind or 'unknown type'}) has no text to index")
            parts.append(base64.b64decode(content.blob).decode("utf-8", errors="replace"))
    return "\n\n".join(p for p in parts if p)


class SyncService:
    def __init__(
        self,
        knowledge: KnowledgeService,
        sources_file: Path,
        timeout: float = 30.0,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.knowledge = knowledge
        self.clock = clock  # when a sync finished, as the store records it
        self.sources_file = sources_file
        # Per request to a source and for the MCP handshake; listing all pages gets twice that.
        self.timeout = timeout

    async def sync(
        self,
        principal: Principal,
        workspace_id: str | None,
        source: str | None = None,
        force_full: bool = False,
    ) -> dict[str, Any]:
        workspace = self.knowledge.workspace(principal, workspace_id)
        require_write(principal)
        sources = load_sources(self.sources_file)
        if source is not None:
            if source not in sources:
                known = ", ".join(sorted(sources)) or "none registered"
                raise InvalidParams(
                    f"unknown source {source!r} (known: {known})",
                    hint="Register it with `triptych sources add` or omit source to sync all",
                    details={"field": "source"},
                )
            sources = {source: sources[source]}
        reports = []
        for item in sources.values():
            report = SourceReport(item.name, item.transport)
            try:
                await self._sync_source(principal, workspace, item, force_full, report)
            except Exception as exc:  # one source failing never stops the others
                log.warning("sync of source %s failed: %s", item.name, exc, exc_info=True)
                report.error = _describe(exc)
            reports.append(report)
        synced = sum(1 for r in reports if r.error is None)
        if synced:
            await anyio.to_thread.run_sync(self.knowledge.store.set_last_sync, workspace, self.clock())
        return {
            "success": all(r.error is None for r in reports),
            "sources_synced": synced,
            "details": [asdict(r) for r in reports],
        }

    async def _sync_source(
        self, principal: Principal, workspace: str, source: Source, force_full: bool, report: SourceReport
    ) -> None:
        existing = await anyio.to_thread.run_sync(
            self.knowledge.store.labels_with_prefix, workspace, label_for(source.name, "")
        )
        seen: set[str] = set()
        # Reads overlap with embedding: several resources are in flight at once.
        limiter = anyio.CapacityLimiter(READS_IN_FLIGHT)

        async def ingest(client: Client, resource: types.Resource) -> None:
            label = label_for(source.name, resource.uri)
            async with limiter:
                try:
                    with anyio.fail_after(self.timeout):
                        text = _text_of(
                            await client.read_resource(resource.uri, cache_mode="bypass"), resource.mime_type
                        )
                    if not text.strip():
                        raise ValueError("resource has no text")
                    metadata = {"source": source.name, "uri": resource.uri, "mime_type": resource.mime_type}
                    result = await anyio.to_thread.run_sync(
                        functools.partial(
                            self.knowledge.store_document, principal, workspace, text, resource.title or resource.name,
                            label, metadata, "mcp", skip_unchanged=not force_full,
                        )
                    )  # fmt: skip
                except Exception as exc:
                    log.warning("resource %s of %s failed: %s", resource.uri, source.name, exc)
                    report.failed += 1
                    return
            if result.unchanged:
                report.unchanged += 1
            elif label in existing:
                report.updated += 1
            else:
                report.added += 1

        async with connect(source, self.timeout) as client:  # the handshake is bounded by connect
            try:
                with anyio.fail_after(2 * self.timeout):  # all pages; each read has its own limit
                    resources = await self._list(client)
            except TimeoutError:
                raise TimeoutError(
                    f"the source did not list its resources within {2 * self.timeout:g} s: "
                    "check the source, or raise TRIPTYCH_SYNC_TIMEOUT"
                ) from None
            seen.update(label_for(source.name, r.uri) for r in resources)
            async with anyio.create_task_group() as group:
                for resource in resources:
                    group.start_soon(ingest, client, resource)
        # Only a complete listing may remove documents: a failure above never reaches this line.
        for label in sorted(set(existing) - seen):
            await anyio.to_thread.run_sync(self.knowledge.delete_document, principal, workspace, label)
            report.removed += 1

    @staticmethod
    async def _list(client: Client) -> list[types.Resource]:
        resources: list[types.Resource] = []
        cursor: str | None = None
        while True:
            page = await client.list_resources(cursor=cursor, cache_mode="bypass")
            resources.extend(page.resources)
            cursor = page.next_cursor
            if not cursor or len(resources) >= MAX_RESOURCES:
                return resources


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return str(exc) or "timed out"
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
