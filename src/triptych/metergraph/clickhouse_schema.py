"""Metergraph's ClickHouse schema: calls, retained content, and rollups the database maintains itself.

``calls`` is a MergeTree partitioned by UTC day and ordered by (workspace, ts_ms, id), so a workspace's
window is one range of the primary key; low-cardinality dimensions are ``LowCardinality``. Metadata
(``tags``, a JSON object) is kept as sent for the Debug view and split by the server at insert time into
``metadata`` (its string values, a ``Map(LowCardinality(String), String)``: a group-by on one key reads
one column) and ``metadata_other`` (keys whose value is not a string). The retention window is the table
``TTL``.

Rollups are ``AggregatingMergeTree`` tables fed by materialized views: the embedded engine's four
(``store.ROLLUPS``: daily by route; hourly, daily and weekly without the route) as grains of one table,
``rollups``, fed by one view (the weekly one read from the daily rows, ``GRAINS``), a daily metadata
rollup and the traces' bounds,
with the sums as ``SimpleAggregateFunction(sum, ...)`` and the latency histogram (``histogram.py``'s 96
buckets) as a mergeable ``sumMap`` of bucket -> count, so aggregates never scan raw calls and percentiles
come out of the same buckets as on the embedded engine. Empty strings stand for a missing route,
provider, model or environment in rollup keys, as there.
"""

from __future__ import annotations

from triptych.metergraph.call_model import ELIGIBLE_CHARS, PRICING_COLUMNS, ROLLUPS, SUMS

# 5: the rollups without metadata are grains of one table fed by one view (``GRAINS``), and the weekly
# ones are read from daily rows: three views and four parts fewer per INSERT (``RETIRED``).
# 6: the calls' pricing provenance (``store.PRICING_COLUMNS``), added to an older table (``ADDED``).
SCHEMA_VERSION = 6

_STR = "Nullable(String)"
_DIM = "LowCardinality(Nullable(String))"
_INT = "Nullable(Int64)"
_FLOAT = "Nullable(Float64)"
_FLAG = "Nullable(UInt8)"

# Every ``store.CALL_COLUMNS`` name with its ClickHouse type (workspace, app, source and id first).
CALL_TYPES: dict[str, str] = {
    "workspace": "LowCardinality(String)", "app": _DIM, "source": "LowCardinality(String)", "ts_ms": "Int64",
    "route": _DIM, "provider": _DIM, "model": _DIM, "environment": _DIM, "operation": _DIM,
    "latency_ms": _FLOAT, "ttft_ms": _FLOAT, "lat_bucket": "Nullable(UInt8)", "input_tokens": _INT,
    "output_tokens": _INT, "cache_read_tokens": _INT, "cache_write_tokens": _INT, "reasoning_tokens": _INT,
    "status": _DIM, "status_code": _DIM, "finish_reason": _DIM, "error": "UInt8", "error_type": _DIM,
    "endpoint": _DIM, "request_id": _STR, "session_id": _STR, "conversation_id": _STR, "trace_id": _STR,
    "span_id": _STR, "parent_span_id": _STR, "trace_name": _DIM, "template_hash": _STR, "unit_name": _DIM,
    "unit_count": _FLOAT, "tool_names": _STR, "tool_call_count": _INT, "stream": _FLAG, "batch": _FLAG,
    "func": _DIM, "module": _DIM, "tags": _STR, "sdk": _DIM, "sdk_version": _DIM, "runtime": _DIM,
    "cost_usd": _FLOAT, "computed_cost_usd": _FLOAT, "reported_cost_usd": _FLOAT,
    "cost_status": "LowCardinality(String)", "cost_unknown": "UInt8", "missing_rates": _DIM,
    "price_source": _STR, "has_content": "UInt8",
    "cache_write_5m_tokens": _INT, "cache_write_1h_tokens": _INT, "gateway": _DIM, "reported_cost_source": _DIM,
    "price_catalog": _DIM, "price_id": _DIM, "cost_provenance": _DIM,
}  # fmt: skip
# Columns a calls table of an earlier version lacks, added when a store opens it (NULL for its calls),
# by the column each adds: an open skips those its table has (``ClickHouseConnection``), since each ALTER,
# even one that changes nothing, costs the server a metadata round of its own at every open.
ADDED_COLUMNS = {
    f"ALTER TABLE calls ADD COLUMN IF NOT EXISTS {name} {CALL_TYPES[name]}": name for name in PRICING_COLUMNS
}
ADDED = tuple(ADDED_COLUMNS)

# The tags object's (key, raw JSON value) pairs: string values go to the map, the other keys to a list.
_PAIRS = "JSONExtractKeysAndValuesRaw(ifNull(tags, '{}'))"
_STRINGS = f"arrayFilter(kv -> startsWith(kv.2, '\"'), {_PAIRS})"


