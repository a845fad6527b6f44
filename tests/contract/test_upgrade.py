"""A data directory written by an earlier release opens with this one: each fixture under
tests/fixtures/upgrade/ (the README there says which commits wrote them) is copied, served, and read back
through the tools of every surface, with the keys that release minted (issue 31, item 6)."""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from harness import ROOT, TRIPTYCH, ServerProcess, bearer, mcp_session

from triptych.core.auth import mint_token

FIXTURES = ROOT / "tests" / "fixtures" / "upgrade"
# The first commit serving all three surfaces, and the last of the session before issue 31.
RELEASES = ("f7657d6", "f9963c7")
# Memory records from before memory migration 6 do not say which model embedded them.
NEED_REINDEX = {"f7657d6"}
WORKSPACE = "ops"


@pytest.fixture(scope="module", params=RELEASES)
def upgraded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp(f"upgrade-{request.param}")
    with tarfile.open(FIXTURES / f"{request.param}.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    expected = json.loads((tmp / "expected.json").read_text())
    env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": expected["jwt_secret"]}
    server = ServerProcess(tmp / "data", env).start()
    yield server, expected
    server.stop()


def user(expected: dict[str, Any]) -> dict[str, str]:
    return bearer(mint_token(expected["jwt_secret"], "alice", "admin", [], 3600))


async def test_metronix_memories_and_documents_read_back(
    upgraded: tuple[ServerProcess, dict[str, Any]],
) -> None:
    server, expected = upgraded
    async with mcp_session(server.url + "/mcp", headers=user(expected)) as mcp:
        for agent in {m["agent_id"] for m in expected["memories"]}:
            listed = await mcp.call("memory_list", agent_id=agent, workspace_id=WORKSPACE, status=["all"])
            assert not listed.is_error, listed.data
            mine = {m["id"]: m["content"] for m in expected["memories"] if m["agent_id"] == agent}
            assert {r["id"]: r["content"] for r in listed.data["records"]} == mine
        if expected["commit"] in NEED_REINDEX:
            # Memory records from before their model was recorded (memory migration 6): memory_search says
            # to re-embed them (the guard never mixes vectors of two models), `triptych reindex` does, and
            # the running server notices on the next call.
            refused = await mcp.call("memory_search", query="When is the deploy window?", agent_id="planner",
                                     workspace_id=WORKSPACE)  # fmt: skip
            assert refused.data["error"]["details"]["reason"] == "EMBEDDING_MISMATCH", refused.data
            assert "triptych reindex" in refused.data["error"]["hint"]
            reindexed = subprocess.run([TRIPTYCH, "reindex", "--data-dir", str(server.data_dir)],
                                       capture_output=True, text=True, timeout=300)  # fmt: skip
            assert reindexed.returncode == 0, reindexed.stderr
            assert "re-embedded 2 chunks and 3 memory records" in reindexed.stdout
        found = await mcp.call("memory_search", query="When is the deploy window?", agent_id="planner",
                               workspace_id=WORKSPACE)  # fmt: skip
        assert not found.is_error, found.data
        assert found.data["results"][0]["record"]["content"] == expected["memories"][0]["content"], found.data
        for doc in expected["documents"]:
            got = await mcp.call("metronix_get", doc_label=doc["doc_label"], workspace_id=WORKSPACE)
            assert not got.is_error and got.data["content"] == doc["content"], got.data
        hits = await mcp.call(
            "metronix_search_fast", query="how do I roll back a release", workspace_id=WORKSPACE
        )
        assert hits.data["results"][0]["doc_label"] == "runbook", hits.data
        # And the upgraded store takes new writes.
        stored = await mcp.call("memory_store", content="Upgraded on the first try.", agent_id="planner",
                                workspace_id=WORKSPACE)  # fmt: skip
        assert not stored.is_error, stored.data


async def test_hadron_nodes_and_edges_read_back(upgraded: tuple[ServerProcess, dict[str, Any]]) -> None:
    server, expected = upgraded
    prefix = expected["memory"].replace("hrn:mem:", "hrn:node:") + ":"
    async with mcp_session(server.url + "/hadron/mcp", headers=user(expected)) as hadron:
        for node in expected["nodes"]:
            got = await hadron.client.call_tool("hadron_get_node", {"loc": prefix + node["loc"]})
            assert not got.is_error, got.content
            data = got.structured_content or {}
            assert (data["name"], data["content"]) == (node["name"], node["content"])
        source = await hadron.client.call_tool("hadron_get_node", {"loc": prefix + expected["edge"]["from"]})
        edges = (source.structured_content or {})["edges"]
        assert [(e["name"], e["target"]["urn"]) for e in edges] == [
            (expected["edge"]["name"], prefix + expected["edge"]["to"])
        ], edges
        made = await hadron.client.call_tool(
            "hadron_create_node", {"loc": "arch:cache", "name": "Cache", "memoryId": expected["memory"]}
        )
        assert not made.is_error, made.content


def usage_by_model_and_team(server: ServerProcess, expected: dict[str, Any]) -> dict[str, Any]:
    """``metergraph_get_usage_aggregates`` over the fixture's days, as the old release's agent key."""
    answer = httpx.post(
        server.url + "/v1/agent/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "metergraph_get_usage_aggregates",
            "arguments": {"since": "2026-11-20T00:00:00Z", "until": "2026-11-24T00:00:00Z",
                          "group_by": ["model", "metadata.team"]}}},
        headers={**bearer(expected["metergraph_agent_key"]), "Accept": "application/json, text/event-stream"},
        timeout=60,
    )  # fmt: skip
    result = answer.json()["result"]
    assert not result.get("isError"), result
    document: dict[str, Any] = result["structuredContent"]
    return document


def test_metergraph_calls_read_back_with_the_old_release_s_key(
    upgraded: tuple[ServerProcess, dict[str, Any]],
) -> None:
    server, expected = upgraded
    document = usage_by_model_and_team(server, expected)
    calls = expected["calls"]
    totals = document["totals"]
    assert (totals["calls"], totals["input_tokens"], totals["output_tokens"]) == (
        calls["count"],
        calls["input_tokens"],
        calls["output_tokens"],
    )
    assert {g["model"] for g in document["items"]} == {"gpt-4o", "gpt-4o-mini"}
    assert {g["metadata.team"] for g in document["items"]} == {"search", "billing"}
    assert sum(g["calls"] for g in document["items"]) == calls["count"]


def test_the_copied_projection_is_taken_up_without_a_rebuild(
    upgraded: tuple[ServerProcess, dict[str, Any]],
) -> None:
    server, expected = upgraded
    assert usage_by_model_and_team(server, expected)["totals"]["calls"] == expected["calls"]["count"]
    assert "metergraph columns: rebuilding" not in server.log()


def test_the_fixtures_are_small_and_documented() -> None:
    readme = (FIXTURES / "README.md").read_text()
    for release in RELEASES:
        assert (FIXTURES / f"{release}.tar.gz").stat().st_size < 100_000
        assert release in readme
