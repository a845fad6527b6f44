"""Replay through the real ``openai`` and ``anthropic`` clients against a local provider server:
the comparison document, candidate models and overrides, provider failures as bounded outcomes, the
refusals, workspace isolation, and nothing persisted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mg_support import NOW, agent, app, embedded_only, engine_settings, row
from provider_server import ProviderServer

from triptych.metergraph.errors import (
    ForbiddenError,
    NotFoundError,
    ReplayNotEligible,
    UnsupportedCapability,
)
from triptych.metergraph.providers import Providers, load_provider_settings
from triptych.metergraph.replay import parse_request
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

REQUEST = {
    "model": "gpt-4o",
    "temperature": 0.2,
    "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
}


@pytest.fixture(scope="module")
def provider() -> Iterator[ProviderServer]:
    with ProviderServer(slow_seconds=5) as server:
        yield server


def open_mg(
    path: Path, provider: ProviderServer | None, engine: dict[str, Any] | None = None, **settings: Any
) -> Metergraph:
    providers = (
        load_provider_settings(
            openai_base_url=provider.openai_url,
            openai_api_key="sk-test-openai",
            anthropic_base_url=provider.anthropic_url,
            anthropic_api_key="sk-test-anthropic",
            **settings,
        )  # fmt: skip
        if provider is not None
        else load_provider_settings(openai_base_url="", anthropic_base_url="")
    )
    return Metergraph.open(
        path, load_metergraph_settings(max_rows=50, **(engine or {})), clock=lambda: NOW,
        provider_settings=providers,
    )  # fmt: skip


@pytest.fixture
def mgr(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path, provider: ProviderServer
) -> Iterator[Metergraph]:
    service = open_mg(tmp_path, provider, engine_settings(request, engine))
    yield service
    service.close()


def retained(mg: Metergraph, workspace: str = "w1", **fields: Any) -> str:
    mg.metadata.set_retain_content(workspace, True, NOW.isoformat())
    trace = fields.pop("trace_id", "t-" + workspace)
    fields.setdefault("request_json", REQUEST)
    fields.setdefault("response_text", "Paris.")
    mg.ingest.ingest_rows(app(workspace), [row(trace_id=trace, **fields)], "sdk")
    return trace


def replay(mg: Metergraph, trace: str, workspace: str = "w1", **kwargs: Any) -> dict[str, Any]:
    return mg.replay.replay(agent(workspace, "replay"), trace, **kwargs)


def test_a_replay_answers_the_new_output_tokens_cost_and_latency_next_to_the_original(
    mgr: Metergraph, provider: ProviderServer
) -> None:
    trace = retained(mgr)
    before = len(provider.requests)
    doc = replay(mgr, trace)
    assert doc["schema_version"] == "metergraph.trace-debug/v1" and doc["status"] == "succeeded"
    original, new = doc["comparison"]["original"], doc["comparison"]["replay"]
    assert original["model"] == "gpt-4o" and original["output"] == {"state": "captured", "text": "Paris."}
    assert original["usage"] == {"input_tokens": 1000, "output_tokens": 100}
    assert original["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)
    assert new["output"]["text"] == "replayed: What is the capital of France?"
    assert new["usage"] == {"input_tokens": 8, "output_tokens": 7}  # the provider's word counts
    assert new["cost_usd"] == pytest.approx(8 * 2.5e-6 + 7 * 10e-6)  # gpt-4o's genai-prices rates
    assert new["latency_ms"] > 0 and doc["delta"]["output_tokens"] == 7 - 100
    assert doc["provenance"]["writes_production"] is False and doc["persisted"] is False
    sent = provider.requests[before]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == "Bearer sk-test-openai"
    assert sent["json"]["messages"][0] == {"role": "system", "content": "Answer briefly."}
    assert sent["json"]["temperature"] == 0.2 and sent["json"]["max_tokens"] == 200  # 2 x the original


def test_a_candidate_model_routes_to_its_provider_and_overrides_apply(
    mgr: Metergraph, provider: ProviderServer
) -> None:
    trace = retained(mgr)
    before = len(provider.requests)
    doc = replay(mgr, trace, overrides={"model": "claude-haiku-4-5", "system": "Be terse.",
                                        "prompt": "And of Spain?", "max_output_tokens": 3, "top_p": 0.5})  # fmt: skip
    new = doc["comparison"]["replay"]
    assert doc["status"] == "succeeded" and new["provider"] == "anthropic"
    assert new["model"] == "claude-haiku-4-5" and new["output"]["text"] == "replayed: And of"
    assert new["cost_usd"] is not None and new["input"]["system"] == "Be terse."
    sent = provider.requests[before]
    assert sent["path"] == "/v1/messages" and "sk-test-anthropic" in (
        sent["headers"].get("x-api-key"),
        sent["headers"].get("authorization", "")[7:],
    )
    assert sent["json"]["system"] == "Be terse." and sent["json"]["max_tokens"] == 3
    assert sent["json"]["messages"] == [{"role": "user", "content": "And of Spain?"}]
    assert doc["provenance"]["overrides"]["model"] == "claude-haiku-4-5"
    # An explicit API prefix picks the OpenAI-compatible endpoint for any model name.
    doc = replay(mgr, trace, overrides={"model": "openai:llama3.1:8b"})
    assert doc["comparison"]["replay"]["model"] == "llama3.1:8b"
    assert provider.requests[-1]["path"] == "/v1/chat/completions"


def test_an_anthropic_call_replays_on_the_messages_api(mgr: Metergraph, provider: ProviderServer) -> None:
    body = {"model": "claude-haiku-4-5", "system": "sys", "max_tokens": 50,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]}  # fmt: skip
    trace = retained(mgr, provider="anthropic", model="claude-haiku-4-5", request_json=body)
    doc = replay(mgr, trace)
    assert doc["status"] == "succeeded"
    assert doc["comparison"]["replay"]["output"]["text"] == "replayed: hi there"
    assert provider.requests[-1]["json"]["system"] == "sys"


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("m-ratelimit", "provider_error", "rate_limited"),
        ("m-broken", "provider_error", "provider_error"),
        ("m-badauth", "provider_error", "provider_error"),
        ("m-slow", "timeout", "timeout"),
        ("m-dribble", "timeout", "timeout"),
    ],
)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
# The provider client's failures, whatever engine retained the trace: the ClickHouse engine's part of a
# replay (the retained request, read back) is proven by the tests above and below on both engines, one of
# them with a failing provider (``test_a_replay_writes_nothing``).
@embedded_only
def test_provider_failures_are_bounded_outcomes(
    mgr: Metergraph, api: str, model: str, status: str, code: str
) -> None:
    trace = retained(mgr)
    doc = replay(mgr, trace, overrides={"model": f"{api}:{model}"}, timeout_seconds=1)
    assert doc["status"] == status and doc["error"]["code"] == code, doc["error"]
    assert doc["comparison"]["replay"]["output"] == {"state": "not_available", "text": None}
    if code == "rate_limited":
        assert "retry after 7" in doc["error"]["message"]


def test_an_unreachable_provider_is_a_provider_error(tmp_path: Path) -> None:
    with ProviderServer() as gone:
        url = gone.openai_url
    mg = Metergraph.open(tmp_path, clock=lambda: NOW, provider_settings=load_provider_settings(
        openai_base_url=url, anthropic_base_url=""))  # fmt: skip
    try:
        doc = replay(mg, retained(mg), timeout_seconds=2)
    finally:
        mg.close()
    assert doc["status"] == "provider_error" and doc["error"]["code"] == "provider_unreachable"


def test_replay_refusals(mgr: Metergraph) -> None:
    trace = retained(mgr)
    with pytest.raises(ForbiddenError):
        mgr.replay.replay(agent("w1", "debug"), trace)
    with pytest.raises(NotFoundError):
        replay(mgr, "no-such-trace")
    with pytest.raises(NotFoundError):  # a key limited to other environments
        mgr.replay.replay(agent("w1", "replay", ("prod",)), trace)
    mgr.ingest.ingest_rows(app("w1"), [row(trace_id="no-content")], "sdk")
    with pytest.raises(ReplayNotEligible, match="no call of this trace has retained request text"):
        replay(mgr, "no-content")
    with pytest.raises(ReplayNotEligible, match="replay allowlist"):
        open_allow = mgr.providers.settings.models
        mgr.providers.settings.models = ["gpt-4o-mini"]
        try:
            replay(mgr, trace, overrides={"model": "gpt-4o"})
        finally:
            mgr.providers.settings.models = open_allow
    mgr.metadata.set_retain_content("w1", False, NOW.isoformat())
    with pytest.raises(ReplayNotEligible, match="content retention is off"):
        replay(mgr, trace)


def test_replay_is_unavailable_until_a_provider_is_configured(tmp_path: Path) -> None:
    mg = open_mg(tmp_path, None)
    try:
        trace = retained(mg)
        caps = mg.workspace.capabilities(agent("w1", "replay"))
        with pytest.raises(UnsupportedCapability, match="MG_REPLAY_OPENAI_BASE_URL"):
            replay(mg, trace)
        with pytest.raises(ForbiddenError):  # without the scope, forbidden first
            mg.replay.replay(agent("w1", "debug"), trace)
    finally:
        mg.close()
    entry = caps["agent"]["trace_replay"]
    assert entry["available"] is False and entry["unavailable_reason"] == "not_configured"
    assert "trace_replay" not in caps["deployment_capabilities"]


def test_capabilities_advertise_replay_once_configured(mgr: Metergraph) -> None:
    caps = mgr.workspace.capabilities(agent("w1", "replay"))
    assert caps["agent"]["trace_replay"]["available"] is True
    assert "trace_replay" in caps["deployment_capabilities"]
    debug = mgr.workspace.capabilities(agent("w1", "debug"))["agent"]["trace_replay"]
    assert debug["available"] is False and debug["unavailable_reason"] == "scope_missing"


def test_a_workspace_cannot_replay_another_workspaces_trace(mgr: Metergraph) -> None:
    trace = retained(mgr, "w1", trace_id="shared-id")
    mgr.metadata.set_retain_content("w2", True, NOW.isoformat())
    with pytest.raises(NotFoundError):
        replay(mgr, trace, workspace="w2")
    assert replay(mgr, trace, workspace="w1")["status"] == "succeeded"


def test_a_replay_writes_nothing(mgr: Metergraph) -> None:
    trace = retained(mgr)
    calls, content = mgr.calls.raw_calls("w1"), mgr.calls.raw_content("w1")
    replay(mgr, trace)
    replay(mgr, trace, overrides={"model": "openai:m-broken"})
    assert mgr.calls.raw_calls("w1") == calls and mgr.calls.raw_content("w1") == content


def test_long_outputs_are_bounded_to_16_kib(mgr: Metergraph) -> None:
    trace = retained(mgr, response_text="x" * 20_000)
    doc = replay(mgr, trace)
    out = doc["comparison"]["original"]["output"]
    assert len(out["text"]) == 16 * 1024 and out["response_limited"] is True


@pytest.mark.parametrize(
    ("text", "system", "messages"),
    [
        ("plain prompt", None, [("user", "plain prompt")]),
        (json.dumps({"prompt": "p"}), None, [("user", "p")]),
        (json.dumps([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]), None,
         [("user", "a"), ("assistant", "b")]),
        (json.dumps({"instructions": "i", "input": [{"role": "developer", "content": "d"},
                                                   {"role": "user", "content": [{"type": "input_text", "text": "q"}]}]}),
         "i\n\nd", [("user", "q")]),
        (json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}), None, []),
    ],
)  # fmt: skip
def test_retained_requests_of_every_shape_parse_to_messages(
    text: str, system: str | None, messages: list[tuple[str, str]]
) -> None:
    parsed = parse_request(text)
    assert parsed.system == system
    assert [(m.role, m.content) for m in parsed.messages] == messages


def test_retries_stay_inside_the_callers_timeout(tmp_path: Path, provider: ProviderServer) -> None:
    mg = open_mg(tmp_path, provider, max_retries=2)
    try:
        trace = retained(mg)
        before = len(provider.requests)
        # The provider asks for a retry after 7 s: past the 1 s budget, so the replay ends as a timeout.
        doc = replay(mg, trace, overrides={"model": "m-ratelimit"}, timeout_seconds=1)
    finally:
        mg.close()
    assert doc["status"] == "timeout" and doc["error"]["code"] == "timeout"
    assert len(provider.requests) - before == 1


@pytest.mark.parametrize(
    ("setting", "sent"),
    [
        ("auto", "max_tokens"),
        ("max_completion_tokens", "max_completion_tokens"),
        ("max_tokens", "max_tokens"),
    ],
)
def test_the_output_cap_is_named_as_the_endpoint_wants(
    tmp_path: Path, provider: ProviderServer, setting: str, sent: str
) -> None:
    mg = open_mg(tmp_path, provider, openai_token_parameter=setting)
    try:
        doc = replay(mg, retained(mg), overrides={"max_output_tokens": 5})
    finally:
        mg.close()
    assert doc["status"] == "succeeded" and provider.requests[-1]["json"][sent] == 5
    assert mg.providers._token_parameter() == sent  # auto: a local server is not OpenAI itself
    official = Providers(
        load_provider_settings(openai_api_key="sk", openai_base_url="", anthropic_base_url="")
    )
    try:
        assert official._token_parameter() == "max_completion_tokens"
    finally:
        official.close()


@embedded_only  # the provider connection's deadline, as the failures above
def test_a_trickling_provider_is_hung_up_on_at_the_deadline(
    mgr: Metergraph, provider: ProviderServer
) -> None:
    trace = retained(mgr)
    aborted = provider.aborted
    doc = replay(mgr, trace, overrides={"model": "m-dribble"}, timeout_seconds=1)
    assert doc["status"] == "timeout"
    # The connection is closed at the deadline (the answer would otherwise trickle for minutes), so the
    # provider's next write fails and no replay thread stays behind.
    for _ in range(100):
        if provider.aborted > aborted:
            break
        time.sleep(0.1)
    assert provider.aborted > aborted


def test_a_candidate_the_catalogue_knows_goes_to_its_vendors_api(
    mgr: Metergraph, provider: ProviderServer
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    trace = retained(mgr, provider="anthropic", model="claude-haiku-4-5", request_json=body)
    doc = replay(mgr, trace, overrides={"model": "gpt-4o-mini"})
    assert doc["status"] == "succeeded" and provider.requests[-1]["path"] == "/v1/chat/completions"
    assert doc["comparison"]["replay"]["provider"] == "openai"
    doc = replay(mgr, trace, overrides={"model": "my-finetune"})  # unknown: the original's API
    assert provider.requests[-1]["path"] == "/v1/messages"


def test_replay_call_refuses_a_row_of_another_workspace(mgr: Metergraph) -> None:
    trace = retained(mgr, "w1")
    span = mgr.calls.trace_spans("w1", trace, 1)[0]
    with pytest.raises(NotFoundError):
        mgr.replay.replay_call("w2", span)
    assert mgr.replay.replay_call("w1", span).status == "succeeded"
