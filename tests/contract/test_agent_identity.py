"""Agent identity: ``X-Agent-Id`` (HTTP) and ``TRIPTYCH_AGENT_ID`` (stdio) name the connection's agent,
and the memory tools act as that agent only, so calls and records are attributed to it and queryable by
it (``memory_list`` with its ``agent_id``). ``agent_id`` stays a required argument, as the contract says."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from pathlib import Path

import pytest
from harness import TRIPTYCH, ServerProcess, mcp_session
from mcp import Client, StdioServerParameters


def ws() -> str:
    return "agent-" + uuid.uuid4().hex[:8]


@pytest.mark.engines("sqlite", "two-machines")
async def test_the_header_agent_owns_what_the_connection_writes(open_server: ServerProcess) -> None:
    workspace = ws()
    url = open_server.url + "/mcp"
    async with mcp_session(url, {"X-Agent-Id": "planner"}) as planner:
        stored = await planner.call(
            "memory_store", content="The release is on Friday.", agent_id="planner", workspace_id=workspace
        )
        assert not stored.is_error, stored.data
        posing = await planner.call(
            "memory_store",
            content="Pretending to be another agent.",
            agent_id="writer",
            workspace_id=workspace,
        )
        assert posing.error_code == "INVALID_PARAMS"
        assert "differs from this connection's agent 'planner'" in posing.data["error"]["message"]
        assert posing.data["error"]["details"]["connection_agent_id"] == "planner"
        read_other = await planner.call("memory_list", agent_id="writer", workspace_id=workspace)
        assert read_other.error_code == "INVALID_PARAMS"
        required = await planner.call("memory_search", query="release", workspace_id=workspace)
        assert required.error_code == "INVALID_PARAMS"  # the contract keeps agent_id required
        assert "agent_id" in required.data["error"]["message"]

    async with mcp_session(url, {"X-Agent-Id": "writer"}) as writer:
        own = await writer.call(
            "memory_store", content="Draft the release notes.", agent_id="writer", workspace_id=workspace
        )
        # Another agent's per-agent record is out of this connection's reach, by id too.
        gone = await writer.call("memory_delete", record_id=stored.data["id"], workspace_id=workspace)
        assert gone.data == {"success": True, "found": False}
        edit = await writer.call(
            "memory_update", record_id=stored.data["id"], content="Changed.", workspace_id=workspace
        )
        assert edit.error_code == "DOCUMENT_NOT_FOUND"

    async with mcp_session(url) as anyone:  # no header: the argument alone decides, as before
        planner_view = await anyone.call("memory_list", agent_id="planner", workspace_id=workspace)
        writer_view = await anyone.call("memory_list", agent_id="writer", workspace_id=workspace)
    assert [r["content"] for r in planner_view.data["records"]] == ["The release is on Friday."]
    assert [r["id"] for r in writer_view.data["records"]] == [own.data["id"]]


async def test_review_resolutions_name_the_header_agent_in_the_audit_log(open_server: ServerProcess) -> None:
    workspace = ws()
    async with mcp_session(open_server.url + "/mcp", {"X-Agent-Id": "curator"}) as mcp:
        for content in ("User prefers dark mode", "User prefers light mode"):
            await mcp.call("memory_store", content=content, agent_id="curator", workspace_id=workspace)
        entry = (await mcp.call("memory_review_list", workspace_id=workspace)).data["entries"][0]
        resolved = await mcp.call(
            "memory_review_resolve", review_id=entry["id"], action="keep", workspace_id=workspace
        )
    assert not resolved.is_error, resolved.data
    with sqlite3.connect(open_server.data_dir / "metronix.db") as db:
        actors = db.execute(
            "SELECT actor FROM machine_events WHERE workspace_id = ?", (workspace,)
        ).fetchall()
    assert actors == [("agent:curator",)]


@pytest.mark.engines("sqlite", "two-machines")
async def test_an_invalid_header_is_dropped_and_binds_nothing(open_server: ServerProcess) -> None:
    workspace = ws()
    async with mcp_session(open_server.url + "/mcp", {"X-Agent-Id": "not valid/agent"}) as mcp:
        stored = await mcp.call(
            "memory_store", content="Still works.", agent_id="anyone", workspace_id=workspace
        )
    assert not stored.is_error


async def test_stdio_takes_the_agent_from_triptych_agent_id(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=TRIPTYCH,
        args=["mcp", "metronix", "--data-dir", str(tmp_path / "data")],
        env={**os.environ, "TRIPTYCH_AGENT_ID": "desk-agent"},
    )
    async with Client(params) as client:
        mine = await client.call_tool("memory_store", {"content": "Over stdio.", "agent_id": "desk-agent"})
        other = await client.call_tool("memory_store", {"content": "Not mine.", "agent_id": "someone"})
    assert not mine.is_error
    assert other.is_error
    refusal = json.loads(other.content[0].text)  # type: ignore[union-attr]
    assert refusal["error"]["details"]["connection_agent_id"] == "desk-agent"
