"""The Agent Access contract (``metergraph.agent-access/v1``) as data: tools, capabilities, bounds,
warning and error codes, and the response envelope every investigation read carries.

Declared once; the MCP adapter, the REST mirrors and capability discovery all read from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

CONTRACT_VERSION = "metergraph.agent-access/v1"
TRACE_DEBUG_VERSION = "metergraph.trace-debug/v1"
# The product's profile of a self-hosted server with every capability (its customer-local deployment;
# "oss" is its content-blind server, "byoc-core" withholds content and replay): decision 0045.
DEPLOYMENT_PROFILE = "local"

MAX_DAYS = 90
MAX_ROWS = 200
MAX_RESPONSE_BYTES = 5 * 1024 * 1024

# Scopes a key holds. A Debug key also holds the metadata scope; a Replay key holds all three.
SCOPE_METADATA = "agent:metadata"
SCOPE_READ = "agent:read"
SCOPE_REPLAY = "agent:replay"
# The scope capability discovery reports a tool needs, in the product's vocabulary (its published capability
# schema knows agent:read and agent:replay only): agent:read is any read, agent:replay a replay. Which role
# reads what is the tool's privacy class (and ``required_role``); a key holds the scopes of its role.
REQUIRED_SCOPES = (SCOPE_READ, SCOPE_REPLAY)
ROLE_SCOPES: dict[str, tuple[str, ...]] = {
    "metadata": (SCOPE_METADATA,),
    "debug": (SCOPE_METADATA, SCOPE_READ),
    "replay": (SCOPE_METADATA, SCOPE_READ, SCOPE_REPLAY),
}
ROLES = tuple(ROLE_SCOPES)

WARNING_CODES = frozenset(
    {
        "truncated",
        "spans_limited",
        "content_omitted",
        "capability_unavailable",
        "unsupported_field",
        "coverage_incomplete",
        "metadata_key_mostly_missing",
        # Upstream's report warnings (agent_contract.py); the three above are the seed contract's own.
        "report_outcome_not_loaded",
        "evidence_omitted",
    }
)


@dataclass(frozen=True, slots=True)
class ToolContract:
    name: str
    capability: str
    privacy_class: str  # metadata | content | replay
    key_scope: str  # the scope a key must hold to call it
    schema: str
    available: bool
    external_calls: bool = False
    mutates: bool = False

    @property
    def content(self) -> bool:
        return self.privacy_class != "metadata"

    @property
    def required_scope(self) -> str:
        """The scope capability discovery reports, in the product's vocabulary."""
        return SCOPE_REPLAY if self.key_scope == SCOPE_REPLAY else SCOPE_READ

    @property
    def required_role(self) -> str:
        """The least role whose keys hold ``key_scope``."""
        return next(role for role, scopes in ROLE_SCOPES.items() if self.key_scope in scopes)


def _t(name: str, capability: str, privacy: str, scope: str, schema: str, available: bool) -> ToolContract:
    return ToolContract(
        name, capability, privacy, scope, schema, available, external_calls=privacy == "replay"
    )


