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
from triptych.hadron.domain.team import (
    Agent,
    AiServiceConfig,
    Channel,
    RegisterEntry,
    Worker,
    WorkItem,
    WorkSession,
)
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
def orgs(tmp_path: Path, contract_database_url: str | None) -> Iterator[tuple[Stores, Org, Org]]:
    stores = open_stores(tmp_path / "hadron.db", contract_database_url, None, None)
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


def test_workers_page_by_name_and_keep_holder_prompt_and_first_retirement(
    orgs: tuple[Stores, Org, Org],
) -> None:
    stores, acme, _ = orgs
    team = stores.team
    app, agent = acme.app, acme.agent
    for name in ("Zed", "adam"):
        team.add_worker(Worker(new_id(), app.id, agent.id, name, name.lower(), "dev", None, None, None, AT,
                               worker_urn(app.root, app.slug, name.lower())), "alice")  # fmt: skip
    page, total = team.workers(app.id, False, 2, 1)
    assert total == 3 and [w.name for w in page] == ["Iris", "Zed"]
    assert team.worker_named(app.id, "ADAM") is not None and team.worker_named(app.id, "zed") is not None
    user = stores.tenancy.user_by_handle("alice")
    assert user is not None
    team.set_holder(acme.worker.id, user.id)
    team.set_prompt_override(acme.worker.id, "be brief")
    team.retire(acme.worker.id, "2026-12-02")
    team.retire(acme.worker.id, "2026-12-03")  # the first retirement stands
    worker = team.worker(acme.worker.id)
    assert worker is not None
    assert (worker.held_by, worker.prompt_override, worker.retired_at) == (user.id, "be brief", "2026-12-02")
    assert team.workers(app.id, False, 10, 0)[1] == 2 and team.workers(app.id, True, 10, 0)[1] == 3


def test_ai_configs_list_by_name_with_their_urn(orgs: tuple[Stores, Org, Org]) -> None:
    stores, acme, globex = orgs
    team = stores.team
    for name in ("zeta", "alpha"):
        team.add_ai_config(AiServiceConfig(new_id(), acme.app.id, name, "openai", "m", ""), AT)
    configs = team.ai_configs([acme.app.id, globex.app.id])
    assert [c.name for c in configs] == ["alpha", "zeta"] and configs[0].urn.endswith("alpha")
    assert team.ai_configs([]) == [] and team.agents([]) == []


def _session(app: App, worker: Worker | None, started: str, **fields: object) -> WorkSession:
    return WorkSession(new_id(), app.id, None, worker.id if worker else None, "s", "DEVELOPMENT", None, None,
                       None, None, None, None, None, started, started, **fields)  # type: ignore[arg-type]  # fmt: skip


def test_sessions_list_in_start_order_and_ties_in_insertion_order(orgs: tuple[Stores, Org, Org]) -> None:
    stores, acme, _ = orgs
    team = stores.team
    tied = [_session(acme.app, acme.worker, AT) for _ in range(3)]
    for s in tied:
        team.add_session(s)
    assert [s.id for s in team.worker_sessions(acme.worker.id)] == [acme.session.id, *[s.id for s in tied]]
    newest_first = [s.id for s in team.sessions_of(None, acme.app.id, True, 10)]
    assert newest_first == [*[s.id for s in reversed(tied)], acme.session.id]
    assert len(team.sessions_of(None, acme.app.id, True, 2)) == 2


def test_a_session_heartbeats_forward_ends_once_and_expires_past_its_deadline(
    orgs: tuple[Stores, Org, Org],
) -> None:
    stores, acme, _ = orgs
    team = stores.team
    sid = acme.session.id
    team.heartbeat(sid, "2026-12-01T10:00:00.000Z")
    team.heartbeat(sid, "2026-12-01T09:30:00.000Z")  # never backwards
    team.set_pr_number(sid, 42)
    team.end_session(
        sid, "2026-12-01T09:45:00.000Z", "ended", {"summary": "done", "handoff": "next", "turn_count": 3}
    )
    team.end_session(sid, "2026-12-01T11:00:00.000Z", "taken-over", {})  # ended already: unchanged
    ended = team.session(sid)
    assert ended is not None
    assert (ended.last_active_at, ended.ended_at, ended.end_reason, ended.summary, ended.turn_count, ended.pr_number) == (
        "2026-12-01T10:00:00.000Z", "2026-12-01T09:45:00.000Z", "ended", "done", 3, 42,
    )  # fmt: skip
    assert team.last_handoff(acme.worker.id) == ended
    assert team.sessions_of(None, acme.app.id, False, 10) == []
    late = _session(acme.app, acme.worker, AT, expires_at="2026-12-01T12:00:00.000Z")
    team.add_session(late)
    assert team.expire_sessions("2026-12-01T11:59:59.999Z") == 0
    assert team.expire_sessions("2026-12-01T12:00:00.000Z") == 1
    expired = team.session(late.id)
    assert expired is not None and expired.end_reason == "expired"


