"""Classification: a workspace's calls grouped into workloads from content-free features.

A workload is the calls of one route that carry the same set of metadata keys and have a similar
token shape (input and output token classes, ``workload_match``). Within a (route, keys) family,
every shape with at least ``MIN_CALLS`` calls and ``MIN_SHARE`` of the family is its own workload;
smaller shapes join the family's largest one. Ids are a hash of the workspace, route, keys and primary
shape: the same calls classify into the same ids, run after run. No prompt, response or metadata value
is read.

``metergraph_start_classification`` classifies the window and saves the workloads (replacing the
previous ones in one transaction); ``metergraph_query_traces`` matches a saved workload by id.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.contract import SCOPE_READ, envelope, warning
from triptych.metergraph.errors import ForbiddenError
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.scope import clip_to_retention, resolve_window
from triptych.metergraph.workload_match import WorkloadMatch, matches, shape_label, signature_keys
from triptych.metergraph.workload_store import WorkloadStore

MIN_CALLS = 20
MIN_SHARE = 0.05
MAX_LISTED = 200
MAX_MODELS = 20


def _iso_ms(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


@dataclass
class _Shape:
    code: int
    calls: int = 0
    retained: int = 0
    cost: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    models: dict[tuple[str | None, str | None], list[float]] = field(default_factory=dict)

    def add(self, g: dict[str, Any]) -> None:
        self.calls += int(g["calls"])
        self.retained += int(g["retained"] or 0)
        if g["cost_usd"] is not None:
            self.cost = (self.cost or 0.0) + float(g["cost_usd"])
        self.input_tokens += int(g["input_tokens"] or 0)
        self.output_tokens += int(g["output_tokens"] or 0)
        self.first_ms = g["first_ms"] if self.first_ms is None else min(self.first_ms, g["first_ms"])
        self.last_ms = g["last_ms"] if self.last_ms is None else max(self.last_ms, g["last_ms"])
        entry = self.models.setdefault((g["provider"], g["model"]), [0, 0.0])
        entry[0] += int(g["calls"])
        entry[1] += float(g["cost_usd"] or 0.0)

    def merge(self, other: _Shape) -> None:
        self.calls += other.calls
        self.retained += other.retained
        if other.cost is not None:
            self.cost = (self.cost or 0.0) + other.cost
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        for ms, pick in ((other.first_ms, min), (other.last_ms, max)):
            if ms is not None:
                if pick is min:
                    self.first_ms = ms if self.first_ms is None else min(self.first_ms, ms)
                else:
                    self.last_ms = ms if self.last_ms is None else max(self.last_ms, ms)
        for key, (calls, cost) in other.models.items():
            entry = self.models.setdefault(key, [0, 0.0])
            entry[0] += calls
            entry[1] += cost


def workload_id(workspace: str, route: str | None, keys: str, primary_shape: int) -> str:
    raw = "\x1e".join([workspace, route if route is not None else "\x00", keys, str(primary_shape)])
    return "wl_" + hashlib.sha256(raw.encode()).hexdigest()[:20]


def group_workloads(workspace: str, groups: list[dict[str, Any]], now_iso: str) -> list[dict[str, Any]]:
    """The workloads of ``CallStore.workload_features`` rows (pure: the same rows give the same workloads)."""
    families: dict[tuple[str | None, str], dict[int, _Shape]] = {}
    for g in groups:
        shapes = families.setdefault((g["route"], g["keys"]), {})
        shape = shapes.setdefault(int(g["shape"]), _Shape(int(g["shape"])))
        shape.add(g)
    out: list[dict[str, Any]] = []
    for (route, keys), shapes in families.items():
        total = sum(s.calls for s in shapes.values())
        floor = max(MIN_CALLS, math.ceil(MIN_SHARE * total))
        ordered = sorted(shapes.values(), key=lambda s: (-s.calls, s.code))
        primary = ordered[0]
        kept = [s for s in ordered if s is primary or s.calls >= floor]
        members: dict[int, list[_Shape]] = {s.code: [s] for s in kept}
        for s in ordered:
            if s.code not in members:
                members[primary.code].append(s)
        for lead in kept:
            merged = _Shape(lead.code)
            for s in members[lead.code]:
                merged.merge(s)
            out.append(_workload_row(workspace, route, keys, lead.code, members[lead.code], merged, now_iso))
    out.sort(key=lambda w: (-w["calls"], w["workload_id"]))
    return out


def _workload_row(
    workspace: str,
    route: str | None,
    keys: str,
    lead: int,
    shapes: list[_Shape],
    merged: _Shape,
    now_iso: str,
) -> dict[str, Any]:
    tag_keys = signature_keys(keys)
    name = route if route is not None else "(unrouted)"
    if tag_keys:
        name += " [" + ", ".join(tag_keys) + "]"
    name += " · " + shape_label(lead)
    models = sorted(merged.models.items(), key=lambda kv: (-kv[1][0], str(kv[0])))
    return {
        "workload_id": workload_id(workspace, route, keys, lead),
        "name": name,
        "route": route,
        "tag_keys": tag_keys,
        "shapes": sorted(s.code for s in shapes),
        "calls": merged.calls,
        "replay_eligible_calls": merged.retained,
        "cost_usd": None if merged.cost is None else round(merged.cost, 10),
        "classified_at": now_iso,
        "stats": {
            "primary_shape": shape_label(lead),
            "token_shapes": [shape_label(s.code) for s in sorted(shapes, key=lambda s: s.code)],
            "input_tokens_mean": round(merged.input_tokens / merged.calls, 1) if merged.calls else None,
            "output_tokens_mean": round(merged.output_tokens / merged.calls, 1) if merged.calls else None,
            "first_seen_at": _iso_ms(merged.first_ms),
            "last_seen_at": _iso_ms(merged.last_ms),
            "models": [
                {"provider": p, "model": m, "calls": int(c), "cost_usd": round(cost, 10)}
                for (p, m), (c, cost) in models[:MAX_MODELS]
            ],
        },
    }


def workload_out(w: dict[str, Any]) -> dict[str, Any]:
    """A saved workload as tools show it (content-free)."""
    return {
        "workload_id": w["workload_id"],
        "workload_name": w["name"],
        "route": w["route"],
        "metadata_keys": w["tag_keys"],
        "token_shapes": w["stats"]["token_shapes"],
        "calls": w["calls"],
        "replay_eligible_calls": w["replay_eligible_calls"],
        "cost_usd": w["cost_usd"],
        "input_tokens_mean": w["stats"]["input_tokens_mean"],
        "output_tokens_mean": w["stats"]["output_tokens_mean"],
        "models": w["stats"]["models"],
        "first_seen_at": w["stats"]["first_seen_at"],
        "last_seen_at": w["stats"]["last_seen_at"],
        "classified_at": w["classified_at"],
    }


class WorkloadService:
    def __init__(
        self,
        store: WorkloadStore,
        telemetry: CallStore,
        clock: Callable[[], datetime],
        app_url: Callable[[str], str | None] = lambda workspace: None,
    ) -> None:
        self.store = store
        self.telemetry = telemetry
        self.clock = clock
        # The Analysis page's address for a workspace (None without a public address).
        self.app_url = app_url

    def match(self, workspace: str, workload_id: str) -> WorkloadMatch | None:
        """The predicate of a saved workload of ``workspace``, or None when there is none by that id."""
        w = self.store.workload(workspace, workload_id)
        if w is None:
            return None
        return WorkloadMatch(w["route"], tuple(w["tag_keys"]), tuple(w["shapes"]))

    def classifications(self, workspace: str, spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """For ``metergraph_get_trace``'s ``root_cause.classifications``: the saved workloads these call
        rows belong to, each with the run that saved it and the spans it covers."""
        saved = self.store.workloads(
            workspace, sorted({s["route"] for s in spans}, key=lambda r: (r is None, r))
        )
        out = []
        for w in saved:
            match = WorkloadMatch(w["route"], tuple(w["tag_keys"]), tuple(w["shapes"]))
            covered = [s["span_id"] or f"call:{s['id']}" for s in spans if matches(match, s)]
            if not covered:
                continue
            run = self.store.run(workspace, w["run_id"]) or {}
            out.append({
                "analysis_run_id": w["run_id"],
                "classification": {"status": "classified", "workload_id": w["workload_id"], "confidence": 1.0,
                                   "method": "content_free_features"},
                "analysis_run": {"status": run.get("status"), "analysis_id": w["run_id"], "report_id": None,
                                 "error_code": run.get("error_code"),
                                 "progress": {"calls": run.get("calls"), "workloads": run.get("workloads")},
                                 "created_at": run.get("created_at"), "finished_at": run.get("finished_at")},
                "workload_name": w["name"],
                "span_ids": covered,
            })  # fmt: skip
        return out

    def start_classification(self, principal: AgentPrincipal, days: int = 30) -> dict[str, Any]:
        if not principal.has(SCOPE_READ):
            raise ForbiddenError("metergraph_start_classification needs the Debug role (agent:read)")
        if principal.environments is not None:
            raise ForbiddenError(
                "classification covers the whole workspace: use a key without an environment allowlist"
            )
        now = self.clock()
        window = clip_to_retention(resolve_window(days, None, None, now), self.telemetry.retention_days, now)
        run: dict[str, Any] = {
            "run_id": str(uuid.uuid4()), "workspace": principal.workspace, "status": "running",
            "created_at": now.isoformat(), "started_at": now.isoformat(), "finished_at": None,
            "error_code": None, "days": days, "calls": 0, "workloads": 0,
        }  # fmt: skip
        try:
            groups = self.telemetry.workload_features(
                CallFilter(principal.workspace, window.since_ms, window.until_ms)
            )
            workloads = group_workloads(principal.workspace, groups, now.isoformat())
            finished = self.clock().isoformat()
            run.update(status="succeeded", finished_at=finished, workloads=len(workloads),
                       calls=sum(w["calls"] for w in workloads))  # fmt: skip
            self.store.replace_workloads(principal.workspace, run["run_id"], workloads, run)
        except Exception:
            # The saved workloads are untouched (one transaction); the run says it failed.
            run.update(status="failed", finished_at=self.clock().isoformat(), error_code="internal")
            self.store.insert_run(run)
            raise
        listed = workloads[:MAX_LISTED]
        truncated = len(workloads) > len(listed)
        body = envelope(
            principal.workspace,
            now,
            window=window.as_dict(),
            content_included=False,
            run=self.run_document(run),
            workloads=[workload_out(w) for w in listed],
            truncated=truncated,
            page={"limit": MAX_LISTED, "truncated": truncated, "next_cursor": None},
            evidence={"sources": ["calls"], "rows": run["calls"], "complete": True},
        )
        if truncated:
            body["warnings"].append(
                warning("truncated", f"{len(workloads)} workloads saved; the first {MAX_LISTED} are listed")
            )
        return body

    def run_document(self, run: dict[str, Any]) -> dict[str, Any]:
        """A classification run in the contract's analysis-run shape (shared with analysis runs)."""
        return {
            "run_id": run["run_id"],
            "analysis_id": run["run_id"],
            "status": run["status"],
            "kind": "classification",
            "created_at": run["created_at"],
            "started_at": run["started_at"],
            "finished_at": run["finished_at"],
            "error_code": run["error_code"],
            "progress": {"calls": run["calls"], "workloads": run["workloads"], "days": run["days"]},
            "report": {
                "available": False,
                "analysis_id": None,
                "imported_at": None,
                "outcome_tool": None,
                "app_url": None,
            },
            "app_url": self.app_url(run["workspace"]),
        }
