"""``metergraph_replay_trace`` end to end: a real `triptych serve` configured with a local provider
server on 127.0.0.1, driven through the official MCP client over streamable HTTP and through the stdio
bridge; each answer is checked against the contract's ``trace-debug/replay`` schema."""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import jsonschema
import pytest
from harness import ServerProcess, mcp_session, open_metergraph
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from provider_server import ProviderServer

from triptych.metergraph.service import Metergraph


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


NULLABLE_STRING = {"type": ["string", "null"]}
NUMBER = {"type": ["number", "integer", "null"]}
PART = obj(
    ["provider", "model", "input", "output", "tool_calls", "error_type", "latency_ms", "cost_usd"],
    provider=NULLABLE_STRING, model=NULLABLE_STRING, input={"type": "object"},
    output=obj(["state", "text"], state={"type": "string"}, text=NULLABLE_STRING),
    tool_calls={"type": "array"}, error_type=NULLABLE_STRING, latency_ms=NUMBER, cost_usd=NUMBER,
    usage=obj(["input_tokens", "output_tokens"], input_tokens={"type": "integer"},
              output_tokens={"type": "integer"}),
)  # fmt: skip
REPLAY = {
    **obj(
        ["schema_version", "status", "provenance"],
        schema_version={"const": "metergraph.trace-debug/v1"},
        status={"enum": ["succeeded", "provider_error", "timeout"]},
        provenance=obj(["source_trace_id", "source_span_id", "replayed_at", "overrides", "writes_production"],
                       writes_production={"const": False}),
        comparison=obj(["original", "replay"], original=PART, replay=PART),
        error=obj(["code", "message"], code={"type": "string"}, message={"type": "string"}),
    ),
    "allOf": [
        {"if": {"properties": {"status": {"const": "succeeded"}}}, "then": {"required": ["comparison"]}},
        {"if": {"properties": {"status": {"enum": ["provider_error", "timeout"]}}},
         "then": {"required": ["error"]}},
    ],
}  # fmt: skip


class Env:
    def __init__(self, server: ServerProcess, provider: ProviderServer) -> None:
        self.server = server
        self.provider = provider
        self.url = server.url + "/v1/agent/mcp"

    def open(self) -> Metergraph:
        return open_metergraph(self.server)

    def setup(self, workspace: str, retain: bool = True) -> tuple[str, str]:
        """An app token and a Replay key for a new workspace (content retention on by default)."""
        mg = self.open()
        try:
            if retain:
                mg.metadata.set_retain_content(workspace, True, datetime.now(UTC).isoformat())
            return mg.keys.create_app_token(workspace)[1], mg.keys.create_agent_key(workspace, "replay")[1]
        finally:
            mg.close()

    def mint(self, workspace: str, role: str) -> str:
        mg = self.open()
        try:
            return mg.keys.create_agent_key(workspace, role)[1]
        finally:
            mg.close()

    def ingest(self, app: str, **fields: Any) -> str:
        trace = uuid.uuid4().hex
        row = {"ts": datetime.now(UTC).isoformat(), "route": "support", "provider": "openai", "model": "gpt-4o",
               "input_tokens": 900, "output_tokens": 40, "latency_ms": 800, "trace_id": trace,
               "request_json": {"messages": [{"role": "user", "content": "Summarize the ticket"}]},
               "response_text": "The customer wants a refund.", **fields}  # fmt: skip
        response = httpx.post(self.server.url + "/v1/ingest", json={"schema_version": 1, "rows": [row]},
                              headers={"Authorization": f"Bearer {app}"}, timeout=30)  # fmt: skip
        assert response.status_code == 202, response.text
        return trace


# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def env(shared_metergraph: ServerProcess, replay_provider: ProviderServer) -> Env:
    """The session's shared server (tests/shared_metergraph.py), replaying on the session's local OpenAI and
    Anthropic; each test takes a workspace of its own."""
    return Env(shared_metergraph, replay_provider)


def ws() -> str:
    return "rp-" + uuid.uuid4().hex[:8]


async def test_a_replay_key_replays_a_retained_trace_through_the_official_client(env: Env) -> None:
    workspace = ws()
    app, key = env.setup(workspace)
    trace = env.ingest(app)
    async with mcp_session(env.url, {"Authorization": f"Bearer {key}"}) as mcp:
        caps = (await mcp.call("metergraph_get_capabilities")).data
        result = await mcp.call("metergraph_replay_trace", trace_id=trace)
        candidate = await mcp.call(
            "metergraph_replay_trace", trace_id=trace,
            overrides={"model": "claude-haiku-4-5", "max_output_tokens": 16, "temperature": 0},
        )  # fmt: skip
    assert caps["agent"]["trace_replay"]["available"] is True
    assert "trace_replay" in caps["deployment_capabilities"]
    assert not result.is_error
    jsonschema.validate(result.data, REPLAY)
    assert result.data["status"] == "succeeded"
    comparison = result.data["comparison"]
    assert comparison["original"]["output"]["text"] == "The customer wants a refund."
    assert comparison["replay"]["output"]["text"] == "replayed: Summarize the ticket"
    assert comparison["replay"]["usage"] == {"input_tokens": 3, "output_tokens": 4}
    assert comparison["replay"]["cost_usd"] == pytest.approx(3 * 2.5e-6 + 4 * 10e-6)
    jsonschema.validate(candidate.data, REPLAY)
    assert candidate.data["comparison"]["replay"]["provider"] == "anthropic"
    assert env.provider.requests[-1]["path"] == "/v1/messages"
    assert env.provider.requests[-1]["json"]["temperature"] == 0


