"""SQL pieces of the ClickHouse engine's stores: ``Where`` (ClickHouse's ``call_filters.Dialect``, every
value a server-side ``{name:Type}`` parameter, never inside the SQL text) and the expressions its reads
share."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from triptych.metergraph import histogram
from triptych.metergraph.call_filters import filter_clauses, key_clauses
from triptych.metergraph.call_model import ELIGIBLE_CHARS, CallFilter
from triptych.metergraph.clickhouse_schema import MEASURES

MEASURES_SQL = ", ".join(MEASURES.values())
# The class of one metadata key on a call (``mv`` is ``metadata[key]``, '' when the key is missing): 'v' an
# eligible string, 'i' present but not eligible, 'm' missing. Most calls carry a non-empty value, so the
# map is searched once for them.
META_CLASS = (
    f"multiIf(mv != '', if(lengthUTF8(mv) <= {ELIGIBLE_CHARS}, 'v', 'i'),"
    " mapContains(metadata, {mk:String}), 'v', has(metadata_other, {mk:String}), 'i', 'm')"
)
# A group's latency histogram straight from the calls: the count of each of the 96 buckets (a call
# without a latency falls outside the range). About half the cost of a per-call sumMap.
HIST_COUNTS = f"countResample(0, {histogram.BUCKETS}, 1)(ifNull(lat_bucket, 255))"
# The same counts from rollup rows' (buckets, counts) maps: about a quarter of ``sumMap``'s cost, which
# builds a map per group where this adds into 96 fixed slots.
HIST_SUM = f"sumResampleArray(0, {histogram.BUCKETS}, 1)(hist.2, hist.1)"
TRACE_KEY = "ifNull(trace_id, concat('call:', toString(id)))"
# One trace's summary over its matching calls (``trace_summaries``).
SUMMARY = (
    f"{TRACE_KEY} AS trace_key, max(trace_name), min(ts_ms), max(ts_ms), count(),"
    " sum(ifNull(input_tokens, 0)), sum(ifNull(output_tokens, 0)), sum(ifNull(cache_read_tokens, 0)),"
    " sum(ifNull(cache_write_tokens, 0)), sum(ifNull(reasoning_tokens, 0)), sum(cost_usd),"
    " countIf(cost_status IN ('unpriced', 'partial')), max(error), groupUniqArray(route),"
    " groupUniqArray(provider), groupUniqArray(model), groupUniqArray(environment), sum(latency_ms),"
    " countIf(environment IS NULL)"
)


class Where:
    """A WHERE clause whose values are all server-side parameters (named p0, p1, ...); the
    ``call_filters.Dialect`` of ClickHouse."""

    # A call's sorted metadata keys joined by U+001F, as ``workload_match.tags_signature`` (byte order).
    keys_sql = "arrayStringConcat(arraySort(JSONExtractKeys(ifNull(tags, '{}'))), char(31))"

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.params: dict[str, Any] = {}

    def param(self, value: Any, kind: str) -> str:
        name = f"p{len(self.params)}"
        self.params[name] = value
        return f"{{{name}:{kind}}}"

    def one_of(self, column: str, values: Sequence[Any], kind: str) -> str:
        return f"{column} IN {self.param(list(values), f'Array({kind})')}"

    def metadata_equals(self, key: str, value: str) -> str:
        k = self.param(key, "String")
        return f"mapContains(metadata, {k}) AND metadata[{k}] = {self.param(value, 'String')}"

    def add(self, clause: str) -> None:
        self.clauses.append(clause)

    def sql(self) -> str:
        return " AND ".join(self.clauses) if self.clauses else "1"


def rollup_keys(f: CallFilter, w: Where) -> None:
    """The route/provider/model/environment filters (a rollup's keys hold '' where a call has NULL)."""
    w.clauses.extend(key_clauses(f, w))


def call_where(f: CallFilter, w: Where | None = None) -> Where:
    w = w or Where()
    w.clauses.extend(filter_clauses(f, w))
    return w


def hist(counts: Sequence[int]) -> histogram.Hist:
    return np.array(counts, dtype=histogram.DTYPE)


def json_list(values: list[Any], with_null: bool = False) -> str:
    """A ``groupUniqArray`` as the JSON list the embedded engine's ``json_group_array(DISTINCT ...)`` gives
    (the readers sort it and drop nulls; a NULL environment marks an untagged span)."""
    out: list[Any] = sorted(v for v in values if v is not None)
    if with_null:
        out.append(None)
    return json.dumps(out)


def workspace_where(workspace: str) -> Where:
    w = Where()
    w.add(f"workspace = {w.param(workspace, 'String')}")
    return w
