"""The workspace's incident webhooks page: its endpoints and their recent deliveries and failures.

Any key of the workspace may open it (it shows no telemetry content). Endpoint URLs are shown as scheme
and host only: a chat incoming-webhook URL's path is itself a secret (whoever has it can post).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.service import Metergraph

DELIVERIES_SHOWN = 100


def masked_url(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{shown}{port}/…"


def webhooks_page(mg: Metergraph, principal: AgentPrincipal, request: Request) -> tuple[str, dict[str, Any]]:
    endpoints = mg.webhooks.endpoints(principal.workspace)
    shown = {e["id"]: masked_url(e["url"]) for e in endpoints}
    deliveries = mg.webhooks.deliveries(principal.workspace, limit=DELIVERIES_SHOWN)
    for d in deliveries:
        d["endpoint"] = shown.get(d["endpoint_id"], "(removed)")
    counts = {s: sum(d["status"] == s for d in deliveries) for s in ("pending", "delivered", "failed")}
    return "webhooks.html", {
        "endpoints": [{**e, "url": shown[e["id"]]} for e in endpoints],
        "deliveries": deliveries,
        "counts": counts,
        "limit": DELIVERIES_SHOWN,
    }
