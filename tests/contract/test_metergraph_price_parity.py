"""Price parity with the product, end to end, on both engines.

Provider-shaped responses (OpenAI Chat Completions and Responses, Anthropic Messages, Gemini
generateContent, OpenRouter through the OpenAI client) over 30+ models go through the product's own SDK
(`metergraph`, installed from the registry in its own environment, run as a subprocess that wraps fake
provider clients returning them), which posts its rows to a real `triptych serve` over /v1/ingest. Each
call's cost is read back through the tools (`metergraph_query_traces`, then `metergraph_get_trace` for
the span and its pricing provenance) and compared with what metergraph-core (its own environment, a
subprocess) computes for the same response at the same time: `cost_from_response`, and for a gateway's
charge `resolve_billing` on the evidence the SDK sends. Every cost must agree to $0.000001, and every
price id, but for the named exceptions below, each with the product rule that explains it.

``PARITY_REPORT=path`` writes the figures (calls and models agreeing, the rest with reasons) as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness import ServerProcess, client_python, mcp_session, open_metergraph

TOLERANCE = 1e-6
OPENAI = ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "gpt-5", "gpt-5-mini", "gpt-5.2",
          "gpt-5.4", "gpt-5.4-mini", "gpt-5.4-nano", "gpt-6-sol", "o4-mini", "o3"]  # fmt: skip
ANTHROPIC = ["claude-sonnet-4", "claude-sonnet-4-5", "claude-sonnet-4-6", "claude-opus-4", "claude-opus-4-6",
             "claude-haiku-4-5", "claude-3-5-haiku-20241022", "claude-3-haiku", "claude-sonnet-5", "claude-opus-5"]  # fmt: skip
GOOGLE = ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3-pro-preview", "gemini-3.5-flash",
          "gemini-3.5-flash-lite", "gemini-flash-latest", "gemini-4-argon", "gemini-3.1-pro-preview"]  # fmt: skip
OPENROUTER = ["anthropic/claude-sonnet-4.5", "openai/gpt-4o", "google/gemini-2.5-flash"]

# Disagreements the product's own rules explain, by reason: a call metergraph-core leaves unpriced that
# Triptych prices with its fallback catalogue (decision 0035: genai-prices prices what metergraph-core
# does not know, instead of storing no price).
FALLBACK = (
    "metergraph-core does not price this (provider, model); Triptych's fallback genai-prices does (0035)"
)


def _openai_chat(i: int, model: str, kind: str, gateway: bool = False) -> dict[str, Any]:
    prompt, completion = 1200 + 37 * i, 150 + 11 * i
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}  # fmt: skip
    if kind == "cached":
        usage["prompt_tokens_details"] = {"cached_tokens": 1024}
    if kind == "reasoning":
        usage["completion_tokens_details"] = {"reasoning_tokens": completion // 2}
    if gateway:
        usage["cost"] = round(0.0001 * (i + 1) + 0.00000123, 8)
    return {"id": f"chatcmpl-{i}", "object": "chat.completion", "model": model, "created": 1_700_000_000,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": usage}  # fmt: skip


def _openai_responses(i: int, model: str) -> dict[str, Any]:
    return {"id": f"resp-{i}", "object": "response", "model": model, "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": 900 + 13 * i, "output_tokens": 120 + i, "total_tokens": 1020 + 14 * i,
                      "input_tokens_details": {"cached_tokens": 256},
                      "output_tokens_details": {"reasoning_tokens": 40}}}  # fmt: skip


def _anthropic(i: int, model: str, kind: str) -> dict[str, Any]:
    usage: dict[str, Any] = {"input_tokens": 4000 + 17 * i, "output_tokens": 2000 + 3 * i}
    if kind in ("cache_read", "cache_1h"):
        usage["cache_read_input_tokens"] = 6000 + i
    if kind == "cache_5m":
        usage["cache_creation_input_tokens"] = 3000 + i
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": 3000 + i, "ephemeral_1h_input_tokens": 0}
    if kind == "cache_1h":
        usage["cache_creation_input_tokens"] = 5000
        usage["cache_creation"] = {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 4000}
    return {"id": f"msg-{i}", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": usage}  # fmt: skip


def _gemini(i: int, model: str, kind: str) -> dict[str, Any]:
    prompt = 250_000 + i if kind == "long" else 2000 + 29 * i
    usage: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": 300 + i}
    if kind == "cached":
        usage["cachedContentTokenCount"] = 1500
    if kind == "thinking":
        usage["thoughtsTokenCount"] = 700 + i
    usage["totalTokenCount"] = prompt + 300 + i + usage.get("thoughtsTokenCount", 0)
    return {"responseId": f"gem-{i}", "modelVersion": model,
            "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
            "usageMetadata": usage}  # fmt: skip


def cases() -> list[dict[str, Any]]:
    """Provider responses: (api, provider as metergraph-core names who served it, model, response)."""
    out: list[dict[str, Any]] = []

    def add(api: str, provider: str, model: str, response: dict[str, Any], kind: str) -> None:
        out.append({"api": api, "provider": provider, "model": model, "response": response, "kind": kind})

    for model in OPENAI:
        for kind in ("plain", "cached", "reasoning"):
            add("openai.chat", "openai", model, _openai_chat(len(out), model, kind), kind)
        add("openai.responses", "openai", model, _openai_responses(len(out), model), "responses")
    for model in ANTHROPIC:
        for kind in ("plain", "cache_read", "cache_5m", "cache_1h"):
            add("anthropic", "anthropic", model, _anthropic(len(out), model, kind), kind)
    for model in GOOGLE:
        for kind in ("plain", "cached", "thinking"):
            add("gemini", "google", model, _gemini(len(out), model, kind), kind)
    add("gemini", "google", "gemini-2.5-pro", _gemini(len(out), "gemini-2.5-pro", "long"), "long")
    for model in OPENROUTER:
        add("openrouter", "openai", model, _openai_chat(len(out), model, "plain", gateway=True), "gateway")
    add("openai.chat", "openai", "ft-support-v7", _openai_chat(len(out), "ft-support-v7", "plain"), "unknown")
    for n, case in enumerate(out):
        case["route"] = f"parity-{n:03d}"
    return out


SDK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from types import SimpleNamespace
    import metergraph

    def ns(value):
        if isinstance(value, dict):
            return SimpleNamespace(**{k: ns(v) for k, v in value.items()})
        if isinstance(value, list):
            return [ns(v) for v in value]
        return value

    class Returns:
        def __init__(self, response):
            self.response = response
        def create(self, **kw):
            return ns(self.response)
        def generate_content(self, **kw):
            return ns(self.response)

    class OpenAI:
        def __init__(self, response, base_url):
            self.chat = SimpleNamespace(completions=Returns(response))
            self.responses = Returns(response)
            self.base_url = base_url

    class Anthropic:
        def __init__(self, response):
            self.messages = Returns(response)

    class Google:
        def __init__(self, response):
            self.models = Returns(response)

    for case in json.load(open(sys.argv[1])):
        api, response, model = case["api"], case["response"], case["model"]
        if api == "anthropic":
            client = metergraph.wrap(Anthropic(response))
        elif api == "gemini":
            client = metergraph.wrap(Google(response))
        else:
            base = "https://openrouter.ai/api/v1" if api == "openrouter" else "https://api.openai.com/v1"
            client = metergraph.wrap(OpenAI(response, base))
        messages = [{"role": "user", "content": "hello"}]
        with metergraph.route(case["route"]):
            if api == "anthropic":
                client.messages.create(model=model, max_tokens=100, messages=messages)
            elif api == "gemini":
                client.models.generate_content(model=model, contents="hello")
            elif api == "openai.responses":
                client.responses.create(model=model, input="hello")
            else:
                client.chat.completions.create(model=model, messages=messages)
    ok = metergraph.flush(30)
    metergraph.shutdown()
    print(json.dumps({"flushed": ok}))
    """
)

