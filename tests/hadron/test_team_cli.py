"""`triptych hadron agent|ai-config|worker ...`: setting up a team from nothing, printing what was made."""

from __future__ import annotations

from pathlib import Path

import pytest
from hadron.test_cli import hadron, hadron_process

from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.selection import SessionState
from triptych.hadron.services.sessions import SessionStart
from triptych.hadron.surface import Hadron

APP = "hrn:app:acme.com:crew"

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def test_a_team_is_set_up_from_nothing_with_the_admin_cli(
    tmp_path: Path, cli_database_url: str | None
) -> None:
    database_url = cli_database_url
    data = tmp_path / "data"
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You are {{name}} ({{role}}).")
    for args in (
        ("org", "create", "acme.com"),
        ("user", "create", "alice"),
        ("org", "member", "acme.com", "alice", "--role", "CONTRIBUTOR"),
        ("app", "create", "crew", "--org", "acme.com", "--name", "Crew"),
    ):
        assert hadron(data, *args).returncode == 0
    team = hadron_process(data, "agent", "install", APP, "team", "--team")
    assert team.returncode == 0, team.stderr
    assert "installed Team Agent hrn:agent:acme.com:crew:team" in team.stdout
    assert "shared app memory hrn:mem:acme.com:crew-team" in team.stdout
    role = hadron(
        data,
        "agent",
        "install",
        APP,
        "dev",
        "--persona-role",
        "developer",
        "--system-prompt-file",
        str(prompt),
    )
    assert "installed role agent (personaRole developer) hrn:agent:acme.com:crew:dev" in role.stdout
    dup = hadron(data, "agent", "install", APP, "dev", "--persona-role", "developer")
    assert dup.returncode == 2 and "URN_ALREADY_EXISTS" in dup.stderr
    assert hadron(data, "agent", "install", APP, "nopersona").returncode == 2  # a role agent needs a role
    twin = hadron(data, "agent", "install", APP, "team2", "--team")
    assert "TEAM_AGENT_AMBIGUOUS" in twin.stdout  # warned, not refused: the state the refusal names
    listed = hadron(data, "agent", "list", APP).stdout
    assert "hrn:agent:acme.com:crew:dev (dev)" in listed and "personaRole=developer" in listed
    config = hadron(data, "ai-config", "create", APP, "main", "--provider", "anthropic", "--model", "claude")
    assert "created AI service config hrn:aiconfig:acme.com:crew:main (anthropic claude)" in config.stdout
    assert hadron(data, "worker", "release", APP, "Nobody").returncode == 2

    hadron_ = Hadron.open(data / "hadron.db", database_url=database_url)
    try:
        alice = hadron_.tenancy.user_by_handle("alice")
        assert alice is not None
        caller = HadronCaller("user", "alice", user=alice)
        state = SessionState("s", caller.key)
        worker = hadron_.team.workers.cast(caller, state, "Iris", "developer", None, APP, None)
        assert "You are Iris (developer)." in hadron_.team.workers.briefing(worker)
        app = hadron_.team.workers.app_context(caller, state, APP, None)
        hadron_.team.sessions.start(caller, state, app, SessionStart("x"), worker, False)
        held = hadron_.team.store.worker(worker.id)
        assert held is not None and held.held_by == alice.id
    finally:
        hadron_.close()
    released = hadron(data, "worker", "release", APP, "iris")
    assert "released Iris (hrn:worker:acme.com:crew:iris): the name is unheld" in released.stdout
    retired = hadron(data, "worker", "retire", APP, "Iris")
    assert "retired Iris" in retired.stdout
