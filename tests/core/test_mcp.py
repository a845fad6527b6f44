"""The one tool layer (``core.mcp``): argument messages, the Host/Origin guard and a Toolbox call."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest
from pydantic import Field

from triptych.core.mcp import ArgumentsInvalid, Tool, ToolArgs, Toolbox, UnknownTool, guard, input_schema


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
