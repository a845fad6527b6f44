"""Which clauses a ``CallFilter`` becomes, once for both engines.

Each engine's store builds its WHERE through ``filter_clauses`` with a ``Dialect`` of its own: the
dialect makes the placeholders (SQLite's ``?`` with a positional argument list, ClickHouse's typed
``{pN:Type}`` server-side parameters) and the few expressions the two SQLs write differently (a metadata
value, the sorted metadata keys); the clauses, their order and what an empty list means are here.
Placeholders are made in the order they appear in the SQL, which SQLite's positional arguments need.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.workload_match import SHAPE_SQL, WorkloadMatch, key_signature

# Value kinds a placeholder may carry (ClickHouse's names; SQLite ignores them).
TEXT = "String"
INT = "Int64"
# A call without a trace id is a trace of its own, keyed ``call:<id>``.
CALL_KEY_PREFIX = "call:"


class Dialect(Protocol):
    def param(self, value: Any, kind: str) -> str:
        """The placeholder of one value (recorded as the next argument)."""
        ...

    def one_of(self, column: str, values: Sequence[Any], kind: str) -> str:
        """``column`` equal to one of ``values`` (never empty)."""
        ...

    def metadata_equals(self, key: str, value: str) -> str:
        """The call's metadata has ``key`` with the string value ``value``."""
        ...

    # The sorted keys of a call's metadata, joined by U+001F ('' for none): ``workload_match.tags_signature``.
    keys_sql: str


def key_clauses(f: CallFilter, d: Dialect) -> list[str]:
    """The route, provider, model and environment filters, shared by raw calls and rollups (a rollup's
    keys hold '' where a call has NULL, which no filter value is)."""
    out = []
    for column, values in (
        ("route", f.routes),
        ("provider", f.providers),
        ("model", f.models),
        ("environment", f.environments),
    ):
        if values is not None:  # an empty list selects nothing
            out.append(d.one_of(column, list(values), TEXT) if values else "0")
    return out


def workload_clause(match: WorkloadMatch, d: Dialect) -> str:
    """The calls of a saved workload: its route, its exact set of metadata keys, one of its shapes."""
    route = "route IS NULL" if match.route is None else f"route = {d.param(match.route, TEXT)}"
    keys = f"{d.keys_sql} = {d.param(key_signature(match.tag_keys), TEXT)}"
    shapes = d.one_of(f"({SHAPE_SQL})", list(match.shapes), INT) if match.shapes else "0"
    return f"({route} AND {keys} AND {shapes})"


def trace_clause(trace_key: str, d: Dialect) -> str:
    """The calls of one trace: its trace id, or for ``call:<id>`` (the key of a call without a trace id,
    as trace reads list it) that one call."""
    if trace_key.startswith(CALL_KEY_PREFIX) and trace_key[len(CALL_KEY_PREFIX) :].isdigit():
        return f"(trace_id IS NULL AND id = {d.param(int(trace_key[len(CALL_KEY_PREFIX) :]), INT)})"
    return f"trace_id = {d.param(trace_key, TEXT)}"


def filter_clauses(f: CallFilter, d: Dialect) -> list[str]:
    """Every clause of ``f`` over the calls table, in SQL order."""
    clauses = [
        f"workspace = {d.param(f.workspace, TEXT)}",
        f"ts_ms >= {d.param(f.since_ms, INT)}",
        f"ts_ms < {d.param(f.until_ms, INT)}",
        *key_clauses(f, d),
    ]
    if f.status is not None:
        clauses.append(f"status = {d.param(f.status, TEXT)}")
    if f.trace_id is not None:
        clauses.append(trace_clause(f.trace_id, d))
    if f.request_id is not None:
        clauses.append(f"request_id = {d.param(f.request_id, TEXT)}")
    if f.workload is not None:
        clauses.append(workload_clause(f.workload, d))
    clauses.extend(d.metadata_equals(key, value) for key, value in f.metadata)
    return clauses
