"""The contract's response schemas (JSON Schema 2020-12), keyed by the ``schema`` each tool's capability
names, written from upstream's published ``metergraph.agent-access/v1`` and extended where the seed contract
says more (``agent:metadata`` scopes, mutating start tools, usage aggregates, suite results, extra warnings).

Each schema states what a client may rely on: required fields and their types. Extra fields are allowed,
as upstream allows them. ``validate`` is what the conformance tests run over every tool's output.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from triptych.metergraph.contract import CONTRACT_VERSION, ROLE_SCOPES, TRACE_DEBUG_VERSION, WARNING_CODES
from triptych.metergraph.errors import ERROR_CODES

Schema = dict[str, Any]
STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
OBJECT: Schema = {"type": "object"}


def obj(*required: str, **properties: Schema) -> Schema:
    """An object with these properties; the names in ``required`` must be present."""
    return {"type": "object", "properties": properties, "required": list(required)}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def maybe(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def exact(properties: Schema, *required: str) -> Schema:
    """A whole document: the envelope's properties plus these, with ``required`` present."""
    merged = {**ENVELOPE_PROPERTIES, **properties["properties"]}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": merged, "required": ["schema_version", *required]}  # fmt: skip


WARNING = obj("code", "message", code={"enum": sorted(WARNING_CODES)}, message=STR)
ENVELOPE_PROPERTIES: Schema = {
    "schema_version": {"const": CONTRACT_VERSION},
    "provenance": obj("deployment_profile", "workspace_id", "generated_at", "source",
                      deployment_profile=STR, workspace_id=STR, generated_at=STR, source=STR),
    "warnings": array(WARNING),
    "window": obj("days", "since", "until", days=maybe(INT), since=STR, until=STR),
    "page": obj("limit", "truncated", "next_cursor", limit=INT, truncated=BOOL, next_cursor=maybe(STR)),
    "evidence": obj("sources", "rows", "complete", sources=array(STR), rows=INT, complete=BOOL),
    "content_included": BOOL,
}  # fmt: skip
ERROR = {"$schema": "https://json-schema.org/draft/2020-12/schema",
         **obj("schema_version", "error", schema_version={"const": CONTRACT_VERSION},
               error=obj("code", "message", code={"enum": sorted(ERROR_CODES)}, message=STR))}  # fmt: skip

SCOPES = sorted({scope for scopes in ROLE_SCOPES.values() for scope in scopes})
CAPABILITY = obj("available", "content", "mutates", "privacy_class", "required_scope", "schema", "external_calls",
                 available=BOOL, content=BOOL, mutates=BOOL, privacy_class={"enum": ["content", "metadata", "replay"]},
                 required_scope={"enum": SCOPES}, schema=STR, external_calls=BOOL)  # fmt: skip
NOT_CONTENT = {"content_included": {"const": False}}
COUNTS = {name: INT for name in ("calls", "input_tokens", "output_tokens")}
INCIDENT = obj(
    "id", "detector_key", "route", "environment", "severity", "status", "generation", "title", "diagnosis",
    "window_start", "window_end", "first_seen_at", "last_seen_at", "acknowledged_at", "resolved_at", "occurrences",
    id=STR, detector_key=maybe(STR), route=maybe(STR), environment=maybe(STR), severity=maybe(STR),
    status=maybe(STR), generation=maybe(INT), title=maybe(STR), diagnosis={"type": ["string", "object", "null"]},
    window_start=maybe(STR), window_end=maybe(STR), first_seen_at=maybe(STR), last_seen_at=maybe(STR),
    acknowledged_at=maybe(STR), resolved_at=maybe(STR), occurrences=INT,
)  # fmt: skip
TRACE_SUMMARY = obj(
    "id", "trace_id", "trace_name", "started_at", "last_span_at", "span_count", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "cost_usd", "status", "routes", "providers", "models",
    id=STR, trace_id=STR, trace_name=STR, started_at=STR, last_span_at=STR, span_count=INT, input_tokens=INT,
    output_tokens=INT, cache_read_tokens=INT, cache_write_tokens=INT, cost_usd=maybe(NUM), status=STR,
    routes=array(STR), providers=array(STR), models=array(STR),
)  # fmt: skip
_TEXT = obj("state", "text", state=STR, text=maybe(STR))
SPAN = obj(
    "span_id", "parent_span_id", "timestamp", "route", "provider", "model", "input_tokens", "output_tokens",
    "cost_usd", "latency_ms", "status", "error", "error_type", "request_id", "content", "tool_definitions",
    "tool_calls", "replay_eligible",
    span_id=STR, parent_span_id=maybe(STR), timestamp=STR, route=maybe(STR), provider=maybe(STR),
    model=maybe(STR), input_tokens=maybe(INT), output_tokens=maybe(INT), cost_usd=maybe(NUM),
    latency_ms=maybe(NUM), status=maybe(STR), error=BOOL, error_type=maybe(STR), request_id=maybe(STR),
    content=obj("request", "response", request=_TEXT, response=_TEXT), tool_definitions=array({}),
    tool_calls=array({}), replay_eligible=BOOL,
)  # fmt: skip
RUN = obj("run_id", "status", "kind", "created_at", "started_at", "finished_at", "error_code", "report",
          run_id=STR, status=STR, kind={"enum": ["analysis", "classification"]}, created_at=STR,
          started_at=maybe(STR), finished_at=maybe(STR), error_code=maybe(STR),
          report=obj("available", "analysis_id", available=BOOL, analysis_id=maybe(STR)))  # fmt: skip
