"""The outbound wire of incident webhooks: the delivery settings, the signature over timestamp and body,
and one signed POST. The service (``webhooks``) and the sender (``webhook_delivery``) both build on it,
so neither imports the other's module for these."""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from typing import Any

import httpx
from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from triptych.metergraph.webhook_secrets import valid_key

SIGNATURE_HEADER = "X-Metergraph-Signature"
TIMESTAMP_HEADER = "X-Metergraph-Timestamp"
DELIVERY_HEADER = "X-Metergraph-Delivery"
EVENT_HEADER = "X-Metergraph-Event"
USER_AGENT = "triptych-metergraph-webhooks/1"
USER_AGENT = "triptych-metergraph-webhooks/1"
RESPONSE_KEPT = 500  # characters of a receiver's answer kept with the delivery (and printed by `test`)


def _env(name: str) -> AliasChoices:
    return AliasChoices(f"MG_WEBHOOK_{name.upper()}", name)


class WebhookSettings(BaseSettings):
    """Delivery of incident webhooks; each is documented in the README's configuration table."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    # A delivery not accepted (2xx) this long after its event was committed is given up (status failed).
    give_up_seconds: float = Field(86400.0, gt=0, validation_alias=_env("give_up_seconds"))
    # The first retry waits about this long; each further one twice as long (with jitter), up to the cap.
    backoff_seconds: float = Field(5.0, gt=0, validation_alias=_env("backoff_seconds"))
    backoff_max_seconds: float = Field(900.0, gt=0, validation_alias=_env("backoff_max_seconds"))
    # One attempt's time limit (connect, send, answer).
    timeout_seconds: float = Field(10.0, gt=0, le=300, validation_alias=_env("timeout_seconds"))
    # How often the sender looks for deliveries another process (a worker, the CLI) committed.
    poll_seconds: float = Field(1.0, gt=0, validation_alias=_env("poll_seconds"))
    # Deliveries in flight at once (per server process).
    concurrency: int = Field(8, ge=1, le=64, validation_alias=_env("concurrency"))
    # The key endpoint secrets are sealed with (base64 of 32 bytes), else a key file in the data directory:
    # servers on several machines (server mode) set the same one everywhere (decision record 0161).
    key: str | None = Field(None, validation_alias=_env("key"), repr=False)

    @field_validator("key")
    @classmethod
    def _a_256_bit_key(cls, value: str | None) -> str | None:
        if value is not None and not valid_key(value):
            raise ValueError("MG_WEBHOOK_KEY must be the base64 of 32 bytes (e.g. `openssl rand -base64 32`)")
        return value


def load_webhook_settings(**overrides: Any) -> WebhookSettings:
    return WebhookSettings(**{k: v for k, v in overrides.items() if v is not None})


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256 with the endpoint secret over ``<timestamp>.<raw body>``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signed_headers(secret: str, delivery_id: str, event_type: str, body: bytes, now: float) -> dict[str, str]:
    timestamp = str(int(now))
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: event_type,
        DELIVERY_HEADER: delivery_id,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }


def post(
    client: httpx.Client, url: str, secret: str, delivery_id: str, event_type: str, body: str
) -> tuple[int | None, str | None, str | None, float | None]:
    """One attempt: (HTTP status, error, the start of the answer, Retry-After seconds). Only the start
    of the answer is read: a receiver cannot make the sender hold a large answer in memory."""
    raw = body.encode()
    headers = signed_headers(secret, delivery_id, event_type, raw, time.time())
    try:
        with client.stream("POST", url, content=raw, headers=headers) as response:
            head = b""
            for chunk in response.iter_bytes():
                head += chunk
                if len(head) >= RESPONSE_KEPT * 4:
                    break
            status, retry = response.status_code, response.headers.get("retry-after", "")
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:RESPONSE_KEPT], None, None
    retry_after: float | None = None
    try:
        retry_after = float(retry)
    except ValueError:
        pass
    if retry_after is not None and not (math.isfinite(retry_after) and retry_after >= 0):
        retry_after = None
    text = head.decode("utf-8", "replace")[:RESPONSE_KEPT]
    error = None if 200 <= status < 300 else f"HTTP {status}"
    return status, error, text, retry_after
