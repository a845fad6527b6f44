"""The Metronix knowledge-base tools through the official MCP client against a real `triptych serve`."""

from __future__ import annotations

import re
import uuid

import pytest
from harness import ServerProcess, mcp_session

# Every knowledge-base tool answers the same on both storage engines.
pytestmark = pytest.mark.engines("sqlite", "postgresql", "two-machines")

KB_TOOLS = {"metronix_search_fast", "metronix_get", "metronix_store", "metronix_status", "metronix_sync"}
MEMORY_TOOLS = {
    "memory_store",
    "memory_search",
    "memory_delete",
    "memory_batch_store",
    "memory_list",
    "memory_update",
    "memory_review_list",
    "memory_review_resolve",
}


def ws() -> str:
    return "ws-" + uuid.uuid4().hex[:8]


async def test_registered_tools_are_the_contracts_tools_and_their_metronix_aliases(
    open_server: ServerProcess,
) -> None:
    async with mcp_session(open_server.url + "/mcp") as mcp:
        tools = {tool.name: tool for tool in (await mcp.client.list_tools()).tools}
    assert set(tools) == KB_TOOLS | MEMORY_TOOLS | {"metronix_" + name for name in MEMORY_TOOLS}
    search = tools["metronix_search_fast"].input_schema
    assert search["required"] == ["query"]
    assert search["additionalProperties"] is False
    assert search["properties"]["top_k"]["default"] == 10
    assert (search["properties"]["top_k"]["minimum"], search["properties"]["top_k"]["maximum"]) == (1, 50)
    assert tools["metronix_store"].input_schema["required"] == ["content"]
    assert tools["metronix_get"].input_schema["required"] == ["doc_label"]


async def test_store_then_search_then_get_round_trip(open_server: ServerProcess) -> None:
    workspace = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = await mcp.call(
            "metronix_store",
            content="Implement memory_store and memory_search as MCP tools. They deduplicate by content hash.",
            title="[MTRNIX-303] Memory MCP tools",
            doc_label="jira:MTRNIX-303",
            workspace_id=workspace,
            metadata={"url": "https://example.test/browse/MTRNIX-303", "date": "2026-04-17", "team": "core"},
        )
        assert stored.data == {"success": True, "doc_label": "jira:MTRNIX-303", "chunks_stored": 1}

        found = await mcp.call(
            "metronix_search_fast", query="memory tools deduplicate", workspace_id=workspace
        )
        assert not found.is_error
        assert found.data["count"] == 1 and isinstance(found.data["latency_ms"], int)
        # An addition to the contract's fields: how each side answered (a small workspace: exactly, or on
        # PostgreSQL through pgvector and its BM25 in SQL while the worker's in-process copies load).
        assert found.data["retrieval"]["keyword"] in {"bm25", "sql"}
        assert found.data["retrieval"]["dense"] in {"exact", "pgvector"}
        hit = found.data["results"][0]
        assert {k: hit[k] for k in ("doc_label", "title", "source_type", "url", "date")} == {
            "doc_label": "jira:MTRNIX-303",
            "title": "[MTRNIX-303] Memory MCP tools",
            "source_type": "jira",
            "url": "https://example.test/browse/MTRNIX-303",
            "date": "2026-04-17",
        }
        assert "deduplicate by content hash" in hit["content"]
        assert 0 < hit["score"] <= 1

        got = await mcp.call("metronix_get", doc_label="jira:MTRNIX-303", workspace_id=workspace)
        assert got.data == {
            "doc_label": "jira:MTRNIX-303",
            "title": "[MTRNIX-303] Memory MCP tools",
            "content": "Implement memory_store and memory_search as MCP tools. They deduplicate by content hash.",
            "source_type": "jira",
            "timestamp": "2026-04-17",
            "metadata": {
                "url": "https://example.test/browse/MTRNIX-303",
                "date": "2026-04-17",
                "team": "core",
            },
        }


async def test_store_without_label_generates_a_mem_label(open_server: ServerProcess) -> None:
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = await mcp.call("metronix_store", content="A note without a label.", workspace_id=ws())
    assert re.fullmatch(r"MEM-[0-9A-F]{8}", stored.data["doc_label"])
    assert stored.data["success"] is True and stored.data["chunks_stored"] == 1


