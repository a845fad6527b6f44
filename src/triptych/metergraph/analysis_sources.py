"""What an analysis run reads and calls, behind small protocols: the workloads of a workspace with their
real usage, a sample of each one's retained calls, and a replayer that re-sends one call to a model.

``RouteWorkloads`` is the embedded default source (one workload per route, read from the SQLite
telemetry file); classification's saved workloads and the provider replayer plug in through the same
protocols.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from triptych.metergraph.store import SqliteTelemetryStore


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
    """Candidates and the evaluation contract a route's config declares (``evaluation_contract`` or
    ``evaluation``: ``{"json_schema": {...}, "exact_match": bool}``; ``candidates``: model names or
    ``{"provider", "model"}`` objects)."""
    names: list[tuple[str | None, str]] = []
    for c in config.get("candidates") or []:
        if isinstance(c, str) and c:
            names.append((None, c))
        elif isinstance(c, dict) and isinstance(c.get("model"), str) and c["model"]:
            provider = c.get("provider")
            names.append((provider if isinstance(provider, str) and provider else None, c["model"]))
    contract = config.get("evaluation_contract") or config.get("evaluation") or {}
    if not isinstance(contract, dict):
        contract = {}
    schema = contract.get("json_schema") or contract.get("output_schema")
    return tuple(names), schema if isinstance(schema, dict) else None, contract.get("exact_match") is True


class RouteWorkloads:
    """One workload per route with calls in the window (the embedded default until classification
    saves its workloads)."""

    def __init__(self, store: SqliteTelemetryStore) -> None:
        self.store = store

    def workloads(self, workspace: str, since_ms: int, until_ms: int) -> list[WorkloadSpec]:
        conn = self.store.db.conn
        rows = conn.execute(
            "SELECT route, COUNT(*) AS calls, COALESCE(SUM(cost_usd), 0) AS cost,"
            " COALESCE(SUM(input_tokens), 0) AS input_tokens, COALESCE(SUM(output_tokens), 0) AS output_tokens"
            " FROM calls WHERE workspace = ? AND ts_ms >= ? AND ts_ms < ? AND route IS NOT NULL"
            " GROUP BY route ORDER BY route",
            (workspace, since_ms, until_ms),
        ).fetchall()
        config = self.store.route_config(workspace)
        specs = []
        for r in rows:
            top = conn.execute(
                "SELECT provider, model FROM calls WHERE workspace = ? AND route = ? AND ts_ms >= ? AND ts_ms < ?"
                " AND model IS NOT NULL GROUP BY provider, model ORDER BY COUNT(*) DESC LIMIT 1",
                (workspace, r["route"], since_ms, until_ms),
            ).fetchone()
            candidates, schema, exact = _route_declarations(config.get(r["route"], {}))
            specs.append(
                WorkloadSpec(
                    workload_id=f"route:{r['route']}"[:200],
                    name=r["route"],
                    route=r["route"],
                    calls=int(r["calls"]),
                    cost_usd=float(r["cost"]),
                    input_tokens=int(r["input_tokens"]),
                    output_tokens=int(r["output_tokens"]),
                    provider=top["provider"] if top else None,
                    model=top["model"] if top else None,
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
        rows = self.store.db.conn.execute(
            "SELECT c.id, c.trace_id, c.ts_ms, c.route, c.provider, c.model, c.input_tokens, c.output_tokens,"
            " c.cost_usd, cc.request_text, cc.response_text FROM calls c"
            " JOIN call_content cc ON cc.call_id = c.id AND cc.workspace = c.workspace"
            " WHERE c.workspace = ? AND c.route IS ? AND c.ts_ms >= ? AND c.ts_ms < ? AND c.has_content = 1"
            " AND c.error = 0 AND c.model IS ? AND cc.request_text IS NOT NULL AND cc.response_text IS NOT NULL"
            " ORDER BY c.ts_ms DESC, c.id DESC LIMIT ?",
            (workspace, workload.route, since_ms, until_ms, workload.model, n),
        ).fetchall()
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
