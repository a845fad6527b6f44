"""The usage page's series: the top groups charted by day, every other call in "(other)", all adding up
to the tool's totals, with "(other)"'s p95 read from its own calls' histogram."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from mg_support import agent, app, row

from triptych.metergraph.errors import InvalidArgument
from triptych.metergraph.pages import usage_view
from triptych.metergraph.service import Metergraph


def test_groups_past_the_charted_ones_add_up_in_other_with_their_own_p95(mg: Metergraph) -> None:
    rows = []
    for i in range(12):  # 12 unpriced models, equal calls: the first 8 by name are charted
        for day in (0, 2):
            rows += [row(minutes_ago=day * 1440 + 5, model=f"m-{i:02d}", latency_ms=100 + 1000 * (i >= 8),
                         input_tokens=1000 * (12 - i)) for _ in range(3)]  # fmt: skip
    rows.append(row(minutes_ago=5, model=None, provider=None))  # an unknown model goes to "(other)" too
    mg.ingest.ingest_rows(app(), rows, "sdk")
    data = usage_view.overview(mg.usage, agent(), 7, "model")
    names = [s["name"] for s in data["chart"]["series"]]
    assert names == [f"m-{i:02d}" for i in range(8)] + [usage_view.OTHER]
    other = data["chart"]["series"][-1]
    assert sum(other["calls"]) == 4 * 2 * 3 + 1
    assert sum(sum(s["calls"]) for s in data["chart"]["series"]) == data["table"]["totals"]["calls"] == 73
    assert sum(sum(s["errors"]) for s in data["chart"]["series"]) == data["table"]["totals"]["errors"]
    today = data["chart"]["x"].index(max(data["chart"]["x"]))
    assert other["p95_latency_ms"][today] > 900  # the slow models' latency, not the charted ones'
    assert data["chart"]["series"][0]["p95_latency_ms"][today] < 150
    assert len(data["chart"]["x"]) == 7 and other["calls"][today - 1] == 0


def test_the_page_query_is_checked() -> None:
    assert usage_view.parse_query(None, None) == (7, "provider")
    assert usage_view.parse_query("90", "route") == (90, "route")
    for days, by in (
        ("0", None),
        ("91", None),
        ("7.5", None),
        ("-1", None),
        ("²", None),
        ("٣", None),
        ("0007", None),
        (None, "day"),
        (None, "metadata.x"),
    ):
        with pytest.raises(InvalidArgument):
            usage_view.parse_query(days, by)


def test_a_day_with_only_unpriced_calls_is_a_gap_and_the_days_are_utc_dates(mg: Metergraph) -> None:
    rows = [row(minutes_ago=5, model="gpt-4o"), row(minutes_ago=5, model="no-such-model-xyz")]
    rows += [row(minutes_ago=2 * 1440 + 5, model="no-such-model-xyz") for _ in range(3)]
    rows.append(row(minutes_ago=2 * 1440 + 5, model=None))  # unknown: no price either
    mg.ingest.ingest_rows(app(), rows, "sdk")
    chart = usage_view.overview(mg.usage, agent(), 7, "provider")["chart"]
    (openai,) = chart["series"]
    today, two_ago = 6, 4
    assert openai["cost_usd"][today] > 0 and openai["unpriced"][today] == 1  # a lower bound: drawn
    assert openai["cost_usd"][two_ago] is None and openai["unpriced"][two_ago] == 4  # nothing priced: a gap
    assert openai["cost_usd"][today - 1] == 0 and openai["calls"][today - 1] == 0  # no calls: $0, drawn
    assert chart["unpriced"] == {"calls": 4, "days": 1}
    now = mg.usage.clock()
    assert chart["days"][today] == now.astimezone(UTC).date().isoformat()
    assert chart["x"][today] == int(datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp())
    assert chart["labels"][today] == f"{now:%b} {now.day}"
