"""Schema-driven fuzzing of every tool on all three MCP endpoints through the official MCP client: each
tool's own inputSchema gives mostly well-shaped arguments mixed with hostile ones; every answer must be
a success or a documented refusal, never an internal error, never another tenant's data, and the
server must log no traceback. ``TRIPTYCH_FUZZ_EXAMPLES`` sets the calls per tool (CI: 8; the release
profile in bench/robustness.py: many more)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from mcp.shared.exceptions import MCPError
from robustness.hostile import arguments
from robustness.report import record
from robustness.target import SECRETS, ClientThread, Target, error_code, result_text

EXAMPLES = int(os.environ.get("TRIPTYCH_FUZZ_EXAMPLES", "8"))
# CI replays the same examples every run (a failure is reproducible); the release profile explores.
DERANDOMIZE = os.environ.get("TRIPTYCH_FUZZ_RANDOM", "") == ""
INTERNAL_CODES = {"INTERNAL_ERROR", "internal"}
JSONRPC_INTERNAL = -32603

ENDPOINTS: dict[str, tuple[str, Callable[[Target], dict[str, str]]]] = {
    "metronix": ("/mcp", lambda t: {"Authorization": f"Bearer {t.metronix_token}"}),
    "hadron": ("/hadron/mcp", lambda t: t.hadron_headers),
    "metergraph": ("/v1/agent/mcp", lambda t: {"Authorization": f"Bearer {t.agent_key}"}),
}


@pytest.mark.parametrize("surface", list(ENDPOINTS))
def test_every_tool_answers_hostile_arguments_with_a_documented_refusal(target: Target, surface: str) -> None:
    path, headers = ENDPOINTS[surface]
    log_before = len(target.server.log())
    client = ClientThread(target.url + path, headers(target))
    tally: Counter[str] = Counter()
    try:
        tools = client.list_tools()
        assert tools, f"{surface} lists no tools"
        for tool in tools:
            _attack(client, tool.name, tool.input_schema, tally)
    finally:
        client.close()
    new_log = target.server.log()[log_before:]
    record(f"fuzz-{surface}", tools=len(tools), **tally, tracebacks=new_log.count("Traceback"))
    assert "Traceback" not in new_log, (
        f"the server logged an exception while fuzzing {surface}:\n{new_log[-4000:]}"
    )
    assert tally["calls"] >= len(tools)


def _attack(client: ClientThread, name: str, schema: dict[str, Any], tally: Counter[str]) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=DERANDOMIZE,
        suppress_health_check=list(HealthCheck),
    )
    @given(args=arguments(schema))
    def attack(args: dict[str, Any]) -> None:
        tally["calls"] += 1
        try:
            result = client.call(name, args)
        except MCPError as exc:  # a protocol-level refusal (-32602 invalid params ...) is documented too
            tally["protocol_errors"] += 1
            if exc.error.code == JSONRPC_INTERNAL:
                tally["internal_errors"] += 1
            assert exc.error.code != JSONRPC_INTERNAL, f"{name}({args!r:.500}) -> internal error: {exc}"
            return
        code = error_code(result)
        tally["refused" if code else "answered"] += 1
        if code in INTERNAL_CODES:
            tally["internal_errors"] += 1
        assert code not in INTERNAL_CODES, f"{name}({args!r:.500}) -> {result_text(result)[:2000]}"
        text = result_text(result)
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, f"{name}({args!r:.500}) leaked another tenant's data: {text[:2000]}"

    attack()


@pytest.mark.parametrize(
    ("surface", "tool", "arguments", "code"),
    [
        ("metronix", "memory_review_list", {"workspace_id": "ws-a", "offset": 2**63}, "INVALID_PARAMS"),
        (
            "metronix",
            "memory_list",
            {"agent_id": "bot", "workspace_id": "ws-a", "offset": 2**63},
            "INVALID_PARAMS",
        ),
        (
            "hadron",
            "hadron_create_node",
            {"loc": "hrn:node:acme.com:specs:seq", "name": "s", "seq": 2**63},
            "BAD_USER_INPUT",
        ),
        (
            "hadron",
            "hadron_find_objects",
            {"memoryUrn": "hrn:mem:acme.com:catalog", "type": "competitor", "offset": 2**63},
            "BAD_USER_INPUT",
        ),
    ],  # fmt: skip
)
def test_integers_past_64_bits_are_refused_as_bad_input_not_internal(
    target: Target, surface: str, tool: str, arguments: dict[str, Any], code: str
) -> None:
    path, headers = ENDPOINTS[surface]
    client = ClientThread(target.url + path, headers(target))
    try:
        result = client.call(tool, arguments)
    finally:
        client.close()
    assert error_code(result) == code, result_text(result)
    assert ("offset" if "offset" in arguments else "seq") in result_text(result)
