"""Usage aggregates: groups add up to totals, the metadata null group, truncation, rollups agree with
raw scans, filters are exact, environments are scoped, credential-like keys are refused."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mg_support import NOW, agent, app, row

from triptych.metergraph import histogram
from triptych.metergraph.call_model import CallFilter
from triptych.metergraph.errors import ForbiddenError, InvalidArgument
from triptych.metergraph.keys import AgentPrincipal
from triptych.metergraph.service import Metergraph
from triptych.metergraph.usage import measures


def aggregates(mg: Metergraph, principal: AgentPrincipal | None = None, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "group_by": None, "days": None, "since": None, "until": None, "routes": None, "providers": None,
        "models": None, "environments": None, "metadata": None, "limit": 100,
    }  # fmt: skip
    args.update(kw)
    return mg.usage.aggregates(principal or agent(), **args)


def test_metadata_groups_and_unlisted_buckets_add_up_to_totals(mg: Metergraph) -> None:
    rows = (
        [row(tags={"prompt_id": f"p-{i % 7}"}) for i in range(40)]
        + [row(tags={"other": "x"}) for _ in range(5)]
        + [row(tags={"prompt_id": 7}) for _ in range(3)]
        + [row(tags={"prompt_id": "x" * 1001}) for _ in range(2)]
    )
    mg.ingest.ingest_document(app(), {"rows": rows})
    out = aggregates(mg, group_by=["metadata.prompt_id"], limit=3)
    unlisted = out["metadata_groups"]["unlisted"]
    listed_with_value = sum(i["calls"] for i in out["items"] if i["metadata.prompt_id"] is not None)
    assert listed_with_value + sum(b["calls"] for b in unlisted.values()) == out["totals"]["calls"] == 50
    assert unlisted["missing_key"]["calls"] == 5
    assert unlisted["ineligible_value"]["calls"] == 5
    assert out["coverage"]["rows"]["matched"] == 8  # seven values and the null group
    assert out["coverage"]["completeness"] == "partial"
    assert {"row_limit", "metadata_key_missing", "metadata_value_ineligible"} <= set(
        out["coverage"]["reasons"]
    )
    assert {w["code"] for w in out["warnings"]} >= {"truncated", "coverage_incomplete"}
    assert out["content_included"] is False


def test_a_key_no_call_carries_warns_outright_but_stays_complete(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(), row()]})
    out = aggregates(mg, group_by=["route", "metadata.prompt_idd"])
    assert out["items"] == [{**out["items"][0], "route": "support", "metadata.prompt_idd": None}]
    assert out["coverage"]["completeness"] == "complete"
    [warning] = [w for w in out["warnings"] if w["code"] == "metadata_key_mostly_missing"]
    assert "no call" in warning["message"]


def test_totals_cover_every_group_whatever_the_limit(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(route=f"r{i}") for i in range(12)]})
    out = aggregates(mg, group_by=["route"], limit=5)
    assert len(out["items"]) == 5
    assert out["totals"]["calls"] == 12
    assert out["coverage"]["rows"] == {
        "shape": "top_n",
        "returned": 5,
        "limit": 5,
        "truncated": True,
        "matched": 12,
    }


def test_missing_provider_model_and_route_are_named(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(provider=None, model=None, route=None)]})
    [item] = aggregates(mg, group_by=["provider", "model", "route"])["items"]
    assert (item["provider"], item["model"], item["route"]) == ("(unknown)", "(unknown)", "(unrouted)")
    assert item["pricing"]["unknown_calls"] == 1
    assert item["pricing"]["cost"] == "lower_bound"


def test_unpriced_models_make_the_cost_a_lower_bound(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(), row(model="in-house-model-7")]})
    out = aggregates(mg, group_by=["model"])
    assert out["pricing"]["cost"] == "lower_bound"
    assert out["pricing"]["unpriced_calls"] == 1
    by_model = {i["model"]: i for i in out["items"]}
    # A group with no priced call costs 0 as a number, as the product gives it, and its pricing says that
    # is a lower bound: no call of it has a price.
    unpriced = by_model["in-house-model-7"]
    assert unpriced["cost_usd"] == 0 and unpriced["cost_per_call_usd"] == 0
    assert unpriced["pricing"] == {**unpriced["pricing"], "cost": "lower_bound", "priced_calls": 0}
    assert by_model["gpt-4o"]["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)
    assert out["totals"]["cost_usd"] == by_model["gpt-4o"]["cost_usd"]


def test_a_free_model_costs_an_exact_zero_and_unpriced_calls_a_lower_bound_of_zero(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(model="in-house-model-7", route="r1")]})
    totals = aggregates(mg)["totals"]
    assert (totals["cost_usd"], totals["pricing"]["cost"]) == (0, "lower_bound")
    usage = mg.usage.usage(agent(), 7, 100, None)
    assert (usage["items"][0]["cost_usd"], usage["items"][0]["pricing"]["cost"]) == (0, "lower_bound")
    # A qualified gateway's charge of $0 (pricing.py): the call costs a real zero.
    free = row(route="r2", reported_cost_usd=0, gateway="openrouter", endpoint="chat.completions",
               reported_cost_source="openrouter.usage.cost")  # fmt: skip
    mg.ingest.ingest_document(app(), {"rows": [free]})
    by_route = {i["route"]: i for i in aggregates(mg, group_by=["route"])["items"]}
    assert (by_route["r1"]["cost_usd"], by_route["r1"]["pricing"]["cost"]) == (0, "lower_bound")
    assert (by_route["r2"]["cost_usd"], by_route["r2"]["pricing"]["cost"]) == (0, "exact")  # a real $0.00


@pytest.mark.parametrize(
    ("dims", "sources"),
    [
        (["provider", "model", "day"], {"rollup_daily_coarse", "rollup_hourly_coarse", "calls"}),
        (["provider", "model", "route", "day"], {"rollup_daily", "calls"}),
    ],
)
def test_rollups_answer_exactly_what_a_raw_scan_answers(
    mg: Metergraph, dims: list[str], sources: set[str]
) -> None:
    rnd = random.Random(4)
    rows = [
        row(
            minutes_ago=rnd.uniform(0, 60 * 24 * 20),
            route=rnd.choice(["a", "b", None]),
            provider=rnd.choice(["openai", "anthropic"]),
            model=rnd.choice(["gpt-4o", "claude-3-5-sonnet-latest", "gpt-4o-mini"]),
            latency_ms=rnd.lognormvariate(6, 1),
            environment=rnd.choice(["prod", "dev", None]),
            error=rnd.random() < 0.1,
        )
        for _ in range(400)
    ]
    for i in range(0, 400, 50):
        mg.ingest.ingest_document(app(), {"rows": rows[i : i + 50]})
    since, until = NOW - timedelta(days=9, hours=5, minutes=13), NOW - timedelta(hours=2, minutes=7)

    def exact() -> dict[str, Any]:
        return aggregates(mg, group_by=dims, since=since.isoformat(), until=until.isoformat(), limit=200)

    out = exact()
    assert set(out["evidence"]["sources"]) == sources
    f = CallFilter("w1", int(since.timestamp() * 1000), int(until.timestamp() * 1000))
    raw = mg.calls.aggregate_raw(f, dims, None)
    assert out["totals"]["calls"] == sum(int(a.get("calls")) for a in raw.values())
    assert out["coverage"]["rows"]["matched"] == len(raw)
    assert out["totals"]["cost_usd"] == pytest.approx(sum(a.get("cost_usd") for a in raw.values()))
    # days=N reads daily rollups only and agrees with the raw calls of those whole days.
    week = aggregates(mg, days=7, group_by=dims)
    start = (NOW.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=6)).timestamp()
    expected = mg.calls.aggregate_raw(
        CallFilter("w1", int(start * 1000), int(NOW.timestamp() * 1000)), [], None
    )
    assert set(week["evidence"]["sources"]) == sources - {"rollup_hourly_coarse", "calls"}
    assert week["totals"]["calls"] == int(expected[()].get("calls"))
    assert week["totals"]["p95_latency_ms"] is not None
    # Rebuilding the rollups from the raw calls gives the same answer (on ClickHouse too: its rollup rows
    # come back in a varying order, so equal costs may differ in their last bit, and groups are ranked
    # by the cost as shown).
    mg.calls.rebuild_rollups()
    assert exact()["items"] == out["items"]


def test_p95_comes_from_the_groups_own_calls_not_a_max_of_days(mg: Metergraph) -> None:
    fast = [row(minutes_ago=60 * 24 * d + 1, latency_ms=100) for d in range(3) for _ in range(30)]
    slow = [row(minutes_ago=60 * 24 * 1 + 1, latency_ms=10_000)]
    mg.ingest.ingest_document(app(), {"rows": fast[:45]})
    mg.ingest.ingest_document(app(), {"rows": fast[45:] + slow})
    [item] = aggregates(mg, group_by=["provider"])["items"]
    assert 85 <= item["p95_latency_ms"] <= 118  # one slow call in 91 is not the p95


@pytest.mark.parametrize(
    ("metadata", "matches"),
    [({"prompt_id": "p-1"}, 1), ({"prompt_id": "P-1"}, 0), ({"prompt_id": "p-1 "}, 0), ({"prompt_id": "p-10"}, 1),
     ({"prompt_id": ""}, 1), ({"n": "7"}, 0), ({"prompt_id": "p-1", "team": "a"}, 1), ({"prompt_id": "p-1", "team": "b"}, 0),
     ({"we.ird\"key": "v"}, 1)],
)  # fmt: skip
def test_metadata_filters_are_exact_case_sensitive_and_anded(
    mg: Metergraph, metadata: dict[str, str], matches: int
) -> None:
    mg.ingest.ingest_document(
        app(),
        {"rows": [row(tags={"prompt_id": "p-1", "team": "a"}), row(tags={"prompt_id": "p-10"}),
                  row(tags={"prompt_id": ""}), row(tags={"n": 7}), row(tags={"we.ird\"key": "v"}), row()]},
    )  # fmt: skip
    out = aggregates(mg, metadata=metadata)
    assert out["totals"]["calls"] == matches
    assert out["coverage"]["filters"]["metadata"] == [
        {"key": k, "value": v} for k, v in sorted(metadata.items())
    ]


@pytest.mark.parametrize(
    "key", ["api_key", "OpenAI-API-Key", "session.token", "X_Authorization", "db_password"]
)
def test_credential_like_keys_are_refused_without_repeating_them(mg: Metergraph, key: str) -> None:
    for kwargs in ({"metadata": {key: "guess"}}, {"group_by": [f"metadata.{key}"]}):
        with pytest.raises(InvalidArgument) as refused:
            aggregates(mg, **kwargs)
        assert key not in refused.value.message and "guess" not in refused.value.message


def test_metadata_bounds_are_enforced_without_echo(mg: Metergraph) -> None:
    for metadata in ({"k" * 201: "v"}, {"k": "v" * 1001}, {f"k{i}": "v" for i in range(6)}):
        with pytest.raises(InvalidArgument) as refused:
            aggregates(mg, metadata=metadata)
        assert "kkkk" not in refused.value.message and "vvvv" not in refused.value.message


def test_environment_allowlists_exclude_untagged_and_refuse_other_environments(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(environment="prod"), row(environment="dev"), row()]})
    assert aggregates(mg)["totals"]["calls"] == 3
    restricted = agent(environments=("prod",))
    assert aggregates(mg, restricted)["totals"]["calls"] == 1
    assert aggregates(mg, restricted, environments=["prod"])["totals"]["calls"] == 1
    with pytest.raises(ForbiddenError):
        aggregates(mg, restricted, environments=["dev"])
    assert aggregates(mg, environments=["dev", "prod"])["totals"]["calls"] == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"days": 7, "since": "2026-11-01T00:00:00Z", "until": "2026-11-02T00:00:00Z"},
        {"since": "2026-11-01T00:00:00Z"},
        {"since": "2026-08-01T00:00:00Z", "until": "2026-11-02T00:00:00Z"},
        {"since": "2026-11-02T00:00:00Z", "until": "2026-11-01T00:00:00Z"},
        {"since": "last tuesday", "until": "2026-11-01T00:00:00Z"},
        {"group_by": ["provider", "provider"]},
        {"group_by": ["metadata.a", "metadata.b"]},
        {"group_by": ["colour"]},
    ],
)
def test_bad_windows_and_groupings_are_invalid_arguments(mg: Metergraph, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        aggregates(mg, **kwargs)


def test_usage_lists_route_days_with_totals_over_the_window(mg: Metergraph) -> None:
    mg.ingest.ingest_document(
        app(), {"rows": [row(minutes_ago=60 * 24 * d + 5, route=r) for d in range(3) for r in "abc"]}
    )
    out = mg.usage.usage(agent(), 7, 4, None)
    assert len(out["items"]) == 4 and out["truncated"] is True
    assert out["totals"]["calls"] == 9
    assert out["items"][0]["date"] == NOW.date().isoformat()
    assert set(out["items"][0]) >= {"date", "route", "calls", "cost_usd", "input_tokens", "output_tokens",
                                    "avg_latency_ms", "p95_latency_ms", "error_calls"}  # fmt: skip
    assert mg.usage.usage(agent(), 7, 100, {"nope": "x"})["totals"]["calls"] == 0


def test_a_database_from_before_the_route_free_rollups_is_upgraded_and_backfilled(tmp_path: Path) -> None:
    from triptych.core.db import Database
    from triptych.metergraph.sqlite_call_store import SqliteCallStore
    from triptych.metergraph.sqlite_schema import MIGRATIONS

    old = Database(tmp_path / "metergraph.db", MIGRATIONS[:1])
    with old.transaction() as conn:
        conn.execute(
            "INSERT INTO calls (workspace, source, ts_ms, provider, model, latency_ms, lat_bucket, cost_usd, cost_status)"
            " VALUES ('w1', 'sdk', ?, 'openai', 'gpt-4o', 500, 38, 0.01, 'priced')",
            (int(NOW.timestamp() * 1000) - 60_000,),
        )
    old.close()
    store = SqliteCallStore.open(tmp_path / "metergraph.db")
    try:
        f = CallFilter("w1", 0, int(NOW.timestamp() * 1000) + 1)
        day = int(NOW.timestamp() * 1000) // 86_400_000
        [agg] = store.aggregate_rollups("rollup_daily_coarse", f, day, day + 1, ["model"], 1).values()
        assert (agg.get("calls"), agg.get("priced"), int(agg.hist.sum())) == (1, 1, 1)
    finally:
        store.close()


@pytest.mark.parametrize("days", [90, 30, 13])
def test_weekly_rollups_answer_exactly_what_a_raw_scan_answers(mg: Metergraph, days: int) -> None:
    rnd = random.Random(days)
    rows = [
        row(
            minutes_ago=rnd.uniform(0, 60 * 24 * 95),
            provider=rnd.choice(["openai", "anthropic", None]),
            model=rnd.choice(["gpt-4o", "claude-3-5-sonnet-latest", "no-such-model"]),
            latency_ms=rnd.lognormvariate(6, 1),
            environment=rnd.choice(["prod", "dev", None]),
            error=rnd.random() < 0.1,
        )
        for _ in range(600)
    ]
    for i in range(0, 600, 50):
        mg.ingest.ingest_document(app(), {"rows": rows[i : i + 50]})
    midnight = NOW.replace(hour=0, minute=0)
    since, until = NOW - timedelta(days=days - 1, hours=7, minutes=3), NOW - timedelta(hours=1, minutes=11)
    windows = [
        ({"days": days}, midnight - timedelta(days=days - 1), midnight + timedelta(days=1)),
        ({"since": since.isoformat(), "until": until.isoformat()}, since, until),
    ]
    for kwargs, lo, hi in windows:
        out = aggregates(mg, group_by=["provider", "model"], limit=200, **kwargs)
        assert "rollup_weekly_coarse" in out["evidence"]["sources"]
        f = CallFilter("w1", int(lo.timestamp() * 1000), int(hi.timestamp() * 1000))
        raw = mg.calls.aggregate_raw(f, ["provider", "model"], None)
        expected = {
            (p or "(unknown)", m or "(unknown)"): (
                int(a.get("calls")), int(a.get("errors")), measures(a)["cost_usd"],
                histogram.quantile(a.hist, 0.95),
            )
            for (p, m), a in raw.items()
        }  # fmt: skip
        got = {
            (i["provider"], i["model"]): (i["calls"], i["errors"], i["cost_usd"], i["p95_latency_ms"])
            for i in out["items"]
        }
        assert got.keys() == expected.keys()
        for key, (calls, errors, cost, p95) in expected.items():
            assert got[key][:2] == (calls, errors) and got[key][3] == p95
            assert got[key][2] == pytest.approx(cost)


def test_the_weekly_rollup_is_backfilled_from_the_daily_one_on_upgrade(tmp_path: Path) -> None:
    from triptych.metergraph.call_model import PRICING_COLUMNS
    from triptych.metergraph.ingest import IngestService
    from triptych.metergraph.pricing import Pricer
    from triptych.metergraph.sqlite_call_store import SqliteCallStore

    store = SqliteCallStore.open(tmp_path / "metergraph.db")
    rows = [row(minutes_ago=60 * 24 * d + 5, latency_ms=100 + d) for d in range(40)]
    IngestService(store, store.metadata, Pricer(), 5000).ingest_document(app(), {"rows": rows})
    store.fold_rollups()  # as ingest did in the same transaction before migration 5
    read = "SELECT * FROM rollup_weekly_coarse ORDER BY bucket, provider, model, environment"
    written = store.db.conn.execute(read).fetchall()
    with store.db.transaction() as conn:  # the database as it was before migration 4
        conn.execute("DROP TABLE rollup_weekly_coarse")
        conn.execute("DROP TABLE rollup_watermark")
        conn.execute("DROP TABLE rollup_folded")
        for column in PRICING_COLUMNS:  # migration 6's
            conn.execute(f"ALTER TABLE calls DROP COLUMN {column}")
        conn.execute("UPDATE schema_version SET version = 3 WHERE component = 'main'")
    store.close()
    store = SqliteCallStore.open(tmp_path / "metergraph.db")
    try:
        assert [tuple(r) for r in store.db.conn.execute(read)] == [tuple(r) for r in written]
        assert len(written) >= 6
    finally:
        store.close()
