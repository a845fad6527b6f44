"""Metergraph's agent surface needs an agent key (or a configured static token) even with auth off, and a
group no call of which has a price reports ``cost_usd: null`` (what a new user met, over MCP)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from harness import ServerProcess, bearer, mcp_session, metergraph_key

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
STATIC_APP, STATIC_AGENT = "static-app-token-for-auth-off", "static-agent-token-for-auth-off"


def rows(workspace_tag: str) -> list[dict[str, object]]:
    now = datetime.now(UTC).isoformat()
    base = {
        "ts": now,
        "route": workspace_tag,
        "provider": "openai",
        "input_tokens": 1000,
        "output_tokens": 100,
    }
    return [{**base, "model": "gpt-4o"}, {**base, "model": "in-house-model-7"}]


def ingest(server: ServerProcess, app_token: str, batch: list[dict[str, object]]) -> None:
    response = httpx.post(
        server.url + "/v1/ingest", json={"schema_version": 1, "rows": batch}, headers=bearer(app_token)
    )
    assert response.status_code == 202, response.text


def test_reads_without_a_key_are_401_even_with_auth_off(open_server: ServerProcess) -> None:
    mcp = httpx.post(open_server.url + "/v1/agent/mcp", json=LIST_TOOLS, headers=HEADERS)
    assert mcp.status_code == 401
    assert mcp.headers["www-authenticate"].startswith("Bearer")
    rest = httpx.get(open_server.url + "/v1/agent/usage/aggregates")
    assert rest.status_code == 401 and rest.json()["error"]["code"] == "unauthenticated"
    assert "agent key" in rest.json()["error"]["message"]


@pytest.fixture(scope="module")
def static_server(
    tmp_path_factory: pytest.TempPathFactory, metergraph_engine: dict[str, str]
) -> Iterator[ServerProcess]:
    env = {"TRIPTYCH_AUTH_ENABLED": "false", "MG_TOKENS": STATIC_APP, "MG_AGENT_TOKENS": STATIC_AGENT,
           "MG_WORKSPACE": "static-ws", **metergraph_engine}  # fmt: skip
    server = ServerProcess(tmp_path_factory.mktemp("mgstatic") / "data", env).start()
    yield server
    server.stop()


async def test_a_configured_static_token_reads_with_auth_off(static_server: ServerProcess) -> None:
    ingest(static_server, STATIC_APP, rows("static-route"))
    anonymous = httpx.post(static_server.url + "/v1/agent/mcp", json=LIST_TOOLS, headers=HEADERS)
    assert anonymous.status_code == 401
    async with mcp_session(static_server.url + "/v1/agent/mcp", bearer(STATIC_AGENT)) as mcp:
        result = await mcp.call("metergraph_get_usage_aggregates", group_by=["route"])
    assert not result.is_error, result.data
    assert [(i["route"], i["calls"]) for i in result.data["items"]] == [("static-route", 2)]
    assert result.data["provenance"]["workspace_id"] == "static-ws"


async def test_an_agent_key_reads_its_workspace_and_unpriced_groups_cost_null(
    static_server: ServerProcess,
) -> None:
    mine, theirs = "mg-" + uuid.uuid4().hex[:6], "mg-" + uuid.uuid4().hex[:6]
    ingest(static_server, metergraph_key(static_server.data_dir, mine, app=True), rows(mine))
    ingest(static_server, metergraph_key(static_server.data_dir, theirs, app=True), rows(theirs))
    key = metergraph_key(static_server.data_dir, mine, "metadata")

    async with mcp_session(static_server.url + "/v1/agent/mcp", bearer(key)) as mcp:
        result = await mcp.call("metergraph_get_usage_aggregates", group_by=["route", "model"])
    assert not result.is_error, result.data
    by_model = {item["model"]: item for item in result.data["items"]}
    assert {item["route"] for item in result.data["items"]} == {mine}  # never the other workspace
    assert by_model["in-house-model-7"]["cost_usd"] == 0  # a number, a lower bound as pricing says
    assert by_model["in-house-model-7"]["pricing"]["cost"] == "lower_bound"
    assert by_model["gpt-4o"]["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)

    rest = httpx.get(
        static_server.url + "/v1/agent/usage/aggregates", params={"group_by": "model"}, headers=bearer(key)
    )
    assert rest.status_code == 200
    assert {i["model"]: i["cost_usd"] for i in rest.json()["items"]}["in-house-model-7"] == 0
