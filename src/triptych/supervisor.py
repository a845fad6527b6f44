"""``triptych serve --workers N``: one listening socket, N worker processes accepting on it.

The supervisor binds the port itself, once per worker with ``SO_REUSEPORT`` (Linux), and starts each
worker as ``python -m triptych serve`` with its listening socket inherited (``TRIPTYCH_WORKER_FD``). The
kernel spreads new connections over the sockets evenly; one shared socket instead lets the first worker
to wake accept a whole burst (asyncio accepts up to 100 connections per wake-up), so 16 clients
connecting at once could all land on one worker. The supervisor keeps every socket open, so connections
that arrive while a worker is being replaced wait in its queue for the replacement instead of being
refused. A worker says it is ready by writing its number to a pipe (``TRIPTYCH_WORKER_READY_FD``) once
its app has started.

What keeps it robust:
- Workers run in their own process group, so a terminal's Ctrl-C reaches the supervisor only, which then
  closes its listening sockets (new connections are refused, not queued), stops each worker once with
  SIGTERM (a graceful uvicorn shutdown: the requests in flight finish, for up to ``REQUEST_GRACE``
  seconds) and kills what is left after ``GRACE`` seconds. Each worker also asks the kernel for SIGTERM
  when the supervisor dies
  (``PR_SET_PDEATHSIG``), so even a ``kill -9`` of the supervisor leaves no orphan serving the port.
- The first worker starts alone and the others once it serves, so one process creates or migrates the
  stores.
- A worker that exits while serving is reported (pid, exit code or signal) and replaced, a replacement
  that fails to start too, up to ``MAX_RESTARTS`` in ``RESTART_WINDOW``. A worker that exits before the
  first start is complete means the configuration or the database is wrong: every worker is stopped
  and the supervisor exits with that worker's code, after its one-line reason on stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from triptych.core.metrics import MULTIPROC_ENV, metrics_process_dead
from triptych.peers import RUN_DIR

WORKER_FD = "TRIPTYCH_WORKER_FD"
READY_FD = "TRIPTYCH_WORKER_READY_FD"
WORKER_INDEX = "TRIPTYCH_WORKER_INDEX"
SUPERVISOR_PID = "TRIPTYCH_SUPERVISOR_PID"
GRACE = 10.0  # seconds a worker has to finish its requests and close its stores after SIGTERM
# Seconds the requests in flight get after SIGTERM (`serve` alone too): open streams (a Hadron GET stream)
# are cut then, so a worker closes its stores before the supervisor's grace runs out and it kills.
REQUEST_GRACE = int(GRACE) - 2
# A worker crashing this many times within RESTART_WINDOW seconds is not restarted again: something is
# wrong that a restart does not cure, and a tight restart loop would hide it.
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
PR_SET_PDEATHSIG = 1


def listen(host: str, port: int, count: int, backlog: int = 2048) -> list[socket.socket]:
    """One listening socket per worker on ``host:port`` (one shared socket where SO_REUSEPORT is missing)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reuse_port = hasattr(socket, "SO_REUSEPORT") and sys.platform.startswith("linux")
    sockets: list[socket.socket] = []
    try:
        for _ in range(count if reuse_port else 1):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def die_with_supervisor() -> None:
    """In a worker: the kernel sends SIGTERM when the supervisor exits, however it exits (Linux)."""
    supervisor = os.environ.get(SUPERVISOR_PID)
    if not sys.platform.startswith("linux") or supervisor is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(supervisor):  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def worker_socket() -> socket.socket | None:
    """The inherited listening socket when this process is a worker, else None."""
    fd = os.environ.get(WORKER_FD)
    return None if fd is None else socket.socket(fileno=int(fd))


def report_ready() -> None:
    """In a worker: tell the supervisor this worker serves now."""
    fd = os.environ.get(READY_FD)
    if fd is not None:
        os.write(int(fd), f"{os.environ.get(WORKER_INDEX, '0')}\n".encode())
        os.close(int(fd))


def named_worker(app: ASGIApp) -> ASGIApp:
    """The app, with each HTTP response saying which worker gave it (``X-Triptych-Worker``): what an
    operator reads to see the load spread, and how the tests reach a chosen worker."""
    name = os.environ.get(WORKER_INDEX, "0").encode()

    async def named(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"x-triptych-worker", name)]}
            await send(message)

        await app(scope, receive, tagged)

    return named


def how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Worker:
    index: int
    process: subprocess.Popen[bytes]
    ready: bool = False


