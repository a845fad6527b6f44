"""The ClickHouse engine answers every read exactly as the embedded engine does, on randomized traffic:
costs, cost_status counts, percentiles, warnings, coverage, cursors, over every filter and grouping path;
workload classification, a workload's calls and what an analysis run samples of them."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mg_support import NOW, agent, app, open_engine

from triptych.metergraph.analysis_sources import StoreWorkloads
from triptych.metergraph.service import Metergraph

ROUTES = ["support", "search", "summarize", None]
MODELS = [("openai", "gpt-4o"), ("openai", "gpt-4o-mini"), ("anthropic", "claude-3-5-sonnet-latest"),
          ("openai", "in-house-model-7"), (None, None)]  # fmt: skip
ENVS = ["prod", "dev", "", None]


def traffic(seed: int, n: int) -> list[dict[str, Any]]:
    """``n`` calls over the last 40 days: traces of 1-4 spans, metadata of every class, odd prices."""
    rnd = random.Random(seed)
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        trace = rnd.choice([None, f"t{rnd.randrange(10**9)}"])
        start = NOW - timedelta(minutes=rnd.uniform(1, 40 * 24 * 60))
        for span in range(rnd.randint(1, 4) if trace else 1):
            provider, model = rnd.choice(MODELS)
            tags: dict[str, Any] = {}
            if rnd.random() < 0.8:
                tags["prompt_id"] = rnd.choice(["p1", "p2", "p3", "x" * 1001, 7, None, "é-prompt"])
            if rnd.random() < 0.5:
                tags["team"] = rnd.choice(["a", "b"])
            row: dict[str, Any] = {
                "ts": (start + timedelta(seconds=span * rnd.uniform(0, 90))).isoformat(),
                "route": rnd.choice(ROUTES),
                "provider": provider,
                "model": model,
                "environment": rnd.choice(ENVS),
                "input_tokens": rnd.choice([None, rnd.randrange(5000)]),
                "output_tokens": rnd.randrange(800),
                "cache_read_tokens": rnd.choice([None, rnd.randrange(300)]),
                "latency_ms": rnd.choice([None, 0.4, rnd.lognormvariate(6, 1.2)]),
                "status": rnd.choice(["success", "success", "error"]),
                "request_id": f"r{rnd.randrange(50)}",
                "trace_name": rnd.choice(["agent", "rag", None]),
            }
            if rnd.random() < 0.1:
                row["cost_usd"] = rnd.choice([0.0, round(rnd.random() / 100, 6)])
            if trace:
                row["trace_id"] = trace
            if tags:
                row["tags"] = tags
            rows.append(row)
    return rows[:n]


@pytest.fixture
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Metergraph, Metergraph]]:
    embedded = open_engine(request, "sqlite", tmp_path / "sqlite", max_rows=5000)
    server = open_engine(request, "clickhouse", tmp_path / "clickhouse", max_rows=5000)
    yield embedded, server
    embedded.close()
    server.close()


def same(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats to 1e-9 relative (the engines add floats in different orders)."""
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), path
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def agree(engines: tuple[Metergraph, Metergraph], read: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``read`` ("service.method") with these arguments on both engines: the same answer."""
    service, method = read.split(".")
    embedded, server = (getattr(getattr(mg, service), method)(*args, **kwargs) for mg in engines)
    same(embedded, server)
    return dict(embedded)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_engines_agree_on_every_read_of_randomized_traffic(
    engines: tuple[Metergraph, Metergraph], seed: int
) -> None:
    rows = traffic(seed, 700)
    for mg in engines:
        for start in range(0, len(rows), 150):
            mg.ingest.ingest_document(app(), {"rows": rows[start : start + 150]})
    rnd = random.Random(seed)
    since = (NOW - timedelta(days=20, hours=3, minutes=17)).isoformat()
    until = (NOW - timedelta(hours=5, minutes=41)).isoformat()
    windows: list[dict[str, Any]] = [{"days": 7}, {"days": 30}, {"since": since, "until": until},
                                     {"since": since, "until": NOW.isoformat()}]  # fmt: skip
    filters: list[dict[str, Any]] = [{}, {"routes": ["support", "search"]}, {"providers": ["openai"]},
               {"models": ["gpt-4o", "in-house-model-7"]}, {"environments": ["prod"]}, {"routes": []},
               {"metadata": {"prompt_id": "p1"}}, {"metadata": {"team": "a", "prompt_id": "p2"}}]  # fmt: skip
    dims = ["provider", "model", "route", "day"]
    groupings = [list(c) for k in range(3) for c in itertools.combinations(dims, k)]
    groupings += [["metadata.prompt_id"], ["route", "metadata.prompt_id"], ["metadata.team", "day"],
                  ["metadata.nosuch"]]  # fmt: skip
    checked = 0
    for group_by, window, flt in itertools.product(groupings, windows, filters):
        if rnd.random() > 0.35:
            continue  # a random third of the grid per seed keeps the test short
        limit = rnd.choice([3, 100])
        out = agree(engines, "usage.aggregates", agent(), group_by=group_by, limit=limit, **window, **flt)
        checked += 1
        assert out["totals"]["calls"] >= 0
    assert checked > 50
    restricted = agent(environments=("prod", "dev"))
    agree(engines, "usage.aggregates", restricted, group_by=["model", "route"], days=30)
    for days in (1, 7, 40):
        out = agree(engines, "usage.usage", agent(), days, 50, None)
    assert out["totals"]["calls"] > 0
    agree(engines, "usage.usage", agent(), 30, 10, {"prompt_id": "p3"})
    # Trace pages, followed to the end through their cursors, with every filter.
    for kwargs in ({}, {"route": "support"}, {"status": "error"}, {"environment": ["prod"]},
                   {"metadata": {"team": "b"}}, {"request_id": "r7"}, {"days": 30, "limit": 7}):  # fmt: skip
        pages = 0
        cursor = None
        while pages < 6:
            args = {**kwargs, "cursor": cursor} if cursor else kwargs
            page = agree(engines, "traces.query", agent(), **args)
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages >= 1
    for kwargs in (
        {"sample": "spread", "days": 30},
        {"sample": "spread", "environment": ["dev"], "limit": 4},
    ):
        agree(engines, "traces.query", restricted, **kwargs)
    page = agree(engines, "traces.query", agent(), days=30, limit=20)
    for trace in page["traces"][:8]:
        agree(engines, "traces.get_trace", agent(), trace["trace_id"])
    agree(engines, "workspace.routes", agent())
    assert json.dumps(page)  # the answers are plain JSON on both engines


def test_the_engines_agree_on_workloads_their_calls_and_their_replayable_samples(
    engines: tuple[Metergraph, Metergraph],
) -> None:
    rows = traffic(3, 400)
    rnd = random.Random(3)
    for row in rows:
        if rnd.random() < 0.4:  # retained content: a request, and mostly a response
            row["request_json"] = {"messages": [{"role": "user", "content": f"q{rnd.randrange(10**6)}"}]}
            if rnd.random() < 0.8:
                row["response_text"] = f"a{rnd.randrange(10**6)}"
    for mg in engines:
        mg.metadata.set_retain_content("w1", True, NOW.isoformat())
        mg.ingest.ingest_document(app(), {"rows": rows})
    classified = [mg.workloads.start_classification(agent(), days=30) for mg in engines]
    for doc in classified:
        del doc["run"]  # its id and times are the run's own
    same(*classified)
    workloads = classified[0]["workloads"]
    assert len(workloads) >= 3
    agree(engines, "workspace.routes", agent())
    for w in workloads[:4]:
        page = agree(engines, "traces.query", agent(), workload=w["workload_id"], days=30, limit=50)
        assert page["traces"]
        agree(engines, "traces.query", agent(), workload=w["workload_id"], sample="spread", days=30, limit=5)
    # What an analysis run reads: each workload's usage and reference model, and its newest samples.
    since, until = int((NOW - timedelta(days=30)).timestamp() * 1000), int(NOW.timestamp() * 1000)
    sources = [StoreWorkloads(mg.calls, mg.metadata, mg.workloads) for mg in engines]
    specs = [source.workloads("w1", since, until) for source in sources]
    same(*([asdict(s) for s in found] for found in specs))
    samples = [[asdict(c) for spec in found for c in source.sample("w1", spec, since, until, 5)]
               for source, found in zip(sources, specs, strict=True)]  # fmt: skip
    same(*samples)
    assert samples[0] and all(c["request_text"] and c["response_text"] for c in samples[0])