REFERENCE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from metergraph_core import cost_from_response, load_catalog, normalize_gateway_evidence, resolve_billing

    catalog = load_catalog()
    out = []
    for case in json.load(open(sys.argv[1])):
        result = cost_from_response(case["provider"], case["response"], at=case["at"])
        cost, price_id = result.cost_usd, result.price_id
        if case["api"] == "openrouter":
            # What the SDK sends for OpenRouter: its gateway, endpoint and fixed source with usage.cost.
            evidence = normalize_gateway_evidence({
                "gateway": "openrouter", "endpoint": "chat.completions",
                "reported_cost_usd": case["response"]["usage"]["cost"],
                "reported_cost_source": "openrouter.usage.cost"})
            decision = resolve_billing(result, evidence, disputes=catalog.disputes, at=case["at"])
            cost = decision.cost_usd
        out.append({"cost": None if cost is None else str(cost), "price_id": price_id,
                    "status": result.status, "model": result.canonical_model})
    print(json.dumps(out))
    """
)


# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def server(shared_metergraph: ServerProcess) -> ServerProcess:
    """The session's shared server (tests/shared_metergraph.py): agent reads unlimited (the test reads every
    page of traces); the workspace is the test's own."""
    return shared_metergraph


def _run(python: Path, script: str, arg: Path, env: dict[str, str], cwd: Path) -> str:
    path = cwd / f"script-{uuid.uuid4().hex[:6]}.py"
    path.write_text(script)
    out = subprocess.run([str(python), str(path), str(arg)], env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=180)  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout.strip().splitlines()[-1]


