"""The product's own relay (``metergraphrelay``, from the registry, unchanged) against a real ``triptych
serve`` on each engine: its export mode over a Portkey export with every provider's shape lands every row
exactly, and its scheduled ``sync phoenix`` against a local stand-in for Phoenix's spans API resumes
window after window through ``/v1/import-sync``, the overlap re-read stored once; so does its scheduled
``sync portkey`` against a local stand-in for Portkey's Logs Export API, decimal-string costs and all."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import ServerProcess
from provider_server import ProviderServer
from relay_support import mint, relay, stored_calls, traces

# Each Metergraph engine, and two machines sharing PostgreSQL and ClickHouse (tests/conftest.py).
pytestmark = pytest.mark.metergraph_engines("sqlite", "clickhouse", "two-machines")


@pytest.fixture(scope="module")
def server(shared_metergraph: ServerProcess) -> ServerProcess:
    """The session's shared server (tests/shared_metergraph.py); each test relays into a workspace of its own."""
    return shared_metergraph


def _portkey_row(n: int, provider: str, model: str, cents: float | None, usage: dict[str, Any],
                 response: dict[str, Any], status: int = 200, created: datetime | None = None,
                 **fields: Any) -> dict[str, Any]:  # fmt: skip
    """One row of a Portkey log export (the fields the relay's converter reads)."""
    created = created or datetime.now(UTC) - timedelta(minutes=30 - n)
    row = {
        "id": f"pk-{n}-{uuid.uuid4().hex[:8]}", "trace_id": f"trace-{n}-{uuid.uuid4().hex[:8]}",
        "created_at": created.isoformat().replace("+00:00", "Z"), "ai_org": provider, "ai_model": model,
        "response_time": 800 + n, "response_status_code": status, "metadata": {"workflow_name": "relay-export"},
        "request": {"model": model, "messages": [{"role": "user", "content": "hello"}]},
        "response": {**response, "usage": usage}, **fields,
    }  # fmt: skip
    if cents is not None:
        row["cost"] = cents
    return row


def _chat(text: str) -> dict[str, Any]:
    return {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": text},
                                                     "finish_reason": "stop"}]}  # fmt: skip


# (export row, what must land: tokens, the reported cost as the relay sends it, error)
EXPORT = [
    (_portkey_row(1, "openai", "gpt-4o", 0.123456, {"prompt_tokens": 1200, "completion_tokens": 300,
                  "prompt_tokens_details": {"cached_tokens": 200}}, _chat("hi"), req_units=1200, res_units=300),
     {"input_tokens": 1200, "output_tokens": 300, "cache_read_tokens": 200, "cache_write_tokens": 0,
      "reasoning_tokens": 0}, "0.00123456", False),
    # Anthropic: the relay sends input without the cache buckets, and the 5-minute and 1-hour writes.
    (_portkey_row(2, "anthropic", "claude-sonnet-4-20250514", 4.38,
                  {"input_tokens": 4000, "output_tokens": 2000, "cache_read_input_tokens": 6000,
                   "cache_creation_input_tokens": 2000,
                   "cache_creation": {"ephemeral_5m_input_tokens": 1500, "ephemeral_1h_input_tokens": 500}},
                  {"type": "message", "content": [{"type": "text", "text": "ok"}]}, req_units=12000, res_units=2000),
     {"input_tokens": 4000, "output_tokens": 2000, "cache_read_tokens": 6000, "cache_write_tokens": 2000,
      "reasoning_tokens": 0}, "0.0438", False),
    (_portkey_row(3, "google", "gemini-2.5-pro", 0.35, {"prompt_tokens": 800, "completion_tokens": 500,
                  "completion_tokens_details": {"reasoning_tokens": 200}}, _chat("thought"), req_units=800,
                  res_units=500),
     {"input_tokens": 800, "output_tokens": 500, "cache_read_tokens": 0, "cache_write_tokens": 0,
      "reasoning_tokens": 200}, "0.0035", False),
    (_portkey_row(4, "mistral-ai", "mistral-large-latest", 0.26, {"prompt_tokens": 1000, "completion_tokens": 100},
                  _chat("bonjour"), req_units=1000, res_units=100),
     {"input_tokens": 1000, "output_tokens": 100, "cache_read_tokens": 0, "cache_write_tokens": 0,
      "reasoning_tokens": 0}, "0.0026", False),
    (_portkey_row(5, "openai", "gpt-4o-mini", 0, {}, {"error": {"message": "rate limited"}}, status=429,
                  req_units=50, res_units=0),
     {"input_tokens": 50, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
      "reasoning_tokens": 0}, "0", True),
    # No cost in the export: nothing reported, the catalogue prices it.
    (_portkey_row(6, "openai", "gpt-4o-mini", None, {"prompt_tokens": 90, "completion_tokens": 10},
                  _chat("free?"), req_units=90, res_units=10),
     {"input_tokens": 90, "output_tokens": 10, "cache_read_tokens": 0, "cache_write_tokens": 0,
      "reasoning_tokens": 0}, None, False),
    # Portkey's responses-API shape, a cost with more digits than a float keeps after a division.
    (_portkey_row(7, "openai", "gpt-4.1", 0.0123456789, {"input_tokens": 300, "output_tokens": 40,
                  "input_tokens_details": {"cached_tokens": 100}, "output_tokens_details": {"reasoning_tokens": 0}},
                  {"object": "response", "output": [{"type": "message",
                                                     "content": [{"type": "output_text", "text": "r"}]}]},
                  req_units=300, res_units=40),
     {"input_tokens": 300, "output_tokens": 40, "cache_read_tokens": 100, "cache_write_tokens": 0,
      "reasoning_tokens": 0}, "0.000123456789", False),
]  # fmt: skip


