"""Analysis runs: start one (asynchronously, in a server thread), follow its progress, cancel it.

A run's report is committed in the same transaction as the run's ``succeeded`` state; a run that fails
or is cancelled writes no report at all. ``request_key`` makes a start idempotent: the same key with
the same arguments returns the same run, with other arguments it is refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from triptych.metergraph.analysis_runner import AnalysisRunner, Cancelled, Progress, RunContext, RunSettings
from triptych.metergraph.contract import SCOPE_READ, envelope, warning
from triptych.metergraph.errors import ForbiddenError, InvalidArgument, NotFoundError, UnsupportedCapability
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.links import AppLinks
from triptych.metergraph.report_schema import serialize
from triptych.metergraph.report_store import ReportStore, RunEnded
from triptych.metergraph.reports import ReportService

log = logging.getLogger(__name__)
FINAL = ("succeeded", "failed", "cancelled")
# A running run writes a heartbeat this often; one silent for ABANDONED_AFTER_SECONDS is abandoned.
HEARTBEAT_SECONDS = 10
ABANDONED_AFTER_SECONDS = 60
# Classification runs are few (each replaces the workspace's workloads); a listing reads at most these.
MAX_CLASSIFICATION_RUNS = 1000
RunKey = tuple[str, int, int, str]  # (created_at, 1 analysis | 0 classification, seq, run_id)


class ClassificationRuns(Protocol):
    """Classification runs in the run documents' shape (``kind: "classification"``)."""

    def runs(self, workspace: str, limit: int) -> list[dict[str, Any]]: ...

    def run(self, workspace: str, run_id: str) -> dict[str, Any] | None: ...