REPORT_SUMMARY = obj("analysis_id", "schema_version", "outcome", "workloads", "opportunities", "artifact",
                     analysis_id=STR, outcome=STR, opportunities=INT,
                     artifact=obj("sha256", "bytes", sha256=STR, bytes=INT))  # fmt: skip
TRACE_DEBUG = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **obj("schema_version", "trace_id", "trace_name", "started_at", "last_span_at", "span_count", "status",
          "error_context", "root_cause", "replay", "spans",
          schema_version={"const": TRACE_DEBUG_VERSION}, trace_id=STR, trace_name=STR, started_at=STR,
          last_span_at=STR, span_count=INT, status={"enum": ["success", "error"]},
          error_context=obj("kinds", kinds=array(STR)), root_cause=obj("classifications"),
          replay=obj("eligible", "allowlisted_overrides", "writes_production", eligible=BOOL,
                     writes_production={"const": False}),
          spans=array(SPAN)),
}  # fmt: skip
REPLAY = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **obj("schema_version", "status", "provenance", schema_version={"const": TRACE_DEBUG_VERSION},
          status={"enum": ["succeeded", "provider_error", "timeout"]},
          provenance=obj("source_trace_id", "replayed_at", "writes_production", writes_production={"const": False})),
}  # fmt: skip

