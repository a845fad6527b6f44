"""SIGTERM stops a server gracefully, alone or with workers: new connections are refused at once (not
queued to be reset later), the request in flight finishes with its answer, and the process exits 0 with
no thread of its stores and services left running (decision 0420).

The request in flight is made certain, not timed: it is sent with ``Expect: 100-continue`` and its body
held back, so the server has read its headers and its handler waits for the body (the ``100 Continue``
says so) when the signal arrives; the body follows once the server has stopped accepting."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from contract.test_server_workers import start_workers, stop_all
from harness import ServerProcess
from postgres import PostgresCluster

SEARCH = json.dumps({"query": "graphs", "workspace_id": "default"}).encode()


@pytest.fixture(params=["serve", "serve --workers 2"])
def stoppable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    env = {"TRIPTYCH_AUTH_ENABLED": "false"}
    if request.param == "serve":
        server = ServerProcess(tmp_path / "data", env).start()
    else:
        cluster: PostgresCluster = request.getfixturevalue("postgres")
        env["TRIPTYCH_DATABASE_URL"] = cluster.create_database("stop")
        server = start_workers(ServerProcess(tmp_path / "data", env))
    try:
        yield server
    finally:
        stop_all(server)


def _read_until(conn: socket.socket, marker: bytes, deadline: float) -> bytes:
    data = b""
    while marker not in data:
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # a connection queued and dropped: not refused yet
        return False
    return False


def test_sigterm_refuses_new_connections_and_the_request_in_flight_completes_with_200(
    stoppable: ServerProcess,
) -> None:
    assert stoppable.process is not None
    deadline = time.monotonic() + 60
    conn = socket.create_connection(("127.0.0.1", stoppable.port), timeout=60)
    try:
        head = (
            f"POST /api/v1/memory/search HTTP/1.1\r\nHost: 127.0.0.1:{stoppable.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(SEARCH)}\r\nExpect: 100-continue\r\n\r\n"
        )
        conn.sendall(head.encode())
        assert b"100 Continue" in _read_until(conn, b"\r\n\r\n", deadline)  # the handler waits for the body

        stoppable.process.send_signal(signal.SIGTERM)
        # Stopping means refusing: a new connection is refused while the request in flight is still open.
        while not _refused(stoppable.port):
            assert time.monotonic() < deadline, f"new connections still accepted:\n{stoppable.log()}"
            time.sleep(0.1)
        assert stoppable.process.poll() is None  # still finishing the request in flight

        conn.sendall(SEARCH)
        answer = _read_until(conn, b"}", deadline)
    finally:
        conn.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:500]
    assert b'"results"' in answer
    assert stoppable.process.wait(timeout=60) == 0, stoppable.log()
    # Every store and service stopped and joined the threads it started (the search's embedding threads,
    # the warm-up, graph builds): the app says which threads are left once the surfaces are closed.
    log = stoppable.log()
    assert "threads still running after the surfaces closed" not in log, log
    assert "no background thread left" in log, log


@pytest.fixture
def two_workers(postgres: PostgresCluster, tmp_path: Path) -> Iterator[ServerProcess]:
    env = {"TRIPTYCH_AUTH_ENABLED": "false", "TRIPTYCH_DATABASE_URL": postgres.create_database("kill")}
    server = start_workers(ServerProcess(tmp_path / "data", env))
    try:
        yield server
    finally:
        stop_all(server)


def _search_head(port: int, expect: bool) -> bytes:
    extra = "Expect: 100-continue\r\n" if expect else ""
    return (
        f"POST /api/v1/memory/search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(SEARCH)}\r\n{extra}\r\n"
    ).encode()


def test_a_worker_killed_with_9_drops_its_request_without_an_answer_and_the_port_serves_the_retry(
    two_workers: ServerProcess,
) -> None:
    """What README says clients see: the connection the dead worker held closes without an answer (never
    a 5xx or half a body), and the same request sent again on a new connection is answered."""
    port, deadline = two_workers.port, time.monotonic() + 60
    pids = [int(p) for p in re.findall(r"pids ([\d, ]+);", two_workers.log())[0].split(", ")]
    conn = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        conn.sendall(_search_head(port, expect=False) + SEARCH)
        first = _read_until(conn, b"}", deadline)
        assert first.startswith(b"HTTP/1.1 200"), first[:300]
        named = re.search(rb"x-triptych-worker: (\d+)", first, re.IGNORECASE)
        assert named is not None, first[:300]
        worker = int(named.group(1))
        conn.sendall(_search_head(port, expect=True))  # the same connection, now in flight on that worker
        assert b"100 Continue" in _read_until(conn, b"\r\n\r\n", deadline)
        os.kill(pids[worker - 1], signal.SIGKILL)
        try:
            conn.sendall(SEARCH)
            dropped = _read_until(conn, b"}", deadline)
        except ConnectionResetError:
            dropped = b""
    finally:
        conn.close()
    assert dropped == b"", dropped[:300]
    retry = httpx.post(f"{two_workers.url}/api/v1/memory/search", content=SEARCH,
                       headers={"Content-Type": "application/json"}, timeout=60)  # fmt: skip
    assert retry.status_code == 200, retry.text
