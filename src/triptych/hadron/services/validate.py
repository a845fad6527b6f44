"""hadron_validate: a read-only sweep of one memory for broken edges, missing content, embedding
failures, stale abstracts and schema violations (the backstop for records written before the schema existed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from triptych.hadron.access import AccessPolicy
from triptych.hadron.domain import schema as schemas
from triptych.hadron.domain.loc import is_urn, node_urn
from triptych.hadron.domain.model import Memory
from triptych.hadron.errors import UrnNotQualified
from triptych.hadron.identity import HadronCaller
from triptych.hadron.store import GraphStore, TenancyStore

# Node types that are containers or typed records: an empty body is expected of them.
CONTENTLESS_TYPES = frozenset(("parent", "record", "chat"))
MAX_ISSUES = 200


@dataclass
class Report:
    memory: Memory
    nodes: int = 0
    broken_edges: list[dict[str, Any]] = field(default_factory=list)
    missing_content: list[dict[str, Any]] = field(default_factory=list)
    embedding_failures: list[dict[str, Any]] = field(default_factory=list)
    schema_violations: list[dict[str, Any]] = field(default_factory=list)
    stale_abstracts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def issues(self) -> int:
        found = (
            self.broken_edges, self.missing_content, self.embedding_failures, self.schema_violations,
            self.stale_abstracts,
        )  # fmt: skip
        return sum(map(len, found))


class ValidateService:
    def __init__(self, tenancy: TenancyStore, graph: GraphStore, access: AccessPolicy) -> None:
        self.tenancy = tenancy
        self.graph = graph
        self.access = access
        # Abstracts whose hash no longer matches their node's content (issue 18), at most n of them.
        self.stale_abstracts: Callable[[Memory, int], list[dict[str, Any]]] | None = None

    def validate(self, caller: HadronCaller, memory_urn: str) -> Report:
        if not is_urn(memory_urn.strip()):
            raise UrnNotQualified(
                f"memoryUrn must be a fully-qualified memory URN (hrn:mem:<root>:<slug>), got {memory_urn!r}"
            )
        memory, _ = self.access.read_memory(caller, memory_urn.strip())
        report = Report(memory)
        batch = []
        for node in self.graph.memory_nodes(memory.id):
            report.nodes += 1
            urn = node_urn(memory.root, memory.slug, node.loc)
            if node.node_type not in CONTENTLESS_TYPES and node.object_type is None:
                if not (node.content or "").strip() and not node.data and not node.properties:
                    _add(report.missing_content, {"urn": urn})
            problem = schemas.violation(memory.schema, node.object_type, node.properties)
            if problem is not None:
                _add(
                    report.schema_violations,
                    {"urn": urn, "field": problem.details["field"], "message": problem.message},
                )
            batch.append((node.id, urn))
            if len(batch) >= 500:
                self._edges(caller, memory, batch, report)
                batch = []
        self._edges(caller, memory, batch, report)
        if self.stale_abstracts is not None:
            report.stale_abstracts = self.stale_abstracts(memory, MAX_ISSUES)
        for _, loc, error in self.graph.failed_embeddings(memory.id):
            _add(report.embedding_failures, {"urn": node_urn(memory.root, memory.slug, loc), "error": error})
        return report

    def _edges(
        self, caller: HadronCaller, memory: Memory, batch: list[tuple[str, str]], report: Report
    ) -> None:
        urns = dict(batch)
        for source_id, edges in self.graph.edges_from(list(urns)).items():
            for edge in edges:
                target = self.graph.node_by_id(edge.target_id) if edge.target_id else None
                if target is None and edge.target_memory_id and edge.target_loc:
                    target = self.graph.node_by_loc(edge.target_memory_id, edge.target_loc)
                if target is not None:
                    continue
                far = self.tenancy.memory(edge.target_memory_id) if edge.target_memory_id else None
                shown = edge.target_ref
                if far is not None and self.access.memory_level(caller, far) is not None and edge.target_loc:
                    shown = node_urn(far.root, far.slug, edge.target_loc)
                elif far is not None and far.id != memory.id:
                    shown = "(a node in a memory you cannot read)"
                _add(report.broken_edges, {"source": urns[source_id], "edge": edge.loc, "target": shown})


def _add(items: list[dict[str, Any]], item: dict[str, Any]) -> None:
    if len(items) < MAX_ISSUES:
        items.append(item)
