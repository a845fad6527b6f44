"""The team store's listings stay inside the App or memory they are asked about, on both engines: two
organizations with the same App slug, worker names, channel addresses and work refs share one database,
and each listing returns only its own rows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from triptych.hadron.domain.loc import worker_urn
from triptych.hadron.domain.model import App, Memory
from triptych.hadron.domain.team import Agent, Channel, RegisterEntry, Worker, WorkItem, WorkSession
from triptych.hadron.engines import Stores, open_stores
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.tenancy import TenancyAdmin
from triptych.hadron.store import new_id

pytestmark = pytest.mark.engines("sqlite", "postgresql")
AT = "2026-12-01T09:00:00.000Z"


@dataclass
class Org:
    app: App
    agent: Agent
    memory: Memory
    worker: Worker
    session: WorkSession
    channel: Channel


def _org(stores: Stores, root: str, user: str) -> Org:
    admin = TenancyAdmin(stores.tenancy)
    admin.create_org(root)
    admin.create_user(user)
    admin.add_org_member(root, user, "OWNER")
    app = admin.create_app("crew", "Crew", root, None)
    agents = AgentService(stores.tenancy, stores.team)
    agent, _ = agents.install(app.urn, "team", team=True)
    memory = agents.team_memory(app)
    team = stores.team
    worker = Worker(new_id(), app.id, agent.id, "Iris", "iris", "dev", None, None, None, AT,
                    worker_urn(app.root, app.slug, "iris"))  # fmt: skip
    team.add_worker(worker, user)
    session = WorkSession(new_id(), app.id, None, worker.id, "stint", "DEVELOPMENT", None, None, None, None, None,
                          None, None, AT, AT)  # fmt: skip
    team.add_session(session)
    channel = Channel(new_id(), memory.id, "chats:general", "general", app.id, 0, AT)
    team.add_channel(channel, user)
    team.post(channel.id, f"hello from {root}", {"handle": user}, None, None, [], ["@iris"], AT)
    team.add_register(RegisterEntry(new_id(), app.id, channel.id, worker.id, "dev", False, AT), user)
    team.add_item(WorkItem(new_id(), app.id, session.id, None, worker.id, "github", "pr", "acme/api#1",
                           "opened", {"org": root}, AT))  # fmt: skip
    return Org(app, agent, memory, worker, session, channel)


@pytest.fixture
def orgs(tmp_path: Path, database_url: str | None) -> Iterator[tuple[Stores, Org, Org]]:
    stores = open_stores(tmp_path / "hadron.db", database_url, None, None)
    try:
        yield stores, _org(stores, "acme.com", "alice"), _org(stores, "globex.com", "dave")
    finally:
        stores.close()


def test_each_listing_returns_only_the_rows_of_the_app_or_memory_asked_about(
    orgs: tuple[Stores, Org, Org],
) -> None:
    stores, acme, globex = orgs
    team = stores.team
    for mine, other in ((acme, globex), (globex, acme)):
        assert team.worker_named(mine.app.id, "iris") == team.worker(mine.worker.id)
        assert [w.id for w in team.workers(mine.app.id, True, 10, 0)[0]] == [mine.worker.id]
        assert [w.id for w in team.all_workers(mine.app.id)] == [mine.worker.id]
        assert team.agent_by_slug(mine.app.id, "team") == mine.agent
        assert [a.id for a in team.agents([mine.app.id])] == [mine.agent.id]
        assert team.channel_at(mine.memory.id, "chats:general") == team.channel(mine.channel.id)
        assert [c.id for c in team.channels(app_id=mine.app.id)] == [mine.channel.id]
        assert [c.id for c in team.channels(memory_id=mine.memory.id)] == [mine.channel.id]
        overlapping = team.channel_overlapping(mine.memory.id, "chats:general:x", containing=True)
        assert overlapping is not None and overlapping.id == mine.channel.id
        channel = team.channel(mine.channel.id)
        assert channel is not None
        messages, total = team.read(channel, None, None, None, 10, 0)
        assert total == 1 and [m.body for m in messages] == [f"hello from {mine.app.root}"]
        mentioned, total = team.read(channel, None, None, "@iris", 10, 0)
        assert total == 1 and [m.seq for m in mentioned] == [1]
        assert [r.channel_id for r in team.registers([mine.app.id], None)] == [mine.channel.id]
        assert team.registers([mine.app.id], other.channel.id) == []
        items, total = team.items(mine.app.id, ["acme/api#1"], None, None, None, 10, 0)
        assert total == 1 and items[0].detail == {"org": mine.app.root}
        assert team.items(mine.app.id, None, other.session.id, None, None, 10, 0) == ([], 0)
        assert team.items(mine.app.id, None, None, None, None, 10, 5) == ([], 1)  # a page past the end
        assert [s.id for s in team.sessions_of(None, mine.app.id, True, 10)] == [mine.session.id]
        assert [s.id for s in team.worker_sessions(mine.worker.id)] == [mine.session.id]
