"""Every documented Metronix error code in the knowledge-base scope, triggered through a real client."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pytest
from harness import ServerProcess, mcp_session

ERROR_KEYS = {"code", "message", "hint", "details"}
# The same refusals on both storage engines (tests that start their own server choose theirs).
pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")


def ws() -> str:
    return "err-" + uuid.uuid4().hex[:8]


@pytest.mark.parametrize(
    ("tool", "arguments", "mentions"),
    [
        ("metronix_search_fast", {"query": ""}, "query"),
        ("metronix_search_fast", {"query": "x", "top_k": 0}, "top_k"),
        ("metronix_search_fast", {"query": "x", "top_k": 51}, "top_k"),
        ("metronix_search_fast", {"query": "x", "top_k": "many"}, "top_k"),
        ("metronix_search_fast", {"query": "x", "topk": 5}, "unknown argument 'topk'"),
        ("metronix_search_fast", {}, "missing required argument 'query'"),
        ("metronix_get", {"doc_label": ""}, "doc_label"),
        ("metronix_get", {"doc_label": "   "}, "doc_label"),
        ("metronix_store", {"content": ""}, "content"),
        ("metronix_store", {"content": "ok", "metadata": "not an object"}, "metadata"),
        ("metronix_store", {"content": "ok", "workspace_id": "has space"}, "workspace_id"),
        ("metronix_status", {"workspace": "typo"}, "unknown argument 'workspace'"),
    ],
)
async def test_bad_arguments_are_invalid_params_with_a_clear_message(
    open_server: ServerProcess, tool: str, arguments: dict[str, object], mentions: str
) -> None:
    async with mcp_session(open_server.url + "/mcp") as mcp:
        result = await mcp.call(tool, **arguments)
    assert result.is_error
    assert set(result.data["error"]) == ERROR_KEYS
    assert result.error_code == "INVALID_PARAMS"
    assert mentions in result.data["error"]["message"]
    assert "Traceback" not in json.dumps(result.data)


async def test_unknown_tool_is_invalid_params_listing_the_tools(open_server: ServerProcess) -> None:
    async with mcp_session(open_server.url + "/mcp") as mcp:
        result = await mcp.call("metronix_serch_fast", query="x")
    assert result.error_code == "INVALID_PARAMS"
    assert "metronix_search_fast" in result.data["error"]["hint"]


async def test_missing_document_is_document_not_found_with_the_contracts_hint(
    open_server: ServerProcess,
) -> None:
    async with mcp_session(open_server.url + "/mcp") as mcp:
        result = await mcp.call("metronix_get", doc_label="jira:MTRNIX-999", workspace_id=ws())
    assert result.data == {
        "error": {
            "code": "DOCUMENT_NOT_FOUND",
            "message": "Document not found: jira:MTRNIX-999",
            "hint": "Check the document label or use search to find documents",
            "details": {"doc_label": "jira:MTRNIX-999"},
        }
    }


async def test_a_failed_store_is_refused_without_touching_what_was_stored(open_server: ServerProcess) -> None:
    workspace = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await mcp.call(
            "metronix_store", content="The original text.", doc_label="keep", workspace_id=workspace
        )
        failed = await mcp.call("metronix_store", content="  ", doc_label="keep", workspace_id=workspace)
        got = await mcp.call("metronix_get", doc_label="keep", workspace_id=workspace)
    assert failed.error_code == "INVALID_PARAMS"
    assert got.data["content"] == "The original text."


def _break_the_chunk_table(data_dir: Path) -> None:
    with sqlite3.connect(data_dir / "metronix.db") as conn:
        conn.execute("ALTER TABLE chunks RENAME TO chunks_gone")


async def test_storage_failures_are_ingestion_failed_and_internal_error_without_a_traceback(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "data", {}).start()
    try:
        async with mcp_session(server.url + "/mcp") as mcp:
            await mcp.call("metronix_store", content="Before the failure.", doc_label="a")
            _break_the_chunk_table(server.data_dir)
            stored = await mcp.call("metronix_store", content="After the failure.", doc_label="b")
            searched = await mcp.call("metronix_search_fast", query="failure")
    finally:
        server.stop()
    assert stored.error_code == "INGESTION_FAILED"
    assert searched.error_code == "INTERNAL_ERROR"
    for result in (stored, searched):
        assert "Traceback" not in json.dumps(result.data)
        assert result.data["error"]["hint"]
    assert "Traceback" in server.log()  # the server log keeps what the client never sees
