"""Incident webhooks: endpoints per workspace that receive ``incident.opened`` / ``incident.updated`` /
``incident.resolved`` events, signed with a per-endpoint secret (docs/metergraph.md, "Incident webhooks").

The detectors never send anything: ``IncidentStore.save`` hands each transition to ``outbox`` inside its
transaction, which writes one pending delivery per endpoint of the workspace; the sender thread
(``webhook_delivery.py``) posts them, retrying with backoff, so a slow or dead receiver never holds up a
sweep and an event committed before a crash is sent after the restart.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from triptych.core.db import Database
from triptych.core.pg import PortableDatabase
from triptych.metergraph.control_sql import Connection
from triptych.metergraph.errors import InvalidArgument, NotFoundError
from triptych.metergraph.incident_store import Incident
from triptych.metergraph.incidents import render_incident
from triptych.metergraph.webhook_secrets import SecretBox, new_secret, valid_key
from triptych.metergraph.webhook_store import webhook_store

EVENT_TYPES = ("incident.opened", "incident.updated", "incident.resolved")
TEST_EVENT = "webhook.test"
SIGNATURE_HEADER = "X-Metergraph-Signature"
TIMESTAMP_HEADER = "X-Metergraph-Timestamp"
DELIVERY_HEADER = "X-Metergraph-Delivery"
EVENT_HEADER = "X-Metergraph-Event"
USER_AGENT = "triptych-metergraph-webhooks/1"
MAX_URL = 2048
RESPONSE_KEPT = 500  # characters of a receiver's answer kept with the delivery (and printed by `test`)
DELIVERY_STATUSES = ("pending", "delivered", "failed", "cancelled")


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


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


# -- URLs ------------------------------------------------------------------------------------------


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> str:
    """The URL, or ``invalid_argument`` saying why it cannot receive webhooks: HTTPS anywhere, plain HTTP
    only on this machine's loopback (a signed body over the network in clear text would be readable and
    its receiver unauthenticated)."""
    if not url or len(url) > MAX_URL:
        raise InvalidArgument(f"a webhook URL has 1 to {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError as exc:
        raise InvalidArgument(f"not a valid URL: {url!r} ({exc})") from None
    if parts.scheme not in ("https", "http") or not host:
        raise InvalidArgument(f"a webhook URL starts with https:// and names a host: {url!r}")
    if parts.scheme == "http" and not _loopback(host):
        raise InvalidArgument(
            f"plain-HTTP webhook URLs are accepted only on loopback (localhost, 127.0.0.1, ::1): {url!r}; "
            "use https:// for any other host",
        )
    return url


# -- signing and bodies ----------------------------------------------------------------------------


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


def _amount(kind: str, value: Any) -> str:
    if not isinstance(value, int | float):
        return "n/a"
    if kind == "cost_spike":
        return f"${value:,.4g}"
    if kind == "error_rate_spike":
        return f"{value:.1%}"
    if kind == "latency_p95_regression":
        return f"{value:,.0f} ms"
    return f"{value:,.4g}"


def _escaped(text: Any) -> str:
    # Slack's control characters: a route or model name sent to ingest must not become a mention
    # (<!channel>) or a link in the channel.
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(event_type: str, incident: dict[str, Any]) -> str:
    """A one-message summary in Slack's mrkdwn (an incoming webhook posts it as is)."""
    verb = event_type.split(".", 1)[1]
    diagnosis = incident["diagnosis"]
    kind = incident["kind"]
    line = f"*Metergraph incident {verb}* [{incident['severity']}] {_escaped(incident['title'])}"
    window = f"window {incident['window_start']} to {incident['window_end']}"
    value = f"value {_amount(kind, diagnosis.get('value'))} vs baseline {_amount(kind, diagnosis.get('baseline'))}"
    if kind == "ingestion_failure":
        numbers = diagnosis.get("numbers", {})
        value = f"{numbers.get('failed_batches')} of the last {numbers.get('recent_batches')} batches failed"
    return (
        f"{line}\n{value}; {window}; occurrences {incident['occurrences']}; status {incident['status']}\n"
        f"incident `{incident['id']}` ({kind}) in workspace `{_escaped(incident['workspace'])}`"
    )


