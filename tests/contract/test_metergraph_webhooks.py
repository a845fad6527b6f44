"""Incident webhooks against a real `triptych serve`: endpoints managed with `triptych metergraph webhook`,
traffic in through `/v1/ingest`, incidents judged when `metergraph_list_incidents` is called through the
official MCP client, and events posted by the server to a real receiver on 127.0.0.1 — including after
the server was killed with SIGKILL between the commit and the delivery, and in the middle of one.

The outbox lives in the data directory's SQLite file on either telemetry engine (the detectors' path on
ClickHouse is covered in tests/metergraph/test_webhooks.py), so these run on the embedded engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SECRET, TRIPTYCH, ServerProcess, bearer, free_port, mcp_session, open_metergraph
from webhook_receiver import Receiver

HOUR = timedelta(hours=1)
ENV = {"AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET, "MG_INCIDENT_TICK_SECONDS": "3600",
       "MG_INCIDENT_COST_MIN_USD": "0.5", "MG_AGENT_RATE_PER_MINUTE": "0", "MG_WEBHOOK_BACKOFF_SECONDS": "0.1",
       "MG_WEBHOOK_BACKOFF_MAX_SECONDS": "0.5", "MG_WEBHOOK_POLL_SECONDS": "0.2",
       "MG_WEBHOOK_TIMEOUT_SECONDS": "1"}  # fmt: skip


def webhook(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPTYCH, "metergraph", "webhook", *args, "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **ENV},
    )  # fmt: skip


class World:
    """One workspace with an ingest token and an agent key; an hour grid ending in the previous hour."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.workspace = "hook-" + uuid.uuid4().hex[:8]
        mg = open_metergraph(server)
        try:
            self.app = mg.keys.create_app_token(self.workspace)[1]
            self.key = mg.keys.create_agent_key(self.workspace, "metadata", None)[1]
        finally:
            mg.close()
        self.zero = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 60 * HOUR

    def hours(self, hours: range, **fields: Any) -> None:
        """30 calls in each grid hour, ingested as one batch."""
        rows = [{"ts": (self.zero + h * HOUR + timedelta(minutes=i + 1)).isoformat(), "route": "support",
                 "provider": "openai", "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 100,
                 "latency_ms": 400, "status": "success", "environment": "production", **fields}
                for h in hours for i in range(30)]  # fmt: skip
        response = httpx.post(
            self.server.url + "/v1/ingest", json={"rows": rows}, headers=bearer(self.app), timeout=60
        )
        assert response.status_code == 202, response.text

    async def incidents(self) -> list[dict[str, Any]]:
        async with mcp_session(self.server.url + "/v1/agent/mcp", bearer(self.key)) as mcp:
            result = await mcp.call("metergraph_list_incidents", limit=50)
        assert not result.is_error, result.data
        listed: list[dict[str, Any]] = result.data["incidents"]
        return listed

    async def spike(self) -> dict[str, Any]:
        """A day of baseline, then an expensive hour: the sweep of the read opens a cost spike."""
        self.hours(range(24))
        self.hours(range(24, 25), input_tokens=60_000)
        [opened] = [i for i in await self.incidents() if i["kind"] == "cost_spike" and i["grain"] == "model"]
        return opened


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port())
    yield r
    if r.hold is not None:
        r.hold.set()
    r.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def deliveries(data_dir: Path, workspace: str) -> list[dict[str, Any]]:
    done = webhook(data_dir, "deliveries", "--workspace", workspace)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def settled(data_dir: Path, workspace: str, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The deliveries once none is pending (the sender records an outcome just after the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = deliveries(data_dir, workspace)
        if all(d["status"] != "pending" for d in rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)


async def test_an_opened_incident_reaches_the_receiver_signed(data_dir: Path, receiver: Receiver) -> None:
    server = ServerProcess(data_dir, ENV).start()
    try:
        receiver.start()
        w = World(server)
        refused = webhook(data_dir, "add", "http://hooks.example.com/x", "--workspace", w.workspace)
        assert refused.returncode == 2 and "only on loopback" in refused.stderr and refused.stdout == ""
        added = webhook(data_dir, "add", receiver.url, "--workspace", w.workspace, "--description", "on-call")
        assert added.returncode == 0, added.stderr
        secret = added.stdout.strip()
        [endpoint] = [json.loads(line) for line in webhook(data_dir, "list").stdout.splitlines()]
        assert (endpoint["url"], endpoint["workspace"], endpoint["description"]) == (
            receiver.url, w.workspace, "on-call")  # fmt: skip
        assert secret not in json.dumps(endpoint)
        # `test` sends a signed test event and prints the receiver's answer.
        tested = webhook(data_dir, "test", endpoint["id"])
        assert tested.returncode == 0, tested.stderr
        answer = json.loads(tested.stdout)
        assert (answer["status"], answer["response"]) == (200, '{"ok": true}')
        assert receiver.wait_for(lambda r: len(r.received) >= 1)  # recorded after it answered
        [test_event] = receiver.received
        assert test_event.verifies(secret) and test_event.json()["type"] == "webhook.test"

        opened = await w.spike()
        [_, got] = receiver.wait_accepted(2)
        assert got.verifies(secret)
        body = got.json()
        assert (body["type"], body["workspace"], body["incident"]) == ("incident.opened", w.workspace, opened)
        assert got.headers["x-metergraph-delivery"] == body["delivery_id"]
        history = settled(data_dir, w.workspace)
        assert [(d["event_type"], d["incident_id"]) for d in history] == [
            ("incident.opened", opened["id"]), ("webhook.test", None)]  # fmt: skip
        # The workspace's page shows the endpoint (scheme and host only) and its deliveries.
        with httpx.Client(base_url=server.url, timeout=30) as web:
            assert web.post("/app/sign-in", data={"key": w.key}).status_code == 303
            page = web.get(f"/app/w/{w.workspace}/webhooks")
        assert page.status_code == 200 and endpoint["id"] in page.text
        assert f"http://127.0.0.1:{receiver.port}/…" in page.text and receiver.url not in page.text
        assert (
            body["delivery_id"] in page.text and "incident.opened" in page.text and opened["id"] in page.text
        )
        assert "2 delivered, 0 pending, 0 failed" in page.text
        removed = webhook(data_dir, "remove", endpoint["id"])
        assert removed.returncode == 0 and webhook(data_dir, "list").stdout == ""
        assert webhook(data_dir, "remove", endpoint["id"]).returncode == 1
    finally:
        server.stop()


async def test_kill_9_between_commit_and_delivery_loses_nothing(data_dir: Path, receiver: Receiver) -> None:
    server = ServerProcess(data_dir, ENV).start()
    try:
        w = World(server)
        added = webhook(data_dir, "add", receiver.url, "--workspace", w.workspace)
        secret = added.stdout.strip()
        opened = await w.spike()  # committed with its delivery; the receiver is not listening yet
        deadline = time.monotonic() + 30
        while not (pending := deliveries(data_dir, w.workspace)[0])["last_error"]:
            assert time.monotonic() < deadline, pending
            time.sleep(0.1)
        # The failure shows in the CLI: refused, to be retried.
        assert (pending["status"], pending["incident_id"]) == ("pending", opened["id"])
        assert pending["last_error"].startswith("ConnectError") and pending["next_attempt_at"] is not None
    finally:
        assert server.process is not None
        server.process.kill()  # SIGKILL: no shutdown hook runs
        server.process.wait()
    receiver.start()
    restarted = ServerProcess(data_dir, ENV).start()
    try:
        [got] = receiver.wait_accepted(1)
        assert got.verifies(secret) and got.delivery_id == pending["id"]
        assert got.json()["incident"]["id"] == opened["id"]
    finally:
        restarted.stop()


async def test_kill_9_in_the_middle_of_a_delivery_sends_it_again(data_dir: Path, receiver: Receiver) -> None:
    import threading

    receiver.hold = threading.Event()  # the receiver takes the request and does not answer yet
    receiver.start()
    server = ServerProcess(data_dir, ENV).start()
    try:
        w = World(server)
        secret = webhook(data_dir, "add", receiver.url, "--workspace", w.workspace).stdout.strip()
        await w.spike()
        assert receiver.wait_for(lambda r: len(r.arrived) == 1)
    finally:
        assert server.process is not None
        server.process.kill()
        server.process.wait()
    receiver.hold.set()  # its answer goes nowhere: the server never learnt the delivery was accepted
    receiver.hold = None
    restarted = ServerProcess(data_dir, ENV).start()
    try:
        # Sent again, with the same delivery id, once the dead process's lease expires.
        assert receiver.wait_for(lambda r: len(r.arrived) == 2, timeout=30)
        [first, second] = receiver.wait_accepted(2)
        assert first.delivery_id == second.delivery_id and second.verifies(secret)
        assert [d["status"] for d in settled(data_dir, w.workspace)] == ["delivered"]
    finally:
        restarted.stop()
