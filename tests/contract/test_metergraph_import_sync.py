"""``/v1/import-sync`` against a real ``triptych serve``: lease races (raw clients and two relays at once),
an expired lease taken over, renew/complete/abandon, and every refusal the endpoints answer. The leases
live in the SQLite metadata file on both engines, so the embedded engine stands for both here."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import SECRET, ServerProcess
from provider_server import ProviderServer
from relay_support import mint, relay, relay_command

SINCE = "2026-11-01T00:00:00Z"


def _server(tmp_path_factory: pytest.TempPathFactory, **env: str) -> ServerProcess:
    data = tmp_path_factory.mktemp("mgsync") / "data"
    return ServerProcess(data, {"AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET, **env}).start()


@pytest.fixture(scope="module")
def server(shared_metergraph_sqlite: ServerProcess) -> ServerProcess:
    """The session's shared server (tests/shared_metergraph.py); each test syncs a workspace of its own.
    Tests that need other lease settings start their own (``_server``)."""
    return shared_metergraph_sqlite


class Sync:
    """A raw client of the import-sync API with one app token."""

    def __init__(self, server: ServerProcess, token: str | None = None) -> None:
        self.url = server.url + "/v1/import-sync"
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def acquire(self, **body: Any) -> httpx.Response:
        return httpx.post(self.url + "/acquire", json=body, headers=self.headers, timeout=30)

    def lease(self, lease_id: str, action: str) -> httpx.Response:
        if action == "abandon":
            return httpx.delete(f"{self.url}/leases/{lease_id}", headers=self.headers, timeout=30)
        return httpx.post(f"{self.url}/leases/{lease_id}/{action}", headers=self.headers, timeout=30)

    def state(self, **params: str) -> httpx.Response:
        return httpx.get(self.url + "/state", params=params, headers=self.headers, timeout=30)


def _app(server: ServerProcess) -> Sync:
    return Sync(server, mint(server, f"ws-{uuid.uuid4().hex[:8]}"))


def _code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def test_raw_clients_acquiring_at_once_get_one_lease(server: ServerProcess) -> None:
    sync = _app(server)
    barrier = threading.Barrier(6)
    answers: list[httpx.Response] = []

    def race() -> None:
        barrier.wait()
        answers.append(sync.acquire(source="portkey", source_scope="ws-acme", initial_since=SINCE))

    threads = [threading.Thread(target=race) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [a.json() for a in answers if a.status_code == 201]
    busy = [a for a in answers if a.status_code == 409]
    assert len(won) == 1 and len(busy) == 5
    for refusal in busy:
        body = refusal.json()
        assert (body["status"], body["retry_at"], body["error"]["code"]) == (
            "busy", won[0]["lease_expires_at"], "lease_held",
        )  # fmt: skip
    assert set(won[0]) >= {"lease_id", "checkpoint_version", "window_start", "window_end", "lease_expires_at"}


def test_two_relays_syncing_one_stream_at_once_one_imports_and_the_other_exits_busy(
    server: ServerProcess, tmp_path: Path
) -> None:
    app = mint(server, f"ws-{uuid.uuid4().hex[:8]}")
    since = (datetime.now(UTC) - timedelta(hours=2)).replace(microsecond=0).isoformat()
    args = ["sync", "phoenix", "--project", "p", "--source-scope", "p", "--initial-since", since]
    with ProviderServer() as phoenix:
        phoenix.spans["p"] = []
        phoenix.span_gate = threading.Event()
        command, env = relay_command(server, app, args, tmp_path, PHOENIX_BASE_URL=phoenix.url)
        first = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)  # fmt: skip
        try:
            assert phoenix.span_waiting.wait(60)  # the first relay holds the lease, inside its pull
            second = relay(server, app, args, tmp_path, PHOENIX_BASE_URL=phoenix.url)
            assert second.returncode == 0, second.stderr  # busy is a clean no-op for cron
            assert "Another sync holds the lease; retry at" in second.stdout
        finally:
            phoenix.span_gate.set()
            out, err = first.communicate(timeout=120)
        assert first.returncode == 0, err
        assert "Imported window" in out and "pushed 0 row(s)" in out


def test_a_lease_is_renewed_completed_and_abandoned_and_ended_leases_are_refused(
    server: ServerProcess,
) -> None:
    sync = _app(server)
    lease = sync.acquire(source="langfuse", source_scope="proj", initial_since=SINCE, max_window_seconds=1800)
    assert lease.status_code == 201
    held = lease.json()
    assert (held["status"], held["window_start"], held["window_end"]) == (
        "acquired", "2026-11-01T00:00:00+00:00", "2026-11-01T00:30:00+00:00",
    )  # fmt: skip
    renewed = sync.lease(held["lease_id"], "renew")
    assert renewed.status_code == 200 and renewed.json()["lease_expires_at"] >= held["lease_expires_at"]
    done = sync.lease(held["lease_id"], "complete")
    assert done.status_code == 200
    assert done.json() == {"lease_id": held["lease_id"], "status": "completed",
                           "checkpoint": "2026-11-01T00:30:00+00:00", "checkpoint_version": 1}  # fmt: skip
    for action in ("renew", "complete", "abandon"):
        assert _code(sync.lease(held["lease_id"], action)) == (409, "lease_ended")
    following = sync.acquire(source="langfuse", source_scope="proj", max_window_seconds=1800).json()
    assert (following["window_start"], following["window_end"], following["checkpoint_version"]) == (
        "2026-11-01T00:25:00+00:00", "2026-11-01T01:00:00+00:00", 1,
    )  # fmt: skip
    gone = sync.lease(following["lease_id"], "abandon")
    assert gone.status_code == 200 and gone.json() == {
        "lease_id": following["lease_id"],
        "status": "abandoned",
    }
    again = sync.acquire(source="langfuse", source_scope="proj", max_window_seconds=1800).json()
    assert (again["window_start"], again["window_end"]) == (
        following["window_start"],
        following["window_end"],
    )
    state = sync.state(source="langfuse", source_scope="proj").json()
    assert (
        state["checkpoint"] == "2026-11-01T00:30:00+00:00"
        and state["lease"]["window_end"] == again["window_end"]
    )
    # Another workspace cannot see, renew or end this lease.
    stranger = _app(server)
    assert _code(stranger.lease(again["lease_id"], "complete")) == (404, "lease_not_found")
    for action in ("renew", "complete", "abandon"):
        assert _code(sync.lease("isl_unknown", action)) == (404, "lease_not_found")
    assert stranger.state(source="langfuse", source_scope="proj").json()["checkpoint"] is None


def test_an_expired_lease_is_taken_over_and_its_holder_can_no_longer_finish(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    short = _server(tmp_path_factory, MG_IMPORT_LEASE_SECONDS="1")
    try:
        sync = _app(short)
        first = sync.acquire(source="braintrust", source_scope="proj", initial_since=SINCE).json()
        taken = sync.acquire(source="braintrust", source_scope="proj")
        for _ in range(100):  # the lease runs out one second after its acquire
            if taken.status_code == 201:
                break
            assert _code(taken) == (409, "lease_held")
            time.sleep(0.05)  # nothing to wait on but the clock: the lease has a length, not an event
            taken = sync.acquire(source="braintrust", source_scope="proj")
        assert taken.status_code == 201
        second = taken.json()
        assert (second["window_start"], second["window_end"]) == (first["window_start"], first["window_end"])
        for action in ("renew", "complete", "abandon"):
            assert _code(sync.lease(first["lease_id"], action)) == (410, "lease_expired")
    finally:
        short.stop()


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"{not json", "invalid_argument"),
        (b"[]", "invalid_argument"),
        (b'{"source": "phoenix", "source_scope": "p", "initial_since": "2026-11-01T00:00:00Z", "x": 1}',
         "invalid_argument"),
        (b'{"source": "phoenix", "source_scope": "p", "initial_since": "2026-11-01T00:00:00"}', "invalid_argument"),
        (b'{"source": "phoenix", "source_scope": "p", "initial_since": "2026-11-01T00:00:00Z",'
         b' "max_window_seconds": 7200}', "invalid_argument"),
        (b'{"source": "", "source_scope": "p"}', "invalid_argument"),
        (b'{"source": "phoenix", "source_scope": "p"}', "initial_since_required"),
    ],
)  # fmt: skip
def test_a_bad_acquire_is_400_with_its_code(server: ServerProcess, content: bytes, code: str) -> None:
    sync = _app(server)
    response = httpx.post(sync.url + "/acquire", content=content, timeout=30,
                          headers={**sync.headers, "Content-Type": "application/json"})  # fmt: skip
    assert _code(response) == (400, code)
    assert sync.state(source="phoenix", source_scope="p").json()["lease"] is None


def test_refusals_of_auth_size_and_state_parameters(server: ServerProcess) -> None:
    anonymous, wrong = Sync(server), Sync(server, "mgapp_not-a-token")
    agent = Sync(server, mint(server, "ws-agent", "metadata"))  # a read key is not an ingest token
    for client in (anonymous, wrong, agent):
        assert _code(client.acquire(source="phoenix", source_scope="p", initial_since=SINCE)) == (
            401,
            "unauthenticated",
        )
        assert _code(client.lease("isl_x", "renew")) == (401, "unauthenticated")
        assert _code(client.state(source="phoenix", source_scope="p")) == (401, "unauthenticated")
    sync = _app(server)
    huge = httpx.post(sync.url + "/acquire", content=b'{"source": "' + b"x" * 70_000 + b'"}', timeout=30,
                      headers={**sync.headers, "Content-Type": "application/json"})  # fmt: skip
    assert _code(huge) == (413, "payload_too_large")
    assert _code(sync.state(source="phoenix")) == (400, "invalid_argument")
    assert _code(sync.state(source="phoenix", source_scope="p", extra="1")) == (400, "invalid_argument")
    fresh = sync.state(source="phoenix", source_scope="p")
    assert fresh.status_code == 200
    assert fresh.json() == {"source": "phoenix", "source_scope": "p", "checkpoint": None, "checkpoint_version": 0,
                            "last_completed_at": None, "lease": None}  # fmt: skip
    # A first window that starts in the future is caught up: 200, no lease.
    later = sync.acquire(source="phoenix", source_scope="p", initial_since="2099-01-01T00:00:00Z")
    assert later.status_code == 200 and later.json()["status"] == "caught_up"
