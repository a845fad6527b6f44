"""Analysis runs: start one (asynchronously, in a server thread), follow its progress, cancel it.

A run's report is committed in the same transaction as the run's ``succeeded`` state; a run that fails
or is cancelled writes no report at all. ``request_key`` makes a start idempotent: the same key with
the same arguments returns the same run, with other arguments it is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from triptych.metergraph.analysis_runner import AnalysisRunner, Cancelled, Progress, RunContext, RunSettings
from triptych.metergraph.contract import SCOPE_READ, envelope, warning
from triptych.metergraph.errors import ForbiddenError, InvalidArgument, NotFoundError, UnsupportedCapability
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.links import AppLinks
from triptych.metergraph.report_schema import serialize
from triptych.metergraph.report_store import ReportStore
from triptych.metergraph.reports import ReportService
from triptych.metergraph.traces import decode_cursor, encode_cursor

log = logging.getLogger(__name__)
FINAL = ("succeeded", "failed", "cancelled")


class AnalysisService:
    def __init__(
        self,
        store: ReportStore,
        reports: ReportService,
        runner: AnalysisRunner | None,
        clock: Callable[[], datetime],
        links: AppLinks,
        available: Callable[[], bool] = lambda: True,
    ) -> None:
        """``available`` says whether runs can replay now (a provider is configured)."""
        self.store = store
        self.available = available
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
        fingerprint = f"runs:{principal.workspace}"
        before = decode_cursor(cursor, fingerprint)[0] if cursor is not None else None
        rows = self.store.list_runs(principal.workspace, limit + 1, before)
        truncated = len(rows) > limit
        rows = rows[:limit]
        next_cursor = encode_cursor(rows[-1]["seq"], 0, fingerprint) if truncated else None
        document = envelope(
            principal.workspace,
            self.clock(),
            page={"limit": limit, "truncated": truncated, "next_cursor": next_cursor},
            content_included=False,
            runs=[self._run_document(principal.workspace, r) for r in rows],
            app_url=self.links.analysis(principal.workspace),
        )
        if truncated:
            document["warnings"].append(warning("truncated", "more runs exist: pass page.next_cursor"))
        return document

    def get_run(self, principal: AgentPrincipal, run_id: str) -> dict[str, Any]:
        row = self.store.run(principal.workspace, run_id)
        if row is None:
            raise NotFoundError("no analysis run with that run_id in this workspace")
        return envelope(
            principal.workspace,
            self.clock(),
            content_included=False,
            run=self._run_document(principal.workspace, row),
        )

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

        try:
            now = self.clock()
            self.store.update_run(workspace, run_id, status="running", started_at=now.isoformat())
            ctx = RunContext(workspace, row["analysis_id"], settings, now, report_progress, should_stop)
            artifact = self.runner.run(ctx)
            if should_stop():
                raise Cancelled
            raw = serialize(artifact)
            stored = self.reports.stored_report(artifact, raw, "analysis_run")
            self.store.finish_run_with_report(workspace, run_id, self.clock().isoformat(), stored, raw)
        except Cancelled:
            code = "server_stopped" if self._stopping.is_set() else "cancelled"
            self.store.update_run(
                workspace, run_id, status="cancelled", error_code=code, finished_at=self.clock().isoformat()
            )
        except Exception as exc:
            log.exception("analysis run %s failed", run_id)
            self.store.update_run(
                workspace, run_id, status="failed", error_code="internal", error_message=type(exc).__name__,
                finished_at=self.clock().isoformat(),
            )  # fmt: skip
        finally:
            with self._lock:
                self._threads.pop(run_id, None)

    def wait(self, timeout: float | None = None) -> None:
        """Join the running runs (tests and benchmarks)."""
        for thread in list(self._threads.values()):
            thread.join(timeout)

    def close(self) -> None:
        self._stopping.set()
        self.wait(30)
