"""`triptych hadron migrate --to postgresql://...` with a team at work: workers, sessions (two of them in
one instant), the team chat with mentions, the worklog and an action run move over, the team services
answer the same on PostgreSQL, and what comes next continues where the embedded data stopped (the next
seq, the newest work item and session first)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
from hadron.team_world import CREW, build_team
from hadron.test_migrate_to_postgres import migrate, migrate_back

from triptych.hadron.action_store import ActionRun
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.selection import SessionState
from triptych.hadron.services.sessions import SessionStart
from triptych.hadron.store import new_id
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("postgresql")
AT = "2026-12-01T09:00:00.000Z"


def who(hadron: Hadron, handle: str) -> tuple[HadronCaller, SessionState]:
    caller = HadronCaller("user", handle, user=hadron.tenancy.user_by_handle(handle))
    return caller, hadron.selections.session(caller, "s", None)


def answers(hadron: Hadron) -> dict[str, object]:
    """What the team services answer: sessions, the roster, the chat (all and by mention), the worklog, runs."""
    alice, state = who(hadron, "alice")
    team = hadron.team
    _, lines, total = team.workers.roster(alice, state, True, 50, 0, CREW, None)
    page = team.channels.read_team(alice, state, CREW, None, None, None, 50, 0)
    mentioned = team.channels.read_team(alice, state, CREW, None, None, "@iris", 50, 0)
    assert page is not None and mentioned is not None
    _, items, items_total = team.worklog.items(alice, state, "acme/api#9", None, None, None, 50, 0, CREW)
    return {
        "whoami": [team.sessions.view(s) for s in team.sessions.whoami(alice, 20, True)],
        "roster": ([asdict(line) for line in lines], total),
        "chat": repr(page),
        "mentions": repr(mentioned),
        "worklog": ([team.worklog.view(i) for i in items], items_total),
        "runs": [r.view() for r in hadron.derived.actions.runs.runs("node-1")],
    }


def test_a_working_team_moves_into_postgresql_and_carries_on(
    tmp_path: Path, database_url: str | None
) -> None:
    assert database_url is not None
    data = tmp_path / "data"
    data.mkdir()
    build_team(data)
    embedded = Hadron.open(data / "hadron.db")
    try:
        team = embedded.team
        alice, state = who(embedded, "alice")
        app = team.workers.app_context(alice, state, CREW, None)
        sessions = []
        for name in ("Iris", "Juno"):
            worker = team.workers.cast(alice, state, name, "backend-engineer", None, CREW, None)
            sessions.append(
                team.sessions.start(alice, state, app, SessionStart(f"{name} stint"), worker, False)[0]
            )
        for i in range(5):
            team.channels.post_team(alice, state, CREW, sessions[0].id, f"note {i} for @iris", None)
        for n in (9, 9, 10):
            team.worklog.record(alice, state, sessions[n % 2].id, "github", "pr", f"acme/api#{n}", "opened",
                                {"n": n}, CREW)  # fmt: skip
        for i in range(3):  # one instant: only insertion order tells the runs apart
            embedded.derived.actions.runs.add_run(ActionRun(new_id(), "node-1", "m", 1, "template", "alice",
                                                            None, None, AT, 1.5, {"i": i}, "ok", None, 3, None))  # fmt: skip
        before = answers(embedded)
        assert len(before["whoami"]) == 2 and before["worklog"][1] == 2 and len(before["runs"]) == 3  # type: ignore[arg-type,index]
        assert "note 4 for @iris" in str(before["mentions"])
    finally:
        embedded.close()

    done = migrate(data, database_url)
    assert done.returncode == 0, done.stderr
    moved = Hadron.open(data / "hadron.db", database_url=database_url)
    try:
        assert answers(moved) == before
        alice, state = who(moved, "alice")
        team = moved.team
        _, seq, *_ = team.channels.post_team(alice, state, CREW, None, "after the move", None)
        assert seq == 6
        session = before["whoami"][0]["id"]  # type: ignore[index]
        item = team.worklog.record(alice, state, session, "github", "pr", "acme/api#9", "merged", None, CREW)
        _, items, total = team.worklog.items(alice, state, "acme/api#9", None, None, None, 50, 0, CREW)
        assert total == 3 and items[0].id == item.id
        on_postgres = answers(moved)
    finally:
        moved.close()

    # And back into a new data directory: the team answers as it did on PostgreSQL, and carries on.
    back = tmp_path / "back"
    returned = migrate_back(database_url, back)
    assert returned.returncode == 0, returned.stderr
    embedded = Hadron.open(back / "hadron.db")
    try:
        assert answers(embedded) == on_postgres
        assert "after the move" in str(on_postgres["chat"])
        alice, state = who(embedded, "alice")
        _, seq, *_ = embedded.team.channels.post_team(alice, state, CREW, None, "home again", None)
        assert seq == 7
    finally:
        embedded.close()
