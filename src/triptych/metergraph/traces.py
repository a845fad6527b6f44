"""Trace reads: content-free trace metadata pages and spread samples, and the Debug-role trace view."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.contract import SCOPE_READ, TRACE_DEBUG_VERSION, envelope, warning
from triptych.metergraph.errors import ForbiddenError, InvalidArgument, NotFoundError
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.metadata_store import MetadataStore
from triptych.metergraph.scope import clip_to_retention, environment_scope, metadata_pairs, resolve_window
from triptych.metergraph.workload_match import WorkloadMatch

MAX_SAMPLE_SLICES = 10
# The overrides metergraph_replay_trace accepts (its argument model in tools.py says the same).
REPLAY_OVERRIDES = ("model", "prompt", "system", "temperature", "top_p", "max_output_tokens")
MAX_SPANS = 200


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _distinct(raw: str | None) -> list[str]:
    values = json.loads(raw) if raw else []
    return sorted({v for v in values if isinstance(v, str)})


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def encode_cursor(last_ms: int, call_id: int, fingerprint: str) -> str:
    raw = json.dumps([last_ms, call_id, fingerprint], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, fingerprint: str) -> tuple[int, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        last_ms, key, seen = json.loads(raw)
        if not isinstance(last_ms, int) or not isinstance(key, int):
            raise ValueError
    except (ValueError, TypeError):
        raise InvalidArgument("cursor is not a cursor this server issued") from None
    if seen != fingerprint:
        raise InvalidArgument("cursor belongs to a different query: repeat the same filters or drop it")
    return last_ms, key


class TraceService:
    def __init__(
        self,
        store: CallStore,
        metadata: MetadataStore,
        clock: Callable[[], datetime],
        workload_match: Callable[[str, str], WorkloadMatch | None] = lambda workspace, workload: None,
        classifications: Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]] = lambda ws, spans: [],
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.clock = clock
        # A saved analysis workload of a workspace by id (``WorkloadService.match``).
        self.workload_match = workload_match
        # The saved workloads a trace's calls belong to (``WorkloadService.classifications``).
        self.classifications = classifications

    def query(
        self,
        principal: AgentPrincipal,
        *,
        route: str | None = None,
        status: str | None = None,
        workload: str | None = None,
        trace_id: str | None = None,
        request_id: str | None = None,
        environment: Sequence[str] | None = None,
        metadata: dict[str, str] | None = None,
        cursor: str | None = None,
        days: int = 7,
        limit: int = 50,
        sample: str | None = None,
    ) -> dict[str, Any]:
        now = self.clock()
        requested = resolve_window(days, None, None, now)
        window = clip_to_retention(requested, self.store.retention_days, now)
        pairs = metadata_pairs(metadata)
        envs = environment_scope(principal, environment)
        # A workload is a saved analysis workload when one has that id, otherwise a route. Route and
        # a route-workload both given must both match: different values select nothing.
        match = self.workload_match(principal.workspace, workload) if workload is not None else None
        wanted = {r for r in (route, None if match is not None else workload) if r is not None}
        routes = sorted(wanted) if len(wanted) == 1 else ([] if wanted else None)
        f = CallFilter(
            principal.workspace,
            window.since_ms,
            window.until_ms,
            routes=routes,
            environments=envs,
            metadata=pairs,
            status=status,
            trace_id=trace_id,
            request_id=request_id,
            workload=match,
        )
        span_filtered = bool(route or workload or status or request_id or pairs)
        cost_basis = "matching_calls" if span_filtered else "trace_total"
        warnings: list[dict[str, str]] = []
        reasons: list[str] = []
        sample_info: dict[str, Any] | None = None
        if sample is not None:
            # The contract: "A sample takes no cursor, trace_id or request_id".
            for name, value in (("cursor", cursor), ("trace_id", trace_id), ("request_id", request_id)):
                if value is not None:
                    raise InvalidArgument(f"a spread sample takes no {name}")
            slices = min(limit, MAX_SAMPLE_SLICES)
            span = (window.until_ms - window.since_ms) / slices
            bounds = [
                (window.since_ms + round(i * span), window.since_ms + round((i + 1) * span))
                for i in range(slices)
            ]
            keys = self.store.sample_calls(f, bounds)
            if envs is not None:
                keys = [k for k in keys if self._all_spans_in(principal.workspace, k, envs)]
            unique = list(dict.fromkeys(keys))
            summaries = self.store.trace_summaries(f, unique)
            truncated, next_cursor = False, None
            reasons.append("sampled")
            sample_info = {"mode": "spread", "slices": slices, "slices_with_calls": len(keys)}
            shape, page_limit = "sample", slices
        else:
            fingerprint = _fingerprint(
                principal.workspace, route, status, workload, trace_id, request_id, envs, pairs, days
            )
            position = decode_cursor(cursor, fingerprint) if cursor is not None else None
            summaries = self.store.trace_page(f, envs, position, limit + 1)
            truncated = len(summaries) > limit
            summaries = summaries[:limit]
            next_cursor = (
                encode_cursor(summaries[-1]["position"][0], summaries[-1]["position"][1], fingerprint)
                if truncated
                else None
            )
            if truncated:
                reasons.append("next_cursor")
                warnings.append(
                    warning("truncated", "more traces matched: pass next_cursor for the next page")
                )
            shape, page_limit = "page", limit
        traces = [self._trace_out(s, cost_basis) for s in summaries]
        if window.clipped:
            reasons.append("retention_clipped")
        body = envelope(
            principal.workspace,
            now,
            warnings=warnings,
            window=window.as_dict(),
            content_included=False,
            truncated=truncated,
            next_cursor=next_cursor,
            traces=traces,
            attribution={"cost_basis": cost_basis},
            coverage={
                "rows": {
                    "shape": shape,
                    "returned": len(traces),
                    "limit": page_limit,
                    "truncated": truncated,
                },
                "completeness": "partial"
                if (truncated or sample is not None or window.clipped)
                else "complete",
                "reasons": reasons,
                "requested_window": requested.as_dict(),
                "effective_window": window.as_dict(),
                "filters": {
                    "route": route,
                    "status": status,
                    "workload": workload,
                    "trace_id": trace_id,
                    "request_id": request_id,
                    "environment": envs if envs is not None else [],
                    "metadata": [{"key": k, "value": v} for k, v in pairs],
                },
            },
            page={"limit": page_limit, "truncated": truncated, "next_cursor": next_cursor},
            evidence={
                "sources": ["calls"],
                "rows": sum(t["span_count"] for t in traces),
                "complete": not truncated,
            },
        )
        if sample_info is not None:
            body["sample"] = sample_info
        return body

    def _all_spans_in(self, workspace: str, key: str, envs: Sequence[str]) -> bool:
        spans = self.store.trace_spans(workspace, key, MAX_SPANS * 50)
        return all(s["environment"] in envs for s in spans)

    @staticmethod
    def _trace_out(s: dict[str, Any], cost_basis: str) -> dict[str, Any]:
        providers = _distinct(s["providers"])
        envs = json.loads(s["envs"]) if s["envs"] else []
        environment = envs[0] if len(envs) == 1 and isinstance(envs[0], str) else None
        key = s["trace_key"]
        cost = s["cost_usd"]
        return {
            "id": key,
            "trace_id": key,
            "trace_name": s["trace_name"] or "",
            "started_at": _iso(s["first_ms"]),
            "last_span_at": _iso(s["last_ms"]),
            "span_count": s["span_count"],
            "input_tokens": s["input_tokens"],
            "output_tokens": s["output_tokens"],
            "cache_read_tokens": s["cache_read_tokens"],
            "cache_write_tokens": s["cache_write_tokens"],
            "reasoning_tokens": s["reasoning_tokens"],
            "cost_usd": round(cost, 10) if cost is not None else None,
            "cost_complete": cost is not None and not s["unpriced_calls"],
            "status": "error" if s["error"] else "success",
            "routes": _distinct(s["routes"]),
            "providers": providers,
            "models": _distinct(s["models"]),
            "mixed_providers": len(providers) > 1,
            "environment": environment,
            "latency_ms": s["latency_ms"],
            "cost_basis": cost_basis,
        }

    # -- metergraph_get_trace (Debug role) ------------------------------------------------------

    def get_trace(self, principal: AgentPrincipal, trace_id: str) -> dict[str, Any]:
        if not principal.has(SCOPE_READ):
            raise ForbiddenError("metergraph_get_trace needs the Debug role (agent:read)")
        spans = self.store.trace_spans(principal.workspace, trace_id, MAX_SPANS + 1)
        if principal.environments is not None and any(
            s["environment"] not in principal.environments for s in spans
        ):
            spans = []  # outside the key's environments: indistinguishable from an unknown trace
        if not spans:
            raise NotFoundError("no trace with that id in this workspace")
        limited = len(spans) > MAX_SPANS
        spans = spans[:MAX_SPANS]
        errors = sorted({s["error_type"] for s in spans if s["error"] and s["error_type"]})
        # What metergraph_replay_trace would accept: retention on and the call's request text kept.
        retained = bool((self.metadata.workspace(principal.workspace) or {}).get("retain_content"))
        out_spans = [self._span_out(s, retained and s["request_text"] is not None) for s in spans]
        eligible = any(s["replay_eligible"] for s in out_spans)
        body: dict[str, Any] = {
            "schema_version": TRACE_DEBUG_VERSION,
            "trace_id": trace_id,
            "trace_name": next((s["trace_name"] for s in spans if s["trace_name"]), ""),
            "started_at": _iso(spans[0]["ts_ms"]),
            "last_span_at": _iso(max(s["ts_ms"] for s in spans)),
            "span_count": len(spans),
            "status": "error" if any(s["error"] for s in spans) else "success",
            "error_context": {"kinds": errors},
            "root_cause": {"classifications": self.classifications(principal.workspace, spans)},
            "replay": {
                "eligible": eligible,
                "allowlisted_overrides": list(REPLAY_OVERRIDES) if eligible else [],
                "writes_production": False,
            },
            "content_included": any(s["request_text"] or s["response_text"] for s in spans),
            "spans": out_spans,
        }
        if limited:
            body["spans_limited"] = True
        return body

    @staticmethod
    def _span_out(s: dict[str, Any], replay_eligible: bool) -> dict[str, Any]:
        def part(text: str | None) -> dict[str, Any]:
            if text is not None:
                return {"state": "captured", "text": text}
            return {"state": "not_retained", "text": None}

        tool_calls = json.loads(s["content_tool_calls"]) if s["content_tool_calls"] else []
        return {
            "span_id": s["span_id"] or f"call:{s['id']}",
            "parent_span_id": s["parent_span_id"],
            "timestamp": _iso(s["ts_ms"]),
            "route": s["route"],
            "func": s["func"],
            "module": s["module"],
            "provider": s["provider"],
            "model": s["model"],
            "environment": s["environment"],
            "input_tokens": s["input_tokens"],
            "output_tokens": s["output_tokens"],
            "cache_read_tokens": s["cache_read_tokens"],
            "cache_write_tokens": s["cache_write_tokens"],
            "reasoning_tokens": s["reasoning_tokens"],
            "cost_usd": s["cost_usd"],
            "cost_status": s["cost_status"],
            "pricing": pricing_provenance(s),
            "latency_ms": s["latency_ms"],
            "ttft_ms": s["ttft_ms"],
            "status": s["status"],
            "error": bool(s["error"]),
            "error_type": s["error_type"],
            "stream": None if s["stream"] is None else bool(s["stream"]),
            "endpoint": s["endpoint"],
            "request_id": s["request_id"],
            "content": {"request": part(s["request_text"]), "response": part(s["response_text"])},
            "tool_definitions": [],
            "tool_calls": tool_calls if isinstance(tool_calls, list) else [],
            "replay_eligible": replay_eligible,
        }


def pricing_provenance(call: Mapping[str, Any]) -> dict[str, Any]:
    """Which catalogue and entry priced a call, and whether its cost is that price or a gateway's charge
    (pricing.py); null fields for a call stored before they were recorded.

    The store keeps the catalogue's model id inside the price id (metergraph-core's ids are
    ``model:channel:region:date``, genai-prices' ``provider/model``) and ``cost_provenance`` only for a
    gateway's charge: a call with a catalogue entry cost its catalogue price (or nothing), a call without
    one and without a cost has none, and a call without one but with a cost was stored before provenance.
    """
    catalog, price_id, cost = call.get("price_catalog"), call.get("price_id"), call.get("cost_usd")
    model = None
    if price_id:
        model = (
            price_id.split("/", 1)[-1]
            if catalog and catalog.startswith("genai-prices")
            else price_id.split(":")[0]
        )
    provenance = call.get("cost_provenance")
    if provenance is None:
        provenance = "none" if cost is None else ("catalog" if catalog else None)
    return {
        "catalog": catalog,
        "price_id": price_id,
        "model": model,
        "cost_provenance": provenance,
        "catalog_cost_usd": call.get("computed_cost_usd"),
        "reported_cost_usd": call.get("reported_cost_usd"),
        "gateway": call.get("gateway"),
        "cache_write_5m_tokens": call.get("cache_write_5m_tokens"),
        "cache_write_1h_tokens": call.get("cache_write_1h_tokens"),
    }
