"""The product's agent skill (``metergraph-skills``, installed from the registry into its own environment),
read as an agent reads it: every tool call it tells an agent to make runs through the official MCP client
against a real `triptych serve` holding some traffic, and works.

The calls are extracted from SKILL.md, never listed by hand: every backticked ``metergraph_*`` tool name,
every backticked ``metergraph <read> ...`` command of the product's CLI (each read is one Agent Access tool:
status the workspace context, capabilities, usage, usage ``--group-by`` the aggregates, traces) with its
flags as arguments, and the tools the skill names in prose. What the text leaves to the agent (a number
of days ``N``, a route "when known", a trace or request id) takes a value from the ingested traffic. Where
a sentence gives a tool its arguments in words, ``SENTENCES`` says which; the test fails when the skill's
text no longer holds one of them, or when it names a tool or read the extraction does not map.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import ServerProcess, bearer, client_python, mcp_session, open_metergraph
from mcp.shared.exceptions import MCPError

from triptych.metergraph.contract import TOOLS_BY_NAME

# The product CLI's read commands and the tool each one reads through (its read paths: /v1/agent/workspace,
# /capabilities, /usage, /usage/aggregates for --group-by, /traces, /routes).
CLI_READS = {
    "status": "metergraph_get_workspace_context",
    "capabilities": "metergraph_get_capabilities",
    "usage": "metergraph_get_usage",
    "traces": "metergraph_query_traces",
    "routes": "metergraph_list_routes",
}
# Commands that set up, sign in or print help: they read no workspace data, so no tool call.
CLI_SETUP = ("setup", "login", "verify", "skill", "help", "doctor", "--help", "--version", "tools")
# Sentences that give a tool its arguments, or name tools without their names, in words: the fragment the
# skill holds, and the calls it asks for (placeholders in angle brackets take the traffic's values).
SENTENCES: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "`metergraph_query_traces` with a small limit, which also takes an exact trace or request ID": [
        ("metergraph_query_traces", {"limit": 1}),
        ("metergraph_query_traces", {"limit": 1, "trace_id": "<trace_id>"}),
        ("metergraph_query_traces", {"limit": 1, "request_id": "<request_id>"}),
    ],
    "grouping\nby provider, model or metadata needs a newer CLI or the\n`metergraph_get_usage_aggregates` tool": [
        ("metergraph_get_usage_aggregates", {"group_by": ["provider"]}),
        ("metergraph_get_usage_aggregates", {"group_by": ["model"]}),
        ("metergraph_get_usage_aggregates", {"group_by": ["metadata.<metadata_key>"]}),
    ],
    "and the incidents tool for known anomalies": [("metergraph_list_incidents", {})],
    "(incidents, ingestion health, reports, retained content and replay)": [
        ("metergraph_list_incidents", {}),
        ("metergraph_get_ingestion_health", {}),
        ("metergraph_list_reports", {}),
        ("metergraph_get_trace", {"trace_id": "<trace_id>"}),
        ("metergraph_replay_trace", {"trace_id": "<trace_id>"}),
    ],
    "/ route metadata for aggregate questions": [("metergraph_list_routes", {})],
    "Follow cursors only within the agreed bound": [
        ("metergraph_query_traces", {"days": "<N>", "limit": 1, "cursor": "<cursor>"})
    ],
    # The flags the traces read takes "when known" / "only for a failed trace", after the command itself.
    "with `--route` when known and `--status error` only for a failed trace": [
        ("metergraph_query_traces", {"days": "<N>", "limit": 1, "route": "<route>"}),
        ("metergraph_query_traces", {"days": "<N>", "limit": 1, "status": "error"}),
    ],
}
# Backticked tool names the sentences above already give their arguments to (the other mentions: none).
ARGUED = {"metergraph_query_traces", "metergraph_get_usage_aggregates"}
# What an agent finds in its own workspace for the placeholders.
ROUTE, METADATA_KEY = "support", "prompt_id"


def skill_text() -> str:
    """SKILL.md of the installed package, found through its own CLI and checked against its manifest."""
    python = client_python("metergraph-skills")
    found = subprocess.run([str(python), "-m", "metergraph_skills", "path"], capture_output=True, text=True,
                           timeout=60, check=True)  # fmt: skip
    folder = Path(found.stdout.strip())
    manifest = json.loads((folder / "manifest.json").read_text())
    raw = (folder / manifest["file"]).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == manifest["sha256"], (
        "the installed skill is not the published one"
    )
    return raw.decode()


def cli_call(command: str) -> tuple[str, dict[str, Any]] | None:
    """The tool call of one backticked CLI command (None for setup and help commands)."""
    words = command.split()[1:]
    if not words or words[0] in CLI_SETUP:
        return None
    read, flags = words[0], words[1:]
    assert read in CLI_READS, f"the skill names a CLI read the test does not map: {command}"
    arguments: dict[str, Any] = {}
    tool = CLI_READS[read]
    i = 0
    while i < len(flags):
        flag = flags[i]
        value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
        i += 2 if value is not None else 1
        if flag == "--json":
            continue
        if flag == "--today":
            arguments["days"] = 1
        elif flag == "--group-by":
            tool = "metergraph_get_usage_aggregates"
            if value != "...":  # "--group-by ...": the dimensions the skill names in words (SENTENCES)
                arguments["group_by"] = [value]
        elif flag in ("--days", "--limit"):
            arguments[flag[2:]] = "<N>" if value == "N" else int(str(value))
        else:
            raise AssertionError(f"the skill passes a flag the test does not map: {command}")
    if tool == "metergraph_get_usage_aggregates" and "group_by" not in arguments:
        return None
    return tool, arguments


def skill_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Every distinct tool call the skill tells an agent to make, in the order it first asks for it."""
    calls: list[tuple[str, dict[str, Any]]] = []

    def add(tool: str, arguments: dict[str, Any]) -> None:
        assert tool in TOOLS_BY_NAME, f"the skill names a tool the contract lacks: {tool}"
        if (tool, arguments) not in calls:
            calls.append((tool, arguments))

    for span in re.findall(r"`([^`\n]+)`", text):
        if re.fullmatch(r"metergraph_[a-z_]+", span):
            if span not in ARGUED:
                add(span, {})
        elif span.startswith("metergraph ") and (call := cli_call(span)) is not None:
            add(*call)
    for fragment, asked in SENTENCES.items():
        assert fragment in text, f"the skill no longer says: {fragment!r}"
        for call in asked:
            add(*call)
    return calls


