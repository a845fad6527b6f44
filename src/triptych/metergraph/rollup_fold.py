"""The background folder: keeps the embedded engine's rollups close behind the committed calls.

Ingest commits calls without touching the rollups (``SqliteCallStore.insert_batch``); folding them in
is ``SqliteCallStore.fold_rollups``, which any process may run at any time (the watermark is in the
database). Reads fold whatever is pending before they read a rollup, so answers never depend on this
thread: it only keeps that catch-up small. It folds once ``pending_rows`` calls were noted since its last
fold (a bound on the lag under sustained ingest) or once no batch came for ``idle_s`` (a quiet moment),
and every ``poll_s`` otherwise, for calls other processes on the same file committed.

Its close waits for the fold in progress to end at its next chunk, at most ``stop_wait`` seconds
(decision 0450): one still at work after that is named, and returned so the database's owner leaves its
connection open.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from triptych.core.partitions import STOP_WAIT

log = logging.getLogger(__name__)

Fold = Callable[[Callable[[], bool]], int]


class RollupFolder:
    """Runs ``fold(stop)`` in a background thread after ingest (see the module docstring)."""

    def __init__(
        self,
        fold: Fold,
        pending_rows: int = 50_000,
        idle_s: float = 0.5,
        poll_s: float = 5.0,
        stop_wait: float = STOP_WAIT,
    ) -> None:
        self._fold = fold
        self.pending_rows = pending_rows
        self.idle_s = idle_s
        self.poll_s = poll_s
        self.stop_wait = stop_wait
        self._pending = 0  # calls committed by this process since the last fold began
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def note(self, calls: int) -> None:
        """``calls`` were just committed (ingest calls this after every batch)."""
        if calls:
            with self._lock:
                self._pending += calls
            self._wake.set()

    @property
    def pending(self) -> int:
        """Calls this process committed that its folder has not begun to fold (for /metrics)."""
        return self._pending

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="metergraph-rollups", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        polled = time.monotonic()
        while not self._stop.is_set():
            noted = self._wake.wait(self.idle_s)
            if self._stop.is_set():
                return
            if noted:
                self._wake.clear()
                if self._pending < self.pending_rows:
                    continue  # ingest is still arriving: wait for a quiet moment or a full chunk
            elif not self._pending and time.monotonic() - polled < self.poll_s:
                continue
            polled = time.monotonic()
            with self._lock:
                self._pending = 0
            try:
                self._fold(self._stop.is_set)
            except Exception:  # keep the thread alive: reads fold what is pending themselves
                log.exception("metergraph rollups: fold failed")

    def close(self) -> list[threading.Thread]:
        """Stop the thread: a fold in progress finishes its chunk first, waited for up to ``stop_wait``
        seconds. Returns the thread if it is still at work after the wait (normally nothing): its
        connection must be left open, since it may be inside a query."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return []
        thread.join(self.stop_wait)
        if not thread.is_alive():
            return []
        log.warning(
            "metergraph rollups: the fold in %s did not end within %.0f s of the close",
            thread.name,
            self.stop_wait,
        )
        return [thread]
