"""Holds versus liveness on the service layer, with a clock the test moves: idle is not ended, an
idle session no longer refuses WORKER_TAKEN but the hold stands, an ended stint's last-driven instant
is capped at its end, and an auto-expired session falls back to its start and usage events; and the
conflict rules under concurrent callers (one name, one worker)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness import run_threads

from triptych.hadron.access import AccessPolicy
from triptych.hadron.domain.team import IDLE_WINDOW
from triptych.hadron.engines import open_stores
from triptych.hadron.errors import TeamRefusal
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.services.sessions import SessionEnd, SessionService, SessionStart
from triptych.hadron.services.tenancy import TenancyAdmin
from triptych.hadron.services.workers import WorkerService
from triptych.hadron.team_store import TeamSql

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> str:
        return self.now.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@dataclass
class Team:
    clock: Clock
    store: TeamSql
    sessions: SessionService
    workers: WorkerService
    alice: HadronCaller
    bob: HadronCaller

    def state(self) -> SessionState:
        return SessionState("mcp", "x")


pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture
def team(tmp_path: Path, database_url: str | None) -> Iterator[Team]:
    stores = open_stores(tmp_path / "hadron.db", database_url, None, None)
    tenancy = stores.tenancy
    admin = TenancyAdmin(tenancy)
    admin.create_org("acme.com")
    for handle in ("alice", "bob"):
        admin.create_user(handle)
        admin.add_org_member("acme.com", handle, "CONTRIBUTOR")
    admin.create_app("crew", "Crew", "acme.com", None)
    clock = Clock()
    store = stores.team
    agents = AgentService(tenancy, store, clock)
    agents.install("hrn:app:acme.com:crew", "team", team=True)
    agents.install("hrn:app:acme.com:crew", "dev", persona_role="developer")
    access = AccessPolicy(tenancy)
    selections = SelectionService(tenancy, access)
    sessions = SessionService(tenancy, store, access, selections, clock)
    workers = WorkerService(tenancy, store, access, selections, agents, sessions, clock)

    def user(handle: str) -> HadronCaller:
        return HadronCaller("user", handle, user=tenancy.user_by_handle(handle))

    yield Team(clock, store, sessions, workers, user("alice"), user("bob"))
    stores.close()


def _bind(team: Team, caller: HadronCaller, worker: str, force: bool = False, **extra: str) -> str:
    state = team.state()
    app = team.workers.app_context(caller, state, "hrn:app:acme.com:crew", None)
    found = team.workers.resolve(caller, state, worker, app.urn, None)
    session, _ = team.sessions.start(caller, state, app, SessionStart("stint", **extra), found, force)  # type: ignore[arg-type]
    return session.id


def _cast(team: Team, name: str) -> None:
    team.workers.cast(team.alice, team.state(), name, "developer", None, "hrn:app:acme.com:crew", None)


def test_an_idle_session_stops_reading_as_live_without_ending_and_stops_refusing_taken(team: Team) -> None:
    _cast(team, "Iris")
    first = _bind(team, team.alice, "Iris")
    with pytest.raises(TeamRefusal) as taken:
        _bind(team, team.alice, "Iris")
    assert taken.value.code == "WORKER_TAKEN"
    team.clock.advance(IDLE_WINDOW + timedelta(seconds=1))
    iris = team.workers.resolve(team.alice, team.state(), "Iris", "hrn:app:acme.com:crew", None)
    line = team.workers.line(team.alice, iris)
    assert line.live_session_id is None and line.held_by_you
    stored = team.store.session(first)
    assert stored is not None and stored.ended_at is None  # idle is not ended
    second = _bind(team, team.alice, "Iris")  # no longer taken: the holder binds from another host
    assert second != first
    # The hold is untouched by idleness: bob is refused, with or without force.
    team.clock.advance(IDLE_WINDOW * 10)
    for force in (False, True):
        with pytest.raises(TeamRefusal) as held:
            _bind(team, team.bob, "Iris", force=force)
        assert held.value.code == "WORKER_HELD"


def test_a_heartbeat_keeps_a_session_live_past_the_idle_window(team: Team) -> None:
    _cast(team, "Dara")
    sid = _bind(team, team.alice, "Dara")
    for _ in range(3):
        team.clock.advance(IDLE_WINDOW - timedelta(minutes=1))
        team.sessions.touch(team.alice, sid)  # what passing session to any team tool does
    dara = team.workers.resolve(team.alice, team.state(), "Dara", "hrn:app:acme.com:crew", None)
    assert team.workers.line(team.alice, dara).live_session_id == sid


def test_late_writes_after_a_stint_ends_do_not_count_as_driving(team: Team) -> None:
    _cast(team, "Pia")
    sid = _bind(team, team.alice, "Pia")
    team.clock.advance(timedelta(minutes=5))
    team.sessions.end(team.alice, sid, SessionEnd(handoff="done"))
    ended_at = team.clock()
    team.clock.advance(timedelta(days=3))
    team.sessions.touch(team.alice, sid)  # a late read: the session has ended, nothing moves
    team.store.add_event(sid, team.clock(), "work", "o/r#1")  # a late work record
    pia = team.workers.resolve(team.alice, team.state(), "Pia", "hrn:app:acme.com:crew", None)
    assert team.workers.line(team.alice, pia).last_driven_at == ended_at


def test_an_auto_expired_session_falls_back_to_its_start_and_usage_events(team: Team) -> None:
    _cast(team, "Juno")
    expires = (T0 + timedelta(hours=1)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    sid = _bind(team, team.alice, "Juno", expires_at=expires)
    team.clock.advance(timedelta(minutes=10))
    usage = team.clock()
    team.store.add_event(sid, usage, "node", "n1")
    team.clock.advance(timedelta(minutes=10))
    team.sessions.touch(team.alice, sid)  # a heartbeat the cleanup write will overwrite
    team.clock.advance(timedelta(hours=2))
    team.sessions.expire()
    stored = team.store.session(sid)
    assert stored is not None and stored.end_reason == "expired" and stored.last_active_at == team.clock()
    juno = team.workers.resolve(team.alice, team.state(), "Juno", "hrn:app:acme.com:crew", None)
    assert (
        team.workers.line(team.alice, juno).last_driven_at == usage
    )  # not the cleanup, not the lost heartbeat


def test_a_casting_nobody_picked_up_reads_never_driven(team: Team) -> None:
    _cast(team, "Wren")
    wren = team.workers.resolve(team.bob, team.state(), "Wren", "hrn:app:acme.com:crew", None)
    line = team.workers.line(team.bob, wren)
    assert line.last_driven_at is None and line.held_by is None and line.live_session_id is None


def test_sessions_started_in_one_instant_list_newest_first_and_in_start_order(team: Team) -> None:
    # The clock stands still: every session starts at one instant, and only insertion order tells them apart.
    for name in ("Ada", "Bo", "Cy"):
        _cast(team, name)
    started = [_bind(team, team.alice, name) for name in ("Ada", "Bo", "Cy")]
    assert [s.id for s in team.sessions.whoami(team.alice, 10, False)] == started[::-1]
    assert [s.id for s in team.sessions.whoami(team.alice, 2, False)] == started[:0:-1]
    ada = team.workers.resolve(team.alice, team.state(), "Ada", "hrn:app:acme.com:crew", None)
    again = _bind(team, team.alice, "Ada", force=True)  # same instant: takes over the first session
    assert [s.id for s in team.store.worker_sessions(ada.id)] == [started[0], again]
    assert team.workers.line(team.alice, ada).live_session_id == again


def test_casting_one_name_from_several_threads_at_once_makes_one_worker_and_refuses_the_rest(
    team: Team,
) -> None:
    for round_ in range(5):
        name = f"Twin{round_}"
        start = threading.Barrier(4)

        def cast(i: int, name: str = name, start: threading.Barrier = start) -> None:
            start.wait()
            team.workers.cast(team.alice, team.state(), name.upper() if i % 2 else name, "developer", None,
                              "hrn:app:acme.com:crew", None)  # fmt: skip

        errors = run_threads(cast, 4)
        assert len(errors) == 3 and all(isinstance(e, TeamRefusal) for e in errors), errors
        assert {e.code for e in errors if isinstance(e, TeamRefusal)} == {"WORKER_NAME_TAKEN"}
    names = [w.name.lower() for w in team.store.all_workers(team.workers.resolve(
        team.alice, team.state(), "Twin0", "hrn:app:acme.com:crew", None).app_id)]  # fmt: skip
    assert sorted(n for n in names if n.startswith("twin")) == [f"twin{i}" for i in range(5)]
