"""Per-key read rate limits: a token bucket per agent key, refilled continuously.

Buckets live in this process's memory: with several workers behind a load balancer each worker
enforces the limit on its own share of the traffic.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

from triptych.metergraph.errors import RateLimited
from triptych.metergraph.keys import AgentPrincipal


class RateLimiter:
    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, principal: AgentPrincipal) -> None:
        if self.capacity <= 0:
            return
        key = f"{principal.workspace}\x00{principal.key_id}"
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens < 1:
                self._buckets[key] = (tokens, now)
                raise RateLimited("too many requests for this key: slow down and retry in a few seconds")
            self._buckets[key] = (tokens - 1, now)

    def wrap(self, handler: Callable[[AgentPrincipal, Any], Any]) -> Callable[[AgentPrincipal, Any], Any]:
        """``handler`` behind the limit; a coroutine handler stays one (``Toolbox`` runs it on the loop)."""
        if inspect.iscoroutinefunction(handler):

            async def limited_on_loop(principal: AgentPrincipal, args: Any) -> Any:
                self.check(principal)  # the lock is held for a dict update only, never across I/O
                return await handler(principal, args)

            return limited_on_loop

        def limited(principal: AgentPrincipal, args: Any) -> Any:
            self.check(principal)
            return handler(principal, args)

        return limited
