"""What an analysis run reads and calls, behind small protocols: the workloads of a workspace with their
real usage, a sample of each one's retained calls, and a replayer that re-sends one call to a model.

``StoreWorkloads`` is the default source (the saved classification, else one workload per route, read
through the ``CallStore`` of either engine); another source or replayer plugs in through the same
protocols.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.metadata_store import MetadataStore
from triptych.metergraph.workload_match import WorkloadMatch
from triptych.metergraph.workloads import WorkloadService


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    workload_id: str
    name: str
    route: str | None
    calls: int
    cost_usd: float
    input_tokens: int
    output_tokens: int
    provider: str | None  # the most used provider and model: the reference
    model: str | None
    # Route declarations: candidate (provider or None, model) pairs and a JSON schema for outputs.
    candidates: tuple[tuple[str | None, str], ...] = ()
    json_schema: dict[str, Any] | None = None
    exact_match: bool = False
    match: WorkloadMatch | None = None  # a saved workload's calls; None: the route's


@dataclass(frozen=True, slots=True)
class RetainedCall:
    call_id: int
    trace_id: str | None
    ts_ms: int
    route: str | None
    provider: str | None
    model: str | None
    request_text: str
    response_text: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclass(frozen=True, slots=True)
class ReplayResult:
    text: str | None  # None: the replay failed (error_code says why)
    input_tokens: int
    output_tokens: int
    latency_ms: float
    error_code: str | None = None


class WorkloadSource(Protocol):
    def workloads(self, workspace: str, since_ms: int, until_ms: int) -> list[WorkloadSpec]: ...

    def sample(
        self, workspace: str, workload: WorkloadSpec, since_ms: int, until_ms: int, n: int
    ) -> list[RetainedCall]: ...


class Replayer(Protocol):
    def replay(
        self, workspace: str, call: RetainedCall, provider: str | None, model: str
    ) -> ReplayResult: ...


def _route_declarations(
    config: dict[str, Any],
) -> tuple[tuple[tuple[str | None, str], ...], dict[str, Any] | None, bool]:
    """Candidates and checks a route's config declares. The evaluation contract (``evaluation_contract``)
    may list ``candidates`` (model names or ``{"provider", "model"}``) and ``checks``
    (``{"kind": "json_schema", "schema": {...}}``, ``{"kind": "exact_match"}``); ``json_schema`` and
    ``exact_match`` may also be given directly, and ``candidates`` at the top of the config."""
    contract = config.get("evaluation_contract") or config.get("evaluation") or {}
    if not isinstance(contract, dict):
        contract = {}
    names: list[tuple[str | None, str]] = []
    for c in [*(contract.get("candidates") or []), *(config.get("candidates") or [])]:
        if isinstance(c, str) and c:
            names.append((None, c))
        elif isinstance(c, dict) and isinstance(c.get("model"), str) and c["model"]:
            provider = c.get("provider")
            names.append((provider if isinstance(provider, str) and provider else None, c["model"]))
    schema = contract.get("json_schema") or contract.get("output_schema")
    exact = contract.get("exact_match") is True
    for check in contract.get("checks") or []:
        if not isinstance(check, dict):
            continue
        if check.get("kind") == "json_schema" and isinstance(check.get("schema"), dict):
            schema = check["schema"]
        elif check.get("kind") == "exact_match":
            exact = True
    return tuple(dict.fromkeys(names)), schema if isinstance(schema, dict) else None, exact


class StoreWorkloads:
    """The workspace's saved classification (``metergraph_start_classification``) when it has one, else
    one workload per route; usage and samples are read from the telemetry store with a ``CallFilter``, so
    a workload selects exactly the calls ``metergraph_query_traces`` shows for it."""

    def __init__(
        self, store: CallStore, metadata: MetadataStore, classified: WorkloadService | None = None
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.classified = classified

    def _filter(self, workspace: str, spec: WorkloadSpec, since_ms: int, until_ms: int) -> CallFilter:
        if spec.match is not None:
            return CallFilter(workspace, since_ms, until_ms, workload=spec.match)
        return CallFilter(workspace, since_ms, until_ms, routes=[spec.route] if spec.route else None)

    def workloads(self, workspace: str, since_ms: int, until_ms: int) -> list[WorkloadSpec]:
        saved = self.classified.store.workloads(workspace) if self.classified is not None else []
        if saved and self.classified is not None:
            shells = [
                WorkloadSpec(w["workload_id"], w["name"], w["route"], 0, 0.0, 0, 0, None, None,
                             match=self.classified.match(workspace, w["workload_id"]))
                for w in saved
            ]  # fmt: skip
        else:
            routes = self.store.route_calls(CallFilter(workspace, since_ms, until_ms))
            shells = [
                WorkloadSpec(f"route:{name}"[:200], name, name, 0, 0.0, 0, 0, None, None)
                for name in sorted(routes)
                if int(routes[name].get("calls") or 0) > 0
            ]
        config = self.metadata.route_config(workspace)
        specs = []
        for shell in shells:
            by_model = self.store.aggregate_raw(
                self._filter(workspace, shell, since_ms, until_ms), ("provider", "model"), None
            )
            calls = sum(int(g.get("calls")) for g in by_model.values())
            if not calls:
                continue
            # The reference: the most used model (ties: provider, then model, a missing provider first).
            models = [g for g in by_model.values() if g.key[1] is not None]
            top = min(models, key=lambda g: (-g.get("calls"), g.key[0] is not None, g.key[0] or "", g.key[1]),
                      default=None)  # fmt: skip
            candidates, schema, exact = _route_declarations(config.get(shell.route or "", {}))
            specs.append(
                replace(
                    shell,
                    calls=calls,
                    cost_usd=sum(g.get("cost_usd") for g in by_model.values()),
                    input_tokens=sum(int(g.get("input_tokens")) for g in by_model.values()),
                    output_tokens=sum(int(g.get("output_tokens")) for g in by_model.values()),
                    provider=top.key[0] if top else None,
                    model=top.key[1] if top else None,
                    candidates=candidates,
                    json_schema=schema,
                    exact_match=exact,
                )
            )
        return specs

    def sample(
        self, workspace: str, workload: WorkloadSpec, since_ms: int, until_ms: int, n: int
    ) -> list[RetainedCall]:
        """The newest ``n`` successful calls of the workload's reference model with retained request and
        response text."""
        f = replace(
            self._filter(workspace, workload, since_ms, until_ms),
            providers=[workload.provider] if workload.provider else None,
            models=[workload.model] if workload.model else None,
        )
        rows = self.store.retained_calls(f, n)
        return [_retained(r) for r in rows]


def _retained(r: Any) -> RetainedCall:
    return RetainedCall(
        call_id=int(r["id"]),
        trace_id=r["trace_id"],
        ts_ms=int(r["ts_ms"]),
        route=r["route"],
        provider=r["provider"],
        model=r["model"],
        request_text=r["request_text"],
        response_text=r["response_text"],
        input_tokens=int(r["input_tokens"] or 0),
        output_tokens=int(r["output_tokens"] or 0),
        cost_usd=None if r["cost_usd"] is None else float(r["cost_usd"]),
    )
