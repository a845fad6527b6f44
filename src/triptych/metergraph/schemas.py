"""The contract's response schemas (JSON Schema 2020-12), keyed by the ``schema`` each tool's capability
names: the requirements of the product's published ``metergraph.agent-access/v1`` schemas (its
``agent_contract.py``, Apache-2.0), restated here, and extended where the seed contract says more (usage
aggregates, suite results, the two mutating start tools, extra warnings).

Each schema states what a client may rely on: required fields and their types. Extra fields are allowed,
as upstream allows them. ``validate`` is what the conformance tests run over every tool's output.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from triptych.metergraph.contract import (
    CONTRACT_VERSION,
    REQUIRED_SCOPES,
    ROLE_SCOPES,
    TOOL_CONTRACT,
    TRACE_DEBUG_VERSION,
    WARNING_CODES,
)
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
# The product's capability entry: a scope in its vocabulary, and no capability that mutates. Triptych's two
# start tools (not in the product's published contract) are the one exception, and say so (``mutates``).
_CAPABILITY_PROPERTIES: Schema = {
    "available": BOOL,
    "content": BOOL,
    "mutates": {"const": False},
    "privacy_class": {"enum": ["content", "metadata", "replay"]},
    "required_scope": {"enum": list(REQUIRED_SCOPES)},
    "schema": STR,
    "external_calls": BOOL,
}
CAPABILITY = obj(*_CAPABILITY_PROPERTIES, **_CAPABILITY_PROPERTIES)
MUTATING_CAPABILITY = obj(*_CAPABILITY_PROPERTIES, **{**_CAPABILITY_PROPERTIES, "mutates": {"const": True}})
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
_NULLABLE_INT = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
_NULLABLE_STR = (
    "route",
    "func",
    "module",
    "provider",
    "model",
    "status",
    "error_type",
    "endpoint",
    "request_id",
)
SPAN = obj(
    "span_id", "parent_span_id", "timestamp", "route", "func", "module", "provider", "model", "input_tokens",
    "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "cost_usd", "latency_ms",
    "ttft_ms", "status", "error", "error_type", "stream", "endpoint", "request_id", "content", "tool_definitions",
    "tool_calls", "replay_eligible",
    span_id=STR, parent_span_id=maybe(STR), timestamp=STR, cost_usd=maybe(NUM), latency_ms=maybe(NUM),
    ttft_ms=maybe(NUM), error=BOOL, stream=maybe(BOOL),
    content=obj("request", "response", request=_TEXT, response=_TEXT), tool_definitions=array({}),
    tool_calls=array({}), replay_eligible=BOOL,
    **{name: maybe(INT) for name in _NULLABLE_INT}, **{name: maybe(STR) for name in _NULLABLE_STR},
)  # fmt: skip
CLASSIFICATION = obj(
    "analysis_run_id", "classification", "analysis_run", analysis_run_id=STR,
    classification=obj("status", "workload_id", "confidence", "method", status=maybe(STR),
                       workload_id=maybe(STR), confidence=maybe(NUM), method=maybe(STR)),
    analysis_run=obj("status", "analysis_id", "report_id", "error_code", "progress", "created_at", "finished_at",
                     status=maybe(STR), analysis_id=maybe(STR), report_id=maybe(STR), error_code=maybe(STR),
                     progress=maybe(OBJECT), created_at=maybe(STR), finished_at=maybe(STR)),
)  # fmt: skip
RUN = obj("run_id", "analysis_id", "status", "kind", "created_at", "started_at", "finished_at", "error_code",
          "report", run_id=STR, analysis_id=STR, status=STR, kind={"enum": ["analysis", "classification"]},
          created_at=STR, started_at=maybe(STR), finished_at=maybe(STR), error_code=maybe(STR),
          report=obj("available", "analysis_id", "imported_at", "outcome_tool", available=BOOL,
                     analysis_id=maybe(STR), imported_at=maybe(STR),
                     outcome_tool={"enum": ["metergraph_get_report", None]}))  # fmt: skip
_COVERAGE = maybe(obj("evaluated", "published", "omitted", evaluated=INT, published=INT, omitted=INT))
_REPORT_PROPERTIES: Schema = {
    "analysis_id": STR, "title": STR, "schema_version": {"type": "integer", "minimum": 11, "maximum": 15},
    "pipeline_name": maybe(STR), "generated_at": maybe(STR), "imported_at": maybe(STR),
    "import_source": maybe(STR), "environment": maybe(STR), "outcome": STR,
    "workloads": obj("covered", "partial", "failed", "ineligible", covered=INT, partial=INT, failed=INT,
                     ineligible=maybe(INT)),
    "opportunities": INT, "evidence_coverage": _COVERAGE,
    "artifact": obj("sha256", "bytes", sha256=STR, bytes=INT, download=STR), "warnings": array(WARNING),
}  # fmt: skip
REPORT_SUMMARY = obj(*_REPORT_PROPERTIES, **_REPORT_PROPERTIES)
OPPORTUNITY = obj("kind", "candidate_ids", "recommendation_status", kind=STR, candidate_ids=array(STR),
                  recommendation_status=maybe(STR), savings_usd=maybe(NUM), quality_vs_reference=maybe(NUM),
                  safe_switch_rate=maybe(NUM), cost_ratio=maybe(NUM), quality_grade_counts=OBJECT)  # fmt: skip
REPORT_WORKLOAD = obj(
    "workload_id", "workload_name", "sample_count", "state", "warnings", "opportunities", "evidence_coverage",
    workload_id=STR, workload_name=STR, sample_count=maybe(INT),
    state={"enum": ["covered", "partial", "failed", "ineligible"]}, reason=maybe(STR),
    reference_readiness=maybe(obj(verdict=maybe(STR), codes=array(STR), counts=OBJECT)), warnings=array({}),
    opportunities=array(OPPORTUNITY), evidence_coverage=_COVERAGE,
)  # fmt: skip
_PAGE_TEXT = obj("text", "truncated", text=STR, truncated=BOOL)
EVIDENCE_CASE = obj("case_id", "question", "reference_model", "candidate_model", "reference_response",
                    "candidate_response", "grade", case_id=STR, question=_PAGE_TEXT, reference_model=maybe(STR),
                    candidate_model=maybe(STR), reference_response=_PAGE_TEXT, candidate_response=_PAGE_TEXT,
                    grade=maybe(STR))  # fmt: skip
TRACE_DEBUG = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **obj("schema_version", "trace_id", "trace_name", "started_at", "last_span_at", "span_count", "status",
          "error_context", "root_cause", "replay", "spans",
          schema_version={"const": TRACE_DEBUG_VERSION}, trace_id=STR, trace_name=STR, started_at=STR,
          last_span_at=STR, span_count=INT, status={"enum": ["success", "error"]},
          error_context=obj("kinds", kinds=array(STR)),
          root_cause=obj("classifications", classifications=array(CLASSIFICATION)),
          replay=obj("eligible", "allowlisted_overrides", "writes_production", eligible=BOOL,
                     allowlisted_overrides=array(STR), writes_production={"const": False}),
          spans=array(SPAN), spans_limited={"const": True}),
}  # fmt: skip
_REPLAY_PART = obj(
    "provider", "model", "input", "output", "tool_calls", "error_type", "latency_ms", "cost_usd",
    provider=maybe(STR), model=maybe(STR),
    input=obj(state=STR, text=maybe(STR), system=maybe(STR), messages=array({})),
    output=obj("state", "text", state=STR, text=maybe(STR)), tool_calls=array({}), error_type=maybe(STR),
    latency_ms=maybe(NUM), cost_usd=maybe(NUM),
    usage=obj("input_tokens", "output_tokens", input_tokens=INT, output_tokens=INT),
)  # fmt: skip
_OVERRIDES = obj(model=STR, prompt=STR, system=STR, temperature=NUM, top_p=NUM, max_output_tokens=INT)
REPLAY = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **obj("schema_version", "status", "provenance", schema_version={"const": TRACE_DEBUG_VERSION},
          status={"enum": ["succeeded", "provider_error", "timeout"]},
          provenance=obj("source_trace_id", "source_span_id", "replayed_at", "overrides", "writes_production",
                         source_trace_id=STR, source_span_id=STR, replayed_at=STR, overrides=_OVERRIDES,
                         writes_production={"const": False}),
          comparison=obj("original", "replay", original=_REPLAY_PART, replay=_REPLAY_PART),
          error=obj("code", "message", code=STR, message=STR)),
    "allOf": [
        {"if": {"properties": {"status": {"const": "succeeded"}}}, "then": {"required": ["comparison"]}},
        {"if": {"properties": {"status": {"enum": ["provider_error", "timeout"]}}}, "then": {"required": ["error"]}},
    ],
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
            agent={"type": "object", "additionalProperties": CAPABILITY,
                   "properties": {t.capability: MUTATING_CAPABILITY for t in TOOL_CONTRACT if t.mutates}},
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
    "agent-access/report": exact(
        # A report's ``workloads`` is its workload list (a summary's is their counts), as in the product.
        obj(**{**NOT_CONTENT, **_REPORT_PROPERTIES, "settings": maybe(OBJECT), "spend_projection": maybe(OBJECT),
               "analysis_generation_cost": maybe(OBJECT), "workloads": array(REPORT_WORKLOAD)}),
        "provenance", "warnings", "content_included", *_REPORT_PROPERTIES, "settings", "spend_projection",
        "analysis_generation_cost", "workloads"),
    "agent-access/suite-results": exact(obj(**NOT_CONTENT, available=BOOL, app_url=maybe(STR)),
                                        "provenance", "warnings", "content_included", "available"),
    "agent-access/report-evidence": exact(
        obj(content_included={"const": True}, workload_id=STR, evidence=array(EVIDENCE_CASE),
            evidence_coverage=_COVERAGE, next_cursor=maybe(STR)),
        "provenance", "warnings", "page", "content_included", "workload_id", "evidence", "evidence_coverage",
        "next_cursor"),
    "trace-debug/trace": TRACE_DEBUG,
    "trace-debug/replay": REPLAY,
}  # fmt: skip


def validate(schema_id: str, document: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``document`` matches the named contract schema."""
    Draft202012Validator(SCHEMAS[schema_id]).validate(document)