def event_body(
    event_type: str,
    event_id: str,
    delivery_id: str,
    workspace: str,
    incident: dict[str, Any] | None,
    at_ms: int,
) -> str:
    if incident is None:
        text = (
            f"Metergraph test event for workspace `{_escaped(workspace)}`: this endpoint receives its incident"
            " events."
        )
    else:
        text = slack_text(event_type, {**incident, "workspace": workspace})
    document = {
        "type": event_type,
        "event_id": event_id,
        "delivery_id": delivery_id,
        "occurred_at": _iso_ms(at_ms),
        "workspace": workspace,
        "incident": incident,
        "text": text,
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


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


# -- the service -----------------------------------------------------------------------------------


class WebhookService:
    """Endpoints, the outbox hook and delivery history over the incidents' database (``db``)."""

    def __init__(
        self,
        db: Database | PortableDatabase,
        data_dir: Path,
        settings: WebhookSettings,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = webhook_store(db)
        self.box = SecretBox(data_dir, settings.key)
        self.settings = settings
        self.clock = clock
        # Set by the sender thread (webhook_delivery.py) so a commit in this process wakes it at once.
        self.wake = threading.Event()
        self.sender: Any = None

    def _clock_ms(self) -> int:
        return int(self.clock().timestamp() * 1000)

    # -- endpoints --------------------------------------------------------------------------------

    def add(self, workspace: str, url: str, description: str | None = None) -> tuple[dict[str, Any], str]:
        """A new endpoint and its signing secret (returned once; stored sealed)."""
        if not workspace or len(workspace) > 200:
            raise InvalidArgument("a workspace name has 1 to 200 characters")
        check_url(url)
        endpoint_id = "whe_" + uuid.uuid4().hex[:16]
        secret = new_secret()
        self.store.add_endpoint(
            endpoint_id, workspace, url, description, self.box.seal(endpoint_id, secret), _now_ms()
        )
        endpoint = self.store.endpoint(endpoint_id)
        assert endpoint is not None
        return endpoint[0], secret

    def endpoints(self, workspace: str | None = None) -> list[dict[str, Any]]:
        return self.store.endpoints(workspace)

    def remove(self, endpoint_id: str) -> int:
        """Delete the endpoint; its pending deliveries are cancelled (their count)."""
        cancelled = self.store.remove_endpoint(endpoint_id, _now_ms())
        if cancelled is None:
            raise NotFoundError(f"no webhook endpoint {endpoint_id}")
        return cancelled

    def secret(self, endpoint_id: str, sealed: str) -> str:
        return self.box.open(endpoint_id, sealed)

    def test(self, endpoint_id: str) -> dict[str, Any]:
        """Send a signed ``webhook.test`` event now (outside the outbox) and return the receiver's answer;
        the attempt is kept in the delivery history."""
        found = self.store.endpoint(endpoint_id)
        if found is None:
            raise NotFoundError(f"no webhook endpoint {endpoint_id}")
        endpoint, sealed = found
        now = _now_ms()
        delivery_id = "whd_" + uuid.uuid4().hex
        body = event_body(
            TEST_EVENT, "evt_" + uuid.uuid4().hex, delivery_id, endpoint["workspace"], None, now
        )
        with httpx.Client(timeout=self.settings.timeout_seconds, follow_redirects=False) as client:
            status, error, answer, _ = post(
                client, endpoint["url"], self.secret(endpoint_id, sealed), delivery_id, TEST_EVENT, body
            )
        self.store.record({
            "id": delivery_id, "endpoint_id": endpoint_id, "workspace": endpoint["workspace"],
            "event_type": TEST_EVENT, "incident_id": None, "body": body, "created_ms": now,
            "status": "delivered" if error is None else "failed", "last_status": status, "last_error": error,
            "last_response": answer,
        })  # fmt: skip
        return {"delivery_id": delivery_id, "url": endpoint["url"], "status": status, "error": error,
                "response": answer}  # fmt: skip

    def deliveries(
        self,
        workspace: str | None = None,
        endpoint_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        rows = self.store.deliveries(workspace, endpoint_id, status, limit)
        for row in rows:
            for name in ("created_ms", "next_attempt_ms", "last_attempt_ms", "finished_ms"):
                value = row.pop(name)
                row[name.removesuffix("_ms") + "_at"] = None if value is None else _iso_ms(value)
            if row["status"] != "pending":
                row["next_attempt_at"] = None
        return rows

    # -- the outbox -------------------------------------------------------------------------------

    def outbox(self, conn: Connection, event_type: str, incident: Incident) -> None:
        """``IncidentStore``'s hook, inside the transaction that changes ``incident``: one pending delivery
        per endpoint of its workspace (nothing when it has none)."""
        endpoints = self.store.workspace_endpoints(conn, incident.workspace)
        if not endpoints:
            return
        now = self._clock_ms()
        # Committed time, not the injected clock: the give-up deadline and backoff run on the wall clock.
        created = _now_ms()
        rendered = render_incident(incident)
        event_id = "evt_" + uuid.uuid4().hex
        rows = []
        for endpoint_id in endpoints:
            delivery_id = "whd_" + uuid.uuid4().hex
            rows.append({
                "id": delivery_id, "endpoint_id": endpoint_id, "workspace": incident.workspace,
                "event_type": event_type, "incident_id": incident.id, "created_ms": created,
                "body": event_body(event_type, event_id, delivery_id, incident.workspace, rendered, now),
            })  # fmt: skip
        self.store.enqueue(conn, rows)

    def committed(self) -> None:
        """``IncidentStore``'s hook after a commit that wrote deliveries: the sender claims them now."""
        self.wake.set()

    # -- the sender -------------------------------------------------------------------------------

    def start(self) -> None:
        """Deliver in a background thread (the server)."""
        from triptych.metergraph.webhook_delivery import WebhookSender

        if self.sender is None:
            self.sender = WebhookSender(self.store, self, self.settings, self.wake)
            self.sender.start()

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
            self.sender = None
