"""``kill -9`` during concurrent writes on each surface, then a restart on the same data directory:
every write the server acknowledged before it died is there afterwards. ``TRIPTYCH_CRASH_SECONDS``
sets how long the writers run before the kill (CI: 3; bench/robustness.py: longer, several rounds)."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SECRET, ServerProcess, token
from robustness.report import record
from robustness.target import ClientThread, error_code

from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

SECONDS = float(os.environ.get("TRIPTYCH_CRASH_SECONDS", "3"))
WRITERS = 3


def alice() -> dict[str, str]:
    """Alice's headers, minted when used (a token minted at import may expire before a long suite gets here)."""
    return {"Authorization": f"Bearer {token(user='alice', workspaces=['crash'])}"}


@pytest.fixture
def crash_server(tmp_path: Path) -> Iterator[ServerProcess]:
    from hadron.world import build_world

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    build_world(data_dir)
    server = ServerProcess(data_dir, {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET}).start()
    yield server
    server.stop()


def _app_token(data_dir: Path) -> str:
    mg = Metergraph.open(data_dir, load_metergraph_settings())
    try:
        return mg.keys.create_app_token("crash")[1]
    finally:
        mg.close()


# What the server answered instead of an acknowledgement, by status or error code: a test that sees no
# write says why (an expired token once looked like a hung server).
REFUSALS: Counter[str] = Counter()


# Each writer writes until the server dies, appending what the server acknowledged.
Writer = Callable[[ServerProcess, int, list[Any], threading.Event], None]


def metronix_writer(server: ServerProcess, i: int, acked: list[Any], stop: threading.Event) -> None:
    with httpx.Client(base_url=server.url, headers=alice(), timeout=30) as http:
        n = 0
        while not stop.is_set():
            n += 1
            body = {
                "content": f"crash note {i}-{n} {uuid.uuid4().hex}",
                "agent_id": "crash",
                "workspace_id": "crash",
            }
            try:
                response = http.post("/api/v1/memory/records", json=body)
            except httpx.HTTPError:
                return
            if response.status_code == 201:
                acked.append(response.json()["id"])
            else:
                REFUSALS[str(response.status_code)] += 1


def hadron_writer(server: ServerProcess, i: int, acked: list[Any], stop: threading.Event) -> None:
    client = ClientThread(server.url + "/hadron/mcp", alice())
    try:
        n = 0
        while not stop.is_set():
            n += 1
            loc = f"hrn:node:acme.com:specs:crash{i}x{n}x{uuid.uuid4().hex[:6]}"
            try:
                result = client.run(
                    lambda c, loc=loc: c.call_tool("hadron_create_node", {"loc": loc, "name": loc}), 15
                )
            except BaseException:  # the server died mid-call (the client's task is cancelled): stop
                return
            code = error_code(result)
            if code is None:
                acked.append(loc)
            else:
                REFUSALS[code] += 1
    finally:
        client.close()


def metergraph_writer(server: ServerProcess, i: int, acked: list[Any], stop: threading.Event) -> None:
    app = server.env["APP_TOKEN"]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {app}"}, timeout=30) as http:
        while not stop.is_set():
            ids = [f"req-{i}-{uuid.uuid4().hex}" for _ in range(20)]
            rows = [{"ts": datetime.now(UTC).isoformat(), "route": "crash", "provider": "openai", "model": "gpt-4o",
                     "input_tokens": 10, "output_tokens": 5, "latency_ms": 100, "request_id": r} for r in ids]  # fmt: skip
            try:
                response = http.post("/v1/ingest", json={"schema_version": 1, "rows": rows})
            except httpx.HTTPError:
                return
            if response.status_code == 202:
                acked.extend(ids)
            else:
                REFUSALS[str(response.status_code)] += 1


def metronix_missing(server: ServerProcess, acked: list[Any]) -> list[Any]:
    with httpx.Client(base_url=server.url, headers=alice(), timeout=30) as http:
        return [
            i
            for i in acked
            if http.get(f"/api/v1/memory/records/{i}", params={"workspace_id": "crash"}).status_code != 200
        ]


def hadron_missing(server: ServerProcess, acked: list[Any]) -> list[Any]:
    client = ClientThread(server.url + "/hadron/mcp", alice())
    try:
        return [loc for loc in acked if error_code(client.call("hadron_get_node", {"loc": loc})) is not None]
    finally:
        client.close()


def metergraph_missing(server: ServerProcess, acked: list[Any]) -> list[Any]:
    mg = Metergraph.open(server.data_dir, load_metergraph_settings())
    try:
        stored = {row["request_id"] for row in mg.store.raw_calls("crash")}
    finally:
        mg.close()
    return [r for r in acked if r not in stored]


SURFACES: dict[str, tuple[Writer, Callable[[ServerProcess, list[Any]], list[Any]]]] = {
    "metronix": (metronix_writer, metronix_missing),
    "hadron": (hadron_writer, hadron_missing),
    "metergraph": (metergraph_writer, metergraph_missing),
}


@pytest.mark.parametrize("surface", list(SURFACES))
def test_every_acknowledged_write_survives_kill_9(crash_server: ServerProcess, surface: str) -> None:
    writer, missing = SURFACES[surface]
    REFUSALS.clear()
    crash_server.env["APP_TOKEN"] = _app_token(crash_server.data_dir)
    acked: list[list[Any]] = [[] for _ in range(WRITERS)]
    stop = threading.Event()
    threads = [
        threading.Thread(target=writer, args=(crash_server, i, acked[i], stop)) for i in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    # The clock starts once writes are being acknowledged (a loaded machine takes a while to connect).
    deadline = time.monotonic() + 120
    while sum(map(len, acked)) < WRITERS and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(SECONDS)
    assert crash_server.process is not None
    crash_server.process.kill()  # SIGKILL: no shutdown hook runs
    crash_server.process.wait()
    stop.set()
    for thread in threads:
        thread.join(60)
    written = [item for part in acked for item in part]
    assert written, f"no {surface} write was acknowledged in {SECONDS} s; refusals: {dict(REFUSALS)}"
    crash_server.start()  # the same data directory, after the crash
    lost = missing(crash_server, written)
    record(f"kill-9-{surface}", acknowledged=len(written), lost=len(lost), seconds=SECONDS)
    assert not lost, f"{len(lost)} of {len(written)} acknowledged {surface} writes lost: {lost[:5]}"