class World:
    """A workspace with a few hours of traffic (routes, metadata, request ids, an error, retained content)
    and a key of each role."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.workspace = "skill-" + uuid.uuid4().hex[:8]
        mg = open_metergraph(server)
        try:
            mg.metadata.set_retain_content(self.workspace, True, datetime.now(UTC).isoformat())
            app = mg.keys.create_app_token(self.workspace)[1]
            self.keys = {role: mg.keys.create_agent_key(self.workspace, role)[1]
                         for role in ("metadata", "debug", "replay")}  # fmt: skip
        finally:
            mg.close()
        now = datetime.now(UTC)
        self.traces = [uuid.uuid4().hex for _ in range(6)]
        rows = [{"ts": (now - timedelta(hours=i)).isoformat(), "route": ROUTE if i % 2 else "triage",
                 "provider": "openai", "model": "gpt-4o" if i % 3 else "gpt-4o-mini", "input_tokens": 800 + i,
                 "output_tokens": 40, "latency_ms": 500 + 10 * i, "trace_id": trace, "request_id": f"req-{i}",
                 "error": i == 4, "status": "error" if i == 4 else "success", "tags": {METADATA_KEY: f"p-{i % 2}"},
                 "request_json": {"messages": [{"role": "user", "content": f"Summarize ticket {i}"}]},
                 "response_text": f"Ticket {i} asks for a refund."}
                for i, trace in enumerate(self.traces)]  # fmt: skip
        reply = httpx.post(server.url + "/v1/ingest", json={"schema_version": 1, "rows": rows},
                           headers=bearer(app), timeout=30)  # fmt: skip
        assert reply.json() == {"accepted": len(rows), "ignored": 0}

    def values(self) -> dict[str, Any]:
        return {"<N>": 7, "<route>": ROUTE, "<trace_id>": self.traces[1], "<request_id>": "req-1",
                "<metadata_key>": METADATA_KEY}  # fmt: skip


def fill(value: Any, values: dict[str, Any]) -> Any:
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, str):
        for placeholder, real in values.items():
            if value == placeholder:
                return real
            if isinstance(real, str):
                value = value.replace(placeholder, real)
    return value


# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def world(shared_metergraph: ServerProcess) -> World:
    """A workspace of its own on the session's shared server (tests/shared_metergraph.py), which replays on
    the session's local OpenAI."""
    return World(shared_metergraph)


def test_the_skill_asks_for_the_calls_of_the_product_s_contract() -> None:
    calls = skill_calls(skill_text())
    assert len(calls) == 21, calls
    assert {tool for tool, _ in calls} <= set(TOOLS_BY_NAME)


async def test_every_call_the_skill_tells_an_agent_to_make_works(world: World) -> None:
    calls = skill_calls(skill_text())
    values = world.values()
    outcomes: dict[str, str] = {}
    for tool, template in calls:
        arguments = {name: fill(value, values) for name, value in template.items()}
        role = {"metadata": "metadata", "content": "debug", "replay": "replay"}[
            TOOLS_BY_NAME[tool].privacy_class
        ]
        async with mcp_session(world.server.url + "/v1/agent/mcp", bearer(world.keys[role])) as mcp:
            if "cursor" in arguments:  # the next page of the same read
                first = (await mcp.call(tool, **{k: v for k, v in arguments.items() if k != "cursor"})).data
                assert first["next_cursor"], "the first page of a 7-day read of six traces must continue"
                arguments["cursor"] = first["next_cursor"]
            label = f"{tool} {json.dumps(arguments, sort_keys=True)}"
            try:
                result = await mcp.call(tool, **arguments)
            except MCPError as exc:  # -32602: an argument the server does not take
                outcomes[label] = f"JSON-RPC {exc.error.code}: {exc.error.message}"
                continue
        outcomes[label] = f"error {result.data['error']['code']}" if result.is_error else "ok"
        if tool == "metergraph_query_traces" and not result.is_error:
            assert result.data["traces"], label  # each of these reads finds the traffic it asks for
            if "trace_id" in arguments:
                assert [t["trace_id"] for t in result.data["traces"]] == [arguments["trace_id"]]
            if "request_id" in arguments:
                assert [t["trace_id"] for t in result.data["traces"]] == [world.traces[1]]
    failed = {label: outcome for label, outcome in outcomes.items() if outcome != "ok"}
    assert not failed, failed
    assert len(outcomes) == 21