async def test_storing_an_existing_label_replaces_the_document_and_its_chunks(
    open_server: ServerProcess,
) -> None:
    workspace = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await mcp.call(
            "metronix_store", content="Zebras graze on the savanna.", doc_label="doc", workspace_id=workspace
        )
        await mcp.call(
            "metronix_store", content="Penguins swim in cold water.", doc_label="doc", workspace_id=workspace
        )
        zebra = await mcp.call("metronix_search_fast", query="zebras savanna", workspace_id=workspace)
        penguin = await mcp.call("metronix_search_fast", query="penguins", workspace_id=workspace)
        got = await mcp.call("metronix_get", doc_label="doc", workspace_id=workspace)
        status = await mcp.call("metronix_status", workspace_id=workspace)
    assert all("Zebras" not in r["content"] for r in zebra.data["results"])
    assert [r["content"] for r in penguin.data["results"]] == ["Penguins swim in cold water."]
    assert got.data["content"] == "Penguins swim in cold water."
    assert status.data["documents"] == {"total": 1}


async def test_long_documents_are_chunked_and_search_returns_the_matching_chunk(
    open_server: ServerProcess,
) -> None:
    workspace = ws()
    filler = " ".join(
        f"Sentence number {i} talks about ordinary logistics and shipping schedules." for i in range(60)
    )
    content = filler + " The secret ingredient of the recipe is cardamom from Kerala. " + filler
    async with mcp_session(open_server.url + "/mcp") as mcp:
        stored = await mcp.call("metronix_store", content=content, doc_label="long", workspace_id=workspace)
        found = await mcp.call(
            "metronix_search_fast", query="secret ingredient cardamom", workspace_id=workspace, top_k=1
        )
    assert stored.data["chunks_stored"] > 3
    assert "cardamom from Kerala" in found.data["results"][0]["content"]
    assert len(found.data["results"][0]["content"]) < len(content) / 3


async def test_status_is_initializing_when_empty_and_healthy_with_documents(
    open_server: ServerProcess,
) -> None:
    workspace = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        empty = await mcp.call("metronix_status", workspace_id=workspace)
        await mcp.call("metronix_store", content="Something to count.", workspace_id=workspace)
        healthy = await mcp.call("metronix_status", workspace_id=workspace)
    assert empty.data == {
        "status": "initializing",
        "documents": {"total": 0},
        "last_sync": None,
        "embedding_model": "all-MiniLM-L6-v2-onnx-qint8-dynamic",
    }
    assert healthy.data["status"] == "healthy" and healthy.data["documents"] == {"total": 1}


async def test_top_k_bounds_the_number_of_results(open_server: ServerProcess) -> None:
    workspace = ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for i in range(4):
            await mcp.call(
                "metronix_store", content=f"Report {i} about solar panels.", workspace_id=workspace
            )
        two = await mcp.call("metronix_search_fast", query="solar panels", workspace_id=workspace, top_k=2)
        default = await mcp.call("metronix_search_fast", query="solar panels", workspace_id=workspace)
    assert two.data["count"] == 2 and len(two.data["results"]) == 2
    assert default.data["count"] == 4


async def test_an_invalid_agent_id_header_is_dropped_not_fatal(open_server: ServerProcess) -> None:
    async with mcp_session(open_server.url + "/mcp", {"X-Agent-Id": "not valid/agent id"}) as mcp:
        status = await mcp.call("metronix_status", workspace_id=ws())
    assert not status.is_error


async def test_omitted_workspace_uses_the_configured_default_when_auth_is_off(
    open_server: ServerProcess,
) -> None:
    label = "default-" + uuid.uuid4().hex[:6]
    async with mcp_session(open_server.url + "/mcp") as mcp:
        await mcp.call("metronix_store", content="Stored without a workspace.", doc_label=label)
        got = await mcp.call("metronix_get", doc_label=label, workspace_id="default")
    assert got.data["content"] == "Stored without a workspace."
