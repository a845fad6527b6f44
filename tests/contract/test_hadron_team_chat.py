"""Hadron team chat, Channels, registers and the worklog through the official MCP client: authorship,
mentions, cross-App posts, chat-root protection, the worklog's ref grammar and both of its gates, and
the entity kinds and scope owners Agents bring."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hadron.team_world import CREW, OPS, cli, start_team_world, worker_session
from hadron.world import World, as_app, as_user

CREW_TEAM = "hrn:mem:acme.com:crew-team"


pytestmark = pytest.mark.engines("sqlite", "postgresql")


@pytest.fixture(scope="module")
def team(
    tmp_path_factory: pytest.TempPathFactory, module_database_url: str | None
) -> Iterator[tuple[World, str]]:
    world, crew_key = start_team_world(tmp_path_factory.mktemp("hadron-team-chat"), module_database_url)
    yield world, crew_key
    world.server.stop()


async def test_the_team_chat_is_bootstrapped_by_the_first_post_and_read_oldest_first(
    team: tuple[World, str],
) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        empty = await alice.ok("hadron_team_chat_read")
        assert empty.data["total"] == 0 and empty.data["messages"] == []
        sid = await worker_session(alice, CREW, "Iris", "backend-engineer")
        await alice.ok("hadron_cast_worker", name="Mary Jane", role="android-engineer")
        first = await alice.ok("hadron_team_chat_post", body="Morning! standup in 5")
        assert first.data["seq"] == 1 and first.data["author"] == {
            "kind": "user", "handle": "alice", "userId": first.data["author"]["userId"]
        }  # fmt: skip
        assert "authored by you, not by a worker" in first.text  # the quiet failure, said out loud
        assert first.data["address"] == "hrn:node:acme.com:crew-team:chats:team"
        body = "@mary-jane can you review? cc @bob, not `@carol`, mail x@iris.dev\n```\n@alice\n```"
        second = await alice.ok("hadron_team_chat_post", body=body, session=sid, replyToSeq=1)
        assert second.data["seq"] == 2
        author = second.data["author"]
        assert author["kind"] == "worker" and author["name"] == "Iris" and author["drivenBy"] == "alice"
        assert [(m["kind"], m.get("name") or m.get("handle")) for m in second.data["mentions"]] == [
            ("worker", "Mary Jane"),
            ("user", "bob"),
        ]
        await alice.refused("hadron_team_chat_post", "BAD_USER_INPUT", body="x", replyToSeq=99)
        await alice.refused("hadron_team_chat_post", "BAD_USER_INPUT", body="   ")
        await alice.refused("hadron_team_chat_post", "BAD_USER_INPUT", body="x" * 65_537)
        third = await alice.ok("hadron_team_chat_post", body="@Mary-Jane ping again", session=sid)
        read = await alice.ok("hadron_team_chat_read", session=sid)
        assert [m["seq"] for m in read.data["messages"]] == [1, 2, 3] and read.data["total"] == 3
        assert read.data["messages"][1]["replyToSeq"] == 1 and read.data["messages"][1]["sessionId"] == sid
        since = await alice.ok("hadron_team_chat_read", sinceSeq=1)
        assert [m["seq"] for m in since.data["messages"]] == [2, 3]
        mentioned = await alice.ok("hadron_team_chat_read", mentions="Mary Jane")
        assert [m["seq"] for m in mentioned.data["messages"]] == [2, third.data["seq"]]
        assert mentioned.data["total"] == 2
        by_handle = await alice.ok("hadron_team_chat_read", mentions="@bob")
        assert [m["seq"] for m in by_handle.data["messages"]] == [2]
        assert (await alice.ok("hadron_team_chat_read", mentions="carol")).data["messages"] == []
        await alice.refused("hadron_team_chat_read", "BAD_USER_INPUT", mentions="nobody-here")
        paged = await alice.ok("hadron_team_chat_read", limit=1, offset=1)
        assert [m["seq"] for m in paged.data["messages"]] == [2]
        await alice.ok("hadron_end_session", id=sid)


async def test_team_chat_authorship_refusals(team: tuple[World, str]) -> None:
    world, crew_key = team
    async with as_user(world, "bob") as bob, as_app(world, crew_key) as key, as_user(world, "dave") as dave:
        await bob.ok("hadron_set_active_app", app=CREW)
        unbound = (await bob.ok("hadron_start_session", description="no worker")).data["sessionId"]
        refused = await bob.refused(
            "hadron_team_chat_post", "SESSION_NOT_WORKER_BOUND", body="hi", session=unbound
        )
        assert "post as yourself" in refused.text
        read = await bob.ok("hadron_team_chat_read", session=unbound)  # an unbound session reads fine
        assert read.is_error is False
        await bob.refused("hadron_team_chat_post", "SESSION_NOT_FOUND", body="hi", session="f" * 32)
        await bob.ok("hadron_end_session", id=unbound)
        await bob.refused("hadron_team_chat_post", "SESSION_ENDED", body="hi", session=unbound)
        sid = await worker_session(bob, CREW, "Rook", "android-engineer")
        cli(world.server.data_dir, "worker", "retire", CREW, "Rook", database_url=world.database_url)
        await bob.refused("hadron_team_chat_post", "WORKER_RETIRED", body="hi", session=sid)
        denied = await key.refused("hadron_team_chat_post", "FORBIDDEN", body="from the key")
        assert "App-key" in denied.text
        assert (await key.ok("hadron_team_chat_read")).data["total"] >= 0  # the key reads its own App's chat
        await key.refused("hadron_team_chat_read", "app_not_found", app=OPS)
        await dave.refused("hadron_team_chat_post", "app_not_found", body="hi", app=CREW)
    async with as_user(world, "alice") as alice:
        await alice.refused("hadron_team_chat_post", "no_active_app", body="hi")
        await alice.refused(
            "hadron_team_chat_post", "TEAM_AGENT_NOT_FOUND", body="hi", app="hrn:app:acme.com:bot"
        )
        await alice.refused(
            "hadron_team_chat_post", "TEAM_AGENT_AMBIGUOUS", body="hi", app="hrn:app:acme.com:twins"
        )


async def test_a_worker_posts_into_another_apps_chat_only_when_its_driver_may_write_the_host(
    team: tuple[World, str],
) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice, as_user(world, "bob") as bob:
        alice_sid = await worker_session(alice, CREW, "Vega", "backend-engineer")
        crossed = await alice.ok("hadron_team_chat_post", body="hello ops", session=alice_sid, app=OPS)
        assert crossed.data["author"]["appId"] != crossed.data["channelId"]
        ops_read = await alice.ok("hadron_team_chat_read", app=OPS)
        message = ops_read.data["messages"][-1]
        assert message["author"]["name"] == "Vega" and message["author"]["workerUrn"].startswith(
            "hrn:worker:acme.com:crew:"
        )  # the author's App is recorded
        bob_sid = await worker_session(bob, CREW, "Lark", "android-engineer")
        # bob is a READER of ops: on its team (he may post as himself) but its host memory is read-only to him.
        refused = await bob.refused("hadron_team_chat_post", "CHANNEL_HOST_NOT_WRITABLE", body="x", session=bob_sid,
                                    app=OPS)  # fmt: skip
        data = refused.data["error"]["data"]
        assert data["workerAppId"] != data["appId"] and set(data) == {"workerAppId", "appId"}
        assert "SESSION_NOT_IN_APP" not in refused.text
        await bob.ok("hadron_team_chat_post", body="as myself", app=OPS)
        await bob.ok("hadron_end_session", id=bob_sid)
        await alice.ok("hadron_end_session", id=alice_sid)


async def test_channels_are_created_listed_read_and_posted_by_host_memory_access(
    team: tuple[World, str],
) -> None:
    world, _ = team
    async with (
        as_user(world, "alice") as alice,
        as_user(world, "erin") as erin,
        as_user(world, "dave") as dave,
    ):
        await alice.ok("hadron_set_active_app", app=CREW)
        made = await alice.ok("hadron_create_channel", memory=CREW_TEAM, loc="chats:design", name="design")
        address = made.data["address"]
        assert address == "hrn:node:acme.com:crew-team:chats:design"
        await alice.refused("hadron_create_channel", "loc_protected", memory=CREW_TEAM, loc="chats:design",
                            name="again")  # fmt: skip
        await alice.ok("hadron_set_active_memory", memoryUrn=CREW_TEAM)
        await alice.ok("hadron_create_node", loc="notes", name="Notes")
        await alice.refused(
            "hadron_create_channel", "URN_ALREADY_EXISTS", memory=CREW_TEAM, loc="notes", name="n"
        )
        await alice.refused("hadron_create_channel", "BAD_USER_INPUT", memory="hrn:mem:acme.com:specs",
                            loc="chats:x", name="x")  # fmt: skip
        await alice.refused("hadron_create_channel", "loc_protected", memory=CREW_TEAM, loc="chats:design:sub",
                            name="nested")  # fmt: skip
        listed = await alice.ok("hadron_list_channels")
        assert address in [c["address"] for c in listed.data["channels"]]
        by_memory = await alice.ok("hadron_list_channels", memory=CREW_TEAM)
        assert {c["name"] for c in by_memory.data["channels"]} >= {"design"}
        seqs = [
            (await alice.ok("hadron_channel_post", channel=address, body=f"m{i}")).data["seq"]
            for i in range(5)
        ]
        assert seqs == [1, 2, 3, 4, 5]
        by_id = await alice.ok("hadron_channel_read", channel=made.data["id"], sinceSeq=2, beforeSeq=5)
        assert [m["seq"] for m in by_id.data["messages"]] == [3, 4] and by_id.data["total"] == 5
        tail = await alice.ok("hadron_channel_read", channel=address, beforeSeq=5, limit=2)
        assert [m["seq"] for m in tail.data["messages"]] == [3, 4]  # the page just before, oldest first
        # erin is a READER AppMember: the app memory is read-only to her.
        assert (await erin.ok("hadron_channel_read", channel=address)).data["total"] == 5
        await erin.refused("hadron_channel_post", "FORBIDDEN", channel=address, body="hi")
        for ref in (address, made.data["id"]):
            await dave.refused("hadron_channel_read", "channel_not_found", channel=ref)
        await dave.refused("hadron_channel_post", "channel_not_found", channel=address, body="x")
        await alice.refused(
            "hadron_channel_read", "channel_not_found", channel="hrn:node:acme.com:crew-team:nope"
        )
        await alice.refused("hadron_channel_read", "channel_not_found", channel="nonsense ref")
        assert (await dave.ok("hadron_list_channels", app="hrn:app:globex.com:helper")).data["channels"] == []


async def test_a_channel_address_is_protected_from_generic_node_writes(team: tuple[World, str]) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_set_active_app", app=CREW)
        await alice.ok("hadron_create_channel", memory=CREW_TEAM, loc="rooms:ops", name="ops-room")
        root = f"{CREW_TEAM.replace('hrn:mem:', 'hrn:node:')}:rooms:ops"
        await alice.ok("hadron_set_active_memory", memoryUrn=CREW_TEAM)
        got = await alice.ok("hadron_get_node", loc="rooms:ops")  # reading the chat root is fine
        assert got.data["nodeType"] == "chat"
        for tool, args in (
            ("hadron_create_node", {"loc": "rooms:ops", "name": "overwrite"}),
            ("hadron_create_node", {"loc": "rooms:ops:inside", "name": "inside"}),
            ("hadron_update_node", {"loc": "rooms:ops", "name": "renamed"}),
            ("hadron_update_node_data", {"nodeUrn": root, "data": {"x": 1}}),
            ("hadron_create_edge", {"sourceUrn": root, "targetUrn": "rooms"}),
            ("hadron_delete_node", {"urn": root}),
            ("hadron_move_node", {"urn": root, "targetUrn": f"{root}-moved"}),
        ):
            refused = await alice.refused(tool, "loc_protected", **args)
            assert refused.text.startswith("[loc_protected]"), tool
        await alice.ok(
            "hadron_create_parent_node", loc="rooms", name="Rooms"
        )  # an ancestor is not the address
        await alice.refused("hadron_delete_node", "loc_protected", urn=root.rsplit(":", 1)[0], recursive=True)
        await alice.ok("hadron_create_node", loc="lobby", name="Lobby")
        await alice.refused("hadron_move_node", "loc_protected", urn=f"{root.rsplit(':', 2)[0]}:lobby",
                            targetUrn=f"{root}:lobby")  # fmt: skip
        assert (await alice.ok("hadron_channel_post", channel=root, body="still works")).data["seq"] == 1


async def test_registers_declare_intent_and_grant_nothing(team: tuple[World, str]) -> None:
    world, _ = team
    async with (
        as_user(world, "alice") as alice,
        as_user(world, "erin") as erin,
        as_user(world, "dave") as dave,
    ):
        await alice.ok("hadron_set_active_app", app=CREW)
        channel = (await alice.ok("hadron_create_channel", memory=CREW_TEAM, loc="chats:standup",
                                  name="standup")).data["address"]  # fmt: skip
        if (await alice.call("hadron_get_worker", workerRef="Onyx")).is_error:
            await alice.ok("hadron_cast_worker", name="Onyx", role="backend-engineer")
        wide = await alice.ok("hadron_register_add", channel=channel)
        assert wide.data["entry"]["attendee"] is None and "every attendee" in wide.text
        onyx = await alice.ok("hadron_register_add", channel=channel, attendee="Onyx", role="moderator",
                              mentionOnly=True)  # fmt: skip
        assert onyx.data["entry"]["attendee"]["name"] == "Onyx" and onyx.data["entry"]["mentionOnly"] is True
        # dave cannot read the channel: the entry is a legitimate statement whose precondition is unmet.
        daves = await alice.ok("hadron_register_add", channel=channel, attendee="@dave")
        assert daves.data["entry"]["attendee"]["handle"] == "dave"
        await alice.refused("hadron_register_add", "BAD_USER_INPUT", channel=channel, attendee="Ghost")
        listed = await alice.ok("hadron_register_list", channel=channel)
        assert listed.data["count"] == 3
        by_attendee = await alice.ok("hadron_register_list", attendee="Onyx")
        assert {e["id"] for e in by_attendee.data["entries"]} == {
            wide.data["entry"]["id"],
            onyx.data["entry"]["id"],
        }
        assert (await alice.ok("hadron_register_list", owner=CREW)).data["count"] >= 3
        await dave.refused("hadron_channel_read", "channel_not_found", channel=channel)  # still cannot read
        await dave.refused("hadron_register_list", "channel_not_found", channel=channel)
        await erin.refused("hadron_register_add", "FORBIDDEN", channel=channel, attendee="Onyx")
        await erin.refused("hadron_register_remove", "FORBIDDEN", id=onyx.data["entry"]["id"])
        await dave.refused("hadron_register_remove", "register_entry_not_found", id=onyx.data["entry"]["id"])
        await alice.ok("hadron_register_remove", id=onyx.data["entry"]["id"])
        await alice.refused("hadron_register_remove", "register_entry_not_found", id=onyx.data["entry"]["id"])
        assert (await alice.ok("hadron_register_list", channel=channel)).data["count"] == 2


# The contract's ref table: (kind, what a writer pastes, the one canonical spelling stored).
REF_CASES = [
    ("pr", "https://github.com/Acme/API/pull/371/files", "acme/api#371"),
    ("pr", "github.com/acme/api/issues/371", "acme/api#371"),
    ("issue", "www.github.com/acme/api/pull/371?x=1#frag", "acme/api#371"),
    ("commit", "https://github.com/acme/api/commit/A1B2C3D/checks", "acme/api@a1b2c3d"),
    ("branch", "https://github.com/acme/api/tree/Feat/X", "acme/api:Feat/X"),
    ("branch", "ACME/api:Feat/X", "acme/api:Feat/X"),
    ("repo", "git@github.com:Acme/API.git", "acme/api"),
]


async def test_the_worklog_stores_one_canonical_ref_per_artifact(team: tuple[World, str]) -> None:
    world, crew_key = team
    async with as_user(world, "carol") as carol:
        sid = await worker_session(carol, CREW, "Sol", "backend-engineer")
        for kind, ref, canonical in REF_CASES:
            recorded = await carol.ok("hadron_record_work", session=sid, tool="github", kind=kind, ref=ref,
                                      action="opened", detail={"title": "T"})  # fmt: skip
            assert recorded.data["item"]["ref"] == canonical, ref
            assert recorded.data["item"]["recordedBy"] == "Sol"
        for bare in ("371", "#371"):
            refused = await carol.refused("hadron_record_work", "WORK_REF_INVALID", session=sid, tool="github",
                                          kind="pr", ref=bare, action="opened")  # fmt: skip
            assert "bare number" in refused.text
        await carol.refused("hadron_record_work", "BAD_USER_INPUT", session=sid, tool="github", kind="tag",
                            ref="a/b", action="x")  # fmt: skip
        await carol.ok(
            "hadron_record_work", session=sid, tool="jira", kind="issue", ref="  PROJ-12 ", action="closed"
        )
        both = await carol.ok("hadron_team_work_items", ref="https://github.com/acme/api/pull/371")
        assert both.data["total"] == 3 and {i["kind"] for i in both.data["items"]} == {"pr", "issue"}
        assert [i["ref"] for i in both.data["items"]] == ["acme/api#371"] * 3
        newest = both.data["items"][0]
        assert newest["kind"] == "issue" and newest["sessionId"] == sid  # newest first
        jira = await carol.ok("hadron_team_work_items", ref="PROJ-12", tool="jira")
        assert jira.data["total"] == 1 and jira.data["items"][0]["ref"] == "PROJ-12"
        assert (await carol.ok("hadron_team_work_items", ref="proj-12")).data["total"] == 0  # byte for byte
        assert (await carol.ok("hadron_team_work_items", ref="371")).data["total"] == 0  # reads never fail
        assert (await carol.ok("hadron_team_work_items", kind="branch")).data["total"] == 2
        assert (await carol.ok("hadron_team_work_items", session=sid, limit=2)).data["total"] == 8
        assert len((await carol.ok("hadron_team_work_items", limit=2)).data["items"]) == 2
        # kind pr refreshes the session's PR number; ended sessions are accepted.
        await carol.ok("hadron_end_session", id=sid)
        late = await carol.ok("hadron_record_work", session=sid, tool="github", kind="pr", ref="acme/api#402",
                              action="merged")  # fmt: skip
        assert late.data["item"]["sessionId"] == sid
        ended = await carol.ok("hadron_whoami", includeEnded=True, limit=50)
        assert next(s for s in ended.data["sessions"] if s["id"] == sid)["prNumber"] == 402
    async with as_app(world, crew_key) as key:
        assert (await key.ok("hadron_team_work_items", ref="acme/api#402")).data["total"] == 1


async def test_recording_passes_the_team_gate_and_the_attribution_gate(team: tuple[World, str]) -> None:
    world, crew_key = team
    async with as_user(world, "alice") as alice, as_user(world, "bob") as bob, as_app(world, crew_key) as key:
        alice_sid = await worker_session(alice, CREW, "Tern", "backend-engineer")
        args: dict[str, Any] = {"tool": "github", "kind": "repo", "ref": "acme/api", "action": "pushed"}
        await bob.ok("hadron_set_active_app", app=CREW)
        # On the team, but not attributed to alice's session.
        refused = await bob.refused("hadron_record_work", "FORBIDDEN", session=alice_sid, **args)
        assert "You cannot record work against a session you are not attributed to." in refused.text
        assert (await bob.ok("hadron_team_work_items", session=alice_sid)).data[
            "total"
        ] == 0  # reading is team-wide
        keyed = await key.refused("hadron_record_work", "FORBIDDEN", session=alice_sid, **args)
        assert "may not record" in keyed.text
        await alice.refused("hadron_record_work", "SESSION_NOT_FOUND", session="e" * 32, **args)
        # An ops session recorded in crew: the record never crosses Apps.
        await alice.ok("hadron_set_active_app", app=OPS)
        ops_sid = (await alice.ok("hadron_start_session", description="ops work")).data["sessionId"]
        await alice.refused("hadron_record_work", "SESSION_NOT_IN_APP", session=ops_sid, app=CREW, **args)
        # A crew session bound to an ops worker: SESSION_WORKER_NOT_IN_APP.
        ops_worker = (await alice.ok("hadron_cast_worker", name="Opal", role="site-reliability")).data[
            "worker"
        ]
        await alice.ok("hadron_set_active_app", app=CREW)
        crossed = (await alice.ok("hadron_start_session", description="x", workerRef=ops_worker["urn"])).data
        await alice.refused(
            "hadron_record_work", "SESSION_WORKER_NOT_IN_APP", session=crossed["sessionId"], **args
        )
        ok = await alice.ok("hadron_record_work", session=alice_sid, **args)
        assert ok.data["item"]["userHandle"] == "alice"
        cli(world.server.data_dir, "worker", "retire", CREW, "Tern", database_url=world.database_url)
        await alice.refused("hadron_record_work", "WORKER_RETIRED", session=alice_sid, **args)
        # The first-write bootstrap needs exactly one Team Agent.
        await alice.ok("hadron_set_active_app", app="hrn:app:acme.com:bot")
        bot_sid = (await alice.ok("hadron_start_session", description="bot")).data["sessionId"]
        await alice.refused("hadron_record_work", "TEAM_AGENT_NOT_FOUND", session=bot_sid, **args)
        await alice.ok("hadron_set_active_app", app="hrn:app:acme.com:twins")
        twin_sid = (await alice.ok("hadron_start_session", description="twins")).data["sessionId"]
        await alice.refused("hadron_record_work", "TEAM_AGENT_AMBIGUOUS", session=twin_sid, **args)
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_team_work_items", "app_not_found", app=CREW)


async def test_agents_and_ai_service_configs_are_searchable_and_own_scopes(team: tuple[World, str]) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice, as_user(world, "dave") as dave:
        found = await alice.ok("hadron_search", query="backend", entityTypes=["agent"])
        assert [h["urn"] for h in found.data["hits"]] == ["hrn:agent:acme.com:crew:backend"]
        configs = await alice.ok("hadron_search", query="claude", entityTypes=["aiServiceConfig"])
        assert [h["name"] for h in configs.data["hits"]] == ["claude-main"]
        assert (await dave.ok("hadron_search", query="backend", entityTypes=["agent"])).data["hits"] == []
        await alice.ok("hadron_set_active_app", app=CREW)
        agent = "hrn:agent:acme.com:crew:backend"
        made = await alice.ok("hadron_create_scope", name="backend-docs", memoryUrns=["hrn:mem:acme.com:specs"],
                              agentRef=agent)  # fmt: skip
        listed = await alice.ok("hadron_list_scopes", ownerType="agent", ownerRef=agent)
        assert [s["name"] for s in listed.data["scopes"]] == ["backend-docs"]
        assert "backend-docs" in [s["name"] for s in (await alice.ok("hadron_list_scopes")).data["scopes"]]
        explained = await alice.ok("hadron_scope_explain", name="backend-docs")
        assert explained.data["tier"] == "agent"
        await alice.ok(
            "hadron_create_scope", name="shared", memoryUrns=["hrn:mem:acme.com:specs"], agentRef=agent
        )
        await alice.ok("hadron_create_scope", name="shared", memoryUrns=["hrn:mem:acme.com:specs"],
                       agentRef="hrn:agent:acme.com:crew:android")  # fmt: skip
        await alice.refused("hadron_scope_explain", "scope_identifier_ambiguous", name="shared")
        await dave.refused("hadron_create_scope", "agent_not_found", name="x", memoryUrns=["hrn:mem:globex.com:plans"],
                           agentRef=agent)  # fmt: skip
        await dave.refused("hadron_list_scopes", "agent_not_found", ownerType="agent", ownerRef=agent)
        async with as_user(world, "bob") as bob:  # an org READER may not manage an Agent's scopes
            await bob.refused("hadron_delete_scope", "FORBIDDEN", scope=made.data["id"])


async def test_server_info_advertises_the_team_capabilities(team: tuple[World, str]) -> None:
    world, _ = team
    async with as_user(world, "alice") as alice:
        info = await alice.ok("hadron_server_info")
        for token in (
            "worker-model",
            "worker-boot-briefing",
            "team-chat",
            "team-worklog",
            "session-app-recovery",
        ):
            assert token in info.data["capabilities"], token