def calls_ddl(retention_days: int) -> str:
    columns = ",\n  ".join(f"{name} {kind}" for name, kind in {"id": "UInt64", **CALL_TYPES}.items())
    return f"""CREATE TABLE IF NOT EXISTS calls (
  {columns},
  metadata Map(LowCardinality(String), String) MATERIALIZED
    mapFromArrays(arrayMap(kv -> kv.1, {_STRINGS}), arrayMap(kv -> JSONExtractString(kv.2), {_STRINGS})),
  metadata_other Array(LowCardinality(String)) MATERIALIZED
    arrayMap(kv -> kv.1, arrayFilter(kv -> NOT startsWith(kv.2, '"'), {_PAIRS})),
  INDEX by_trace trace_id TYPE bloom_filter GRANULARITY 4,
  INDEX by_request request_id TYPE bloom_filter GRANULARITY 4
) ENGINE = MergeTree
PARTITION BY toDate(intDiv(ts_ms, 1000))
ORDER BY (workspace, ts_ms, id)
TTL {ttls(retention_days)["calls"]}"""


CONTENT_DDL = """CREATE TABLE IF NOT EXISTS call_content (
  workspace LowCardinality(String), call_id UInt64, ts_ms Int64,
  request_text Nullable(String), response_text Nullable(String), tool_calls Nullable(String)
) ENGINE = MergeTree ORDER BY (workspace, call_id)"""


def ttls(retention_days: int) -> dict[str, str]:
    """Each table's TTL expression for a retention of ``retention_days``: a call with its time, a rollup
    row with its bucket's end plus the window (plus a day, as a window may start mid-bucket), a trace's
    bounds with its last call, retained content with its call."""
    days = int(retention_days)
    starts = f"toDateTime(bucket * if(grain = {_HOURLY}, 3600, 86400))"
    return {
        "calls": f"toDateTime(intDiv(ts_ms, 1000)) + INTERVAL {days} DAY",
        "call_content": f"toDateTime(intDiv(ts_ms, 1000)) + INTERVAL {days} DAY",
        ROLLUP_TABLE: f"addDays({starts}, if(grain = {_HOURLY}, {days + 1}, {days + 2}))",
        META_ROLLUP: f"toDateTime(bucket * 86400) + INTERVAL {days + 2} DAY",
        TRACE_BOUNDS: f"toDateTime(intDiv(last_ms, 1000)) + INTERVAL {days + 1} DAY",
    }


def ttl_statements(retention_days: int) -> list[str]:
    """The TTLs of ``ttls`` set on tables that exist (created with another retention, or none): run with
    ``materialize_ttl_after_modify = 0``, they only change metadata; merges expire the rows."""
    return [f"ALTER TABLE {table} MODIFY TTL {expr}" for table, expr in ttls(retention_days).items()]


_INT_SUM = "SimpleAggregateFunction(sum, Int64)"
_FLOAT_SUM = "SimpleAggregateFunction(sum, Float64)"
# What each ``store.SUMS`` measure adds per call (a rollup row and a raw aggregate compute the same).
MEASURES: dict[str, str] = {
    "calls": "toInt64(count())",
    "errors": "toInt64(sum(error))",
    "cost_usd": "sum(ifNull(cost_usd, 0))",
    "input_tokens": "toInt64(sum(ifNull(input_tokens, 0)))",
    "output_tokens": "toInt64(sum(ifNull(output_tokens, 0)))",
    "cache_read_tokens": "toInt64(sum(ifNull(cache_read_tokens, 0)))",
    "cache_write_tokens": "toInt64(sum(ifNull(cache_write_tokens, 0)))",
    "reasoning_tokens": "toInt64(sum(ifNull(reasoning_tokens, 0)))",
    "latency_sum": "sum(ifNull(latency_ms, 0))",
    "latency_count": "toInt64(count(latency_ms))",
    "priced": "toInt64(countIf(cost_status = 'priced'))",
    "partial": "toInt64(countIf(cost_status = 'partial'))",
    "zero": "toInt64(countIf(cost_status = 'zero'))",
    "unpriced": "toInt64(countIf(cost_status = 'unpriced' AND cost_unknown = 0))",
    "unknown": "toInt64(sum(cost_unknown))",
}
assert tuple(MEASURES) == SUMS
# The latency histogram of a group: bucket -> calls, for calls with a latency.
HIST = (
    "sumMap(if(lat_bucket IS NULL, [], [assumeNotNull(lat_bucket)]),"
    " if(lat_bucket IS NULL, [], [toUInt64(1)]))"
)
_HIST_TYPE = "SimpleAggregateFunction(sumMap, Tuple(Array(UInt8), Array(UInt64)))"
_KEY = ("route", "provider", "model", "environment")


