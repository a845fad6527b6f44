"""Edge references: an edge's URN (``hrn:edge:<root>:<memory>:<loc>``, the source node's memory and the
edge's loc) and what an edge reference may be (its id or that URN). Pure rules, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from triptych.hadron.domain.loc import MemoryKey, is_id, parse_node_ref, urn_type
from triptych.hadron.domain.urn import UrnError, normalize_scheme

EDGE_TYPE = "edge"


def edge_urn(root: str, slug: str, loc: str) -> str:
    """An edge's URN: its source node's memory and its own loc, in the flat form node URNs take."""
    return f"hrn:edge:{root}:{slug}:{loc}"


@dataclass(frozen=True, slots=True)
class EdgeRef:
    """An edge named by id (``id`` set) or by URN (``memory`` and ``loc`` set)."""

    id: str | None = None
    memory: MemoryKey | None = None
    loc: str = ""


def parse_edge_ref(value: str) -> EdgeRef:
    """An edge id or a fully qualified edge URN (``hrn:edge:``/``urn:edge:``, flat or ``::`` form)."""
    value = value.strip()
    if is_id(value):
        return EdgeRef(id=value)
    if urn_type(value) != EDGE_TYPE:
        raise UrnError(
            "urn-not-qualified",
            value,
            message=f"expected an edge id or an edge URN (hrn:edge:<root>:<memory>:<loc>), got {value!r}",
        )
    # An edge URN has a node URN's grammar (memory, then a loc): read it with the node parser.
    rest = normalize_scheme(value).removeprefix("hrn:edge:")
    ref = parse_node_ref(f"hrn:node:{rest}")
    if ref.memory is None:  # pragma: no cover - a prefixed node URN always names its memory
        raise UrnError("urn-not-qualified", value)
    return EdgeRef(memory=ref.memory, loc=ref.loc)