def test_session_events_and_node_attribution_keep_the_first_session(orgs: tuple[Stores, Org, Org]) -> None:
    stores, acme, globex = orgs
    team = stores.team
    team.add_event(acme.session.id, "2026-12-01T09:02:00.000Z", "tool", "x")
    team.attribute_node("n1", acme.session.id, "2026-12-01T09:01:00.000Z")
    team.attribute_node("n1", globex.session.id, "2026-12-01T09:03:00.000Z")
    assert team.node_session("n1") == acme.session.id and team.node_session("n2") is None
    assert team.events(acme.session.id) == ["2026-12-01T09:01:00.000Z", "2026-12-01T09:02:00.000Z"]


def test_posts_take_gap_free_seqs_and_read_pages_from_either_end(orgs: tuple[Stores, Org, Org]) -> None:
    stores, acme, _ = orgs
    team = stores.team
    cid = acme.channel.id
    for i in range(2, 6):
        refs = ["@iris"] if i % 2 else []
        assert (
            team.post(cid, f"m{i}", {"handle": "alice"}, acme.session.id, i - 1, [{"ref": "@iris"}], refs, AT)
            == i
        )
    channel = team.channel(cid)
    assert (
        channel is not None
        and channel.last_seq == 5
        and team.has_message(cid, 5)
        and not team.has_message(cid, 6)
    )
    assert [m.seq for m in team.read(channel, 1, None, None, 2, 0)[0]] == [2, 3]
    assert [m.seq for m in team.read(channel, None, 5, None, 2, 0)[0]] == [3, 4]
    assert [m.seq for m in team.read(channel, 2, 5, None, 10, 1)[0]] == [4]
    mentioned, total = team.read(channel, None, 5, "@iris", 1, 0)
    assert total == 3 and [m.seq for m in mentioned] == [3]
    message = team.read(channel, 4, None, None, 1, 0)[0][0]
    assert (message.author, message.reply_to_seq, message.mentions) == (
        {"handle": "alice"},
        4,
        [{"ref": "@iris"}],
    )


def test_receipts_only_rise_and_list_highest_first(orgs: tuple[Stores, Org, Org]) -> None:
    stores, acme, _ = orgs
    team = stores.team
    cid = acme.channel.id
    team.acknowledge(cid, "w:b", 3, "t1")
    team.acknowledge(cid, "w:a", 3, "t1")
    team.acknowledge(cid, "w:b", 2, "t2")  # lower: ignored
    team.acknowledge(cid, "w:c", 5, "t3")
    assert team.receipts(cid) == [("w:c", 5, "t3"), ("w:a", 3, "t1"), ("w:b", 3, "t1")]


def test_channels_overlap_above_and_below_and_registers_come_and_go(orgs: tuple[Stores, Org, Org]) -> None:
    stores, acme, _ = orgs
    team = stores.team
    mid = acme.memory.id
    assert team.channel_overlapping(mid, "chats", containing=False) is None
    below = team.channel_overlapping(mid, "chats", containing=True)
    assert below is not None and below.id == acme.channel.id
    assert team.channel_overlapping(mid, "chats:generalx", containing=True) is None
    entry = RegisterEntry(new_id(), acme.app.id, acme.channel.id, None, None, True, "2026-12-02")
    team.add_register(entry, "alice")
    assert team.register_entry(entry.id) == entry and team.registers([], None) == []
    assert [r.id for r in team.registers([acme.app.id], acme.channel.id)][-1] == entry.id
    team.remove_register(entry.id)
    assert team.register_entry(entry.id) is None


def test_worklog_items_page_newest_first_with_their_total(orgs: tuple[Stores, Org, Org]) -> None:
    stores, acme, _ = orgs
    team = stores.team
    for i in range(3):
        team.add_item(WorkItem(new_id(), acme.app.id, acme.session.id, None, None, "jira", "issue", f"J-{i}",
                               "opened", None, AT))  # fmt: skip
    items, total = team.items(acme.app.id, None, None, "jira", None, 2, 0)
    assert total == 3 and [i.ref for i in items] == ["J-2", "J-1"]
    assert team.items(acme.app.id, None, None, None, "issue", 10, 2)[0][0].ref == "J-0"
    assert team.items(acme.app.id, [], None, None, None, 10, 0) == ([], 0)
    assert team.items(acme.app.id, None, acme.session.id, None, None, 1, 0)[1] == 4
