"""Workspace reads: identity and policy, capability discovery, routes, ingestion health."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.call_store import CallStore
from triptych.metergraph.contract import (
    CONTRACT_VERSION,
    DEPLOYMENT_PROFILE,
    MAX_DAYS,
    MAX_RESPONSE_BYTES,
    MAX_ROWS,
    PRIVACY_DESCRIPTIONS,
    PRIVACY_FIELDS,
    TOOL_CONTRACT,
    TOOLS_BY_NAME,
    TRACE_DEBUG_VERSION,
    envelope,
)
from triptych.metergraph.errors import ForbiddenError, InvalidArgument, UnsupportedCapability
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.metadata_store import MetadataStore
from triptych.metergraph.scope import (
    MAX_KEY_LEN,
    MAX_METADATA_KEYS,
    MAX_VALUE_LEN,
    environment_scope,
    resolve_window,
)


def _iso_ms(ms: int | None) -> str | None:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat() if ms is not None else None


def evaluation_contract(config: dict[str, Any] | None) -> tuple[Any, int | str | None, str | None]:
    """A route's evaluation contract, declared under ``evaluation_contract`` in its config (``triptych
    metergraph route set --config``): (the contract, its ``version`` when it has one, sha256 of its
    canonical JSON), or Nones."""
    contract = (config or {}).get("evaluation_contract")
    if contract is None:
        return None, None, None
    version = contract.get("version") if isinstance(contract, dict) else None
    if isinstance(version, bool) or not isinstance(version, int | str):
        version = None
    canonical = json.dumps(contract, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return contract, version, "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def route_settings(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A route's ``--config`` split into its constraints (the ``constraints`` member: route governance
    that ``metergraph_list_routes`` returns) and the rest (served to SDKs at ``/v1/config``)."""
    if not isinstance(config, dict):
        raise InvalidArgument("a route's config must be a JSON object")
    rest = dict(config)
    constraints = rest.pop("constraints", {})
    if not isinstance(constraints, dict):
        raise InvalidArgument("a route's constraints must be a JSON object")
    return constraints, rest


def tool_visible(principal: AgentPrincipal, tool_name: str) -> bool:
    """Metadata-role keys do not see content or replay tools in tools/list."""
    contract = TOOLS_BY_NAME[tool_name]
    return contract.privacy_class == "metadata" or principal.has(contract.key_scope)


def refuse_unavailable(principal: AgentPrincipal, tool_name: str) -> NoReturn:
    """A contract tool this deployment does not build: ``forbidden`` without its scope, otherwise
    ``unsupported_capability`` (capability discovery says the same)."""
    contract = TOOLS_BY_NAME[tool_name]
    if not principal.has(contract.key_scope):
        raise ForbiddenError(f"{tool_name} needs the {contract.required_role} role ({contract.key_scope})")
    raise UnsupportedCapability(f"{tool_name} ({contract.capability}) is not available in this deployment")


