"""Team chat and Channel push (issue 32) through official MCP clients: a session subscribed to a chat's
resource is sent ``notifications/resources/updated`` with the new seq when another client posts, named
as a mention when the message mentions its worker or user; the chat tools stay the source of truth; a
session that may not read the chat is refused at subscribe and hears nothing after losing access; a read
through a worker-bound session is that worker's read receipt, which the author reads."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hadron.push_client import Subscriber, subscriber
from hadron.team_world import CREW, OPS, start_team_world, worker_session
from hadron.world import World, admin_of, as_user, user_headers
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.engines("sqlite", "postgresql")

CREW_CHAT = "hrn:node:acme.com:crew-team:chats:team"
OPS_CHAT = "hrn:node:acme.com:ops-team:chats:team"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None) -> Iterator[World]:
    world, _ = start_team_world(tmp_path_factory.mktemp("hadron-push"), module_database_url)
    yield world
    world.server.stop()


async def last_seq(s: Subscriber, uri: str) -> int:
    read = await s.session.ok("hadron_channel_read", channel=uri, limit=1)
    return int(read.data["lastSeq"])


async def test_a_post_through_one_client_notifies_the_other_with_its_seq(team: World) -> None:
    async with subscriber(team.url, user_headers("bob")) as bob, as_user(team, "alice") as alice:
        info = await bob.session.ok("hadron_server_info")
        assert "chat-push" in info.data["capabilities"]
        listed = await bob.client.list_resources()
        assert CREW_CHAT in [r.uri for r in listed.resources]  # subscribable before its first post
        templates = await bob.client.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["hrn:node:{root}:{memory}:{loc}"]
        await bob.subscribe(CREW_CHAT)
        posted = await alice.ok("hadron_team_chat_post", app=CREW, body="standup in 5")
        update = await bob.inbox.next()
        assert (update.uri, update.seq, update.channel_id, update.mentioned) == (
            CREW_CHAT, posted.data["seq"], posted.data["channelId"], False,
        )  # fmt: skip
        # The notification is a hint: the read since the watermark is the message.
        read = await bob.session.ok("hadron_team_chat_read", app=CREW, sinceSeq=update.seq - 1)
        assert [m["body"] for m in read.data["messages"]] == ["standup in 5"]
        # resources/read gives the newest page in the read tools' shape.
        contents = (await bob.client.read_resource(CREW_CHAT)).contents[0]
        assert '"standup in 5"' in contents.text  # type: ignore[union-attr]
        await bob.unsubscribe(CREW_CHAT)
        after = await alice.ok("hadron_team_chat_post", app=CREW, body="after unsubscribe")
        await bob.subscribe(OPS_CHAT)  # a barrier: updates of one session arrive in order
        ops = await alice.ok("hadron_team_chat_post", app=OPS, body="ops ping")
        assert (await bob.inbox.next()).uri == OPS_CHAT and after.data["seq"] > posted.data["seq"]
        assert ops.data["seq"] >= 1 and bob.inbox.empty()


async def test_a_mention_of_the_sessions_worker_or_user_is_named_and_never_folded(team: World) -> None:
    async with subscriber(team.url, user_headers("bob")) as bob, as_user(team, "alice") as alice:
        await worker_session(bob.session, CREW, "Iris", "backend-engineer")  # this MCP session drives Iris
        await bob.subscribe(CREW_CHAT)
        base = await last_seq(bob, CREW_CHAT)
        plain = await alice.ok("hadron_team_chat_post", app=CREW, body="nothing for anyone")
        assert (await bob.inbox.next()).mentioned is False
        worker = await alice.ok("hadron_team_chat_post", app=CREW, body="@iris please review")
        update = await bob.inbox.next()
        assert (update.seq, update.mentioned) == (worker.data["seq"], True)
        user = await alice.ok("hadron_team_chat_post", app=CREW, body="cc @bob")
        update = await bob.inbox.next()
        assert (update.seq, update.mentioned) == (user.data["seq"], True)
        # A burst: plain messages may fold into fewer updates, the mention in its midst is its own.
        seqs = []
        for i in range(12):
            body = "@iris this one is yours" if i == 5 else f"burst {i}"
            seqs.append((await alice.ok("hadron_team_chat_post", app=CREW, body=body)).data["seq"])
        got = await bob.inbox.until_seq(seqs[-1])
        assert [u.seq for u in got if u.mentioned] == [seqs[5]]
        assert max(u.seq for u in got) == seqs[-1] and len(got) <= len(seqs)
        assert plain.data["seq"] == base + 1


async def test_a_channel_is_pushed_by_its_address(team: World) -> None:
    async with subscriber(team.url, user_headers("alice")) as alice, as_user(team, "bob") as bob:
        made = await alice.session.ok(
            "hadron_create_channel", memory="hrn:mem:acme.com:crew-team", loc="chats:design", name="design"
        )
        address = made.data["address"]
        await alice.subscribe(address)
        posted = await bob.ok("hadron_channel_post", channel=address, body="mockups are up @alice")
        update = await alice.inbox.next()
        assert (update.uri, update.seq, update.mentioned) == (address, posted.data["seq"], True)


async def test_a_session_that_may_not_read_the_chat_is_refused_and_hears_nothing(team: World) -> None:
    async with subscriber(team.url, user_headers("dave")) as dave:  # globex.com only
        for uri in (CREW_CHAT, "hrn:node:acme.com:crew-team:chats:nowhere", "not a urn"):
            with pytest.raises(MCPError) as refused:
                await dave.subscribe(uri)
            assert refused.value.code == -32002 and refused.value.error.data["code"] == "channel_not_found"
        assert CREW_CHAT not in [r.uri for r in (await dave.client.list_resources()).resources]
        with pytest.raises(MCPError):
            await dave.client.read_resource(CREW_CHAT)


async def test_access_is_checked_again_when_a_message_lands(team: World) -> None:
    data_dir = team.server.data_dir
    async with (
        subscriber(team.url, user_headers("carol")) as carol,  # on the team as an org CONTRIBUTOR
        subscriber(team.url, user_headers("bob")) as bob,
        as_user(team, "alice") as alice,
    ):
        await carol.subscribe(CREW_CHAT)  # first: her check runs before bob's send of the same post
        await bob.subscribe(CREW_CHAT)
        with admin_of(data_dir, team.database_url) as admin:
            admin.add_org_member("acme.com", "carol", "READER")  # off the team: may not read the chat
        try:
            hidden = await alice.ok("hadron_team_chat_post", app=CREW, body="carol may not see this")
            assert (await bob.inbox.next()).seq == hidden.data["seq"]  # the post's push was dispatched
        finally:
            with admin_of(data_dir, team.database_url) as admin:
                admin.add_org_member("acme.com", "carol", "CONTRIBUTOR")
        shown = await alice.ok("hadron_team_chat_post", app=CREW, body="welcome back")
        assert (await carol.inbox.next()).seq == shown.data["seq"]  # never the hidden one before it


async def receipts(s: Subscriber, uri: str) -> dict[str, int]:
    contents = (await s.client.read_resource(uri)).contents[0]
    data = json.loads(contents.text)  # type: ignore[union-attr]
    return {r["name"]: r["seq"] for r in data["receipts"]}


async def test_a_read_through_a_worker_session_is_its_read_receipt_for_the_author(team: World) -> None:
    async with subscriber(team.url, user_headers("alice")) as alice, as_user(team, "bob") as bob:
        sid = await worker_session(bob, CREW, "Rex", "backend-engineer")
        first = await alice.session.ok("hadron_team_chat_post", app=CREW, body="@rex can you take this?")
        second = await alice.session.ok("hadron_team_chat_post", app=CREW, body="and this")
        assert "Rex" not in await receipts(alice, CREW_CHAT)  # posted, not yet read
        await bob.ok(
            "hadron_team_chat_read", app=CREW, sinceSeq=first.data["seq"] - 1
        )  # no session: no receipt
        assert "Rex" not in await receipts(alice, CREW_CHAT)
        await bob.ok("hadron_team_chat_read", app=CREW, session=sid, sinceSeq=first.data["seq"] - 1)
        assert (await receipts(alice, CREW_CHAT))["Rex"] == second.data["seq"]
        await bob.ok("hadron_team_chat_read", app=CREW, session=sid, sinceSeq=0, limit=1)  # an old page
        assert (await receipts(alice, CREW_CHAT))["Rex"] == second.data["seq"]  # never lowered
        third = await alice.session.ok("hadron_team_chat_post", app=CREW, body="one more")
        await bob.ok("hadron_channel_read", channel=CREW_CHAT, session=sid, sinceSeq=second.data["seq"])
        assert (await receipts(alice, CREW_CHAT))["Rex"] == third.data["seq"]


def subscriptions(team: World) -> float:
    """The server's ``triptych_hadron_push_subscriptions`` gauge (``/metrics`` answers loopback)."""
    text = httpx.get(team.server.url + "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "triptych_hadron_push_subscriptions":
                return float(sample.value)
    raise AssertionError("no triptych_hadron_push_subscriptions gauge")


async def test_subscriptions_end_with_the_mcp_session(team: World) -> None:
    before = subscriptions(team)
    async with subscriber(team.url, user_headers("alice")) as alice:
        await alice.subscribe(CREW_CHAT)
        await alice.subscribe(OPS_CHAT)
        await alice.subscribe(CREW_CHAT)  # again: still one
        assert subscriptions(team) == before + 2
        await alice.unsubscribe(OPS_CHAT)
        assert subscriptions(team) == before + 1
    assert subscriptions(team) == before  # the client's DELETE ended the session and its subscriptions
