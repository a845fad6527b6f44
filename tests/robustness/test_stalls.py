"""Requests that once froze the server: a catastrophic-backtracking regex and a 300 KB document. Each
runs while /health is polled (and, for the document, while other tools are called); the figures go to
the report (bench/robustness.py), the test asserts what does not depend on the machine's load: the
request finishes, /health answers every time, and the other calls finish too."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from harness import token
from robustness.report import record
from robustness.target import ClientThread, Target, error_code, result_text

STALL_MS = 100.0  # the criterion: no request stalls /health by more than this
IDLE: list[float] = []  # /health latencies (ms) just before the last scenario started


def _figures(health: list[float]) -> dict[str, float]:
    return {
        "health_polls": len(health),
        "health_p50_ms": round(statistics.median(health), 1) if health else 0.0,
        "health_max_ms": round(max(health, default=0.0), 1),
        "stalls": sum(h > STALL_MS for h in health),
        "idle_p50_ms": round(statistics.median(IDLE), 1),
        "idle_max_ms": round(max(IDLE), 1),
    }


def _while_polling(
    target: Target, work: Callable[[], Any], also: Callable[[], None] | None = None
) -> tuple[Any, list[float], int]:
    """Run ``work`` in a thread; meanwhile poll /health (and call ``also``) until it is done. The first
    20 polls, before ``work`` starts, are the same run's idle baseline (``IDLE``)."""
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", work()))
    latencies: list[float] = []
    extra_calls = 0
    with httpx.Client(base_url=target.url, timeout=120.0) as http:
        IDLE.clear()
        for _ in range(20):
            started = time.perf_counter()
            assert http.get("/health").status_code == 200
            IDLE.append((time.perf_counter() - started) * 1000)
        thread.start()
        while thread.is_alive():
            started = time.perf_counter()
            assert http.get("/health").status_code == 200
            latencies.append((time.perf_counter() - started) * 1000)
            if also is not None:
                also()
                extra_calls += 1
            time.sleep(0.02)
    thread.join()
    return out.get("result"), latencies, extra_calls


def test_regex_bomb_is_linear_and_health_keeps_answering(target: Target) -> None:
    alice = ClientThread(target.url + "/hadron/mcp", {"Authorization": f"Bearer {token(user='alice')}"})
    try:
        memory = "hrn:mem:acme.com:specs"
        for i, size in enumerate((25, 5_000, 50_000)):
            loc = f"hrn:node:acme.com:specs:bomb{i}"
            made = alice.call(
                "hadron_create_node", {"loc": loc, "name": "a" * 25 + "!", "content": "a" * size + "!"}
            )
            assert error_code(made) in (None, "URN_ALREADY_EXISTS"), result_text(made)
        for pattern in ("(a+)+$", "(a|aa)+$", "(a*)*b", "(.*a){20}"):
            args = {"query": pattern, "mode": "regex", "memoryUrn": memory, "granularity": "chunk"}
            started = time.perf_counter()
            result, health, _ = _while_polling(
                target, lambda args=args: alice.call("hadron_find_nodes", args)
            )
            took = (time.perf_counter() - started) * 1000
            assert error_code(result) is None, result_text(result)
            record("regex-bomb", pattern=pattern, call_ms=round(took, 1), **_figures(health))
        refused = alice.call("hadron_find_nodes", {"query": r"(a)\1", "mode": "regex", "memoryUrn": memory})
        assert error_code(refused) == "BAD_USER_INPUT" and "invalid regex" in result_text(refused)
    finally:
        alice.close()


def test_a_300_kb_document_leaves_health_and_other_tools_answering(target: Target) -> None:
    rng = random.Random(19)
    words = "graph memory server context agent search index token vector keyword answer store".split()
    document = "\n\n".join(" ".join(rng.choice(words) for _ in range(120)) for _ in range(410))
    assert len(document) > 300_000
    headers = {"Authorization": f"Bearer {target.metronix_token}"}
    big, other = ClientThread(target.url + "/mcp", headers), ClientThread(target.url + "/mcp", headers)
    other_ms: list[float] = []

    def another_call() -> None:
        started = time.perf_counter()
        found = other.call(
            "memory_search", {"query": "graph memory", "agent_id": "bot", "workspace_id": "ws-a"}
        )
        assert error_code(found) is None, result_text(found)
        other_ms.append((time.perf_counter() - started) * 1000)

    try:
        started = time.perf_counter()
        stored, health, calls = _while_polling(
            target,
            lambda: big.call(
                "metronix_store", {"content": document, "doc_label": "big", "workspace_id": "ws-a"}
            ),
            another_call,
        )
        took = time.perf_counter() - started
        assert error_code(stored) is None, result_text(stored)[:500]
        record("document-300kb", chars=len(document), store_s=round(took, 1), other_calls=calls,
               other_max_ms=round(max(other_ms, default=0.0), 1), **_figures(health))  # fmt: skip
    finally:
        big.close()
        other.close()