SCHEMAS: dict[str, Schema] = {
    "agent-access/error": ERROR,
    "agent-access/workspace-context": exact(
        obj(workspace=obj("id", "slug", "name", "created_at", id=STR, slug=STR, name=STR, created_at=maybe(STR)),
            retention=obj("metadata_days", metadata_days=maybe(INT)),
            content=obj("captured", "included", captured=BOOL, included=BOOL),
            access=obj("scopes", scopes=array({"enum": SCOPES}))),
        "provenance", "workspace", "retention", "content", "access"),
    "agent-access/capabilities": exact(
        obj(deployment_profile=STR, deployment_capabilities=array(STR),
            agent={"type": "object", "additionalProperties": CAPABILITY},
            privacy_classes={"type": "object", "additionalProperties": obj("description", "fields",
                                                                            description=STR, fields=array(STR))},
            contracts=obj("agent_access", "trace_debug", agent_access={"const": CONTRACT_VERSION},
                          trace_debug={"const": TRACE_DEBUG_VERSION}),
            bounds=obj("max_days", "max_rows", "max_response_bytes", "content_included_by_default", max_days=INT,
                       max_rows=INT, max_response_bytes=INT, content_included_by_default=BOOL)),
        "provenance", "deployment_profile", "deployment_capabilities", "agent", "privacy_classes", "contracts",
        "bounds"),
    "agent-access/routes": exact(
        obj(routes=array(obj("route", "description", "constraints", "evaluation_contract",
                             "evaluation_contract_version", "evaluation_contract_hash", "updated_at", "calls",
                             "replay_eligible_calls", route=STR, description=maybe(STR), constraints=OBJECT,
                             evaluation_contract_version={"type": ["integer", "string", "null"]},
                             evaluation_contract_hash=maybe(STR), updated_at=STR, calls=INT,
                             replay_eligible_calls=INT))),
        "provenance", "routes"),
    "agent-access/usage": exact(
        obj(**NOT_CONTENT, days=INT, truncated=BOOL,
            items=array(obj("date", "route", "calls", "cost_usd", "input_tokens", "output_tokens", "avg_latency_ms",
                            "p95_latency_ms", "error_calls", date=STR, route=STR, cost_usd=NUM,
                            avg_latency_ms=maybe(INT), p95_latency_ms=maybe(INT), error_calls=INT, **COUNTS))),
        "provenance", "window", "evidence", "warnings", "days", "content_included", "truncated", "items"),
    # The seed contract's aggregates: groups, whole-window totals, coverage and pricing.
    "agent-access/usage-aggregates": exact(
        obj(**NOT_CONTENT, group_by=array(STR), items=array(obj("calls", "cost_usd", cost_usd=NUM, calls=INT)),
            totals=obj("calls", "cost_usd", calls=INT, cost_usd=NUM),
            coverage=obj("rows", "completeness", "reasons", completeness={"enum": ["complete", "partial", "unknown"]},
                         reasons=array(STR))),
        "provenance", "warnings", "content_included", "items", "totals", "coverage"),
    "agent-access/ingestion-health": exact(
        obj(**NOT_CONTENT, days=INT, **{name: INT for name in (
            "pending_batches", "processed_batches", "failed_batches", "permanent_failures", "recoverable_failures",
            "unclassified_failures")}, last_received_at=maybe(STR), last_processed_at=maybe(STR)),
        "provenance", "window", "evidence", "warnings", "days", "content_included", "pending_batches",
        "processed_batches", "failed_batches", "permanent_failures", "recoverable_failures", "unclassified_failures",
        "last_received_at", "last_processed_at"),
    "agent-access/incidents": exact(
        obj(**NOT_CONTENT, open=INT, critical=INT, truncated=BOOL, incidents=array(INCIDENT)),
        "provenance", "page", "evidence", "warnings", "content_included", "open", "critical", "truncated",
        "incidents"),
    "agent-access/trace-metadata": exact(
        obj(**NOT_CONTENT, truncated=BOOL, next_cursor=maybe(STR), traces=array(TRACE_SUMMARY)),
        "provenance", "window", "page", "evidence", "warnings", "content_included", "truncated", "next_cursor",
        "traces"),
    "agent-access/analysis-runs": exact(obj(**NOT_CONTENT, runs=array(RUN)),
                                        "provenance", "warnings", "page", "content_included", "runs"),
    "agent-access/analysis-run": exact(obj(**NOT_CONTENT, run=RUN), "provenance", "warnings", "content_included", "run"),
    "agent-access/reports": exact(obj(**NOT_CONTENT, reports=array(REPORT_SUMMARY)),
                                  "provenance", "warnings", "page", "content_included", "reports"),
    "agent-access/report": exact(obj(**NOT_CONTENT, analysis_id=STR, workloads=array(obj("workload_id", "state",
                                     "opportunities", workload_id=STR, opportunities=array(OBJECT)))),
                                 "provenance", "warnings", "content_included", "analysis_id", "workloads"),
    "agent-access/suite-results": exact(obj(**NOT_CONTENT, available=BOOL, app_url=maybe(STR)),
                                        "provenance", "warnings", "content_included", "available"),
    "agent-access/report-evidence": exact(
        obj(content_included={"const": True}, workload_id=STR, evidence=array(obj("case_id", case_id=STR)),
            next_cursor=maybe(STR)),
        "provenance", "warnings", "page", "content_included", "workload_id", "evidence", "next_cursor"),
    "trace-debug/trace": TRACE_DEBUG,
    "trace-debug/replay": REPLAY,
}  # fmt: skip


def validate(schema_id: str, document: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``document`` matches the named contract schema."""
    Draft202012Validator(SCHEMAS[schema_id]).validate(document)
