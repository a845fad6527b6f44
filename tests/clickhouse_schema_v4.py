"""The ClickHouse objects of Metergraph's schema version 4 that version 5 retires
(``clickhouse_schema.RETIRED``), as version 4 created them: the weekly route-free and metadata rollups,
each fed by a view cascading from its daily rollup. For the migration's test and the views benchmark
(``bench/metergraph_ch_views.py``), which build a version-4 database with them."""

from __future__ import annotations

from triptych.metergraph.store import SUMS

_SUMS = ", ".join(
    f"{n} SimpleAggregateFunction(sum, {'Float64' if n in ('cost_usd', 'latency_sum') else 'Int64'})"
    for n in SUMS
)
_SUMMED = ", ".join(f"sum({n}) AS {n}" for n in SUMS)
_HIST = "hist SimpleAggregateFunction(sumMap, Tuple(Array(UInt8), Array(UInt64)))"
_KEYS = ", ".join(f"{k} LowCardinality(String)" for k in ("route", "provider", "model", "environment"))

V4_WEEKLY = (
    f"CREATE TABLE rollup_weekly_coarse (workspace LowCardinality(String), bucket Int64, {_KEYS}, {_SUMS},"
    f" {_HIST}) ENGINE = AggregatingMergeTree ORDER BY (workspace, bucket, route, provider, model, environment)",
    f"CREATE TABLE rollup_meta_weekly (workspace LowCardinality(String), key LowCardinality(String), bucket Int64,"
    f" {_KEYS}, cls LowCardinality(String), value String, {_SUMS}, {_HIST}) ENGINE = AggregatingMergeTree"
    " ORDER BY (workspace, key, bucket, route, provider, model, environment, cls, value)",
    "CREATE MATERIALIZED VIEW rollup_weekly_coarse_mv TO rollup_weekly_coarse AS SELECT workspace,"
    f" coarse AS bucket, route, provider, model, environment, {_SUMMED}, sumMap(hist) AS hist"
    " FROM (SELECT *, intDiv(bucket, 7) AS coarse FROM rollup_daily_coarse)"
    " GROUP BY workspace, coarse, route, provider, model, environment",
    "CREATE MATERIALIZED VIEW rollup_meta_weekly_mv TO rollup_meta_weekly AS SELECT workspace, key,"
    f" week AS bucket, route, provider, model, environment, cls, value, {_SUMMED}, sumMap(hist) AS hist"
    " FROM (SELECT *, intDiv(bucket, 7) AS week FROM rollup_meta_daily)"
    " GROUP BY workspace, week, key, route, provider, model, environment, cls, value",
)
