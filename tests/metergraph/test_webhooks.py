"""Incident webhooks underneath the CLI: endpoint rules, the outbox written with each incident transition,
signatures, retries against a receiver that is down, giving up, and removal; real detectors over real
ingest (on each engine) with a movable clock, and a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mg_support import NOW, agent, app, engine_settings
from webhook_receiver import Receiver

from triptych.metergraph.detectors import load_incident_settings
from triptych.metergraph.errors import InvalidArgument, NotFoundError
from triptych.metergraph.incidents import DB_FILE
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings
from triptych.metergraph.webhook_delivery import backoff_seconds
from triptych.metergraph.webhooks import check_url, load_webhook_settings

ZERO = NOW - timedelta(hours=40)
FAST = {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2, "poll_seconds": 0.05, "timeout_seconds": 2}


class World:
    """Metergraph on one engine with a movable clock; calls go in through the ingest service."""

    def __init__(self, tmp_path: Path, engine: dict[str, Any] | None = None, **webhook: Any) -> None:
        self.now = ZERO
        self.mg = Metergraph.open(
            tmp_path, load_metergraph_settings(**(engine or {})), clock=lambda: self.now,
            incident_settings=load_incident_settings(cost_min_usd=0.5),
            webhook_settings=load_webhook_settings(**{**FAST, **webhook}),
        )  # fmt: skip

    def hour(self, h: int, workspace: str = "w1", **fields: Any) -> None:
        self.hours([h], workspace, **fields)

    def hours(self, hours: Sequence[int], workspace: str = "w1", **fields: Any) -> None:
        """``hour`` for each of ``hours`` in one batch: with no sweep between them, what is left to judge
        is the same (the noted newest call, the stored calls), for one insert instead of one per hour."""
        rows = []
        for h in hours:
            start = ZERO + timedelta(hours=h)
            rows += [{"ts": (start + timedelta(minutes=i)).isoformat(), "route": "support", "provider": "openai",
                      "model": "gpt-4o", "input_tokens": 1000, "output_tokens": 100, "latency_ms": 500,
                      "environment": "prod", **fields} for i in range(30)]  # fmt: skip
            self.now = max(self.now, start + timedelta(minutes=31))
        self.mg.ingest.ingest_document(app(workspace), {"rows": rows})

    def sweep(self, workspace: str = "w1") -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = self.mg.incidents.list(agent(workspace), 200)["incidents"]
        return listed

    def cost_episode(self, workspace: str = "w1") -> None:
        """Opened (hour 24), updated (hour 25: a new window), resolved (hours 27 and 28 clear)."""
        self.hours(range(24), workspace)
        self.sweep(workspace)
        for h, tokens in ((24, 60_000), (25, 60_000), (26, 1000), (27, 1000), (28, 1000)):
            self.hour(h, workspace, input_tokens=tokens)
            self.sweep(workspace)


def eventually(read: Any, done: Any, timeout: float = 10.0) -> Any:
    """``read()`` once ``done`` holds for it (the sender records a batch's outcomes just after the
    receiver has answered)."""
    deadline = time.monotonic() + timeout
    while not done(value := read()):
        assert time.monotonic() < deadline, value
        time.sleep(0.02)
    return value


def settled(hooks: Any, workspace: str) -> list[dict[str, Any]]:
    """The workspace's deliveries once none is pending."""
    rows: list[dict[str, Any]] = eventually(
        lambda: hooks.deliveries(workspace), lambda rows: all(d["status"] != "pending" for d in rows)
    )
    return rows


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.hold = None
    r.stop()


@pytest.fixture
def world(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, engine_settings(request, engine))
    yield w
    w.mg.close()


@pytest.fixture
def sqlite_world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.mg.close()


def test_urls_are_https_or_plain_http_on_loopback_only() -> None:
    for url in ("https://hooks.slack.com/services/T/B/x", "http://127.0.0.1:9000/hook", "http://localhost/x",
                "http://[::1]:8080/", "http://127.8.0.1/"):  # fmt: skip
        assert check_url(url) == url
    with pytest.raises(InvalidArgument, match="only on loopback"):
        check_url("http://hooks.example.com/x")
    with pytest.raises(InvalidArgument, match="only on loopback"):
        check_url("http://10.0.0.5/x")
    for bad in ("ftp://example.com/x", "https://", "hooks.example.com", "https://h:notaport/", ""):
        with pytest.raises(InvalidArgument):
            check_url(bad)


