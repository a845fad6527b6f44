"""Import sync: the server side of the relay's scheduled ``sync <provider>`` modes (``/v1/import-sync/*``).

A stream is one (workspace, source, scope). The server owns its resume state: ``acquire`` hands out the
next window with a lease, the relay pulls that window from the provider, pushes its rows to
``/v1/ingest`` and completes the lease; only a completion moves the checkpoint to the window's end.

    first window       [initial_since, min(initial_since + max_window, now))
    each window after  [checkpoint - 5 min, min(checkpoint + max_window, now))
    caught up          when now <= checkpoint: nothing new to pull (200, no lease)

The 5-minute overlap re-reads rows a provider recorded late; re-read rows carry the same import identity
and are stored once (``import_events``). A lease lasts ``lease_seconds`` (15 minutes) from its acquire or
its last renewal. While it runs, acquire answers busy with ``retry_at``; once it has run out, the next
acquire takes the stream over (the old lease is then expired for good: renew, complete and abandon
answer 410). At most one lease per stream is active (``import_sync_store``).

The refusals (``errors.ImportSyncError`` and its subclasses: codes and HTTP statuses are listed there):
a bad request, a first acquire without ``initial_since``, a busy stream (with ``retry_at``), an unknown
lease, an ended one (completed or abandoned) and an expired one.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from triptych.metergraph.errors import (
    InitialSinceRequired,
    LeaseEnded,
    LeaseExpired,
    LeaseHeld,
    LeaseNotFound,
    SyncInvalid,
)
from triptych.metergraph.import_sync_store import ImportSyncStore, Lease, Stream

LEASE_SECONDS = 900
OVERLAP_MS = 5 * 60 * 1000
MAX_WINDOW_SECONDS = 3600
_SOURCE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_MAX_SCOPE = 512
_ACQUIRE_FIELDS = frozenset({"source", "source_scope", "initial_since", "max_window_seconds"})


def iso(ms: int) -> str:
    """UTC ISO 8601 with an explicit offset, milliseconds only when there are some."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")


def _aware_ms(value: Any) -> int:
    if not isinstance(value, str) or len(value) > 64:
        raise SyncInvalid("initial_since must be an ISO 8601 timestamp string")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SyncInvalid(f"initial_since is not an ISO 8601 timestamp: {value!r}") from None
    if moment.tzinfo is None:
        raise SyncInvalid("initial_since must carry a UTC offset (for example +00:00 or Z)")
    return int(moment.timestamp() * 1000)


def stream_key(source: Any, scope: Any) -> tuple[str, str]:
    """``source`` and ``source_scope`` as the API accepts them: a lower-case source name and a scope of
    1 to 512 characters (surrounding spaces dropped)."""
    if not isinstance(source, str) or not _SOURCE.fullmatch(source):
        raise SyncInvalid(
            "source must be a lower-case source name such as portkey or phoenix (1-64 characters)"
        )
    if not isinstance(scope, str) or not 0 < len(scope.strip()) <= _MAX_SCOPE:
        raise SyncInvalid(f"source_scope must be a string of 1 to {_MAX_SCOPE} characters")
    return source, scope.strip()


@dataclass(frozen=True)
class Acquired:
    source: str
    scope: str
    lease: Lease | None  # None: caught up
    stream: Stream | None