async def test_provider_failures_answer_a_bounded_replay_outcome(env: Env) -> None:
    app, key = env.setup(ws())
    trace = env.ingest(app)
    async with mcp_session(env.url, {"Authorization": f"Bearer {key}"}) as mcp:
        limited = await mcp.call(
            "metergraph_replay_trace", trace_id=trace, overrides={"model": "m-ratelimit"}
        )
        slow = await mcp.call(
            "metergraph_replay_trace",
            trace_id=trace,
            overrides={"model": "anthropic:m-slow"},
            timeout_seconds=1,
        )
    for result, status, code in ((limited, "provider_error", "rate_limited"), (slow, "timeout", "timeout")):
        jsonschema.validate(result.data, REPLAY)
        assert result.data["status"] == status and result.data["error"]["code"] == code


async def test_replay_refusals_carry_the_contract_codes(env: Env) -> None:
    workspace = ws()
    app, key = env.setup(workspace)
    no_content = env.ingest(app, request_json=None, response_text=None)
    debug = env.mint(workspace, "debug")
    off_app, off_key = env.setup(ws(), retain=False)
    not_retained = env.ingest(off_app)
    async with mcp_session(env.url, {"Authorization": f"Bearer {key}"}) as mcp:
        missing = await mcp.call("metergraph_replay_trace", trace_id="no-such-trace")
        ineligible = await mcp.call("metergraph_replay_trace", trace_id=no_content)
    async with mcp_session(env.url, {"Authorization": f"Bearer {off_key}"}) as mcp:
        retention_off = await mcp.call("metergraph_replay_trace", trace_id=not_retained)
    async with mcp_session(env.url, {"Authorization": f"Bearer {debug}"}) as mcp:
        hidden = "metergraph_replay_trace" not in await mcp.tool_names()
        forbidden = await mcp.call("metergraph_replay_trace", trace_id=no_content)
    assert missing.error_code == "not_found"
    assert ineligible.error_code == "replay_not_eligible"
    assert retention_off.error_code == "replay_not_eligible"
    assert "retain-content on" in retention_off.data["error"]["message"]
    assert hidden and forbidden.error_code == "forbidden"


async def test_a_workspace_cannot_replay_another_workspaces_trace(env: Env) -> None:
    app, _ = env.setup(ws())
    trace = env.ingest(app)
    _, other = env.setup(ws())
    async with mcp_session(env.url, {"Authorization": f"Bearer {other}"}) as mcp:
        refused = await mcp.call("metergraph_replay_trace", trace_id=trace)
    assert refused.error_code == "not_found"


async def test_the_stdio_bridge_replays_a_trace(env: Env) -> None:
    app, key = env.setup(ws())
    trace = env.ingest(app)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "triptych.metergraph.bridge"],
        env={**os.environ, "METERGRAPH_URL": env.server.url, "METERGRAPH_AGENT_TOKEN": key},
    )
    async with Client(params) as client:
        result = await client.call_tool("metergraph_replay_trace", {"trace_id": trace})
        refused = await client.call_tool("metergraph_replay_trace", {"trace_id": "no-such-trace"})
    document = json.loads(result.content[0].text)  # type: ignore[union-attr]
    jsonschema.validate(document, REPLAY)
    assert document["status"] == "succeeded" and not result.is_error
    assert refused.is_error
    assert json.loads(refused.content[0].text)["error"]["code"] == "not_found"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "arguments",
    [
        {"trace_id": "t", "overrides": {"model": "x", "stream": True}},
        {"trace_id": "t", "overrides": {"max_output_tokens": 1025}},
        {"trace_id": "t", "overrides": {"temperature": 1.5}},
        {"trace_id": "t", "overrides": {"top_p": 0}},
        {"trace_id": "t", "timeout_seconds": 31},
        {"trace_id": ""},
    ],
)
async def test_replay_arguments_outside_the_contract_are_invalid_params(
    env: Env, arguments: dict[str, Any]
) -> None:
    _, key = env.setup(ws())
    async with mcp_session(env.url, {"Authorization": f"Bearer {key}"}) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.client.call_tool("metergraph_replay_trace", arguments)
    assert refused.value.error.code == -32602


def test_the_rest_door_replays_as_the_upstream_bridge_calls_it(env: Env) -> None:
    workspace = ws()
    app, key = env.setup(workspace)
    trace = env.ingest(app)
    url = env.server.url + "/v1/agent/debug/replay"

    def post(token: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=60, **kwargs)

    done = post(key, json={"trace_id": trace, "overrides": {"model": "gpt-4o-mini"}})
    assert done.status_code == 200 and done.headers["cache-control"] == "no-store"
    jsonschema.validate(done.json(), REPLAY)
    assert done.json()["comparison"]["replay"]["model"] == "gpt-4o-mini"
    missing = post(key, json={"trace_id": "no-such-trace"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    for body in ({"content": b"[1, 2]"}, {"content": b"{oops"}, {"json": {"trace_id": trace, "extra": 1}}):
        refused = post(key, **body)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_argument"
    forbidden = post(env.mint(workspace, "debug"), json={"trace_id": trace})
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
    assert post("not-a-key", json={"trace_id": trace}).status_code == 401