def test_secrets_are_shown_once_and_stored_sealed(sqlite_world: World, tmp_path: Path) -> None:
    hooks = sqlite_world.mg.webhooks
    endpoint, secret = hooks.add("w1", "https://hooks.example.com/a", "on-call")
    assert secret.startswith("whsec_") and len(secret) > 40
    assert hooks.endpoints("w1") == [endpoint] and "secret" not in endpoint
    assert hooks.endpoints("w2") == []
    raw = sqlite3.connect(tmp_path / DB_FILE).execute("SELECT secret FROM webhook_endpoints").fetchone()[0]
    assert secret not in raw and secret.encode() not in (tmp_path / DB_FILE).read_bytes()
    assert (tmp_path / "metergraph-webhooks.key").stat().st_mode & 0o077 == 0
    assert hooks.remove(endpoint["id"]) == 0
    with pytest.raises(NotFoundError):
        hooks.remove(endpoint["id"])
    with pytest.raises(InvalidArgument, match="loopback"):
        hooks.add("w1", "http://hooks.example.com/a")
    assert hooks.endpoints() == []


def test_each_transition_reaches_the_receiver_signed(world: World, receiver: Receiver) -> None:
    hooks = world.mg.webhooks
    endpoint, secret = hooks.add("w1", receiver.url)
    other, _ = hooks.add("w2", receiver.url)  # another workspace's endpoint hears nothing of w1
    hooks.start()
    world.cost_episode()
    # Posted up to ``concurrency`` at once, so they may arrive in any order (decision 0077: no ordering
    # guarantee); the incident's generation in each body orders them.
    got = sorted(receiver.wait_accepted(3), key=lambda r: r.json()["incident"]["generation"])
    assert len(receiver.received) == 3
    assert all(r.verifies(secret) for r in got)
    bodies = [r.json() for r in got]
    assert [b["type"] for b in bodies] == ["incident.opened", "incident.updated", "incident.resolved"]
    assert [r.headers["x-metergraph-event"] for r in got] == [b["type"] for b in bodies]
    assert [r.delivery_id for r in got] == [b["delivery_id"] for b in bodies]
    assert len({b["event_id"] for b in bodies}) == 3 and {b["workspace"] for b in bodies} == {"w1"}
    incident = bodies[0]["incident"]
    # The same object metergraph_list_incidents gives, as it stood at the transition.
    [listed] = [i for i in world.sweep() if i["kind"] == "cost_spike" and i["grain"] == "model"]
    assert {b["incident"]["id"] for b in bodies} == {listed["id"]} and bodies[2]["incident"] == listed
    assert (incident["severity"], incident["status"], incident["occurrences"]) == ("critical", "open", 1)
    assert bodies[1]["incident"]["occurrences"] == 2 and bodies[2]["incident"]["status"] == "resolved"
    diagnosis = incident["diagnosis"]
    assert diagnosis["numbers"]["window_cost_usd"] > 3 * diagnosis["baseline"] > 0
    assert diagnosis["window"]["start"] == incident["window_start"]
    assert diagnosis["evidence"]["usage"]["tool"] == "metergraph_get_usage_aggregates"
    assert diagnosis["evidence"]["traces"]["arguments"]["route"] == "support"
    assert incident["title"] in bodies[0]["text"] and "opened" in bodies[0]["text"]
    assert "resolved" in bodies[2]["text"] and "`w1`" in bodies[2]["text"]
    # A forged or altered body does not verify.
    forged = type(got[0])(got[0].headers, got[0].body.replace(b"critical", b"warning"), 0, 200)
    assert not forged.verifies(secret)
    history = settled(hooks, "w1")
    assert [d["status"] for d in history] == ["delivered"] * 3
    assert {d["endpoint_id"] for d in history} == {endpoint["id"]}
    assert hooks.deliveries("w2") == [] and hooks.deliveries(endpoint_id=other["id"]) == []


def test_a_receiver_down_for_a_while_gets_every_event_once(sqlite_world: World, receiver: Receiver) -> None:
    hooks = sqlite_world.mg.webhooks
    _, secret = hooks.add("w1", receiver.url)
    receiver.status = 503
    hooks.start()
    sqlite_world.cost_episode()
    # Refused with 503 a few times each, then the receiver goes away altogether (connections refused) ...
    assert receiver.wait_for(lambda r: len({x.delivery_id for x in r.received}) == 3 and len(r.received) >= 9)
    receiver.stop()
    pending = hooks.deliveries("w1", status="pending")
    assert len(pending) == 3 and all(d["last_error"] for d in pending)
    assert receiver.wait_for(lambda r: False, timeout=0.5) is False  # retries hit a closed port meanwhile
    attempts = {d["id"]: d["attempts"] for d in hooks.deliveries("w1")}
    # ... and comes back on the same port.
    receiver.status = 200
    receiver.start()
    got = receiver.wait_accepted(3)
    assert sorted(r.delivery_id for r in got) == sorted(attempts)  # each event accepted exactly once
    assert all(r.verifies(secret) for r in got)
    assert [r.json()["type"] for r in sorted(got, key=lambda r: r.json()["incident"]["generation"])] == [
        "incident.opened", "incident.updated", "incident.resolved"]  # fmt: skip
    done = settled(hooks, "w1")
    assert {d["status"] for d in done} == {"delivered"}
    assert all(d["attempts"] > attempts[d["id"]] >= 3 for d in done)  # connection refusals were retried too