def _encode_run_cursor(key: RunKey, fingerprint: str) -> str:
    raw = json.dumps([list(key), fingerprint], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_run_cursor(cursor: str, fingerprint: str) -> RunKey:
    try:
        key, seen = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        created, kind, seq, run_id = key
        if not (
            isinstance(created, str)
            and isinstance(kind, int)
            and isinstance(seq, int)
            and isinstance(run_id, str)
        ):
            raise ValueError
    except (ValueError, TypeError):
        raise InvalidArgument("cursor is not a cursor this server issued") from None
    if seen != fingerprint:
        raise InvalidArgument("cursor belongs to a different query: repeat the same filters or drop it")
    return created, kind, seq, run_id


class AnalysisService:
    def __init__(
        self,
        store: ReportStore,
        reports: ReportService,
        runner: AnalysisRunner | None,
        clock: Callable[[], datetime],
        links: AppLinks,
        available: Callable[[], bool] = lambda: True,
        classification_runs: ClassificationRuns | None = None,
    ) -> None:
        """``available`` says whether runs can replay now (a provider is configured);
        ``classification_runs`` lists the classification runs the run tools show beside analysis runs."""
        self.store = store
        self.available = available
        self.classification_runs = classification_runs
        self.reports = reports
        self.runner = runner
        self.clock = clock
        self.links = links
        self._threads: dict[str, threading.Thread] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    # -- documents -------------------------------------------------------------------------------

    def _run_document(
        self, workspace: str, row: dict[str, Any], replayed: bool | None = None
    ) -> dict[str, Any]:
        report = self.store.report(workspace, row["analysis_id"]) if row["status"] == "succeeded" else None
        run = {
            "run_id": row["run_id"],
            "analysis_id": row["analysis_id"],
            "status": row["status"],
            "kind": row["kind"],
            "created_at": row["created_at"],
            "started_at": row["started_at"],
            "finished_at": row["finished_at"],
            "error_code": row["error_code"],
            "error_message": row["error_message"],
            "progress": row["progress"],
            "arguments": row["arguments"],
            "report": {
                "available": report is not None,
                "analysis_id": report.analysis_id if report else None,
                "imported_at": report.imported_at if report else None,
                "outcome_tool": "metergraph_get_report" if report else None,
                "outcome": report.outcome if report else None,
                "app_url": self.links.report(workspace, report.analysis_id) if report else None,
            },
            "app_url": self.links.analysis(workspace),
        }
        if replayed is not None:
            run["request"] = {"request_key": row["request_key"], "replayed": replayed}
        return run

    # -- reads -----------------------------------------------------------------------------------

    def list_runs(
        self, principal: AgentPrincipal, limit: int = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Analysis and classification runs together, newest first by creation time (an analysis run
        before a classification run created at the same instant)."""
        workspace = principal.workspace
        fingerprint = f"runs:{workspace}"
        before = _decode_run_cursor(cursor, fingerprint) if cursor is not None else None
        mine = self.store.list_runs(workspace, limit + 1, None if before is None else (before[0], before[2]))
        keyed = [
            ((r["created_at"], 1, int(r["seq"]), r["run_id"]), self._run_document(workspace, r)) for r in mine
        ]
        if self.classification_runs is not None:
            for doc in self.classification_runs.runs(workspace, MAX_CLASSIFICATION_RUNS):
                key = (doc["created_at"], 0, 0, doc["run_id"])
                if before is None or key < before:
                    keyed.append((key, doc))
        keyed.sort(key=lambda kv: kv[0], reverse=True)
        truncated = len(keyed) > limit
        keyed = keyed[:limit]
        next_cursor = _encode_run_cursor(keyed[-1][0], fingerprint) if truncated else None
        document = envelope(
            workspace,
            self.clock(),
            page={"limit": limit, "truncated": truncated, "next_cursor": next_cursor},
            content_included=False,
            runs=[doc for _, doc in keyed],
            app_url=self.links.analysis(workspace),
        )
        if truncated:
            document["warnings"].append(warning("truncated", "more runs exist: pass page.next_cursor"))
        return document

    def get_run(self, principal: AgentPrincipal, run_id: str) -> dict[str, Any]:
        row = self.store.run(principal.workspace, run_id)
        if row is not None:
            run = self._run_document(principal.workspace, row)
        elif self.classification_runs is not None and (
            found := self.classification_runs.run(principal.workspace, run_id)
        ):
            run = found
        else:
            raise NotFoundError("no analysis run with that run_id in this workspace")
        return envelope(principal.workspace, self.clock(), content_included=False, run=run)

    # -- start / cancel --------------------------------------------------------------------------

    def start(
        self,
        principal: AgentPrincipal,
        settings: RunSettings,
        request_key: str | None = None,
        rerun_of_run_id: str | None = None,
    ) -> dict[str, Any]:
        """Queue a run and start it in a server thread; answers at once with the queued run."""
        if not principal.has(SCOPE_READ):
            raise ForbiddenError("metergraph_start_analysis needs the Debug role (agent:read)")
        if self.runner is None or not self.available():
            raise UnsupportedCapability("analysis runs need a configured provider replayer")
        if settings.min_samples > settings.samples_per_workload:
            raise InvalidArgument("min_samples cannot exceed samples_per_workload")
        if rerun_of_run_id is not None and self.store.run(principal.workspace, rerun_of_run_id) is None:
            raise NotFoundError("rerun_of_run_id names no analysis run in this workspace")
        arguments = {**settings.as_dict(), "rerun_of_run_id": rerun_of_run_id}
        request_hash = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()
        with self._lock:  # one start at a time decides "already active"
            if request_key is not None:
                existing = self.store.run_by_request_key(principal.workspace, request_key)
                if existing is not None:
                    if existing["request_hash"] != request_hash:
                        raise InvalidArgument(
                            "idempotency_conflict: request_key was used with other arguments; choose a new "
                            "request_key"
                        )
                    return self._started(principal.workspace, existing, replayed=True)
            active = self.store.active_run(principal.workspace, "analysis")
            if active is not None:
                # One run at a time per workspace: the caller follows the active run (not an error).
                return self._started(principal.workspace, active, replayed=False, reason="analysis_active")
            now = self.clock()
            run_id = str(uuid.uuid4())
            row = {
                "run_id": run_id,
                "kind": "analysis",
                "analysis_id": f"an-{now:%Y%m%d-%H%M%S}-{run_id[:8]}",
                "request_key": request_key,
                "request_hash": request_hash,
                "status": "queued",
                "created_at": now.isoformat(),
                "progress": Progress().as_dict(),
                "arguments": arguments,
                "heartbeat_ms": int(time.time() * 1000),
            }
            self.store.insert_run(principal.workspace, row)
            thread = threading.Thread(
                target=self._execute, args=(principal.workspace, row, settings), name=f"analysis-{run_id[:8]}"
            )
            self._threads[run_id] = thread
            thread.start()
        stored = self.store.run(principal.workspace, run_id)
        return self._started(principal.workspace, stored or row, replayed=False)

    def _started(
        self, workspace: str, row: dict[str, Any], replayed: bool, reason: str | None = None
    ) -> dict[str, Any]:
        """``started`` and ``mutates`` say whether this call created the run; ``reason`` why it did not."""
        created = not replayed and reason is None
        return envelope(
            workspace, self.clock(), content_included=False, started=created, mutates=created, reason=reason,
            run=self._run_document(workspace, row, replayed=replayed),
        )  # fmt: skip

    def cancel(self, workspace: str, run_id: str) -> bool:
        """Ask a queued or running run to stop (any process: the flag lives in the database)."""
        return self.store.request_cancel(workspace, run_id)

    def _execute(self, workspace: str, row: dict[str, Any], settings: RunSettings) -> None:
        run_id = row["run_id"]
        assert self.runner is not None
        progress_lock = threading.Lock()

        def report_progress(progress: Progress) -> None:
            with progress_lock:
                self.store.update_run(workspace, run_id, progress=progress.as_dict())

        def should_stop() -> bool:
            return self._stopping.is_set() or self.store.cancel_requested(workspace, run_id)

        done = threading.Event()

        def beat() -> None:
            while True:
                try:
                    self.store.heartbeat(workspace, run_id, int(time.time() * 1000))
                except Exception:  # a missed beat only risks a late "server_restarted"
                    log.warning("analysis run %s: heartbeat not written", run_id, exc_info=True)
                if done.wait(HEARTBEAT_SECONDS):
                    return

        heart = threading.Thread(target=beat, name=f"analysis-beat-{run_id[:8]}", daemon=True)
        heart.start()
        try:
            now = self.clock()
            self.store.start_run(workspace, run_id, now.isoformat())
            ctx = RunContext(workspace, row["analysis_id"], settings, now, report_progress, should_stop)
            artifact = self.runner.run(ctx)
            if should_stop():
                raise Cancelled
            raw = serialize(artifact)
            stored = self.reports.stored_report(artifact, raw, "analysis_run")
            self.store.finish_run_with_report(workspace, run_id, self.clock().isoformat(), stored, raw)
        except (Cancelled, RunEnded):
            code = "server_stopped" if self._stopping.is_set() else "cancelled"
            self.store.end_active_run(workspace, run_id, "cancelled", code, self.clock().isoformat())
        except Exception as exc:
            log.exception("analysis run %s failed", run_id)
            self.store.end_active_run(
                workspace, run_id, "failed", "internal", self.clock().isoformat(), type(exc).__name__
            )
        finally:
            done.set()
            heart.join()
            with self._lock:
                self._threads.pop(run_id, None)

    def fail_abandoned(self) -> int:
        """At server start: runs whose heartbeat stopped (their process is gone) become ``failed``."""
        stale = int(time.time() * 1000) - ABANDONED_AFTER_SECONDS * 1000
        return self.store.fail_abandoned_runs(self.clock().isoformat(), stale)

    def wait(self, timeout: float | None = None) -> None:
        """Join the running runs (tests and benchmarks)."""
        for thread in list(self._threads.values()):
            thread.join(timeout)

    def close(self) -> None:
        self._stopping.set()
        self.wait(30)