def test_export_mode_lands_every_row_of_a_portkey_export_exactly(
    server: ServerProcess, tmp_path: Path
) -> None:
    workspace = f"relay-{uuid.uuid4().hex[:8]}"
    export = tmp_path / "portkey-export.jsonl"
    export.write_text("".join(json.dumps(row) + "\n" for row, *_ in EXPORT))
    done = relay(server, mint(server, workspace), ["sync", "portkey", str(export)], tmp_path)
    assert done.returncode == 0, done.stderr
    n = len(EXPORT)
    assert f"Converted {n} row(s), skipped 0, pushed {n} row(s), 0 failed." in done.stdout
    landed = traces(server, mint(server, workspace, "metadata"))
    calls = stored_calls(server, workspace)
    stored = {c["request_id"]: c for c in calls}
    assert len(landed) == len(stored) == len(calls) == n
    for row, tokens, reported, error in EXPORT:
        trace = landed[row["trace_id"]]
        assert {name: trace[name] for name in tokens} == tokens, row["id"]
        assert trace["status"] == ("error" if error else "success")
        call = stored[row["id"]]
        # The decimal string the relay sent, read exactly: the double nearest it, rounded once.
        assert call["reported_cost_usd"] == (None if reported is None else float(Decimal(reported))), row[
            "id"
        ]
        # What the agent reads is what was stored, to the tenth decimal the contract rounds to.
        assert trace["cost_usd"] == (None if call["cost_usd"] is None else round(call["cost_usd"], 10))
        assert call["cost_usd"] is not None, row["id"]  # every row is priced: reported or catalogue


def _span(n: int, at: datetime, model: str = "gpt-4o-mini") -> dict[str, Any]:
    """One LLM span as Phoenix's spans API returns it (OpenInference attributes)."""
    span_id = f"span-{n:03d}-{uuid.uuid4().hex[:6]}"
    return {
        "id": span_id, "name": "ChatCompletion", "span_kind": "LLM", "parent_id": None,
        "context": {"trace_id": f"ptrace-{n:03d}-{uuid.uuid4().hex[:6]}", "span_id": span_id},
        "start_time": at.isoformat(), "end_time": (at + timedelta(milliseconds=640)).isoformat(),
        "status_code": "OK", "status_message": "",
        "attributes": {"llm.model_name": model, "llm.provider": "openai", "llm.token_count.prompt": 100 + n,
                       "llm.token_count.completion": 10 + n, "metergraph.route": "phoenix-sync"},
    }  # fmt: skip


def _scheduled(server: ServerProcess) -> tuple[str, str, str, datetime]:
    """A fresh workspace, its app token and read key, and a whole hour three hours ago: the first window
    of a scheduled sync starts there, and its first two windows lie wholly in the past."""
    workspace = f"sync-{uuid.uuid4().hex[:8]}"
    t0 = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    return workspace, mint(server, workspace), mint(server, workspace, "metadata"), t0