# The rollups without metadata (``store.ROLLUPS``) are grains of one table, ``rollups``, fed by one view:
# a grain's rows are (workspace, grain, bucket, route, provider, model, environment) with the sums and
# the histogram. A rollup -> (grain, its bucket in grain buckets): the daily one by route (grain 0), the
# hourly (1) and daily (2) ones without the route, and the weekly one read from the daily rows (7 a week).
# One view and one part per INSERT where version 4 had four tables, four views (two cascading: each
# costs every INSERT a query and a part even when fed a handful of rows) and four parts.
ROLLUP_TABLE = "rollups"
GRAINS: dict[str, tuple[int, int]] = {
    "rollup_daily": (0, 1),
    "rollup_hourly_coarse": (1, 1),
    "rollup_daily_coarse": (2, 1),
    "rollup_weekly_coarse": (2, 7),
}
assert set(GRAINS) == set(ROLLUPS)
_HOURLY = GRAINS["rollup_hourly_coarse"][0]


def rollups_ddl(retention_days: int) -> list[str]:
    """The rollups table and the view that feeds it from every insert into ``calls``. A row expires
    with its bucket's end plus the retention window (plus a day, as a window may start mid-bucket)."""
    sums = ",\n  ".join(
        f"{name} {_FLOAT_SUM if name in ('cost_usd', 'latency_sum') else _INT_SUM}" for name in SUMS
    )
    keys = ", ".join(f"{k} LowCardinality(String)" for k in _KEY)
    return [
        f"""CREATE TABLE IF NOT EXISTS {ROLLUP_TABLE} (
  workspace LowCardinality(String), grain UInt8, bucket Int64, {keys},
  {sums},
  hist {_HIST_TYPE}
) ENGINE = AggregatingMergeTree
ORDER BY (workspace, grain, bucket, {", ".join(_KEY)})
TTL {ttls(retention_days)[ROLLUP_TABLE]}""",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {ROLLUP_TABLE}_mv TO {ROLLUP_TABLE} AS {rollups_select()}",
    ]


def rollups_select() -> str:
    """The rows every grain gets from the calls (the view's query, and a rebuild's): the calls grouped
    once by hour and route, each group then counted in its three grains (by route per day, without it
    per hour and per day) and grouped again. Key columns are computed under other names: an alias equal
    to a column's name would shadow the column inside the measures."""
    measured = ", ".join(f"{expr} AS {name}" for name, expr in MEASURES.items())
    key_values = ", ".join(f"ifNull({k}, '') AS key_{k}" for k in _KEY)
    key_names = ", ".join(f"key_{k}" for k in _KEY)
    hourly = f"""SELECT workspace, hour, {key_names}, {measured}, {HIST} AS hist
  FROM (SELECT *, intDiv(ts_ms, 3600000) AS hour, {key_values} FROM calls)
  GROUP BY workspace, hour, {key_names}"""
    day = "intDiv(hour, 24)"  # the UTC day of an hour, as intDiv(ts_ms, 86400000)
    grains = [
        f"({GRAINS['rollup_daily'][0]}, {day}, key_route)",
        f"({_HOURLY}, hour, '')",
        f"({GRAINS['rollup_daily_coarse'][0]}, {day}, '')",
    ]
    summed = ", ".join(f"sum({name}) AS {name}" for name in SUMS)
    out_keys = ", ".join(f"key_{k} AS {k}" for k in _KEY[1:])
    return f"""SELECT workspace, g.1 AS grain, g.2 AS bucket, g.3 AS route, {out_keys}, {summed}, sumMap(hist) AS hist
FROM ({hourly})
ARRAY JOIN [{", ".join(grains)}] AS g
GROUP BY workspace, g.1, g.2, g.3, {", ".join(f"key_{k}" for k in _KEY[1:])}"""


# The metadata rollup: per UTC day, route, provider, model and environment, one row per (key, class,
# value) with the calls carrying that key. The class is the one ``clickhouse_call_store`` gives a raw call:
# 'v' an eligible string (its value kept), 'i' a longer string or a non-string value (value ''). Calls
# without the key are not in it: a read takes them as the route rollup's calls minus the key's rows.
# Keyed by key before day, so a group-by on one key reads one range; the row count grows with the
# distinct values per day, not with the calls.
META_ROLLUP = "rollup_meta_daily"
_META_KEY = (*_KEY, "key", "cls", "value")
_META_PAIRS = (
    f"arrayConcat(arrayMap((k, v) -> (k, if(lengthUTF8(v) <= {ELIGIBLE_CHARS}, 'v', 'i'),"
    f" if(lengthUTF8(v) <= {ELIGIBLE_CHARS}, v, '')), mapKeys(metadata), mapValues(metadata)),"
    " arrayMap(k -> (toString(k), 'i', ''), metadata_other))"
)


