"""The webhook sender: one background thread per server process that claims due deliveries from the
outbox, posts them (up to ``concurrency`` at once) and records each outcome.

A 2xx answer delivers; anything else (an error status, a refused connection, a timeout, a redirect) is
retried after an exponential backoff with jitter (``backoff_seconds`` doubling up to
``backoff_max_seconds``, or the receiver's ``Retry-After`` when longer), until ``give_up_seconds`` after
the event was committed, when the delivery is marked failed. Rows are leased while in flight, so a crash
mid-send leaves them pending and they are sent again once the lease expires (at least once: receivers
deduplicate by delivery id).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from triptych.metergraph.contract import MAX_DAYS
from triptych.metergraph.webhook_http import WebhookSettings, post
from triptych.metergraph.webhook_store import Claimed, WebhookStore

log = logging.getLogger(__name__)
# Finished deliveries are kept as long as resolved incidents (contract.MAX_DAYS), then forgotten.
HISTORY_MS = MAX_DAYS * 86_400_000


def backoff_seconds(attempts: int, settings: WebhookSettings, rng: random.Random) -> float:
    """The wait after the ``attempts``-th failed attempt: the capped doubling, then "equal jitter" (half
    fixed, half random) so receivers coming back are not hit by every sender in step."""
    step: float = min(settings.backoff_max_seconds, settings.backoff_seconds * 2 ** min(attempts - 1, 30))
    return step / 2 + float(rng.uniform(0, step / 2))


def lease_ms(settings: WebhookSettings) -> int:
    return int((3 * settings.timeout_seconds + 5) * 1000)


class WebhookSender:
    def __init__(
        self,
        store: WebhookStore,
        secret: Callable[[str, str], str],
        settings: WebhookSettings,
        wake: threading.Event,
    ) -> None:
        self.store = store
        self.secret = secret  # (endpoint id, sealed secret) -> the secret: the service unseals
        self.settings = settings
        self.wake = wake
        self._stop = threading.Event()
        self._rng = random.Random()
        self._secrets: dict[str, str] = {}
        # A lease outlives an attempt (the timeout bounds each of connect, send and read) with room to
        # record its outcome; after a crash mid-send, the row is sent again once it expires.
        self._lease_ms = lease_ms(settings)
        self._thread = threading.Thread(target=self._run, name="metergraph-webhooks", daemon=True)
        self._pool = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="metergraph-webhook")
        self._client = httpx.Client(
            timeout=settings.timeout_seconds,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=settings.concurrency * 2),
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.settings.timeout_seconds + 5)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def _run(self) -> None:
        pruned_at = float("-inf")
        while not self._stop.is_set():
            try:
                if time.monotonic() - pruned_at > 3600:
                    pruned_at = time.monotonic()
                    self.store.prune(int(time.time() * 1000) - HISTORY_MS)
                sent = self.deliver_due()
            except Exception:
                log.exception("metergraph webhooks: delivering failed; retrying shortly")
                sent = 0
            if sent:
                continue  # more may be due at once (a burst larger than one claim)
            self.wake.wait(self._idle_wait())
            self.wake.clear()

    def _idle_wait(self) -> float:
        wait = self.settings.poll_seconds
        due = self.store.next_due_ms()
        if due is not None:
            wait = min(wait, max(0.0, due / 1000 - time.time()))
        return max(wait, 0.005)

    def deliver_due(self) -> int:
        """Claim what is due, send it, record the outcomes: how many were attempted."""
        claimed = self.store.claim(int(time.time() * 1000), self._lease_ms, self.settings.concurrency * 4)
        if not claimed:
            return 0
        outcomes = list(self._pool.map(self._attempt, claimed))
        self.store.finish(outcomes)
        return len(claimed)

    def _secret(self, c: Claimed) -> str:
        secret = self._secrets.get(c.endpoint_id)
        if secret is None:
            secret = self._secrets[c.endpoint_id] = self.secret(c.endpoint_id, c.sealed_secret)
        return secret

    def _attempt(self, c: Claimed) -> dict[str, Any]:
        try:
            status, error, answer, retry_after = post(
                self._client, c.url, self._secret(c), c.id, c.event_type, c.body
            )
        except Exception as exc:
            # A secret that no longer opens (the key file replaced), a URL httpx refuses: this delivery
            # fails and is retried like any other; the rest of the batch goes on.
            log.warning("metergraph webhooks: delivery %s could not be sent: %s", c.id, exc)
            status, error, answer, retry_after = (
                None,
                f"not sent: {type(exc).__name__}: {exc}"[:500],
                None,
                None,
            )
        now = time.time()
        outcome: dict[str, Any] = {
            "id": c.id, "last_status": status, "last_error": error, "last_response": answer,
            "status": "delivered", "next_attempt_ms": int(now * 1000), "finished_ms": int(now * 1000),
        }  # fmt: skip
        if error is None:
            return outcome
        wait = backoff_seconds(c.attempts, self.settings, self._rng)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.settings.backoff_max_seconds))
        next_ms = int((now + wait) * 1000)
        if next_ms > c.created_ms + self.settings.give_up_seconds * 1000:
            outcome["status"] = "failed"
            outcome["last_error"] = f"gave up after {c.attempts} attempts: {error}"
            return outcome
        outcome.update(status="pending", next_attempt_ms=next_ms, finished_ms=None)
        return outcome