class ImportSyncService:
    def __init__(
        self,
        store: ImportSyncStore,
        clock: Callable[[], float] = time.time,
        lease_seconds: int = LEASE_SECONDS,
    ) -> None:
        self.store = store
        self.clock = clock
        self.lease_ms = lease_seconds * 1000

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def acquire(self, workspace: str, body: Any) -> Acquired:
        """The stream's next window under a new lease, or caught up; LeaseHeld while another runs."""
        if not isinstance(body, Mapping):
            raise SyncInvalid("the body must be a JSON object")
        unknown = sorted(set(body) - _ACQUIRE_FIELDS)
        if unknown:
            raise SyncInvalid(
                f"unknown field {unknown[0]!r}: acquire takes {', '.join(sorted(_ACQUIRE_FIELDS))}"
            )
        source, scope = stream_key(body.get("source"), body.get("source_scope"))
        since = body.get("initial_since")
        since_ms = None if since is None else _aware_ms(since)
        max_window = body.get("max_window_seconds", MAX_WINDOW_SECONDS)
        if type(max_window) is not int or not 1 <= max_window <= MAX_WINDOW_SECONDS:
            raise SyncInvalid(f"max_window_seconds must be an integer from 1 to {MAX_WINDOW_SECONDS}")
        with self.store.transaction() as tx:
            now = self._now_ms()
            stream = tx.stream(workspace, source, scope)
            holder = tx.lease(workspace, stream.lease_id) if stream and stream.lease_id else None
            if holder is not None and holder.status == "active":
                if holder.expires_ms > now:
                    raise LeaseHeld(
                        f"another sync holds {source}/{scope} until {iso(holder.expires_ms)}",
                        iso(holder.expires_ms),
                    )
                tx.end(holder, "expired", now)  # taken over: the old holder can no longer finish
            if stream is None:
                if since_ms is None:
                    raise InitialSinceRequired(
                        f"{source}/{scope} has no checkpoint yet: send initial_since for its first window"
                    )
                start = base = since_ms  # initial_since seeds the stream; ignored once it exists
            elif stream.checkpoint_ms is None:
                start = base = stream.seed_ms  # the first window again (abandoned or taken over)
            else:
                base = stream.checkpoint_ms
                start = base - OVERLAP_MS
            if now <= base:
                return Acquired(source, scope, None, stream)
            lease = Lease(
                lease_id="isl_" + secrets.token_urlsafe(18),
                workspace=workspace,
                source=source,
                scope=scope,
                window_start_ms=start,
                window_end_ms=min(base + max_window * 1000, now),
                checkpoint_version=stream.checkpoint_version if stream is not None else 0,
                acquired_ms=now,
                expires_ms=now + self.lease_ms,
                status="active",
                ended_ms=None,
            )
            tx.start(lease)
        return Acquired(source, scope, lease, stream)

    def _held(self, tx: Any, workspace: str, lease_id: str, now: int) -> Lease:
        lease: Lease | None = tx.lease(workspace, lease_id)
        if lease is None:
            raise LeaseNotFound("no such lease in this workspace")
        if lease.status in ("completed", "abandoned"):
            raise LeaseEnded(f"the lease was already {lease.status}")
        if lease.status == "expired" or lease.expires_ms <= now:
            raise LeaseExpired(f"the lease ran out at {iso(lease.expires_ms)}: acquire the window again")
        return lease

    def renew(self, workspace: str, lease_id: str) -> Lease:
        with self.store.transaction() as tx:
            now = self._now_ms()
            lease = self._held(tx, workspace, lease_id, now)
            tx.extend(lease, now + self.lease_ms)
        return replace(lease, expires_ms=now + self.lease_ms)

    def complete(self, workspace: str, lease_id: str) -> tuple[Lease, int]:
        """The window is imported: the checkpoint moves to its end. Returns the lease and the new version."""
        with self.store.transaction() as tx:
            now = self._now_ms()
            lease = self._held(tx, workspace, lease_id, now)
            tx.advance(lease, now)
            tx.end(lease, "completed", now)
        return lease, lease.checkpoint_version + 1

    def abandon(self, workspace: str, lease_id: str) -> Lease:
        """The run gives the window back: the next acquire gets the same window at once."""
        with self.store.transaction() as tx:
            now = self._now_ms()
            lease = self._held(tx, workspace, lease_id, now)
            tx.end(lease, "abandoned", now)
        return lease

    def state(self, workspace: str, source: Any, scope: Any) -> dict[str, Any]:
        source, scope = stream_key(source, scope)
        stream, holder = self.store.stream(workspace, source, scope)
        now = self._now_ms()
        active = holder is not None and holder.status == "active" and holder.expires_ms > now
        return {
            "source": source,
            "source_scope": scope,
            "checkpoint": None
            if stream is None or stream.checkpoint_ms is None
            else iso(stream.checkpoint_ms),
            "checkpoint_version": 0 if stream is None else stream.checkpoint_version,
            "last_completed_at": None
            if stream is None or stream.completed_ms is None
            else iso(stream.completed_ms),
            # The holder without its id: the id is what renews and completes, it stays with its run.
            "lease": None
            if not active or holder is None
            else {
                "window_start": iso(holder.window_start_ms),
                "window_end": iso(holder.window_end_ms),
                "acquired_at": iso(holder.acquired_ms),
                "lease_expires_at": iso(holder.expires_ms),
            },
        }