class Supervisor:
    """Starts, watches and stops the workers; ``run`` returns the supervisor's exit code."""

    def __init__(
        self,
        count: int,
        sockets: Sequence[socket.socket],
        command: Sequence[str],
        say: Callable[[str], None],
        on_ready: Callable[[list[int]], None],
    ) -> None:
        self.count = count
        self.sockets = list(sockets)
        self.command = list(command)
        self.say = say
        self.on_ready = on_ready
        self.workers: dict[int, Worker] = {}
        self.crashes: list[float] = []
        self.stopping: signal.Signals | None = None
        self.all_ready = False
        # Each worker's own socket for requests of MCP sessions it holds (peers.py); removed at the end.
        self.run_dir = tempfile.mkdtemp(prefix="triptych-workers-")
        # Every worker's /metrics values, in files a scrape of any worker sums (core/metrics.py).
        self.metrics_dir = os.path.join(self.run_dir, "metrics")
        os.mkdir(self.metrics_dir)
        self._ready_read, self._ready_write = os.pipe()
        os.set_blocking(self._ready_read, False)

    def _spawn(self, index: int) -> Worker:
        sock = self.sockets[(index - 1) % len(self.sockets)]
        env = {
            **os.environ,
            WORKER_FD: str(sock.fileno()),
            READY_FD: str(self._ready_write),
            WORKER_INDEX: str(index),
            SUPERVISOR_PID: str(os.getpid()),
            RUN_DIR: self.run_dir,
            MULTIPROC_ENV: self.metrics_dir,
        }
        process = subprocess.Popen(
            self.command,
            env=env,
            pass_fds=(sock.fileno(), self._ready_write),
            process_group=0,  # Ctrl-C reaches the supervisor only; it stops the workers once
        )
        worker = Worker(index, process)
        self.workers[index] = worker
        return worker

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping is None:
            self.stopping = signal.Signals(signum)

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        code = 0
        try:
            # The first worker alone, the others once it serves: it creates or migrates the data
            # directory's SQLite files (two processes creating one file at once can fail) and the
            # database, and the others then find them current.
            self._spawn(1)
            code = self._watch()
        finally:
            self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._ready_read)
            os.close(self._ready_write)
            shutil.rmtree(self.run_dir, ignore_errors=True)
        return code

    def _read_ready(self) -> None:
        with contextlib.suppress(BlockingIOError):
            data = os.read(self._ready_read, 4096)
            for line in data.decode().split():
                worker = self.workers.get(int(line))
                if worker is not None:
                    worker.ready = True
        if len(self.workers) < self.count and self.workers[1].ready:
            for index in range(len(self.workers) + 1, self.count + 1):
                self._spawn(index)
        if (
            not self.all_ready
            and len(self.workers) == self.count
            and all(w.ready for w in self.workers.values())
        ):
            self.all_ready = True
            self.on_ready([w.process.pid for w in self.workers.values()])

    def _watch(self) -> int:
        while self.stopping is None:
            with contextlib.suppress(InterruptedError):
                select.select([self._ready_read], [], [], 0.2)
            self._read_ready()
            for worker in list(self.workers.values()):
                code = worker.process.poll()
                if code is None or self.stopping is not None:
                    continue
                pid = worker.process.pid
                # Its gauges leave the sums; its counters stay (a rate must not drop at a restart).
                metrics_process_dead(pid, self.metrics_dir)
                if not worker.ready and not self.all_ready:  # at start: the setup is wrong
                    self.say(
                        f"worker {worker.index} (pid {pid}) {how_it_ended(code)} before it was ready:"
                        " stopping the others"
                    )
                    return code if code > 0 else 1
                now = time.monotonic()
                self.crashes = [t for t in self.crashes if now - t < RESTART_WINDOW] + [now]
                if len(self.crashes) > MAX_RESTARTS:
                    self.say(
                        f"worker {worker.index} (pid {pid}) {how_it_ended(code)}; {len(self.crashes)} workers"
                        f" ended within {RESTART_WINDOW:.0f} s: stopping"
                    )
                    return 1
                if not worker.ready:  # a replacement that did not start (the database away?): retried
                    time.sleep(1.0)
                replacement = self._spawn(worker.index)
                self.say(
                    f"worker {worker.index} (pid {pid}) {how_it_ended(code)}; started worker {worker.index}"
                    f" again (pid {replacement.process.pid})"
                )
        self.say(f"{self.stopping.name}: stopping {len(self.workers)} workers")
        return 0

    def _stop_all(self) -> None:
        # Stop accepting first: the workers hold the same listening sockets, and while this process kept
        # its copies open the kernel went on queueing new connections that no worker would accept, each
        # reset once the grace ran out. Closed here, and by each worker as its shutdown starts, a new
        # connection is refused at once (a client or balancer retries elsewhere) while the requests in
        # flight finish.
        for sock in self.sockets:
            sock.close()
        running = [w.process for w in self.workers.values() if w.process.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"worker pid {process.pid} did not stop within {GRACE:.0f} s: killing it")
                process.kill()
                process.wait()
