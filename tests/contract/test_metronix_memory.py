"""The Metronix agent-memory tools through the official MCP client against real `triptych serve` processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from harness import ServerProcess, ToolResult, bearer, mcp_session, token

# The same answers on both storage engines (server mode, issue 16).
pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")

MEMORY_TOOLS = (
    "memory_store",
    "memory_search",
    "memory_delete",
    "memory_batch_store",
    "memory_list",
    "memory_update",
    "memory_review_list",
    "memory_review_resolve",
)
# Seven facts far apart in meaning, so the freshness checks leave every one of them active.
FACTS = [
    "The staging database runs PostgreSQL 16",
    "Invoices are emailed on the first business day",
    "The office dog is a golden retriever",
    "Kubernetes nodes are patched every Tuesday night",
    "The marketing site is built with Astro",
    "Lunch orders close at eleven",
    "Backups are encrypted before upload to cold storage",
]


def ws(prefix: str = "mem") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def ok(result: ToolResult) -> dict[str, Any]:
    assert not result.is_error, result.data
    return result.data


@pytest.fixture(scope="module", autouse=True)
def ttl_server_starting(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Future[ServerProcess] | None]:
    """Starts the short-TTL server in the background while the module's other tests run.

    Only when a selected test asks for ``ttl_server``: a `-k` run of other tests starts nothing.
    """
    if not any("ttl_server" in getattr(item, "fixturenames", ()) for item in request.session.items):
        yield None
        return
    env = {"TRIPTYCH_AUTH_ENABLED": "false", "METRONIX_MEMORY_SESSION_TTL": "2"}
    server = ServerProcess(tmp_path_factory.mktemp("ttl") / "data", env)
    with ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(server.start)
        try:
            yield starting
        finally:
            starting.exception()  # wait for the start to finish, successful or not
            server.stop()


@pytest.fixture
def ttl_server(ttl_server_starting: Future[ServerProcess] | None) -> Future[ServerProcess]:
    """A server whose session records live two seconds (METRONIX_MEMORY_SESSION_TTL=2), once started."""
    assert ttl_server_starting is not None
    return ttl_server_starting


# -- the tools and their aliases -----------------------------------------------------------------


async def test_every_memory_tool_is_also_served_as_metronix_memory_alias_with_the_same_schema(
    open_server: ServerProcess,
) -> None:
    async with mcp_session(open_server.url + "/mcp") as mcp:
        tools = {tool.name: tool for tool in (await mcp.client.list_tools()).tools}
    for name in MEMORY_TOOLS:
        assert tools["metronix_" + name].input_schema == tools[name].input_schema
        assert tools[name].input_schema["additionalProperties"] is False
    assert tools["memory_store"].input_schema["required"] == ["content", "agent_id"]
    search = tools["memory_search"].input_schema["properties"]
    assert (search["top_k"]["default"], search["top_k"]["minimum"], search["top_k"]["maximum"]) == (5, 1, 50)


async def test_the_aliases_act_on_the_same_records_as_the_plain_names(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = ok(
            await mcp.call("metronix_memory_store", content=FACTS[0], agent_id="hermes", workspace_id=w)
        )
        again = ok(await mcp.call("memory_store", content=FACTS[0], agent_id="hermes", workspace_id=w))
        assert (again["id"], again["deduped"]) == (stored["id"], True)

        found = ok(
            await mcp.call(
                "metronix_memory_search", query="staging database", agent_id="hermes", workspace_id=w
            )
        )
        assert [r["record"]["id"] for r in found["results"]] == [stored["id"]]
        listed = ok(await mcp.call("metronix_memory_list", agent_id="hermes", workspace_id=w))
        assert [r["id"] for r in listed["records"]] == [stored["id"]]

        updated = ok(
            await mcp.call("metronix_memory_update", record_id=stored["id"], tags=["db"], workspace_id=w)
        )
        assert updated["updated_fields"] == ["tags"]
        plain = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))
        assert plain["records"][0]["tags"] == ["db"]

        batch = ok(
            await mcp.call(
                "metronix_memory_batch_store",
                records=[{"content": FACTS[1]}, {"content": FACTS[0]}],
                agent_id="hermes",
                workspace_id=w,
            )
        )
        assert (batch["stored"], batch["deduped"]) == (1, 1)

        await mcp.call("memory_store", content="User prefers dark mode", agent_id="hermes", workspace_id=w)
        await mcp.call("memory_store", content="User prefers light mode", agent_id="hermes", workspace_id=w)
        reviews = ok(await mcp.call("metronix_memory_review_list", workspace_id=w))
        assert reviews == ok(await mcp.call("memory_review_list", workspace_id=w))
        assert reviews["total"] == 1
        resolved = ok(
            await mcp.call(
                "metronix_memory_review_resolve",
                review_id=reviews["entries"][0]["id"],
                action="keep",
                workspace_id=w,
            )
        )
        assert resolved["success"] is True
        assert ok(await mcp.call("memory_review_list", workspace_id=w))["total"] == 0

        deleted = ok(await mcp.call("metronix_memory_delete", record_id=stored["id"], workspace_id=w))
        assert deleted == {"success": True, "found": True}
        assert ok(await mcp.call("memory_delete", record_id=stored["id"], workspace_id=w)) == {
            "success": True,
            "found": False,
        }


# -- scopes -----------------------------------------------------------------------------------------


async def test_global_records_reach_every_agent_and_per_agent_records_only_their_own(
    open_server: ServerProcess,
) -> None:
    w = ws()
    shared, private = (
        "The company VPN endpoint is vpn.example.test",
        "The favourite editor of athena is Helix",
    )
    async with mcp_session(open_server.url + "/mcp") as mcp:
        g = ok(
            await mcp.call("memory_store", content=shared, agent_id="athena", scope="global", workspace_id=w)
        )
        p = ok(await mcp.call("memory_store", content=private, agent_id="athena", workspace_id=w))
        own = ok(await mcp.call("memory_list", agent_id="athena", workspace_id=w))
        other = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))
        other_search = ok(
            await mcp.call(
                "memory_search", query="favourite editor Helix", agent_id="hermes", top_k=50, workspace_id=w
            )
        )
        own_search = ok(
            await mcp.call("memory_search", query="favourite editor Helix", agent_id="athena", workspace_id=w)
        )
        only_global = ok(await mcp.call("memory_list", agent_id="athena", scope="global", workspace_id=w))
    assert {r["id"] for r in own["records"]} == {g["id"], p["id"]}
    assert [r["id"] for r in other["records"]] == [g["id"]] and other["total"] == 1
    assert [r["record"]["id"] for r in other_search["results"]] == [g["id"]]
    assert own_search["results"][0]["record"]["id"] == p["id"]
    assert [r["id"] for r in only_global["records"]] == [g["id"]]
    assert only_global["records"][0]["scope"] == "global"


async def test_session_scope_without_a_session_id_is_invalid_params(open_server: ServerProcess) -> None:
    w = ws()
    note = "Scratch note for this session."
    async with mcp_session(open_server.url + "/mcp") as mcp:
        refused = [
            await mcp.call("memory_store", content=note, agent_id="hermes", scope="session", workspace_id=w),
            await mcp.call(
                "memory_batch_store", records=[{"content": note}], agent_id="hermes", scope="session",
                workspace_id=w,
            ),
        ]  # fmt: skip
        listed = ok(await mcp.call("memory_list", agent_id="hermes", status=["all"], workspace_id=w))
    for result in refused:
        assert result.error_code == "INVALID_PARAMS"
        assert "session_id" in result.data["error"]["message"]
    assert listed["total"] == 0


async def test_an_unknown_scope_or_kind_is_invalid_params(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        scope = await mcp.call("memory_store", content="x y z", agent_id="a", scope="team", workspace_id=w)
        kind = await mcp.call("memory_store", content="x y z", agent_id="a", kind="opinion", workspace_id=w)
        list_scope = await mcp.call("memory_list", agent_id="a", scope="team", workspace_id=w)
    assert [r.error_code for r in (scope, kind, list_scope)] == ["INVALID_PARAMS"] * 3


async def test_kind_is_stored_and_filters_the_list(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        pref = ok(
            await mcp.call(
                "memory_store", content="The user prefers concise answers", kind="preference",
                agent_id="hermes", workspace_id=w,
            )
        )  # fmt: skip
        await mcp.call("memory_store", content=FACTS[2], agent_id="hermes", workspace_id=w)
        prefs = ok(await mcp.call("memory_list", agent_id="hermes", kind="preference", workspace_id=w))
        every = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))
    assert [(r["id"], r["kind"]) for r in prefs["records"]] == [(pref["id"], "preference")]
    assert prefs["total"] == 1 and every["total"] == 2
    assert {r["kind"] for r in every["records"]} == {"preference", "fact"}


async def test_memory_delete_refuses_session_records_which_stay_stored(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = ok(
            await mcp.call(
                "memory_store", content="The user is debugging the login flow", agent_id="hermes",
                scope="session", session_id="s1", workspace_id=w,
            )
        )  # fmt: skip
        refused = await mcp.call("memory_delete", record_id=stored["id"], workspace_id=w)
        listed = ok(await mcp.call("memory_list", agent_id="hermes", scope="session", workspace_id=w))
    assert refused.error_code == "INVALID_PARAMS"
    assert [r["id"] for r in listed["records"]] == [stored["id"]]


async def test_memory_delete_removes_a_record_from_search_and_list(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        doomed = ok(await mcp.call("memory_store", content=FACTS[3], agent_id="hermes", workspace_id=w))
        kept = ok(await mcp.call("memory_store", content=FACTS[4], agent_id="hermes", workspace_id=w))
        first = ok(await mcp.call("memory_delete", record_id=doomed["id"], workspace_id=w))
        second = ok(await mcp.call("memory_delete", record_id=doomed["id"], workspace_id=w))
        never = ok(await mcp.call("memory_delete", record_id=str(uuid.uuid4()), workspace_id=w))
        listed = ok(await mcp.call("memory_list", agent_id="hermes", status=["all"], workspace_id=w))
        found = ok(
            await mcp.call(
                "memory_search", query="Kubernetes nodes patched", agent_id="hermes", status=["all"],
                top_k=50, workspace_id=w,
            )
        )  # fmt: skip
    assert first == {"success": True, "found": True}
    assert second == never == {"success": True, "found": False}
    assert [r["id"] for r in listed["records"]] == [kept["id"]]
    assert [r["record"]["id"] for r in found["results"]] == [kept["id"]]


# -- dedup ----------------------------------------------------------------------------------------------


async def test_same_content_returns_the_same_id_keyed_by_workspace_agent_scope_and_session(
    open_server: ServerProcess,
) -> None:
    w, other_w = ws(), ws()
    text = "Standups happen at nine sharp"
    async with mcp_session(open_server.url + "/mcp") as mcp:

        async def store(**kw: Any) -> dict[str, Any]:
            args = {"content": text, "agent_id": "hermes", "workspace_id": w, **kw}
            return ok(await mcp.call("memory_store", **args))

        first = await store()
        again = await store(tags=["other", "tags"], importance_score=0.9)
        variants = [
            await store(workspace_id=other_w),
            await store(agent_id="athena"),
            await store(scope="global"),
            await store(scope="session", session_id="s1"),
            await store(scope="session", session_id="s2"),
        ]
        session_again = await store(scope="session", session_id="s1")
        listed = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w, status=["all"]))
    assert first == {"id": first["id"], "content_hash": sha256(text), "deduped": False}
    assert again == {**first, "deduped": True}
    assert all(v["deduped"] is False for v in variants)
    assert len({first["id"], *(v["id"] for v in variants)}) == 6
    assert (session_again["id"], session_again["deduped"]) == (variants[3]["id"], True)
    # hermes sees its per_agent, its two session records and its global one; athena's stays hers.
    assert listed["total"] == 4


async def test_concurrent_stores_of_the_same_content_from_two_sessions_make_one_record(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with (
        mcp_session(open_server.url + "/mcp") as one,
        mcp_session(open_server.url + "/mcp") as two,
    ):
        rounds = []
        for text in FACTS[:3]:
            rounds.append(
                await asyncio.gather(
                    one.call("memory_store", content=text, agent_id="hermes", workspace_id=w),
                    two.call("memory_store", content=text, agent_id="hermes", workspace_id=w),
                )
            )
        listed = ok(await one.call("memory_list", agent_id="hermes", status=["all"], workspace_id=w))
    for a, b in rounds:
        assert ok(a)["id"] == ok(b)["id"]
        assert sorted([a.data["deduped"], b.data["deduped"]]) == [False, True]
    assert listed["total"] == 3


# -- lifecycle statuses ------------------------------------------------------------------------------------


async def test_status_defaults_to_active_and_accepts_all_or_an_explicit_list(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        dark = ok(
            await mcp.call("memory_store", content="User prefers dark mode", agent_id="a", workspace_id=w)
        )
        light = ok(
            await mcp.call("memory_store", content="User prefers light mode", agent_id="a", workspace_id=w)
        )

        async def listed(status: list[str] | None) -> set[str]:
            extra = {} if status is None else {"status": status}
            data = ok(await mcp.call("memory_list", agent_id="a", workspace_id=w, **extra))
            assert data["total"] == len(data["records"])
            return {r["id"] for r in data["records"]}

        async def searched(status: list[str] | None) -> set[str]:
            extra = {} if status is None else {"status": status}
            data = ok(
                await mcp.call(
                    "memory_search", query="user prefers mode", agent_id="a", workspace_id=w, **extra
                )
            )
            return {r["record"]["id"] for r in data["results"]}

        for view in (listed, searched):
            assert await view(None) == {dark["id"]}
            assert await view(["active"]) == {dark["id"]}
            assert await view(["all"]) == {dark["id"], light["id"]}
            assert await view(["conflicted"]) == {light["id"]}
            assert await view(["active", "conflicted"]) == {dark["id"], light["id"]}
            assert await view(["archived", "stale"]) == set()


async def test_an_unknown_status_is_invalid_params(open_server: ServerProcess) -> None:
    w = ws()
    bad = {
        "unknown": ["deleted"],
        "one-unknown": ["active", "bogus"],
        "all-combined": ["all", "active"],
        "empty": [],
    }
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for name, status in bad.items():
            results = [
                await mcp.call("memory_list", agent_id="a", status=status, workspace_id=w),
                await mcp.call(
                    "memory_search", query="anything", agent_id="a", status=status, workspace_id=w
                ),
            ]
            for result in results:
                assert result.error_code == "INVALID_PARAMS", name
                # A value outside the advertised enum is refused by the schema ("fields"), a combination
                # the schema cannot express ("all" with another) by the service ("field").
                details = result.data["error"]["details"]
                assert details.get("fields", [details.get("field")]) == ["status"], name


# -- memory_list paging ---------------------------------------------------------------------------------


async def test_memory_list_pages_honestly_with_a_total_for_the_same_filter(
    open_server: ServerProcess,
) -> None:
    w = ws()
    tags = [["ops", "db"], ["ops"], ["db"], ["ops", "db"], [], ["ops"], ["ops", "db", "backup"]]
    records = [{"content": text, "tags": t} for text, t in zip(FACTS, tags, strict=True)]
    async with mcp_session(open_server.url + "/mcp") as mcp:
        batch = ok(await mcp.call("memory_batch_store", records=records, agent_id="hermes", workspace_id=w))
        pages = [
            ok(await mcp.call("memory_list", agent_id="hermes", limit=3, offset=o, workspace_id=w))
            for o in (0, 3, 6, 9)
        ]
        both = ok(
            await mcp.call("memory_list", agent_id="hermes", tags=["ops", "db"], limit=2, workspace_id=w)
        )
        rest = ok(
            await mcp.call(
                "memory_list", agent_id="hermes", tags=["ops", "db"], limit=2, offset=2, workspace_id=w
            )
        )
        none = ok(await mcp.call("memory_list", agent_id="hermes", tags=["ops", "nope"], workspace_id=w))
    ids = [r["id"] for r in batch["results"]]
    assert [(p["count"], p["total"], p["limit"], p["offset"]) for p in pages] == [
        (3, 7, 3, 0),
        (3, 7, 3, 3),
        (1, 7, 3, 6),
        (0, 7, 3, 9),
    ]
    paged = [r["id"] for p in pages for r in p["records"]]
    assert sorted(paged) == sorted(ids) and len(set(paged)) == 7
    with_both = {ids[0], ids[3], ids[6]}
    assert (both["count"], both["total"], rest["count"], rest["total"]) == (2, 3, 1, 3)
    assert {r["id"] for r in both["records"] + rest["records"]} == with_both
    assert all({"ops", "db"} <= set(r["tags"]) for r in both["records"] + rest["records"])
    assert (none["count"], none["total"]) == (0, 0)


async def test_memory_list_limit_is_1_to_100_and_offset_not_negative(open_server: ServerProcess) -> None:
    w = ws()
    bad = {"limit": [0, 101, -5, "ten"], "offset": [-1, "first"]}
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await mcp.call("memory_store", content=FACTS[0], agent_id="hermes", workspace_id=w)
        for field, values in bad.items():
            for value in values:
                args: dict[str, Any] = {field: value}
                result = await mcp.call("memory_list", agent_id="hermes", workspace_id=w, **args)
                assert result.error_code == "INVALID_PARAMS", (field, value)
                assert field in result.data["error"]["message"], (field, value)
        one = ok(await mcp.call("memory_list", agent_id="hermes", limit=1, workspace_id=w))
        hundred = ok(await mcp.call("memory_list", agent_id="hermes", limit=100, offset=0, workspace_id=w))
    assert (one["count"], hundred["count"]) == (1, 1)


# -- memory_update -----------------------------------------------------------------------------------------


async def test_memory_update_changes_only_the_fields_passed(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = ok(
            await mcp.call(
                "memory_store", content=FACTS[1], tags=["finance"], importance_score=0.3, kind="pinned",
                source_type="conversation", agent_id="hermes", workspace_id=w,
            )
        )  # fmt: skip
        tags = ok(await mcp.call("memory_update", record_id=stored["id"], tags=["billing"], workspace_id=w))
        importance = ok(
            await mcp.call("memory_update", record_id=stored["id"], importance_score=0.9, workspace_id=w)
        )
        same = ok(
            await mcp.call(
                "memory_update", record_id=stored["id"], tags=["billing"], importance_score=0.9,
                content=FACTS[1], workspace_id=w,
            )
        )  # fmt: skip
        record = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))["records"][0]
    assert tags == {"id": stored["id"], "content_hash": stored["content_hash"], "updated_fields": ["tags"]}
    assert importance["updated_fields"] == ["importance_score"]
    assert importance["content_hash"] == stored["content_hash"]
    assert same["updated_fields"] == []
    assert {
        k: record[k] for k in ("content", "tags", "importance_score", "kind", "source_type", "status")
    } == {
        "content": FACTS[1],
        "tags": ["billing"],
        "importance_score": 0.9,
        "kind": "pinned",
        "source_type": "conversation",
        "status": "active",
    }
    assert record["content_hash"] == stored["content_hash"]


async def test_memory_update_of_content_rehashes_and_reembeds_so_search_finds_only_the_new_text(
    open_server: ServerProcess,
) -> None:
    w = ws()
    old, new = "The staging database lives on host alpha-7", "Payroll runs through the Gusto integration"
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = ok(
            await mcp.call("memory_store", content=old, tags=["infra"], agent_id="hermes", workspace_id=w)
        )
        updated = ok(await mcp.call("memory_update", record_id=stored["id"], content=new, workspace_id=w))
        await mcp.call("memory_store", content=FACTS[0], agent_id="hermes", workspace_id=w)

        async def search(query: str) -> list[dict[str, Any]]:
            data = ok(
                await mcp.call("memory_search", query=query, agent_id="hermes", top_k=50, workspace_id=w)
            )
            return list(data["results"])

        by_keyword = await search("payroll Gusto integration")
        # No word in common with either record: only the new vector can put the record first.
        by_meaning = await search("which company pays salaries")
        by_old = await search("staging database host alpha-7")
        record = ok(await mcp.call("memory_list", agent_id="hermes", tags=["infra"], workspace_id=w))
    assert updated == {"id": stored["id"], "content_hash": sha256(new), "updated_fields": ["content"]}
    for found in (by_keyword, by_meaning):
        assert found[0]["record"]["id"] == stored["id"] and found[0]["record"]["content"] == new
    assert by_keyword[0]["keyword_score"] > 0
    assert all(r["record"]["content"] != old for r in by_old)
    assert by_old[0]["record"]["content"] == FACTS[0]
    assert [r["keyword_score"] for r in by_old if r["record"]["id"] == stored["id"]] == [0]
    assert [(r["id"], r["content_hash"], r["tags"]) for r in record["records"]] == [
        (stored["id"], sha256(new), ["infra"])
    ]


async def test_memory_update_refuses_unknown_records_and_bad_values(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = ok(await mcp.call("memory_store", content=FACTS[0], agent_id="hermes", workspace_id=w))
        missing = await mcp.call("memory_update", record_id=str(uuid.uuid4()), tags=["x"], workspace_id=w)
        importance = await mcp.call(
            "memory_update", record_id=stored["id"], importance_score=1.5, workspace_id=w
        )
        empty = await mcp.call("memory_update", record_id=stored["id"], content="   ", workspace_id=w)
        record = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))["records"][0]
    assert missing.error_code == "DOCUMENT_NOT_FOUND"
    assert importance.error_code == "INVALID_PARAMS" and empty.error_code == "INVALID_PARAMS"
    assert (record["content"], record["importance_score"]) == (FACTS[0], 0.5)


# -- memory_batch_store --------------------------------------------------------------------------------------


async def test_memory_batch_store_refuses_more_than_100_records_or_none(open_server: ServerProcess) -> None:
    w = ws()
    too_many = [{"content": f"Batch record number {i} of too many"} for i in range(101)]
    async with mcp_session(open_server.url + "/mcp") as mcp:
        over = await mcp.call("memory_batch_store", records=too_many, agent_id="hermes", workspace_id=w)
        empty = await mcp.call("memory_batch_store", records=[], agent_id="hermes", workspace_id=w)
        listed = ok(await mcp.call("memory_list", agent_id="hermes", status=["all"], workspace_id=w))
    assert over.error_code == "INVALID_PARAMS" and "100" in over.data["error"]["message"]
    assert empty.error_code == "INVALID_PARAMS"
    assert listed["total"] == 0


async def test_memory_batch_store_processes_in_order_so_duplicates_inside_one_batch_dedup(
    open_server: ServerProcess,
) -> None:
    w = ws()
    records = [{"content": FACTS[0]}, {"content": FACTS[1], "tags": ["x"]}, {"content": FACTS[0]}]
    async with mcp_session(open_server.url + "/mcp") as mcp:
        batch = ok(await mcp.call("memory_batch_store", records=records, agent_id="hermes", workspace_id=w))
        again = ok(
            await mcp.call("memory_batch_store", records=records[:1], agent_id="hermes", workspace_id=w)
        )
    first, second, third = batch["results"]
    assert (batch["stored"], batch["deduped"]) == (2, 1)
    assert (first["deduped"], second["deduped"], third["deduped"]) == (False, False, True)
    assert third["id"] == first["id"] and third["content_hash"] == sha256(FACTS[0])
    assert all(r["error"] is None for r in batch["results"])
    assert again["results"][0]["id"] == first["id"] and (again["stored"], again["deduped"]) == (0, 1)


async def test_one_bad_record_sets_its_error_and_the_rest_are_stored(open_server: ServerProcess) -> None:
    w = ws()
    records = [
        {"content": FACTS[0]},
        {"content": "   "},
        {"content": FACTS[1], "tags": ["billing"]},
        {"content": FACTS[2], "colour": "red"},
        {"content": 42},
        {"content": FACTS[3]},
    ]
    async with mcp_session(open_server.url + "/mcp") as mcp:
        batch = ok(await mcp.call("memory_batch_store", records=records, agent_id="hermes", workspace_id=w))
        listed = ok(await mcp.call("memory_list", agent_id="hermes", workspace_id=w))
    results = batch["results"]
    assert len(results) == 6 and (batch["stored"], batch["deduped"]) == (3, 0)
    for bad in (1, 3, 4):
        assert results[bad]["id"] is None and results[bad]["error"]
    assert "colour" in results[3]["error"]
    good = [results[i]["id"] for i in (0, 2, 5)]
    assert all(results[i]["error"] is None for i in (0, 2, 5))
    assert sorted(r["id"] for r in listed["records"]) == sorted(good)


async def test_a_record_that_is_not_an_object_sets_its_error_without_aborting_the_batch(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        result = await mcp.call(
            "memory_batch_store",
            records=[{"content": FACTS[0]}, "just a string", {"content": FACTS[1]}],
            agent_id="hermes",
            workspace_id=w,
        )
    batch = ok(result)
    assert batch["stored"] == 2
    assert batch["results"][1]["id"] is None and batch["results"][1]["error"]


# -- memory_search ---------------------------------------------------------------------------------------------


async def test_memory_search_scores_are_the_contracts_weighted_sum_with_ranks_and_a_keyword_score(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await mcp.call(
            "memory_batch_store", records=[{"content": f} for f in FACTS], agent_id="a", workspace_id=w
        )
        await mcp.call(
            "memory_store", content="The user is debugging the login flow", scope="session",
            session_id="s1", agent_id="a", workspace_id=w,
        )  # fmt: skip
        found = ok(
            await mcp.call(
                "memory_search", query="which database does staging run", agent_id="a", session_id="s1",
                top_k=8, workspace_id=w,
            )
        )  # fmt: skip
    results = found["results"]
    assert found["count"] == len(results) == 8
    assert [r["rank"] for r in results] == list(range(1, 9))
    assert results[0]["record"]["content"] == FACTS[0]
    for hit in results:
        expected = 0.6 * hit["dense_score"] + 0.3 * hit["graph_score"] + 0.1 * hit["session_boost"]
        assert hit["score"] == pytest.approx(expected, abs=2e-4)
        assert 0 <= hit["keyword_score"] <= 1 and 0 <= hit["dense_score"] <= 1
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert results[0]["keyword_score"] > 0
    record = results[0]["record"]
    assert set(record) >= {
        "id", "workspace_id", "agent_id", "scope", "source_type", "content", "tags", "importance_score",
        "ttl_expires_at", "content_hash", "created_at", "session_id", "metadata", "status",
    }  # fmt: skip


async def test_graph_score_rewards_a_record_sharing_a_ticket_id_or_a_name_with_the_query(
    open_server: ServerProcess,
) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        ticket = ok(
            await mcp.call(
                "memory_store", content="Caroline owns ticket MTRNIX-303 about the memory tools",
                agent_id="a", workspace_id=w,
            )
        )  # fmt: skip
        pasta = ok(
            await mcp.call(
                "memory_store", content="The cafeteria serves pasta on fridays", agent_id="a", workspace_id=w
            )
        )
        by_ticket = ok(
            await mcp.call("memory_search", query="status of MTRNIX-303", agent_id="a", workspace_id=w)
        )
        by_name = ok(
            await mcp.call("memory_search", query="what does Caroline own", agent_id="a", workspace_id=w)
        )
    for found in (by_ticket, by_name):
        graph = {r["record"]["id"]: r["graph_score"] for r in found["results"]}
        assert graph[ticket["id"]] > 0 and graph[pasta["id"]] == 0
        assert found["results"][0]["record"]["id"] == ticket["id"]


async def test_session_boost_goes_only_to_records_of_the_session_passed(open_server: ServerProcess) -> None:
    w = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:

        async def store(content: str, **kw: Any) -> str:
            return str(
                ok(await mcp.call("memory_store", content=content, agent_id="a", workspace_id=w, **kw))["id"]
            )

        one = await store("The user is debugging the login flow", scope="session", session_id="s1")
        two = await store("The user is drafting the quarterly memo", scope="session", session_id="s2")
        durable = await store("The user prefers concise answers")

        async def boosts(**kw: Any) -> dict[str, float]:
            data = ok(
                await mcp.call(
                    "memory_search", query="what is the user doing", agent_id="a", workspace_id=w, **kw
                )
            )
            return {r["record"]["id"]: r["session_boost"] for r in data["results"]}

        in_one = await boosts(session_id="s1")
        in_two = await boosts(session_id="s2")
        unknown = await boosts(session_id="s3")
        without = await boosts()
    assert in_one[one] > 0 and in_one[two] == 0 and in_one[durable] == 0
    assert in_two[two] > 0 and in_two[one] == 0
    assert set(unknown.values()) == set(without.values()) == {0}


async def test_filters_apply_before_top_k_so_another_agents_records_cannot_crowd_out_visible_ones(
    open_server: ServerProcess,
) -> None:
    w = ws()
    query = "deploy pipeline build farm"
    noise = [{"content": f"Deploy pipeline {i} runs on the build farm"} for i in range(60)]
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await mcp.call("memory_batch_store", records=noise, agent_id="noisy", workspace_id=w)
        mine = ok(
            await mcp.call(
                "memory_batch_store",
                records=[
                    {"content": "Releases are cut from the main branch on Mondays", "tags": ["release"]},
                    {"content": "Our CI machines live in the Frankfurt region"},
                ],
                agent_id="quiet",
                workspace_id=w,
            )
        )
        found = ok(await mcp.call("memory_search", query=query, agent_id="quiet", top_k=2, workspace_id=w))
        tagged = ok(
            await mcp.call("memory_search", query=query, agent_id="quiet", tags=["release"], workspace_id=w)
        )
        noisy = ok(
            await mcp.call(
                "memory_search", query=query, agent_id="noisy", status=["all"], top_k=50, workspace_id=w
            )
        )
    assert {r["record"]["id"] for r in found["results"]} == {r["id"] for r in mine["results"]}
    assert [r["record"]["id"] for r in tagged["results"]] == [mine["results"][0]["id"]]
    assert noisy["count"] == 50 and all(r["record"]["agent_id"] == "noisy" for r in noisy["results"])


async def test_memory_search_out_of_bounds_arguments_are_invalid_params(open_server: ServerProcess) -> None:
    w = ws()
    bad: dict[str, dict[str, Any]] = {
        "top_k-0": {"top_k": 0},
        "top_k-51": {"top_k": 51},
        "empty-query": {"query": ""},
        "blank-query": {"query": "   "},
        "unknown-argument": {"topk": 5},
    }
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for name, args in bad.items():
            result = await mcp.call(
                "memory_search", **{"query": "anything", "agent_id": "a", "workspace_id": w, **args}
            )
            assert result.error_code == "INVALID_PARAMS", name
        fifty = ok(await mcp.call("memory_search", query="anything", agent_id="a", top_k=50, workspace_id=w))
    assert fifty["count"] == 0


# -- agent_id ------------------------------------------------------------------------------------------------------


async def test_a_missing_or_invalid_agent_id_is_invalid_params_for_every_tool_taking_one(
    open_server: ServerProcess,
) -> None:
    w = ws()
    bad_ids = {
        "missing": None,
        "empty": "",
        "space": "has space",
        "slash": "a/b",
        "too-long": "x" * 65,
        "tab": "tab\there",
        "non-ascii": "émile",
    }
    calls: dict[str, dict[str, Any]] = {
        "memory_store": {"content": FACTS[0]},
        "memory_search": {"query": "staging"},
        "memory_list": {},
        "memory_batch_store": {"records": [{"content": FACTS[0]}]},
    }
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for name, agent_id in bad_ids.items():
            agent = {} if agent_id is None else {"agent_id": agent_id}
            for tool, args in calls.items():
                result = await mcp.call(tool, workspace_id=w, **args, **agent)
                assert result.error_code == "INVALID_PARAMS", (name, tool)
                assert "agent_id" in result.data["error"]["message"], (name, tool)


async def test_a_valid_agent_id_uses_letters_digits_dot_underscore_and_dash(
    open_server: ServerProcess,
) -> None:
    w = ws()
    agent = "Agent_7.v2-" + "x" * 53  # 64 characters
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = ok(await mcp.call("memory_store", content=FACTS[0], agent_id=agent, workspace_id=w))
        listed = ok(await mcp.call("memory_list", agent_id=agent, workspace_id=w))
    assert [(r["id"], r["agent_id"]) for r in listed["records"]] == [(stored["id"], agent)]


# -- roles and workspaces ------------------------------------------------------------------------------------------


async def test_a_viewer_can_search_and_list_but_every_memory_write_is_forbidden(
    auth_server: ServerProcess,
) -> None:
    w = ws()
    url = auth_server.url + "/mcp"
    async with mcp_session(url, bearer(token(workspaces=[w]))) as editor:
        stored = ok(
            await editor.call("memory_store", content="User prefers dark mode", agent_id="a", workspace_id=w)
        )
        await editor.call("memory_store", content="User prefers light mode", agent_id="a", workspace_id=w)
        review = ok(await editor.call("memory_review_list", workspace_id=w))["entries"][0]
    async with mcp_session(url, bearer(token("vic", "viewer", [w]))) as viewer:
        writes = [
            await viewer.call("memory_store", content="Overwrite", agent_id="a", workspace_id=w),
            await viewer.call(
                "memory_batch_store", records=[{"content": "Overwrite"}], agent_id="a", workspace_id=w
            ),
            await viewer.call("memory_update", record_id=stored["id"], tags=["x"], workspace_id=w),
            await viewer.call("memory_delete", record_id=stored["id"], workspace_id=w),
            await viewer.call(
                "memory_review_resolve", review_id=review["id"], action="archive", workspace_id=w
            ),
            await viewer.call("metronix_memory_store", content="Overwrite", agent_id="a", workspace_id=w),
        ]
        found = ok(await viewer.call("memory_search", query="dark mode", agent_id="a", workspace_id=w))
        listed = ok(await viewer.call("memory_list", agent_id="a", status=["all"], workspace_id=w))
        reviews = ok(await viewer.call("memory_review_list", workspace_id=w))
    for refused in writes:
        # The reference's permission refusal (403, a workspace not granted: here, not for writing);
        # AUTH_REQUIRED is reserved for a credential that fails validation.
        assert refused.error_code == "WORKSPACE_NOT_FOUND"
        assert refused.data["error"]["details"]["reason"] == "FORBIDDEN"
    assert [r["record"]["id"] for r in found["results"]] == [stored["id"]]
    assert listed["total"] == 2 and all(r["tags"] == [] for r in listed["records"])
    assert [e["id"] for e in reviews["entries"]] == [review["id"]]


async def test_every_memory_tool_refuses_a_workspace_the_token_does_not_grant(
    auth_server: ServerProcess,
) -> None:
    mine, theirs = ws(), ws()
    url = auth_server.url + "/mcp"
    async with mcp_session(url, bearer(token("owner", "editor", [theirs]))) as owner:
        stored = ok(await owner.call("memory_store", content=FACTS[0], agent_id="a", workspace_id=theirs))
    calls: list[tuple[str, dict[str, Any]]] = [
        ("memory_store", {"content": "x", "agent_id": "a"}),
        ("memory_search", {"query": "staging", "agent_id": "a"}),
        ("memory_delete", {"record_id": stored["id"]}),
        ("memory_batch_store", {"records": [{"content": "x"}], "agent_id": "a"}),
        ("memory_list", {"agent_id": "a"}),
        ("memory_update", {"record_id": stored["id"], "tags": ["x"]}),
        ("memory_review_list", {}),
        ("memory_review_resolve", {"review_id": "review_x", "action": "keep"}),
    ]
    async with mcp_session(url, bearer(token("eve", "admin", [mine]))) as eve:
        results = [await eve.call(tool, workspace_id=theirs, **args) for tool, args in calls]
        aliased = [await eve.call("metronix_" + tool, workspace_id=theirs, **args) for tool, args in calls]
    async with mcp_session(url, bearer(token("owner", "editor", [theirs]))) as owner:
        listed = ok(await owner.call("memory_list", agent_id="a", workspace_id=theirs))
    assert [r.error_code for r in results + aliased] == ["WORKSPACE_NOT_FOUND"] * 16
    assert [(r["id"], r["tags"]) for r in listed["records"]] == [(stored["id"], [])]


async def test_records_of_one_workspace_are_invisible_and_untouchable_from_another(
    open_server: ServerProcess,
) -> None:
    a, b = ws(), ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = ok(
            await mcp.call("memory_store", content=FACTS[0], agent_id="a", scope="global", workspace_id=a)
        )
        await mcp.call("memory_store", content=FACTS[1], agent_id="a", workspace_id=b)
        found = ok(
            await mcp.call(
                "memory_search", query="staging database", agent_id="a", status=["all"], workspace_id=b
            )
        )
        listed = ok(await mcp.call("memory_list", agent_id="a", status=["all"], workspace_id=b))
        updated = await mcp.call("memory_update", record_id=stored["id"], content="Hijacked", workspace_id=b)
        deleted = ok(await mcp.call("memory_delete", record_id=stored["id"], workspace_id=b))
        same = ok(
            await mcp.call("memory_store", content=FACTS[0], agent_id="a", scope="global", workspace_id=b)
        )
        still = ok(await mcp.call("memory_list", agent_id="a", workspace_id=a))
    assert stored["id"] not in {r["record"]["id"] for r in found["results"]}
    assert stored["id"] not in {r["id"] for r in listed["records"]}
    assert updated.error_code == "DOCUMENT_NOT_FOUND"
    assert deleted == {"success": True, "found": False}
    assert same["deduped"] is False and same["id"] != stored["id"]
    assert [(r["id"], r["content"]) for r in still["records"]] == [(stored["id"], FACTS[0])]


# -- session TTL (its own server, started in the background; last so the start has finished) -----


async def test_session_records_slide_their_ttl_while_used_then_vanish_from_search_and_list(
    ttl_server: Future[ServerProcess],
) -> None:
    server = await asyncio.wrap_future(ttl_server)
    w = ws("ttl")
    query = "debugging the login flow"
    async with mcp_session(server.url + "/mcp") as mcp:
        session = ok(
            await mcp.call(
                "memory_store", content="The user is debugging the login flow", agent_id="hermes",
                scope="session", session_id="s1", workspace_id=w,
            )
        )  # fmt: skip
        durable = ok(await mcp.call("memory_store", content=FACTS[5], agent_id="hermes", workspace_id=w))
        started = time.monotonic()
        # Every read touches the record, so it outlives its two-second TTL while it is in use.
        while time.monotonic() - started < 2.3:
            await asyncio.sleep(0.3)
            listed = ok(await mcp.call("memory_list", agent_id="hermes", scope="session", workspace_id=w))
            assert [r["id"] for r in listed["records"]] == [session["id"]]
        found = ok(
            await mcp.call("memory_search", query=query, agent_id="hermes", session_id="s1", workspace_id=w)
        )
        assert found["results"][0]["record"]["id"] == session["id"]
        assert found["results"][0]["session_boost"] > 0

        await asyncio.sleep(2.2)  # untouched for longer than the TTL
        listed = ok(await mcp.call("memory_list", agent_id="hermes", status=["all"], workspace_id=w))
        found = ok(
            await mcp.call(
                "memory_search", query=query, agent_id="hermes", session_id="s1", status=["all"],
                top_k=50, workspace_id=w,
            )
        )  # fmt: skip
        session_only = ok(await mcp.call("memory_list", agent_id="hermes", scope="session", workspace_id=w))
    assert [r["id"] for r in listed["records"]] == [durable["id"]] and listed["total"] == 1
    assert [r["record"]["id"] for r in found["results"]] == [durable["id"]]
    assert session_only["total"] == 0 and session_only["records"] == []


async def test_every_tool_result_reports_the_server_s_own_time_in_meta(open_server: ServerProcess) -> None:
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = await mcp.client.call_tool(
            "memory_store", {"content": "The ferry leaves at noon", "agent_id": "timer"}
        )
        failed = await mcp.client.call_tool("memory_store", {"content": "", "agent_id": "timer"})
    for result in (stored, failed):
        assert result.meta is not None
        assert isinstance(result.meta["triptych/server_ms"], float) and result.meta["triptych/server_ms"] >= 0
    # The payload keeps exactly the contract's fields.
    assert set(json.loads(stored.content[0].text)) == {"id", "content_hash", "deduped"}  # type: ignore[union-attr]
    assert failed.is_error