def routes_with_config(
    calls: dict[str, dict[str, Any]], configured: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every route with calls (``CallStore.route_calls``) and every configured route, by name: the call
    counts with the configured description, constraints and update time."""
    found = {name: dict(row) for name, row in calls.items()}
    for r in configured:
        entry = found.setdefault(r["route"], {"route": r["route"], "calls": 0, "replay_eligible_calls": 0})
        entry.update(description=r["description"], constraints=r["constraints"], updated_at=r["updated_at"])
    return [found[k] for k in sorted(found)]


class WorkspaceService:
    def __init__(
        self,
        store: CallStore,
        metadata: MetadataStore,
        clock: Callable[[], datetime],
        not_configured: Callable[[str], bool] = lambda tool_name: False,
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.clock = clock
        # Tools the deployment builds but this server is not set up for (replay without a provider).
        self.not_configured = not_configured

    def context(self, principal: AgentPrincipal) -> dict[str, Any]:
        row = self.metadata.workspace(principal.workspace) or {}
        return envelope(
            principal.workspace,
            self.clock(),
            content_included=False,
            workspace={
                "id": principal.workspace,
                "slug": principal.workspace,
                "name": principal.workspace,
                "created_at": row.get("created_at"),
            },
            # The days calls are kept (MG_RETENTION_DAYS; null: kept for good), whatever the key.
            retention={
                "metadata_days": self.store.retention_days,
                "content_retained": bool(row.get("retain_content")),
            },
            content={"captured": bool(row.get("retain_content")), "included": False},
            access={
                "scopes": list(principal.scopes),
                "role": principal.role,
                "environments": list(principal.environments) if principal.environments is not None else None,
            },
        )

    def capabilities(self, principal: AgentPrincipal) -> dict[str, Any]:
        agent: dict[str, Any] = {}
        works = {t.name: t.available and not self.not_configured(t.name) for t in TOOL_CONTRACT}
        for tool in TOOL_CONTRACT:
            allowed = principal.has(tool.key_scope)
            entry: dict[str, Any] = {
                "available": works[tool.name] and allowed,
                "content": tool.content,
                "mutates": tool.mutates,
                "privacy_class": tool.privacy_class,
                "required_scope": tool.required_scope,
                "required_role": tool.required_role,
                "schema": tool.schema,
                "external_calls": tool.external_calls,
                "capability": tool.capability,
            }
            if not tool.available:
                entry["unavailable_reason"] = "not_supported_by_deployment"
            elif not works[tool.name]:
                entry["unavailable_reason"] = "not_configured"
            elif not allowed:
                entry["unavailable_reason"] = "scope_missing"
            agent[tool.capability] = {**entry, "tool": tool.name}
        return envelope(
            principal.workspace,
            self.clock(),
            content_included=False,
            deployment_profile=DEPLOYMENT_PROFILE,
            deployment_capabilities=sorted({t.capability for t in TOOL_CONTRACT if works[t.name]}),
            agent=agent,
            privacy_classes={
                name: {"description": PRIVACY_DESCRIPTIONS[name], "fields": PRIVACY_FIELDS[name]}
                for name in PRIVACY_DESCRIPTIONS
            },
            contracts={"agent_access": CONTRACT_VERSION, "trace_debug": TRACE_DEBUG_VERSION},
            bounds={
                "max_days": MAX_DAYS,
                "max_rows": MAX_ROWS,
                "max_response_bytes": MAX_RESPONSE_BYTES,
                "max_request_bytes": 1024 * 1024,
                "content_included_by_default": False,
                "metadata_keys": MAX_METADATA_KEYS,
                "metadata_key_length": MAX_KEY_LEN,
                "metadata_value_length": MAX_VALUE_LEN,
                "metadata_group_dimensions": 1,
                "filter_values": 20,
                "sample_slices": 10,
            },
            access={"scopes": list(principal.scopes), "role": principal.role},
        )

    def routes(self, principal: AgentPrincipal) -> dict[str, Any]:
        now = self.clock()
        envs = environment_scope(principal, None)
        f = CallFilter(principal.workspace, 0, int(now.timestamp() * 1000) + 86_400_000, environments=envs)
        configs = self.metadata.route_config(principal.workspace)
        retained = bool((self.metadata.workspace(principal.workspace) or {}).get("retain_content"))
        # Per route, the calls replay can re-send (their request text is retained).
        eligible = self.store.replay_eligible_by_route(f) if retained else {}
        routes = []
        for r in routes_with_config(
            self.store.route_calls(f), self.metadata.configured_routes(principal.workspace)
        ):
            contract, version, digest = evaluation_contract(configs.get(r["route"]))
            routes.append(
                {
                    "route": r["route"],
                    "description": r.get("description"),
                    "constraints": r.get("constraints") or {},
                    "evaluation_contract": contract,
                    "evaluation_contract_version": version,
                    "evaluation_contract_hash": digest,
                    "updated_at": r.get("updated_at") or _iso_ms(r.get("last_ms")) or now.isoformat(),
                    "calls": int(r.get("calls") or 0),
                    "replay_eligible_calls": eligible.get(r["route"], 0),
                }
            )
        return envelope(principal.workspace, now, content_included=False, routes=routes)

    def ingestion_health(self, principal: AgentPrincipal, days: int) -> dict[str, Any]:
        now = self.clock()
        window = resolve_window(days, None, None, now)
        h = self.metadata.batch_health(principal.workspace, window.since_ms)
        n = {k: int(v or 0) for k, v in h.items() if k not in ("last_received", "last_processed")}
        return envelope(
            principal.workspace,
            now,
            window=window.as_dict(),
            evidence={"sources": ["ingest_batches"], "rows": n["processed"] + n["failed"], "complete": True},
            days=days,
            content_included=False,
            pending_batches=0,
            processed_batches=n["processed"],
            failed_batches=n["failed"],
            permanent_failures=n["permanent"],
            recoverable_failures=n["recoverable"],
            unclassified_failures=n["unclassified"],
            last_received_at=_iso_ms(h["last_received"]),
            last_processed_at=_iso_ms(h["last_processed"]),
            rows={
                "accepted": n["accepted"],
                "ignored": n["ignored"],
                "sdk_dropped": n["dropped"],
                "sdk_transport_errors": n["transport_errors"],
                "content_dropped": n["content_dropped"],
            },
            unknown_attributes=n["unknown_attributes"],
        )