def test_scheduled_sync_resumes_window_after_window_and_stores_overlap_rows_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    workspace, app, agent, t0 = _scheduled(server)
    # Minutes after t0: window 1 is [t0, t0+60), window 2 [t0+55, t0+120): the span at 57 is read twice.
    minutes = [10, 40, 57, 70, 100, 150]
    spans = [_span(i, t0 + timedelta(minutes=m)) for i, m in enumerate(minutes)]
    with ProviderServer() as phoenix:
        phoenix.spans["proj-a"] = spans

        def run() -> str:
            done = relay(
                server, app,
                ["sync", "phoenix", "--project", "proj-a", "--source-scope", "proj-a",
                 "--initial-since", t0.isoformat()],
                tmp_path, PHOENIX_BASE_URL=phoenix.url,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout

        first = run()
        assert f"Imported window {t0.isoformat()}..{(t0 + timedelta(hours=1)).isoformat()}" in first
        assert "pushed 3 row(s), skipped 0, 0 failed" in first
        second = run()
        assert f"Imported window {(t0 + timedelta(minutes=55)).isoformat()}.." in second
        assert "pushed 3 row(s), skipped 0, 0 failed" in second  # 57, 70 and 100: 57 again
    landed = traces(server, agent)
    by_span = {s["context"]["trace_id"]: s for s in spans}
    # The five spans of the two windows, each once; the one at 150 waits for the next window.
    assert sorted(landed) == sorted(s["context"]["trace_id"] for s in spans[:5])
    for trace_id, trace in landed.items():
        attributes = by_span[trace_id]["attributes"]
        assert trace["span_count"] == 1
        assert (trace["input_tokens"], trace["output_tokens"]) == (
            attributes["llm.token_count.prompt"],
            attributes["llm.token_count.completion"],
        )
    state = httpx.get(
        server.url + "/v1/import-sync/state", params={"source": "phoenix", "source_scope": "proj-a"},
        headers={"Authorization": f"Bearer {app}"}, timeout=30,
    ).json()  # fmt: skip
    assert state["checkpoint"] == (t0 + timedelta(hours=2)).isoformat()
    assert (state["checkpoint_version"], state["lease"]) == (2, None)


def test_scheduled_portkey_sync_resumes_windows_and_stores_each_row_once_with_its_exact_cost(
    server: ServerProcess, tmp_path: Path
) -> None:
    workspace, app, agent, t0 = _scheduled(server)
    # Window 1 is [t0, t0+60 min), window 2 [t0+55, t0+120): the row at minute 58 is exported twice.
    rows = [
        _portkey_row(minute, "openai", "gpt-4o", cents, {"prompt_tokens": 100 + minute, "completion_tokens": 7},
                     _chat("ok"), created=t0 + timedelta(minutes=minute), req_units=100 + minute, res_units=7)
        for minute, cents in ((5, 0.123456), (58, 4.38), (80, 0.0123456789))
    ]  # fmt: skip
    with ProviderServer() as portkey:
        portkey.portkey_rows = rows
        outputs = []
        for _ in range(2):
            done = relay(
                server, app, ["sync", "portkey", "--source-scope", "ws-acme", "--initial-since", t0.isoformat()],
                tmp_path, PORTKEY_API_KEY="pk-test", PORTKEY_BASE_URL=portkey.portkey_url,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            outputs.append(done.stdout)
    assert "pushed 2 row(s)" in outputs[0] and "pushed 2 row(s)" in outputs[1]
    landed = traces(server, agent)
    calls = stored_calls(server, workspace)
    stored = {c["request_id"]: c for c in calls}
    assert len(calls) == len(rows)  # four rows pushed, three stored
    assert sorted(landed) == sorted(r["trace_id"] for r in rows)
    assert sorted(stored) == sorted(r["id"] for r in rows)
    assert all(trace["span_count"] == 1 for trace in landed.values())
    for row, cost in zip(rows, ("0.00123456", "0.0438", "0.000123456789"), strict=True):
        assert stored[row["id"]]["reported_cost_usd"] == float(Decimal(cost))
        assert landed[row["trace_id"]]["input_tokens"] == row["req_units"]
