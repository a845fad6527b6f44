"""What the server is doing, for Prometheus: ``GET /metrics`` in its text format, with the maintained client.

Counters and histograms are updated where things happen (``observe_tool`` from the one tool layer,
``observe_request`` from the request middleware, ``observe_ingest`` from Metergraph's ingest door); gauges
(backlogs, index builds, database pools) are sampled from callbacks each surface registers with
``register_gauge``, at scrape time and, under ``serve --workers N``, every few seconds in each worker.

Several workers: the supervisor gives every worker one ``PROMETHEUS_MULTIPROC_DIR`` before it starts
(the client library picks its storage when it is first imported), each worker writes its values there,
and whichever worker answers a scrape sums them all (``MultiProcessCollector``); a gauge then carries a
``pid`` label per live worker. One process: the default registry, no files.

Access: ``/metrics`` answers a request bearing ``TRIPTYCH_METRICS_TOKEN``; without a token set, it answers
loopback clients only (a Prometheus on the same machine), so a server bound to a public address does not
publish its tool names and rates to anyone who asks.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from triptych.core.errors import Forbidden, TriptychError, Unauthenticated

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SAMPLE_EVERY_S = 5.0
# Latency buckets from a 1 ms status call to a 30 s import, in seconds.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_MODE: Final = "liveall"  # a gauge per live worker (pid label); dead workers' files are dropped

TOOL_CALLS = Counter(
    "triptych_tool_calls_total", "MCP tool calls by surface, tool and outcome (ok or the error code)",
    ["surface", "tool", "outcome"],
)  # fmt: skip
TOOL_SECONDS = Histogram(
    "triptych_tool_call_seconds", "Time the server spent on an MCP tool call", ["surface", "tool"],
    buckets=BUCKETS,
)  # fmt: skip
REQUESTS = Counter(
    "triptych_http_requests_total",
    "HTTP requests by surface, method and status",
    ["surface", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "triptych_http_request_seconds", "Time to the end of an HTTP response", ["surface"], buckets=BUCKETS
)
INGEST_ROWS = Counter(
    "triptych_metergraph_ingest_rows_total", "Metergraph ingest rows by outcome (accepted, ignored, refused)",
    ["outcome"],
)  # fmt: skip
INDEX_EVICTIONS = Counter(
    "triptych_index_evictions_total",
    "In-process index partitions (a workspace's or memory's vectors or keywords) forgotten to stay within "
    "TRIPTYCH_INDEX_MEMORY_MB", ["index"],
)  # fmt: skip
INGEST_BATCHES = Counter(
    "triptych_metergraph_ingest_batches_total", "Metergraph ingest batches by outcome", ["outcome"]
)

# name -> (gauge, sample): sample() yields (label values, value) pairs, read at scrape time.
Sample = Callable[[], Iterable[tuple[Sequence[str], float]]]
_gauges: dict[str, tuple[Gauge, Sample]] = {}
_lock = threading.Lock()


def register_gauge(name: str, documentation: str, labels: Sequence[str], sample: Sample) -> None:
    """A gauge whose values ``sample()`` gives when asked; registering a name again replaces its sampler
    (an app built twice in one process, as tests do, keeps one gauge)."""
    with _lock:
        if name in _gauges:
            _gauges[name] = (_gauges[name][0], sample)
            return
        gauge = Gauge(name, documentation, list(labels), multiprocess_mode=_MODE)
        _gauges[name] = (gauge, sample)


def refresh_gauges() -> None:
    """Sample every registered gauge now. A sampler that fails is logged and skipped, never the scrape."""
    with _lock:
        gauges = list(_gauges.items())
    for name, (gauge, sample) in gauges:
        try:
            values = list(sample())
        except Exception:  # a closing store, a pool mid-reconnect: the gauge keeps its last value
            log.debug("gauge %s not sampled", name, exc_info=True)
            continue
        for labels, value in values:
            gauge.labels(*labels).set(value) if labels else gauge.set(value)


def _child(metric: Counter | Histogram, *labels: str) -> Any:
    """``metric.labels(*labels)``, remembered: the client takes a lock and checks every label value on each
    lookup, which ``observe_request`` and ``observe_tool`` did on every request (decision 0340). The
    children are the client's own, so ``/metrics`` reads the same values."""
    key = (id(metric), labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


_children: dict[tuple[int, tuple[str, ...]], Any] = {}


def observe_tool(surface: str, tool: str, seconds: float, outcome: str) -> None:
    _child(TOOL_CALLS, surface, tool, outcome).inc()
    _child(TOOL_SECONDS, surface, tool).observe(seconds)


def observe_request(surface: str, method: str, status: int, seconds: float) -> None:
    _child(REQUESTS, surface, method, str(status)).inc()
    _child(REQUEST_SECONDS, surface).observe(seconds)


def observe_ingest(outcome: str, batches: int, rows: int) -> None:
    INGEST_BATCHES.labels(outcome).inc(batches)
    if rows:
        INGEST_ROWS.labels(outcome).inc(rows)


def observe_evictions(index: str, count: int) -> None:
    INDEX_EVICTIONS.labels(index).inc(count)


def metrics_process_dead(pid: int, directory: str) -> None:
    """A worker ended: drop its live gauges from the sums (the supervisor calls this)."""
    multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


class GaugeSampler:
    """Under several workers, samples this worker's gauges every few seconds into the shared files, so a
    scrape answered by any worker shows every worker's backlogs."""

    def __init__(self, every_s: float = SAMPLE_EVERY_S) -> None:
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if multiprocess_dir() is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="metrics-gauges", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            refresh_gauges()

    def stop(self, timeout: float = 30.0) -> None:
        """End the sampling and wait (bounded) for a round in flight: a gauge may query a store that the
        surfaces close right after this."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def exposition() -> bytes:
    """The metrics in Prometheus' text format: this process's, or every worker's under several."""
    refresh_gauges()
    directory = multiprocess_dir()
    if directory is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def metrics_endpoint(token: str | None) -> Callable[[Request], Response]:
    """``GET /metrics``: with ``token``, for a bearer of it; without, for loopback clients only."""

    def metrics(request: Request) -> Response:
        if token:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return _refused(
                    Unauthenticated(
                        "/metrics needs its token", hint="send Authorization: Bearer <TRIPTYCH_METRICS_TOKEN>"
                    )
                )
        elif (request.client.host if request.client else "") not in LOOPBACK:
            return _refused(
                Forbidden(
                    "/metrics answers this machine only while TRIPTYCH_METRICS_TOKEN is unset",
                    hint="set TRIPTYCH_METRICS_TOKEN and scrape with it as a bearer token, or scrape from this host",
                )
            )
        return Response(exposition(), media_type=CONTENT_TYPE_LATEST)

    return metrics


def _refused(error: TriptychError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if error.http_status == 401 else None
    return JSONResponse({"error": error.to_dict()}, status_code=error.http_status, headers=headers)