def test_a_delivery_is_given_up_after_the_configured_time(tmp_path: Path, receiver: Receiver) -> None:
    w = World(tmp_path, give_up_seconds=0.5)
    try:
        w.mg.webhooks.add("w1", receiver.url)
        receiver.status = 500
        w.mg.webhooks.start()
        w.hours(range(24))
        w.hour(24, input_tokens=60_000)
        w.sweep()
        assert receiver.wait_for(lambda r: len(r.received) >= 2)
        deadline_ok = receiver.wait_for(lambda r: False, timeout=1.0) is False
        [failed] = w.mg.webhooks.deliveries("w1", status="failed")
        assert (
            deadline_ok and failed["last_error"].startswith("gave up after") and failed["last_status"] == 500
        )
        assert failed["event_type"] == "incident.opened" and failed["next_attempt_at"] is None
    finally:
        w.mg.close()


def test_a_hanging_receiver_never_holds_up_a_sweep(sqlite_world: World, receiver: Receiver) -> None:
    import threading

    hooks = sqlite_world.mg.webhooks
    hooks.add("w1", receiver.url)
    receiver.hold = threading.Event()
    hooks.start()
    sqlite_world.cost_episode()  # every sweep commits while the first delivery is still unanswered
    assert receiver.wait_for(lambda r: False, timeout=0.2) is False and receiver.received == []
    assert [d["status"] for d in hooks.deliveries("w1")] == ["pending"] * 3
    receiver.hold.set()
    assert len(receiver.wait_accepted(3)) == 3


def test_removing_an_endpoint_cancels_what_it_had_pending(sqlite_world: World, receiver: Receiver) -> None:
    hooks = sqlite_world.mg.webhooks
    endpoint, _ = hooks.add("w1", receiver.url)
    sqlite_world.cost_episode()  # no sender started: the three events wait in the outbox
    assert len(hooks.deliveries("w1", status="pending")) == 3
    assert hooks.remove(endpoint["id"]) == 3
    hooks.start()
    assert [d["status"] for d in hooks.deliveries("w1")] == ["cancelled"] * 3
    assert receiver.wait_for(lambda r: False, timeout=0.3) is False and receiver.received == []


def test_no_endpoint_writes_no_delivery(sqlite_world: World) -> None:
    sqlite_world.cost_episode()
    assert sqlite_world.mg.webhooks.deliveries() == []


def test_the_test_event_reports_the_receivers_answer(sqlite_world: World, receiver: Receiver) -> None:
    hooks = sqlite_world.mg.webhooks
    endpoint, secret = hooks.add("w1", receiver.url)
    result = hooks.test(endpoint["id"])
    assert (result["status"], result["error"], result["response"]) == (200, None, '{"ok": true}')
    # The receiver records a request after it has answered it: wait for the record, not the answer.
    assert receiver.wait_for(lambda r: len(r.received) >= 1)
    [got] = receiver.received
    assert got.verifies(secret) and got.json()["type"] == "webhook.test" and got.json()["incident"] is None
    receiver.status = 410
    assert hooks.test(endpoint["id"])["error"] == "HTTP 410"
    assert [d["status"] for d in hooks.deliveries("w1")] == ["failed", "delivered"]
    with pytest.raises(NotFoundError):
        hooks.test("whe_missing")


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    import random

    s = load_webhook_settings(backoff_seconds=2, backoff_max_seconds=60)
    rng = random.Random(7)
    waits = [backoff_seconds(n, s, rng) for n in range(1, 10)]
    for n, wait in enumerate(waits, start=1):
        step = min(60, 2 * 2 ** (n - 1))
        assert step / 2 <= wait <= step
    assert len({round(w, 6) for w in waits}) == len(waits)


def test_finished_deliveries_are_forgotten_after_the_history_window(
    sqlite_world: World, receiver: Receiver
) -> None:
    hooks = sqlite_world.mg.webhooks
    endpoint, _ = hooks.add("w1", receiver.url)
    hooks.test(endpoint["id"])
    sqlite_world.cost_episode()  # three pending, no sender
    [finished] = [d for d in hooks.deliveries("w1") if d["status"] != "pending"]
    assert hooks.store.prune(int(time.time() * 1000) - 60_000) == 0  # ended a moment ago: kept
    assert hooks.store.prune(int(time.time() * 1000) + 1) == 1  # pending rows are never pruned
    assert [d["status"] for d in hooks.deliveries("w1")] == ["pending"] * 3
    assert finished["event_type"] == "webhook.test"