TOOL_CONTRACT: tuple[ToolContract, ...] = (
    _t(
        "metergraph_get_workspace_context",
        "workspace_context",
        "metadata",
        SCOPE_METADATA,
        "agent-access/workspace-context",
        True,
    ),
    _t(
        "metergraph_get_capabilities",
        "capability_discovery",
        "metadata",
        SCOPE_METADATA,
        "agent-access/capabilities",
        True,
    ),
    _t("metergraph_list_routes", "routes", "metadata", SCOPE_METADATA, "agent-access/routes", True),
    _t("metergraph_get_usage", "usage", "metadata", SCOPE_METADATA, "agent-access/usage", True),
    _t(
        "metergraph_get_usage_aggregates",
        "usage_aggregates",
        "metadata",
        SCOPE_METADATA,
        "agent-access/usage-aggregates",
        True,
    ),
    _t(
        "metergraph_get_ingestion_health",
        "ingestion_health",
        "metadata",
        SCOPE_METADATA,
        "agent-access/ingestion-health",
        True,
    ),
    _t("metergraph_list_incidents", "incidents", "metadata", SCOPE_METADATA, "agent-access/incidents", True),
    _t(
        "metergraph_query_traces",
        "trace_metadata",
        "metadata",
        SCOPE_METADATA,
        "agent-access/trace-metadata",
        True,
    ),
    _t(
        "metergraph_list_analysis_runs",
        "analysis_runs",
        "metadata",
        SCOPE_METADATA,
        "agent-access/analysis-runs",
        True,
    ),
    _t(
        "metergraph_get_analysis_run",
        "analysis_run",
        "metadata",
        SCOPE_METADATA,
        "agent-access/analysis-run",
        True,
    ),
    _t("metergraph_list_reports", "reports", "metadata", SCOPE_METADATA, "agent-access/reports", True),
    _t("metergraph_get_report", "report_detail", "metadata", SCOPE_METADATA, "agent-access/report", True),
    _t(
        "metergraph_get_suite_results",
        "suite_results",
        "metadata",
        SCOPE_METADATA,
        "agent-access/suite-results",
        True,
    ),
    ToolContract(
        "metergraph_start_analysis",
        "analysis_start",
        "metadata",
        SCOPE_READ,
        "agent-access/analysis-run",
        True,
        mutates=True,
    ),
    ToolContract(
        "metergraph_start_classification",
        "classification_start",
        "metadata",
        SCOPE_READ,
        "agent-access/analysis-run",
        True,
        mutates=True,
    ),
    _t(
        "metergraph_get_report_evidence",
        "report_evidence",
        "content",
        SCOPE_READ,
        "agent-access/report-evidence",
        True,
    ),
    _t("metergraph_get_trace", "trace_content", "content", SCOPE_READ, "trace-debug/trace", True),
    _t("metergraph_replay_trace", "trace_replay", "replay", SCOPE_REPLAY, "trace-debug/replay", True),
)
TOOLS_BY_NAME = {tool.name: tool for tool in TOOL_CONTRACT}

PRIVACY_DESCRIPTIONS = {
    "metadata": "Tenant-scoped operational metadata without captured request or response content.",
    "content": "Metadata plus retained request/response text, tool definitions, and tool calls.",
    "replay": "Content access plus a non-persistent call to a configured external provider.",
}
_METADATA_FIELDS = [
    "identifiers",
    "timestamps",
    "counts",
    "token totals",
    "cost",
    "latency",
    "status",
    "stable error kinds",
    "route/provider/model names",
    "route descriptions and constraints",
    "incident titles and diagnoses",
    "metadata keys and values",
    "ingestion counts",
]
PRIVACY_FIELDS = {
    "metadata": _METADATA_FIELDS,
    "content": [
        *_METADATA_FIELDS,
        "spans[].content.request.text",
        "spans[].content.response.text",
        "spans[].tool_calls",
    ],
    "replay": [
        *_METADATA_FIELDS,
        "spans[].content.request.text",
        "spans[].content.response.text",
        "comparison.replay.input",
        "comparison.replay.output",
    ],
}


def now_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).isoformat()


def provenance(
    workspace_id: str, now: datetime | None = None, source: str = "live-database"
) -> dict[str, str]:
    return {
        "deployment_profile": DEPLOYMENT_PROFILE,
        "workspace_id": workspace_id,
        "generated_at": now_iso(now),
        "source": source,
    }


def warning(code: str, message: str) -> dict[str, str]:
    if code not in WARNING_CODES:
        raise ValueError(f"unknown warning code: {code}")
    return {"code": code, "message": message}


def envelope(workspace_id: str, now: datetime | None = None, **fields: Any) -> dict[str, Any]:
    """The fields every investigation response starts with."""
    return {
        "schema_version": CONTRACT_VERSION,
        "provenance": provenance(workspace_id, now),
        "warnings": [],
        **fields,
    }
