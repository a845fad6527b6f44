"""``kill -9`` during concurrent writes on every surface at once, then a restart on the same data directory:
every write the server acknowledged before it died is there afterwards, and every Metronix record and
Hadron node the engine holds is whole (those committed but not yet acknowledged too). The same on
PostgreSQL (server mode) for Metronix and Hadron, whose data lives there. ``TRIPTYCH_CRASH_SECONDS``
sets how long the writers run before the kill (CI: 3; bench/robustness.py: longer, several rounds)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
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
def crash_server(tmp_path: Path, database_url: str | None) -> Iterator[ServerProcess]:
    """A server on the data directory, or in server mode on a fresh PostgreSQL database."""
    from hadron.world import build_world, engine

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    build_world(data_dir, database_url)
    env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET, **engine(database_url)}
    server = ServerProcess(data_dir, env).start()
    yield server
    server.stop()


def stored(server: ServerProcess, database: str, statement: str) -> list[Any]:
    """The first column of ``statement``'s rows, read from the engine the server keeps ``database``'s
    data in: its PostgreSQL database, or the data directory's SQLite file (the SQL is the same)."""
    url = server.env.get("TRIPTYCH_DATABASE_URL")
    if url:
        with psycopg.connect(url) as conn:
            return [r[0] for r in conn.execute(statement.encode()).fetchall()]
    with closing(sqlite3.connect(server.data_dir / database)) as conn:
        return [r[0] for r in conn.execute(statement).fetchall()]


def _app_token(server: ServerProcess) -> str:
    mg = Metergraph.open(
        server.data_dir, load_metergraph_settings(), database_url=server.env.get("TRIPTYCH_DATABASE_URL")
    )
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
        stored = {row["request_id"] for row in mg.calls.raw_calls("crash")}
    finally:
        mg.close()
    return [r for r in acked if r not in stored]


def metronix_stored(server: ServerProcess) -> tuple[list[Any], list[Any]]:
    """(every record of the workspace the engine holds, those not whole: no vector)."""
    query = "SELECT id FROM memory_records WHERE workspace_id = 'crash'"
    return stored(server, "metronix.db", query), stored(
        server, "metronix.db", query + " AND embedding IS NULL"
    )


def hadron_stored(server: ServerProcess) -> tuple[list[Any], list[Any]]:
    """(every node the writers' memory holds, nodes without their revision and revisions without their node)."""
    nodes = stored(
        server,
        "hadron.db",
        "SELECT 'hrn:node:acme.com:specs:' || n.loc FROM nodes n JOIN memories m ON m.id = n.memory_id"
        " WHERE m.slug = 'specs' AND n.loc LIKE 'crash%'",
    )
    broken = stored(
        server,
        "hadron.db",
        "SELECT n.loc FROM nodes n WHERE NOT EXISTS (SELECT 1 FROM node_revisions r WHERE r.node_id = n.id)"
        " UNION ALL SELECT r.node_id FROM node_revisions r"
        " WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = r.node_id)",
    )
    return nodes, broken


Missing = Callable[[ServerProcess, list[Any]], list[Any]]
Stored = Callable[[ServerProcess], tuple[list[Any], list[Any]]]

SURFACES: dict[str, tuple[Writer, Missing]] = {
    "metronix": (metronix_writer, metronix_missing),
    "hadron": (hadron_writer, hadron_missing),
    "metergraph": (metergraph_writer, metergraph_missing),
}


# Half-written rows: those the engine holds that a restarted server does not serve whole.
STORED: dict[str, Stored] = {"metronix": metronix_stored, "hadron": hadron_stored}


def test_every_acknowledged_write_survives_kill_9(crash_server: ServerProcess) -> None:
    crash_and_check(crash_server, list(SURFACES), "kill-9-{surface}")


# Server mode keeps Metronix and Hadron in PostgreSQL; Metergraph's calls stay in the data directory (tested
# above).
@pytest.mark.engines("postgresql")
def test_every_acknowledged_write_survives_kill_9_on_postgresql(crash_server: ServerProcess) -> None:
    crash_and_check(crash_server, list(STORED), "kill-9-{surface}-postgresql")


def crash_and_check(crash_server: ServerProcess, surfaces: list[str], name: str) -> None:
    """Writers on every surface at once until ``kill -9``, a restart, then each surface's acknowledged
    writes and nothing half-written. One crash for all the surfaces, each judged and recorded on its own
    (``name`` with the surface): a server and its restart per surface cost two starts each, and each
    surface's writes die mid-flight as they did alone, beside the others'."""
    REFUSALS.clear()
    if "metergraph" in surfaces:
        crash_server.env["APP_TOKEN"] = _app_token(crash_server)
    acked: dict[str, list[list[Any]]] = {s: [[] for _ in range(WRITERS)] for s in surfaces}
    stop = threading.Event()
    threads = [
        threading.Thread(target=SURFACES[s][0], args=(crash_server, i, acked[s][i], stop))
        for s in surfaces
        for i in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    # The clock starts once every surface's writes are being acknowledged (a loaded machine takes a while
    # to connect).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(sum(map(len, acked[s])) < WRITERS for s in surfaces):
        time.sleep(0.05)
    time.sleep(SECONDS)
    assert crash_server.process is not None
    crash_server.process.kill()  # SIGKILL: no shutdown hook runs
    crash_server.process.wait()
    stop.set()
    for thread in threads:
        thread.join(60)
    written = {s: [item for part in acked[s] for item in part] for s in surfaces}
    for surface in surfaces:
        assert written[surface], (
            f"no {surface} write was acknowledged in {SECONDS} s; refusals: {dict(REFUSALS)}"
        )
    crash_server.start()  # the same data directory (and database), after the crash
    for surface in surfaces:
        check(crash_server, surface, written[surface], name.format(surface=surface))


def check(crash_server: ServerProcess, surface: str, written: list[Any], name: str) -> None:
    """Every acknowledged ``surface`` write is there after the restart, and nothing is half-written."""
    missing = SURFACES[surface][1]
    lost = missing(crash_server, written)
    record(name, acknowledged=len(written), lost=len(lost), seconds=SECONDS)
    assert not lost, f"{len(lost)} of {len(written)} acknowledged {surface} writes lost: {lost[:5]}"
    if surface in STORED:
        held, broken = STORED[surface](crash_server)
        assert set(written) <= set(held)
        # Committed as the server died, before the acknowledgement left: whole all the same.
        unacknowledged = sorted(set(held) - set(written))
        unreadable = missing(crash_server, unacknowledged)
        assert not broken and not unreadable, f"half-written {surface} rows: {broken[:5]} {unreadable[:5]}"
