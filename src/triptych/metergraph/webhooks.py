"""Incident webhooks: endpoints per workspace that receive ``incident.opened`` / ``incident.updated`` /
``incident.resolved`` events, signed with a per-endpoint secret (docs/metergraph.md, "Incident webhooks").

The detectors never send anything: ``IncidentStore.save`` hands each transition to ``outbox`` inside its
transaction, which writes one pending delivery per endpoint of the workspace; the sender thread
(``webhook_delivery.py``) posts them, retrying with backoff, so a slow or dead receiver never holds up a
sweep and an event committed before a crash is sent after the restart.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metergraph.control_sql import Connection
from triptych.metergraph.errors import InvalidArgument, NotFoundError
from triptych.metergraph.incident_store import Incident
from triptych.metergraph.incidents import render_incident
from triptych.metergraph.webhook_http import (  # re-exported: the CLI and the tests name them here
    DELIVERY_HEADER,
    EVENT_HEADER,
    RESPONSE_KEPT,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    USER_AGENT,
    WebhookSettings,
    load_webhook_settings,
    post,
    signature,
    signed_headers,
)
from triptych.metergraph.webhook_secrets import SecretBox, new_secret
from triptych.metergraph.webhook_store import webhook_store

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "RESPONSE_KEPT",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "USER_AGENT",
    "WebhookService",
    "WebhookSettings",
    "load_webhook_settings",
    "post",
    "signature",
    "signed_headers",
]

EVENT_TYPES = ("incident.opened", "incident.updated", "incident.resolved")
TEST_EVENT = "webhook.test"
MAX_URL = 2048
DELIVERY_STATUSES = ("pending", "delivered", "failed", "cancelled")


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


# -- the service -----------------------------------------------------------------------------------


class WebhookService:
    """Endpoints, the outbox hook and delivery history over the incidents' database (``db``)."""

    def __init__(
        self,
        db: Database | NativeDatabase,
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
            self.sender = WebhookSender(self.store, self.secret, self.settings, self.wake)
            self.sender.start()

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
            self.sender = None
