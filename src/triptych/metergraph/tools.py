"""Metergraph tools: argument models (the contract as data) and thin adapters onto the services.

Every tool is declared at module level (``TOOLS``: ``core.mcp.DeclaredTool``s, each handler a function
beside it taking the ``Services``, the key's principal and the arguments); ``build_tools`` registers them
with one ``Metergraph``'s services (decision 0141 for the other surfaces). Schema violations (unknown tools,
unknown arguments, wrong types, out-of-range values) are JSON-RPC -32602 protocol errors; a well-formed call the services refuse is a tool result carrying the contract's
``error.code``. Messages about metadata never repeat a key or value the caller sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints

from triptych.core.mcp import Bind, DeclaredTool, Tool, Toolbox, register
from triptych.metergraph.analysis import AnalysisService
from triptych.metergraph.analysis_runner import RunSettings
from triptych.metergraph.contract import TOOLS_BY_NAME
from triptych.metergraph.errors import BY_KIND
from triptych.metergraph.incidents import IncidentService
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.replay import ReplayService
from triptych.metergraph.reports import ReportService
from triptych.metergraph.traces import TraceService
from triptych.metergraph.usage import UsageService
from triptych.metergraph.workloads import WorkloadService
from triptych.metergraph.workspace import WorkspaceService, refuse_unavailable


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Days = Annotated[StrictInt, Field(ge=1, le=90, description="1 to 90")]
Metadata = Annotated[
    dict[str, str],
    Field(min_length=1, max_length=5, description="exact, case-sensitive string pairs, ANDed (1 to 5 keys)"),
]
Value512 = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Env = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Id200 = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=512)]
FilterList = Annotated[list[Value512], Field(min_length=1, max_length=20)]


class NoArgs(Args):
    pass


class UsageArgs(Args):
    days: Days = 7
    limit: Annotated[StrictInt, Field(ge=1, le=200)] = 100
    metadata: Metadata | None = None


class AggregatesArgs(Args):
    group_by: Annotated[list[Annotated[str, StringConstraints(min_length=1, max_length=209)]],
                        Field(min_length=1, max_length=5)] | None = None  # fmt: skip
    days: Days | None = None
    since: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    until: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    route: FilterList | None = None
    provider: FilterList | None = None
    model: FilterList | None = None
    environment: Annotated[list[Env], Field(min_length=1, max_length=20)] | None = None
    metadata: Metadata | None = None
    limit: Annotated[StrictInt, Field(ge=1, le=200)] = 100


class HealthArgs(Args):
    days: Days = 7


class LimitArgs(Args):
    limit: Annotated[StrictInt, Field(ge=1, le=200)] = 50


class TracesArgs(Args):
    route: Value512 | None = None
    status: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    workload: Id200 | None = None
    trace_id: Id200 | None = None
    request_id: Id200 | None = None
    environment: (
        Annotated[list[Env], Field(min_length=1, max_length=20, json_schema_extra={"uniqueItems": True})]
        | None
    ) = None
    metadata: Metadata | None = None
    cursor: Cursor | None = None
    days: Days = 7
    limit: Annotated[StrictInt, Field(ge=1, le=200)] = 50
    sample: Literal["spread"] | None = None


class RunsArgs(Args):
    limit: Annotated[StrictInt, Field(ge=1, le=200)] = 50
    cursor: Cursor | None = None


class RunArgs(Args):
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=36)]


class ReportArgs(Args):
    analysis_id: Id200


class SuiteArgs(Args):
    analysis_id: Id200
    workload_id: Id200


class EvidenceArgs(Args):
    analysis_id: Id200
    workload_id: Id200
    cursor: Cursor | None = None
    limit: Annotated[StrictInt, Field(ge=1, le=50)] = 50


class StartAnalysisArgs(Args):
    request_key: (
        Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$")] | None
    ) = None
    workloads: Annotated[list[Id200], Field(min_length=1, max_length=20)] | None = None
    candidates: Annotated[list[Id200], Field(min_length=1, max_length=5)] | None = None
    samples_per_workload: Annotated[StrictInt, Field(ge=1, le=200)] = 20
    min_samples: Annotated[StrictInt, Field(ge=1, le=200)] = 10
    days: Days = 7
    rerun_of_run_id: Annotated[str, StringConstraints(min_length=1, max_length=36)] | None = None


class TraceArgs(Args):
    trace_id: Id200


class ReplayOverrides(Args):
    model: Id200 | None = None
    prompt: Annotated[str, StringConstraints(min_length=1, max_length=16384)] | None = None
    system: Annotated[str, StringConstraints(min_length=1, max_length=16384)] | None = None
    temperature: Annotated[float, Field(ge=0, le=1)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    max_output_tokens: Annotated[StrictInt, Field(ge=1, le=1024)] | None = None


class ReplayArgs(Args):
    trace_id: Id200
    overrides: ReplayOverrides | None = None
    timeout_seconds: Annotated[StrictInt, Field(ge=1, le=30)] | None = None


class ClassificationArgs(Args):
    days: Days = 30


class OpenArgs(BaseModel):
    """Tools the contract names without an argument table (not available here): any object."""

    model_config = ConfigDict(extra="allow")


# Metadata keys are the caller's data: an argument error below ``metadata`` never repeats them.
PRIVATE_ARGUMENTS = ("metadata",)

MetergraphTool = Tool[AgentPrincipal]


def toolbox(tools: list[MetergraphTool]) -> Toolbox[AgentPrincipal]:
    """The tools as both doors (MCP and the REST mirrors) run them."""
    return Toolbox(tools, surface="metergraph", error_codes=BY_KIND, private_arguments=PRIVATE_ARGUMENTS)


def _principal_context(principal: AgentPrincipal, tool: MetergraphTool) -> nullcontext[AgentPrincipal]:
    return nullcontext(principal)


def principal_bind(principal: AgentPrincipal) -> Bind[AgentPrincipal]:
    """The REST mirrors' context hook: the key's principal, whatever the tool."""
    return partial(_principal_context, principal)


@dataclass(frozen=True, slots=True)
class Services:
    """What the tools call: one ``Metergraph``'s services (an optional one is None where this
    deployment has none, and its tools answer ``unsupported_capability``)."""

    workspace: WorkspaceService
    usage: UsageService
    traces: TraceService
    replay: ReplayService | None = None
    workloads: WorkloadService | None = None
    reports: ReportService | None = None
    analysis: AnalysisService | None = None
    incidents: IncidentService | None = None


P = AgentPrincipal
Doc = dict[str, Any]
T = TypeVar("T")


def _available(service: T | None, p: P, tool: str) -> T:
    """The service an optional tool calls, or the refusal of a deployment without it."""
    if service is None:
        refuse_unavailable(p, tool)
    return service


def get_workspace_context(s: Services, p: P, a: NoArgs) -> Doc:
    return s.workspace.context(p)


async def get_capabilities(s: Services, p: P, a: NoArgs) -> Doc:
    # On the event loop: the document is built from the contract table, the settings and the key, with no
    # I/O and no lock, so a worker thread would only add its hop (decision 0340).
    return s.workspace.capabilities(p)


def list_routes(s: Services, p: P, a: NoArgs) -> Doc:
    return s.workspace.routes(p)


def get_usage(s: Services, p: P, a: UsageArgs) -> Doc:
    return s.usage.usage(p, a.days, a.limit, a.metadata)


def get_usage_aggregates(s: Services, p: P, a: AggregatesArgs) -> Doc:
    return s.usage.aggregates(
        p, group_by=a.group_by, days=a.days, since=a.since, until=a.until, routes=a.route,
        providers=a.provider, models=a.model, environments=a.environment, metadata=a.metadata,
        limit=a.limit,
    )  # fmt: skip


def get_ingestion_health(s: Services, p: P, a: HealthArgs) -> Doc:
    return s.workspace.ingestion_health(p, a.days)


def list_incidents(s: Services, p: P, a: LimitArgs) -> Doc:
    return _available(s.incidents, p, "metergraph_list_incidents").list(p, a.limit)


def query_traces(s: Services, p: P, a: TracesArgs) -> Doc:
    return s.traces.query(
        p, route=a.route, status=a.status, workload=a.workload, trace_id=a.trace_id,
        request_id=a.request_id, environment=a.environment, metadata=a.metadata, cursor=a.cursor,
        days=a.days, limit=a.limit, sample=a.sample,
    )  # fmt: skip


def list_analysis_runs(s: Services, p: P, a: RunsArgs) -> Doc:
    return _available(s.analysis, p, "metergraph_list_analysis_runs").list_runs(p, a.limit, a.cursor)


def get_analysis_run(s: Services, p: P, a: RunArgs) -> Doc:
    return _available(s.analysis, p, "metergraph_get_analysis_run").get_run(p, a.run_id)


def list_reports(s: Services, p: P, a: LimitArgs) -> Doc:
    return _available(s.reports, p, "metergraph_list_reports").list_reports(p, a.limit)


def get_report(s: Services, p: P, a: ReportArgs) -> Doc:
    return _available(s.reports, p, "metergraph_get_report").get_report(p, a.analysis_id)


def get_suite_results(s: Services, p: P, a: SuiteArgs) -> Doc:
    return _available(s.reports, p, "metergraph_get_suite_results").suite_results(
        p, a.analysis_id, a.workload_id
    )


def start_analysis(s: Services, p: P, a: StartAnalysisArgs) -> Doc:
    analysis = _available(s.analysis, p, "metergraph_start_analysis")
    settings = RunSettings(
        days=a.days, samples_per_workload=a.samples_per_workload, min_samples=a.min_samples,
        candidates=tuple((None, m) for m in a.candidates or ()), workload_ids=tuple(a.workloads or ()),
    )  # fmt: skip
    return analysis.start(p, settings, a.request_key, a.rerun_of_run_id)


def start_classification(s: Services, p: P, a: ClassificationArgs) -> Doc:
    return _available(s.workloads, p, "metergraph_start_classification").start_classification(p, a.days)


def get_report_evidence(s: Services, p: P, a: EvidenceArgs) -> Doc:
    return _available(s.reports, p, "metergraph_get_report_evidence").evidence(
        p, a.analysis_id, a.workload_id, a.cursor, a.limit
    )


def get_trace(s: Services, p: P, a: TraceArgs) -> Doc:
    return s.traces.get_trace(p, a.trace_id)


def replay_trace(s: Services, p: P, a: ReplayArgs) -> Doc:
    overrides = a.overrides.model_dump(exclude_none=True) if a.overrides else None
    return _available(s.replay, p, "metergraph_replay_trace").replay(
        p, a.trace_id, overrides, a.timeout_seconds
    )


MetergraphDeclared = DeclaredTool[Services, AgentPrincipal]


def _declare(
    name: str,
    title: str,
    description: str,
    args: type[BaseModel],
    handler: Callable[[Services, P, Any], Doc | Awaitable[Doc]],
) -> MetergraphDeclared:
    contract = TOOLS_BY_NAME[name]  # read-only and open-world flags come from the contract table
    return DeclaredTool(name, description, args, handler, read_only=not contract.mutates, title=title,
                        open_world=contract.external_calls)  # fmt: skip


# Every tool of the contract, in its table's order.
TOOLS: tuple[MetergraphDeclared, ...] = (
    _declare("metergraph_get_workspace_context", "Get Metergraph workspace context",
     "Describe the workspace, retention, this key's scopes and environments, and the content policy.",
     NoArgs, get_workspace_context),
    _declare("metergraph_get_capabilities", "Discover Metergraph capabilities",
     "Authoritative list of every tool's availability, privacy class and required scope for this key and "
     "deployment, and the bounds every read applies.", NoArgs, get_capabilities),
    _declare("metergraph_list_routes", "List Metergraph routes",
     "List the workspace's LLM routes with descriptions, constraints and call counts. Never returns "
     "prompts or outputs.", NoArgs, list_routes),
    _declare("metergraph_get_usage", "Get Metergraph usage summary",
     "Bounded, content-free usage by route and UTC day: cost, tokens, latency and error counts, with "
     "totals over the whole window, coverage and pricing completeness.", UsageArgs, get_usage),
    _declare("metergraph_get_usage_aggregates", "Get Metergraph usage aggregates",
     "Usage grouped server-side by provider, model, route, UTC day and at most one metadata.<key>, with "
     "whole-window totals, coverage, pricing (exact or lower bound) and a p95 latency from histograms.",
     AggregatesArgs, get_usage_aggregates),
    _declare("metergraph_get_ingestion_health", "Get Metergraph ingestion health",
     "Ingestion batch counts, failures and the latest receive/process timestamps for the window.",
     HealthArgs, get_ingestion_health),
    _declare("metergraph_list_incidents", "List Metergraph incidents",
     "Detector incidents of the workspace (cost spike, error-rate spike, p95 latency regression, model "
     "without a price, failed ingestion), open first: kind, severity, window, the numbers that triggered "
     "it next to the baseline, and tool calls that reproduce it. Content-free.", LimitArgs, list_incidents),
    _declare("metergraph_query_traces", "Query Metergraph trace metadata",
     "Content-free trace metadata, newest first with an opaque cursor, or a spread sample across the "
     "window: tokens, cost, latency, status, routes, providers, models and environment. An exact "
     "trace_id selects that trace; an exact request_id selects the calls with that provider request id.",
     TracesArgs, query_traces),
    _declare("metergraph_list_analysis_runs", "List Metergraph analysis runs",
     "A page of the workspace's analysis runs, newest first, with progress and report availability. "
     "Read-only.", RunsArgs, list_analysis_runs),
    _declare("metergraph_get_analysis_run", "Get a Metergraph analysis run",
     "One analysis run by run_id: status, progress, timestamps, error_code and its report once "
     "available. Does not start, cancel or rerun analysis.", RunArgs, get_analysis_run),
    _declare("metergraph_list_reports", "List Metergraph pipeline reports",
     "Report metadata, newest first: schema version, provenance, outcome, workload counts, opportunity "
     "count, evidence coverage, and the artifact's SHA-256 and size.", LimitArgs, list_reports),
    _declare("metergraph_get_report", "Get a Metergraph pipeline report",
     "One report's metadata and per-workload projections (state, warnings, numeric opportunity "
     "summaries, evaluation gates, evidence coverage). Never model-authored text.", ReportArgs, get_report),
    _declare("metergraph_get_suite_results", "Get suite results",
     "One workload's evaluation-suite results per candidate and check (pass rates, counts, "
     "representative case ids). Metadata class: no case text.", SuiteArgs, get_suite_results),
    _declare("metergraph_start_analysis", "Start a Metergraph analysis",
     "Start an asynchronous analysis run: replays sampled retained calls of each workload on cheaper "
     "candidate models, scores them with an evaluation suite and writes a report. Spends provider "
     "money. Poll metergraph_get_analysis_run. Requires the Debug role.", StartAnalysisArgs, start_analysis),
    _declare("metergraph_start_classification", "Start a Metergraph classification",
     "Group the workspace's calls of the last `days` (1 to 90, default 30) into workloads from "
     "content-free features (route, metadata keys, token shapes; models are listed per workload) and "
     "save them, replacing the previous classification. Workload ids are stable; pass one as "
     "metergraph_query_traces' workload. Requires the Debug role (agent:read).", ClassificationArgs,
     start_classification),
    _declare("metergraph_get_report_evidence", "Get pipeline report evidence",
     "One page of a report workload's replay evidence (content class, each text field at most 16 KiB, "
     "cursor paging). Requires the Debug role (agent:read).", EvidenceArgs, get_report_evidence),
    _declare("metergraph_get_trace", "Get a Metergraph trace",
     "One trace with its spans and retained request/response content where it exists. Requires the "
     "Debug role (agent:read).", TraceArgs, get_trace),
    _declare("metergraph_replay_trace", "Replay a Metergraph trace",
     "Run one bounded, non-persistent replay of a retained call on its provider (or a candidate model "
     "in overrides.model) and compare output, tokens, cost and latency with the original. Only model, "
     "prompt/system text, temperature, top_p and output-token overrides are accepted; nothing is "
     "written. Requires the Replay role (agent:replay).", ReplayArgs, replay_trace),
)  # fmt: skip
assert [t.name for t in TOOLS] == list(TOOLS_BY_NAME), "tools must match the contract table"


def build_tools(
    workspace: WorkspaceService,
    usage: UsageService,
    traces: TraceService,
    replay: ReplayService | None = None,
    workloads: WorkloadService | None = None,
    reports: ReportService | None = None,
    analysis: AnalysisService | None = None,
    incidents: IncidentService | None = None,
) -> list[MetergraphTool]:
    """Every declared tool registered with one ``Metergraph``'s services."""
    services = Services(workspace, usage, traces, replay, workloads, reports, analysis, incidents)
    return register(TOOLS, services)