def test_an_endpoint_whose_secret_no_longer_opens_fails_alone(
    sqlite_world: World, receiver: Receiver, tmp_path: Path
) -> None:
    hooks = sqlite_world.mg.webhooks
    good, secret = hooks.add("w1", receiver.url)
    broken, _ = hooks.add("w1", receiver.url + "?broken")
    with sqlite3.connect(tmp_path / DB_FILE) as db:  # sealed under another endpoint's id: it cannot open
        db.execute("UPDATE webhook_endpoints SET secret = (SELECT secret FROM webhook_endpoints WHERE id = ?)"
                   " WHERE id = ?", (good["id"], broken["id"]))  # fmt: skip
    hooks.start()
    sqlite_world.cost_episode()
    got = receiver.wait_accepted(3)
    assert all(r.verifies(secret) for r in got) and len(receiver.received) == 3
    failing = eventually(
        lambda: hooks.deliveries(endpoint_id=broken["id"]), lambda rows: all(d["last_error"] for d in rows)
    )
    assert len(failing) == 3 and all(d["last_error"].startswith("not sent: InvalidTag") for d in failing)


def test_two_processes_sharing_the_data_directory_send_each_delivery_once(
    sqlite_world: World, receiver: Receiver, tmp_path: Path
) -> None:
    # A second Metergraph on the same data directory stands for another server worker: its own
    # connections, its own sender polling the same outbox.
    other = Metergraph.open(
        tmp_path, load_metergraph_settings(), webhook_settings=load_webhook_settings(**FAST)
    )
    try:
        for workspace in ("w1", "w2"):
            sqlite_world.mg.webhooks.add(workspace, receiver.url)
            other.webhooks.add(workspace, receiver.url + "?second")
        sqlite_world.mg.webhooks.start()
        other.webhooks.start()
        sqlite_world.cost_episode("w1")
        sqlite_world.cost_episode("w2")
        got = receiver.wait_accepted(12)
        assert len(receiver.received) == 12 and len({r.delivery_id for r in got}) == 12
        rows = settled(other.webhooks, "w1") + settled(other.webhooks, "w2")
        assert [d["attempts"] for d in rows] == [1] * 12
    finally:
        other.close()


def test_names_from_ingest_cannot_ping_a_chat_channel(sqlite_world: World, receiver: Receiver) -> None:
    hooks = sqlite_world.mg.webhooks
    hooks.add("w1", receiver.url)
    hooks.start()
    sqlite_world.hours(range(24), model="<!channel> & <https://evil.example|click>")
    sqlite_world.hour(24, model="<!channel> & <https://evil.example|click>", input_tokens=60_000)
    sqlite_world.sweep()
    body = receiver.wait_accepted(1)[0].json()  # the model has no price: an unpriced_model incident
    assert "<!channel>" in body["incident"]["title"]  # the data as it is
    assert (
        "<" not in body["text"]
        and "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;" in body["text"]
    )


def test_which_writes_are_events() -> None:
    from dataclasses import replace

    from triptych.metergraph.incident_store import Incident, transition

    base = Incident("inc_1", "w1", "cost_spike", "model", "[]", None, None, None, None, "open", "warning", "t",
                    0, 1, 0, 0, None, 1, 1, 0, 0, {})  # fmt: skip

    def stored(status: str = "open", severity: str = "warning", occurrences: int = 1) -> sqlite3.Row:
        db = sqlite3.connect(":memory:")
        db.row_factory = sqlite3.Row
        row: sqlite3.Row = db.execute(
            "SELECT ? AS status, ? AS severity, ? AS occurrences", (status, severity, occurrences)
        ).fetchone()
        return row

    assert transition(None, base, written=True) == "incident.opened"
    assert transition(None, base, written=False) is None  # another worker opened it first
    assert transition(stored(), replace(base, occurrences=2), True) == "incident.updated"
    assert transition(stored(), replace(base, severity="critical"), True) == "incident.updated"
    assert transition(stored(), replace(base, generation=2, clear_windows=1), True) is None  # a clear window
    assert transition(stored(), replace(base, generation=2), True) is None  # the same window re-judged
    assert transition(stored(), replace(base, status="resolved"), True) == "incident.resolved"
    assert transition(stored("resolved"), replace(base, status="resolved"), True) is None
