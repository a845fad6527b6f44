"""The one tool layer (``core.mcp``): argument messages, the Host/Origin guard, a Toolbox call, the wire form
of a result and the SDK's span middleware."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import nullcontext
from typing import Any

import mcp_types as types
import pytest
from mcp.server._otel import OpenTelemetryMiddleware
from mcp_types import methods
from pydantic import Field

from triptych.core.mcp import (
    ArgumentsInvalid,
    Tool,
    ToolArgs,
    Toolbox,
    UnknownTool,
    build_server,
    guard,
    input_schema,
    text_result,
)


class Args(ToolArgs):
    query: str
    top_k: int = Field(10, ge=1, le=50)
    metadata: dict[str, int] | None = None


def echo(context: str, args: Args) -> dict[str, Any]:
    return {"context": context, "query": args.query}


TOOLS = Toolbox(
    [Tool("echo", "Echo the query.", Args, echo)],
    surface="test",
    error_codes={},
    private_arguments=("metadata",),
)


def bind(tool: Tool[str]) -> Any:
    return nullcontext("ctx-" + tool.name)


async def test_a_call_runs_the_handler_with_the_bound_context() -> None:
    assert await TOOLS.call("echo", {"query": "q"}, bind) == {"context": "ctx-echo", "query": "q"}


async def test_an_unknown_tool_names_the_available_ones() -> None:
    with pytest.raises(UnknownTool) as caught:
        await TOOLS.call("ech", {}, bind)
    assert caught.value.hint == "Available tools: echo"


@pytest.mark.parametrize(
    ("arguments", "message", "fields"),
    [
        ({}, "missing required argument 'query'", ["query"]),
        ({"query": "q", "topk": 3}, "unknown argument 'topk'", ["topk"]),
        ({"query": "q", "top_k": 0}, "top_k: Input should be greater than or equal to 1", ["top_k"]),
        ([1, 2], "arguments must be an object", []),
    ],
)
async def test_arguments_that_do_not_fit_are_refused_with_a_readable_message(
    arguments: Any, message: str, fields: list[str]
) -> None:
    with pytest.raises(ArgumentsInvalid) as caught:
        await TOOLS.call("echo", arguments, bind)
    assert caught.value.message == message
    assert caught.value.details == {"fields": fields}
    assert caught.value.kind == "invalid"


async def test_a_private_argument_never_repeats_the_callers_keys() -> None:
    with pytest.raises(ArgumentsInvalid) as caught:
        await TOOLS.call("echo", {"query": "q", "metadata": {"secret-key": "x", "other": "y"}}, bind)
    assert "secret-key" not in caught.value.message
    # Two bad values under one private argument read as one line.
    assert (
        caught.value.message
        == "metadata: Input should be a valid integer, unable to parse string as an integer"
    )


def test_the_schema_has_no_generated_titles() -> None:
    schema = input_schema(Args)
    assert "title" not in schema and all("title" not in p for p in schema["properties"].values())
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("host", "origin", "refused"),
    [
        ("127.0.0.1:8000", None, None),
        ("[::1]:8000", "http://[::1]:3000", None),
        ("localhost", None, "host"),  # no port: the patterns name one
        ("evil.example:8000", None, "host"),
        (None, None, "host"),
        ("127.0.0.1:8000", "https://evil.example", "origin"),
        ("127.0.0.1:8000", "http://localhost:5173", None),
    ],
)
def test_the_guard(host: str | None, origin: str | None, refused: str | None) -> None:
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    headers = {k: v for k, v in (("host", host), ("origin", origin)) if v is not None}
    assert guard(headers, hosts, origins) == refused
    assert guard({"origin": "https://evil.example"}, None, origins) == "origin"


@pytest.mark.parametrize(
    ("data", "is_error"), [({"total": 3, "nested": {"a": [1, None]}}, False), (None, False), ({"e": 1}, True)]
)
def test_a_result_in_wire_form_is_what_the_sdk_model_dumps(
    data: dict[str, Any] | None, is_error: bool
) -> None:
    model = types.CallToolResult(
        content=[types.TextContent(type="text", text="t")], structured_content=data, is_error=is_error
    )
    wire = text_result("t", data, is_error=is_error)
    assert wire == model.model_dump(by_alias=True, mode="json", exclude_none=True)
    # What the SDK sends for either, at a handshake revision and at the stateless one.
    for version in ("2025-11-25", "2026-07-28"):
        model.meta = {"triptych/server_ms": 1.5}
        shaped = methods.serialize_server_result(
            "tools/call", version, model.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
        assert methods.serialize_server_result("tools/call", version, {**wire, "_meta": model.meta}) == shaped


def test_without_a_tracer_provider_the_sdk_spans_are_left_out() -> None:
    server = build_server(
        "test", [], bind=lambda ctx, tool: nullcontext(), render_error=text_error, error_codes={}
    )
    assert not any(isinstance(m, OpenTelemetryMiddleware) for m in server.middleware)


def test_with_a_tracer_provider_the_sdk_spans_stay() -> None:
    # Its own process: a tracer provider, once set, stays for the life of the process.
    script = (
        "from contextlib import nullcontext\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from mcp.server._otel import OpenTelemetryMiddleware\n"
        "from triptych.core.mcp import build_server, text_result\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "server = build_server('test', [], bind=lambda c, t: nullcontext(),\n"
        "                      render_error=lambda e: text_result(e.message), error_codes={})\n"
        "print(any(isinstance(m, OpenTelemetryMiddleware) for m in server.middleware))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ)
    assert done.stdout.strip() == "True", done.stderr


def text_error(exc: Any) -> dict[str, Any]:
    return text_result(str(exc), is_error=True)


async def test_a_coroutine_hidden_behind_a_plain_wrapper_is_an_error_that_names_the_tool() -> None:
    async def handler(context: str, args: Args) -> dict[str, Any]:
        return {}

    def plain_wrapper(context: str, args: Args) -> Any:
        return handler(context, args)

    toolbox = Toolbox(
        [Tool("hidden", "A wrapped handler.", Args, plain_wrapper)], surface="test", error_codes={}
    )
    with pytest.raises(TypeError, match="hidden: a plain handler returned a coroutine"):
        await toolbox.call("hidden", {"query": "q"}, bind)