async def _stored(server: ServerProcess, key: str, routes: set[str]) -> dict[str, dict[str, Any]]:
    """Each route's one span, read through the tools: every page of traces, then each trace. The SDK's
    202s have all come back when this runs; a route still missing is looked for again for up to 30 s
    (one reason this test failed once, under a load of 10, was never shown: the message now says)."""
    spans: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    async with mcp_session(server.url + "/v1/agent/mcp", {"Authorization": f"Bearer {key}"}) as mcp:
        while True:
            cursor: str | None = None
            pages: list[Any] = []
            while True:
                listed = await mcp.call("metergraph_query_traces", days=1, limit=200,
                                        **({"cursor": cursor} if cursor else {}))  # fmt: skip
                assert not listed.is_error, listed.data
                pages.append({k: v for k, v in listed.data.items() if k != "traces"})
                for trace in listed.data["traces"]:
                    if set(trace["routes"]) <= set(spans):
                        continue
                    detail = await mcp.call("metergraph_get_trace", trace_id=trace["trace_id"])
                    assert not detail.is_error, detail.data
                    for span in detail.data["spans"]:
                        spans[span["route"]] = span
                cursor = listed.data.get("next_cursor")
                if not cursor:
                    break
            if set(spans) == routes or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
    assert set(spans) == routes, (sorted(routes - set(spans)), pages)
    return spans


async def test_every_sdk_call_costs_what_metergraph_core_computes(
    server: ServerProcess, tmp_path: Path
) -> None:
    workspace = "parity-" + uuid.uuid4().hex[:8]
    mg = open_metergraph(server)
    try:
        app_token = mg.keys.create_app_token(workspace)[1]
        key = mg.keys.create_agent_key(workspace, "debug", None)[1]
    finally:
        mg.close()
    calls = cases()
    assert len(calls) >= 80 and len({c["model"] for c in calls}) >= 30
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(calls))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    sdk_env = {**clean, "METERGRAPH_APP_TOKEN": app_token, "METERGRAPH_INGEST_URL": server.url,
               "METERGRAPH_REPOSITORY": "acme/parity", "METERGRAPH_FLUSH_SECONDS": "0.2",
               "METERGRAPH_CONFIG_POLL_SECONDS": "600"}  # fmt: skip
    sent = json.loads(_run(client_python("metergraph"), SDK_SCRIPT, cases_file, sdk_env, tmp_path))
    assert sent == {"flushed": True}

    spans = await _stored(server, key, {c["route"] for c in calls})
    for case in calls:
        case["at"] = spans[case["route"]]["timestamp"]  # priced at the time the call was stored with
    cases_file.write_text(json.dumps(calls))
    reference = json.loads(
        _run(client_python("metergraph-core"), REFERENCE_SCRIPT, cases_file, clean, tmp_path)
    )

    agree: list[str] = []
    excepted: dict[str, list[str]] = {}
    disagree: list[str] = []
    for case, want in zip(calls, reference, strict=True):
        span = spans[case["route"]]
        got, pricing = span["cost_usd"], span["pricing"]
        label = f"{case['api']} {case['model']} {case['kind']}"
        expected = None if want["cost"] is None else float(want["cost"])
        if expected is None and got is None:
            agree.append(case["model"])
        elif expected is not None and got is not None and abs(got - expected) <= TOLERANCE:
            if case["api"] != "openrouter" and pricing["price_id"] != want["price_id"]:
                disagree.append(f"{label}: price id {pricing['price_id']} != {want['price_id']}")
            else:
                agree.append(case["model"])
        elif expected is None and got is not None and pricing["catalog"].startswith("genai-prices"):
            excepted.setdefault(FALLBACK, []).append(label)
        else:
            disagree.append(f"{label}: {got} != {expected} ({pricing})")
        if case["api"] == "openrouter":
            assert pricing["cost_provenance"] == "gateway_reported" and pricing["gateway"] == "openrouter"
        elif got is not None:
            assert pricing["cost_provenance"] == "catalog"
    models = {c["model"] for c in calls}
    bad_models = {label.split()[1] for label in disagree} | {
        label.split()[1] for labels in excepted.values() for label in labels
    }
    figures = {
        "calls": len(calls), "calls_agreeing": len(agree), "models": len(models),
        "models_agreeing": len(models - bad_models), "exceptions": excepted, "disagreements": disagree,
    }  # fmt: skip
    if os.environ.get("PARITY_REPORT"):
        Path(os.environ["PARITY_REPORT"]).write_text(json.dumps(figures, indent=1))
    print(json.dumps(figures))
    assert not disagree, disagree
    assert len(agree) >= 80
    # Only the model metergraph-core does not know is priced by the fallback.
    assert excepted.get(FALLBACK, []) == [f"{api} o3 {kind}" for api, kind in
                                          [("openai.chat", "plain"), ("openai.chat", "cached"),
                                           ("openai.chat", "reasoning"), ("openai.responses", "responses")]]  # fmt: skip
