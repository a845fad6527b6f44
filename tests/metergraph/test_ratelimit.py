"""The per-key read limit (``metergraph.ratelimit``) holds for a handler on the loop as for one in a thread."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from triptych.metergraph.errors import RateLimited
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.ratelimit import RateLimiter

KEY = AgentPrincipal("ws", "debug", "key-1")


def in_thread(principal: AgentPrincipal, args: Any) -> dict[str, Any]:
    return {"key": principal.key_id}


async def on_loop(principal: AgentPrincipal, args: Any) -> dict[str, Any]:
    return {"key": principal.key_id}


async def test_a_coroutine_handler_stays_one_and_is_limited_like_a_plain_one() -> None:
    now = [0.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    plain, coroutine = limiter.wrap(in_thread), limiter.wrap(on_loop)
    assert not inspect.iscoroutinefunction(plain) and inspect.iscoroutinefunction(coroutine)
    assert await coroutine(KEY, None) == {"key": "key-1"}
    assert plain(KEY, None) == {"key": "key-1"}  # one bucket per key, whichever door spends it
    with pytest.raises(RateLimited):
        await coroutine(KEY, None)
    now[0] += 30.0  # half a minute refills one of two
    assert await coroutine(KEY, None) == {"key": "key-1"}
