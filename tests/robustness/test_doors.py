"""Raw HTTP garbage at every door of a real server: bad JSON, hostile nesting and numbers, non-object
bodies, lone surrogates, wrong content types, batches, oversized and compressed bombs, bad tokens.
Every answer is a 4xx in the door's own error shape (never a 500, never plain text), and the same
keep-alive connection still serves the next request."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from robustness.report import record
from robustness.target import Target

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Door:
    name: str
    path: str
    shape: str  # jsonrpc | metronix | openai | metergraph
    headers: Callable[[Target], dict[str, str]]


def bearer(attr: str) -> Callable[[Target], dict[str, str]]:
    return lambda t: {"Authorization": f"Bearer {getattr(t, attr)}"}


def _hadron(t: Target, revision: str | None = None) -> dict[str, str]:
    return {**MCP_HEADERS, **t.hadron_headers, **({"MCP-Protocol-Version": revision} if revision else {})}


DOORS = [
    Door("metronix-mcp", "/mcp", "jsonrpc", lambda t: {**MCP_HEADERS, **bearer("metronix_token")(t)}),
    Door("hadron-mcp", "/hadron/mcp", "jsonrpc", _hadron),
    Door("hadron-revision-refusal", "/hadron/mcp", "jsonrpc", lambda t: _hadron(t, "2099-01-01")),
    Door("metergraph-mcp", "/v1/agent/mcp", "jsonrpc", lambda t: {**MCP_HEADERS, **bearer("agent_key")(t)}),
    Door("ingest", "/v1/ingest", "metergraph", lambda t: {**JSON, **bearer("app_token")(t)}),
    Door(
        "ingest-sessions", "/v1/ingest/sessions", "metergraph", lambda t: {**JSON, **bearer("app_token")(t)}
    ),
    Door("traces-json", "/v1/traces", "metergraph", lambda t: {**JSON, **bearer("app_token")(t)}),
    Door(
        "import-sync", "/v1/import-sync/acquire", "metergraph", lambda t: {**JSON, **bearer("app_token")(t)}
    ),
    Door("replay", "/v1/agent/debug/replay", "metergraph", lambda t: {**JSON, **bearer("agent_key")(t)}),
    Door(
        "rest-records",
        "/api/v1/memory/records",
        "metronix",
        lambda t: {**JSON, **bearer("metronix_token")(t)},
    ),
    Door(
        "rest-search", "/api/v1/memory/search", "metronix", lambda t: {**JSON, **bearer("metronix_token")(t)}
    ),
    Door(
        "rest-review",
        "/api/v1/memory/review/r1",
        "metronix",
        lambda t: {**JSON, **bearer("metronix_token")(t)},
    ),
    Door(
        "rest-knowledge",
        "/api/v1/knowledge/store",
        "metronix",
        lambda t: {**JSON, **bearer("metronix_token")(t)},
    ),
    Door(
        "chat-completions",
        "/v1/chat/completions",
        "openai",
        lambda t: {**JSON, **bearer("metronix_token")(t)},
    ),
]

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 5_000 + b"1" + b"}" * 5_000


def rpc(params: bytes = b"{}", msg_id: bytes = b"1") -> bytes:
    return b'{"jsonrpc":"2.0","id":' + msg_id + b',"method":"tools/call","params":' + params + b"}"


BODIES: dict[str, tuple[bytes, dict[str, str]]] = {
    "deep-array": (DEEP, {}),
    "deep-object": (DEEP_OBJECT, {}),
    "deep-in-params": (rpc(DEEP_OBJECT), {}),
    "5000-digit-id": (rpc(msg_id=b"9" * 5_000), {}),
    "10000-digit-number": (b"1" * 10_000, {}),
    "long-int-in-object": (b'{"limit":' + b"7" * 5_000 + b',"rows":[],"messages":[]}', {}),
    "null": (b"null", {}),
    "number": (b"42", {}),
    "string": (b'"text"', {}),
    "array-of-numbers": (b"[1,2,3]", {}),
    "lone-surrogate-id": (rpc(msg_id=b'"\\ud800"'), {}),
    "lone-surrogate-text": (
        b'{"content":"\\udc80","query":"\\ud800x","messages":[{"role":"user","content":"\\ud800"}]}',
        {},
    ),
    "surrogate-bytes": ('{"content":"\udc80"}'.encode("utf-8", "surrogatepass"), {}),
    "invalid-utf8": (b'{"content":"\xff\xfe"}', {}),
    "empty": (b"", {}),
    "truncated": (b'{"jsonrpc":"2.0","id":', {}),
    "batch": (b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]', {}),
    "nan": (b'{"content":NaN,"rows":[{"input_tokens":NaN}]}', {}),
    "duplicate-keys": (b'{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"ping"}', {}),
    "text-plain": (b'{"jsonrpc":"2.0","id":1,"method":"ping"}', {"Content-Type": "text/plain"}),
    "form-encoded": (b"a=1&b=2", {"Content-Type": "application/x-www-form-urlencoded"}),
    "oversized": (b" " * (9 * 1024 * 1024) + b"{}", {}),
    "gzip-bomb": (gzip.compress(b" " * (64 * 1024 * 1024), 9), {"Content-Encoding": "gzip"}),
    "bad-gzip": (b"\x1f\x8bnot gzip at all", {"Content-Encoding": "gzip"}),
    "unknown-encoding": (b"{}", {"Content-Encoding": "br, zstd"}),
    "bad-token": (rpc(), {"Authorization": "Bearer not-a-token"}),
    "huge-token": (rpc(), {"Authorization": "Bearer " + "x" * 20_000}),
    "basic-auth": (rpc(), {"Authorization": "Basic YTpi"}),
}


@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.name)
def test_garbage_at_every_door_gets_a_4xx_in_the_doors_shape_and_the_connection_survives(
    target: Target, door: Door
) -> None:
    failures: list[str] = []
    with httpx.Client(base_url=target.url, timeout=120.0) as http:
        for name, (body, extra) in BODIES.items():
            response = http.post(door.path, content=body, headers={**door.headers(target), **extra})
            problem = _judge(door, response)
            if problem:
                failures.append(f"{name}: {problem}")
            # The next request on the same keep-alive connection is served.
            follow = http.get("/health")
            if follow.status_code != 200:
                failures.append(f"{name}: the next request on the connection got {follow.status_code}")
    record(f"doors-{door.name}", calls=len(BODIES), failures=len(failures))
    assert not failures, "\n".join(failures)


def _judge(door: Door, response: httpx.Response) -> str | None:
    status = response.status_code
    if status >= 500:
        return f"HTTP {status}: {response.text[:300]}"
    if status in (202, 204) and not response.content:
        return None  # a notification or an empty accepted batch: nothing to say
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {status} without a JSON body: {response.text[:200]!r}"
    if status < 400:
        return None  # garbage the door could read after all (a batch of nothing, NaN rows refused one by one)
    if door.shape == "jsonrpc":
        ok = isinstance(body, dict) and (isinstance(body.get("error"), dict) and "code" in body["error"])
    elif door.shape == "openai":
        ok = isinstance(body, dict) and {"message", "type"} <= set(body.get("error", {}))
    else:
        ok = isinstance(body, dict) and "code" in body.get("error", {})
    return None if ok else f"HTTP {status} not in the {door.shape} error shape: {json.dumps(body)[:300]}"


METADATA_VALUES = {
    "deep": "[" * 5_000,
    "deep-object": '{"a":' * 3_000 + '"x"' + "}" * 3_000,
    "long-int": '{"k":' + "1" * 5_000 + "}",
    "surrogate": '{"k":"\\ud800"}',
    "null": "null",
    "number": "7",
    "not-json": "{k: v}",
}


@pytest.mark.parametrize("value", list(METADATA_VALUES), ids=str)
def test_metadata_parameter_garbage_is_an_invalid_argument(target: Target, value: str) -> None:
    response = httpx.get(
        target.url + "/v1/agent/usage/aggregates",
        params={"metadata": METADATA_VALUES[value]},
        headers={"Authorization": f"Bearer {target.agent_key}"},
        timeout=60,
    )
    assert response.status_code in (400, 422), response.text[:300]
    assert response.json()["error"]["code"] == "invalid_argument"


@pytest.mark.parametrize("raw", ["1" * 5_000, "²", "99999999999999999999999", "-0x10"])
def test_integer_query_parameters_past_64_bits_are_refused(target: Target, raw: str) -> None:
    metergraph = httpx.get(
        target.url + "/v1/agent/usage",
        params={"days": raw},
        headers={"Authorization": f"Bearer {target.agent_key}"},
    )
    assert metergraph.status_code in (400, 422) and metergraph.json()["error"]["code"] == "invalid_argument"
    metronix = httpx.get(
        target.url + "/api/v1/memory/records",
        params={"offset": raw, "agent_id": "a"},
        headers={"Authorization": f"Bearer {target.metronix_token}"},
    )
    assert metronix.status_code == 422 and metronix.json()["error"]["code"] == "INVALID_PARAMS"


GET_DOORS = [
    ("/api/v1/memory/records", "metronix_token"),
    ("/api/v1/memory/records/some-id", "metronix_token"),
    ("/api/v1/memory/review", "metronix_token"),
    ("/api/v1/auth/me", "metronix_token"),
    ("/v1/models", "metronix_token"),
    ("/v1/config", "app_token"),
    ("/v1/agent/workspace", "agent_key"),
    ("/v1/agent/capabilities", "agent_key"),
    ("/v1/agent/routes", "agent_key"),
    ("/v1/agent/usage", "agent_key"),
    ("/v1/agent/usage/aggregates", "agent_key"),
    ("/v1/agent/ingestion-health", "agent_key"),
    ("/v1/agent/incidents", "agent_key"),
    ("/v1/agent/traces", "agent_key"),
    ("/v1/agent/analysis-runs", "agent_key"),
    ("/v1/agent/analysis-runs/x", "agent_key"),
    ("/v1/agent/reports", "agent_key"),
    ("/v1/agent/debug/traces/abc", "agent_key"),
]
PARAM_NAMES = ["workspace_id", "agent_id", "limit", "offset", "days", "scope", "tags", "status_filter", "kind_filter",
               "reason", "record_id", "route", "provider", "model", "environment", "metadata", "group_by",
               "start", "end", "cursor", "trace_id", "unknown"]  # fmt: skip


@pytest.mark.parametrize(("path", "credential"), GET_DOORS, ids=[p for p, _ in GET_DOORS])
def test_hostile_query_parameters_at_every_get_door_never_earn_a_500(
    target: Target, path: str, credential: str
) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from robustness.hostile import FOREIGN, HUGE_INTS, NASTY_TEXT

    values = st.one_of(
        st.sampled_from([t for t in NASTY_TEXT + FOREIGN if len(t) < 3000] + [str(i) for i in HUGE_INTS]),
        st.text(max_size=30),
        st.sampled_from(["1", "0", "-1", "7", "abc", "1,2", "metadata.k", '{"k":"v"}', "true", ""]),
    )
    params = st.lists(st.tuples(st.sampled_from(PARAM_NAMES), values), max_size=5)
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {getattr(target, credential)}"}

    with httpx.Client(base_url=target.url, headers=headers, timeout=60.0) as http:

        @settings(max_examples=EXAMPLES_PER_DOOR, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(query=params)
        def attack(query: list[tuple[str, str]]) -> None:
            try:
                response = http.get(path, params=query)
            except httpx.InvalidURL:
                return  # the client refused to build the URL: nothing reached the server
            # 501 unsupported_capability is the contract's answer for a tool this deployment lacks.
            documented = response.status_code == 501 and "unsupported_capability" in response.text
            if (response.status_code >= 500 and not documented) or "json" not in response.headers.get(
                "content-type", ""
            ):
                failures.append(f"{query!r:.300} -> {response.status_code} {response.text[:200]}")

        attack()
    record(f"get-{path}", calls=EXAMPLES_PER_DOOR, failures=len(failures))
    assert not failures, "\n".join(failures[:10])


EXAMPLES_PER_DOOR = 25