def meta_rollup_ddl(retention_days: int) -> list[str]:
    sums = ",\n  ".join(
        f"{name} {_FLOAT_SUM if name in ('cost_usd', 'latency_sum') else _INT_SUM}" for name in SUMS
    )
    keys = ", ".join(f"{k} LowCardinality(String)" for k in _KEY)
    return [
        f"""CREATE TABLE IF NOT EXISTS {META_ROLLUP} (
  workspace LowCardinality(String), key LowCardinality(String), bucket Int64, {keys},
  cls LowCardinality(String), value String,
  {sums},
  hist {_HIST_TYPE}
) ENGINE = AggregatingMergeTree
ORDER BY (workspace, key, bucket, {", ".join(_META_KEY[:-3])}, cls, value)
TTL {ttls(retention_days)[META_ROLLUP]}""",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {META_ROLLUP}_mv TO {META_ROLLUP} AS {meta_rollup_select()}",
    ]


def meta_rollup_select(where: str = "") -> str:
    """The rows the metadata rollup gets from the calls ``where`` selects (its view's query, a rebuild's)."""
    key_values = ", ".join(f"ifNull({k}, '') AS key_{k}" for k in _KEY)
    measured = ", ".join(f"{expr} AS {name}" for name, expr in MEASURES.items())
    key_out = ", ".join(f"key_{k} AS {k}" for k in _KEY)
    return f"""SELECT workspace, kv.1 AS key, bucket, {key_out}, kv.2 AS cls, kv.3 AS value, {measured},
  {HIST} AS hist
FROM (SELECT *, intDiv(ts_ms, 86400000) AS bucket, {key_values}, {_META_PAIRS} AS kvs FROM calls{where})
ARRAY JOIN kvs AS kv
GROUP BY workspace, kv.1, bucket, {", ".join(f"key_{k}" for k in _KEY)}, kv.2, kv.3"""


# Each trace's first and last call time, fed by a view: a trace page reads its traces' spans within
# those bounds (a range of the calls' primary key) instead of the whole window. Bloom filters on
# ``trace_id`` cannot do it for a page: with 50 ids in the IN list nearly every granule passes.
TRACE_BOUNDS = "trace_bounds"


def trace_bounds_ddl(retention_days: int) -> list[str]:
    return [
        f"""CREATE TABLE IF NOT EXISTS {TRACE_BOUNDS} (
  workspace LowCardinality(String), trace_id String,
  first_ms SimpleAggregateFunction(min, Int64), last_ms SimpleAggregateFunction(max, Int64)
) ENGINE = AggregatingMergeTree
ORDER BY (workspace, trace_id)
TTL {ttls(retention_days)[TRACE_BOUNDS]}""",
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {TRACE_BOUNDS}_mv TO {TRACE_BOUNDS} AS {trace_bounds_select()}",
    ]


def trace_bounds_select() -> str:
    return """SELECT workspace, assumeNotNull(trace_id) AS trace_id, min(ts_ms) AS first_ms, max(ts_ms) AS last_ms
FROM calls WHERE trace_id IS NOT NULL GROUP BY workspace, trace_id"""


# Tables fed by views that a database created before them fills once from the stored calls.
BACKFILLED = {
    ROLLUP_TABLE: rollups_select,
    META_ROLLUP: meta_rollup_select,
    TRACE_BOUNDS: trace_bounds_select,
}

# Tables and views of earlier schema versions, dropped when a store opens a database created by one (each
# statement is idempotent, so every worker may run them): a view first, so no INSERT feeds a table
# being dropped. Version 4's rollups without metadata (now grains of ``rollups``, filled from the calls
# by ``BACKFILLED``) and its weekly metadata rollup (reads sum the daily one).
RETIRED = tuple(
    statement
    for table in ("rollup_daily", "rollup_hourly_coarse", "rollup_daily_coarse", "rollup_weekly_coarse",
                  "rollup_meta_weekly")
    for statement in (f"DROP VIEW IF EXISTS {table}_mv", f"DROP TABLE IF EXISTS {table}")
)  # fmt: skip


def statements(retention_days: int) -> list[str]:
    """Every statement that brings a database (new, or of an earlier version) to this schema, in order
    (each is idempotent)."""
    out = [*RETIRED, calls_ddl(retention_days), *ADDED, CONTENT_DDL]
    ddl = {ROLLUP_TABLE: rollups_ddl(retention_days), META_ROLLUP: meta_rollup_ddl(retention_days)}
    ddl[TRACE_BOUNDS] = trace_bounds_ddl(retention_days)
    out.extend(table_ddl for table_ddl, _ in ddl.values())
    out.extend(view for _, view in ddl.values())
    return out
