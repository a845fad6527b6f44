"""Response documents carry the fields the upstream `metergraph.agent-access/v1` schemas require
(envelope, usage, trace metadata, ingestion health, capabilities, routes, trace debug), checked with
jsonschema against required-field schemas written from the published contract."""

from __future__ import annotations

from typing import Any

import jsonschema
from mg_support import NOW, agent, app, row

from triptych.metergraph.contract import TOOL_CONTRACT, TOOLS_BY_NAME, WARNING_CODES
from triptych.metergraph.errors import ERROR_CODES, InvalidArgument, error_document
from triptych.metergraph.service import Metergraph


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


ENVELOPE = obj(
    ["schema_version", "provenance", "warnings"],
    schema_version={"const": "metergraph.agent-access/v1"},
    provenance=obj(["deployment_profile", "workspace_id", "generated_at", "source"]),
    warnings={"type": "array", "items": obj(["code", "message"], code={"enum": sorted(WARNING_CODES)})},
    window=obj(["days", "since", "until"]),
    page=obj(["limit", "truncated", "next_cursor"]),
    evidence=obj(["sources", "rows", "complete"]),
)
USAGE_ITEM = obj(["date", "route", "calls", "cost_usd", "input_tokens", "output_tokens", "avg_latency_ms",
                  "p95_latency_ms", "error_calls"])  # fmt: skip
USAGE = obj(["window", "evidence", "days", "content_included", "truncated", "items"],
            content_included={"const": False}, items={"type": "array", "items": USAGE_ITEM})  # fmt: skip
TRACE = obj(["id", "trace_id", "trace_name", "started_at", "last_span_at", "span_count", "input_tokens",
             "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd", "status", "routes",
             "providers", "models"], status={"enum": ["success", "error"]})  # fmt: skip
TRACES = obj(["window", "page", "evidence", "content_included", "truncated", "next_cursor", "traces"],
             content_included={"const": False}, traces={"type": "array", "items": TRACE})  # fmt: skip
HEALTH = obj(["window", "evidence", "days", "content_included", "pending_batches", "processed_batches",
              "failed_batches", "permanent_failures", "recoverable_failures", "unclassified_failures",
              "last_received_at", "last_processed_at"])  # fmt: skip
CAPABILITY = obj(["available", "content", "mutates", "privacy_class", "required_scope", "schema", "external_calls"],
                 privacy_class={"enum": ["metadata", "content", "replay"]})  # fmt: skip
CAPABILITIES = obj(
    ["deployment_profile", "deployment_capabilities", "agent", "privacy_classes", "contracts", "bounds"],
    agent={"type": "object", "additionalProperties": CAPABILITY},
    bounds=obj(["max_days", "max_rows", "max_response_bytes", "content_included_by_default"]),
)
ROUTE = obj(["route", "description", "constraints", "evaluation_contract", "evaluation_contract_version",
             "evaluation_contract_hash", "updated_at", "calls", "replay_eligible_calls"])  # fmt: skip
WORKSPACE = obj(
    ["workspace", "retention", "content", "access"], workspace=obj(["id", "slug", "name", "created_at"])
)
SPAN = obj(["span_id", "parent_span_id", "timestamp", "route", "func", "module", "provider", "model", "input_tokens",
            "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "cost_usd", "latency_ms",
            "ttft_ms", "status", "error", "error_type", "stream", "endpoint", "request_id", "content",
            "tool_definitions", "tool_calls", "replay_eligible"])  # fmt: skip
TRACE_DEBUG = obj(["schema_version", "trace_id", "trace_name", "started_at", "last_span_at", "span_count", "status",
                   "error_context", "root_cause", "replay", "spans"],
                  schema_version={"const": "metergraph.trace-debug/v1"}, spans={"type": "array", "items": SPAN})  # fmt: skip


def check(document: dict[str, Any], *schemas: dict[str, Any]) -> None:
    for schema in schemas:
        jsonschema.validate(document, schema)


def test_every_read_matches_the_contract_shapes(mg: Metergraph) -> None:
    mg.metadata.set_retain_content("w1", True, NOW.isoformat())
    mg.ingest.ingest_document(
        app(), {"rows": [row(trace_id="t", response_text="hi"), row(trace_id="t", error=True)]}
    )
    who = agent(role="replay")
    check(mg.usage.usage(who, 7, 100, None), ENVELOPE, USAGE)
    check(mg.traces.query(who), ENVELOPE, TRACES)
    check(mg.workspace.ingestion_health(who, 7), ENVELOPE, HEALTH)
    check(mg.workspace.capabilities(who), ENVELOPE, CAPABILITIES)
    check(mg.workspace.routes(who), ENVELOPE, obj(["routes"], routes={"type": "array", "items": ROUTE}))
    check(mg.workspace.context(who), ENVELOPE, WORKSPACE)
    check(mg.usage.aggregates(who, days=7), ENVELOPE)
    check(mg.traces.get_trace(who, "t"), TRACE_DEBUG)


def test_capability_discovery_covers_every_tool_and_error_documents_use_contract_codes(
    mg: Metergraph,
) -> None:
    caps = mg.workspace.capabilities(agent())
    assert set(caps["agent"]) == {t.capability for t in TOOL_CONTRACT}
    assert {entry["tool"] for entry in caps["agent"].values()} == {t.name for t in TOOL_CONTRACT}
    assert ERROR_CODES == {"invalid_argument", "not_found", "forbidden", "replay_not_eligible", "response_too_large",
                           "unsupported_capability", "rate_limited"}  # fmt: skip
    document = error_document(InvalidArgument("bad"))
    assert document == {
        "schema_version": "metergraph.agent-access/v1",
        "error": {"code": "invalid_argument", "message": "bad"},
    }


def test_the_tools_are_exactly_the_contracts_and_each_is_documented() -> None:
    import re

    from harness import ROOT, shared_file

    spec = shared_file("spec/metergraph.md").read_text()
    named = set(re.findall(r"metergraph_[a-z_]+", spec)) - {"metergraph_links"}
    assert {t.name for t in TOOL_CONTRACT} == named
    docs = (ROOT / "docs" / "metergraph.md").read_text()
    assert [t.name for t in TOOL_CONTRACT if t.name not in docs] == []
    mutating = [t.name for t in TOOL_CONTRACT if t.mutates]
    assert mutating == ["metergraph_start_analysis", "metergraph_start_classification"]
    # A mutating tool may be available (analysis starts); discovery then reports mutates: true.
    assert TOOLS_BY_NAME["metergraph_start_analysis"].available
