"""The columnar projection answers exactly what the SQL scan of the calls answers: every filter kind,
the metadata classes, empty windows, across a reopen, after a torn append, per workspace."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mg_support import NOW, agent, app

from triptych.metergraph import column_scan
from triptych.metergraph.call_model import DIMENSIONS, AggRow, CallFilter
from triptych.metergraph.columns import ColumnProjection
from triptych.metergraph.service import COLUMNS_DIR, Metergraph
from triptych.metergraph.settings import load_metergraph_settings
from triptych.metergraph.sqlite_call_store import SqliteCallStore

DAY = 86_400_000
KEYS = ["prompt_id", "team", "a.b", "with space", 'q"uote', "é"]
# No NUL characters: SQLite's json_extract hands a value back cut at its first NUL (docs/decisions.md).
VALUES = ["p-1", "p-2", "P-1", "", " p-1", "x" * 1000, "x" * 1001, "中文"]
ROUTES = ["support", "search", "", None]
PAIRS = [("openai", "gpt-4o"), ("anthropic", "claude-3-5-haiku-latest"), ("in-house", "ft-v1"), (None, None)]
ENVS = ["prod", "staging", "", "  ", None]
STATUSES = ["success", "error", None]


def open_mg(data_dir: Path) -> Metergraph:
    return Metergraph.open(data_dir, load_metergraph_settings(max_rows=5000), clock=lambda: NOW)


@pytest.fixture
def mgc(tmp_path: Path) -> Iterator[Metergraph]:
    service = open_mg(tmp_path)
    yield service
    service.close()


def random_tags(rnd: random.Random) -> dict[str, Any] | None:
    if rnd.random() < 0.15:
        return None
    tags: dict[str, Any] = {}
    for key in rnd.sample(KEYS, rnd.randint(0, 3)):
        kind = rnd.random()
        if kind < 0.7:
            tags[key] = rnd.choice(VALUES[:4]) if rnd.random() < 0.8 else rnd.choice(VALUES)
        else:
            tags[key] = rnd.choice([7, 1.5, True, False, None, ["p-1"], {"p": "1"}])
    return tags


def random_rows(rnd: random.Random, count: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(count):
        provider, model = rnd.choice(PAIRS)
        row: dict[str, Any] = {
            "ts": (NOW - timedelta(minutes=rnd.uniform(-90, 6 * 24 * 60))).isoformat(),
            "route": rnd.choice(ROUTES),
            "provider": provider,
            "model": model,
            "input_tokens": rnd.choice([None, 0, rnd.randint(1, 5000)]),
            "output_tokens": rnd.choice([None, 0, rnd.randint(1, 900)]),
            "cache_read_tokens": rnd.choice([None, rnd.randint(0, 100)]),
            "reasoning_tokens": rnd.choice([None, rnd.randint(0, 100)]),
            "latency_ms": rnd.choice([None, 0.4, rnd.uniform(1, 20_000)]),
            "status": rnd.choice(STATUSES),
            "error": rnd.random() < 0.1,
            "environment": rnd.choice(ENVS),
            "tags": random_tags(rnd),
        }
        if rnd.random() < 0.1:
            row["cost_usd"] = round(rnd.uniform(0, 0.1), 6)
        rows.append({k: v for k, v in row.items() if v is not None or rnd.random() < 0.5})
    return rows


def ingest(mg: Metergraph, workspace: str, rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), 500):
        mg.ingest.ingest_document(app(workspace), {"rows": rows[start : start + 500]})


def random_filter(rnd: random.Random, workspace: str) -> CallFilter:
    now_ms = int(NOW.timestamp() * 1000)
    if rnd.random() < 0.1:  # an empty window
        since = until = now_ms + 100 * DAY
    else:
        since = now_ms - rnd.randint(0, 7) * DAY - rnd.randint(0, DAY)
        until = since + rnd.randint(1, 8) * DAY
    pick = lambda pool: rnd.sample(pool, rnd.randint(0, 2)) if rnd.random() < 0.3 else None  # noqa: E731
    metadata: list[tuple[str, str]] = []
    if rnd.random() < 0.4:
        metadata = sorted(
            {rnd.choice(KEYS): rnd.choice(VALUES[:5] + ["nope"]) for _ in range(rnd.randint(1, 2))}.items()
        )
    return CallFilter(
        workspace,
        since,
        until,
        routes=pick(["support", "search", "", "nope"]),
        providers=pick(["openai", "anthropic", "in-house"]),
        models=pick(["gpt-4o", "ft-v1", "claude-3-5-haiku-latest"]),
        environments=pick(["prod", "staging", "dev"]),
        metadata=metadata,
        status=rnd.choice([None, None, "success", "error", "nope"]),
    )


def assert_same(found: dict[tuple[Any, ...], AggRow] | None, expected: dict[tuple[Any, ...], AggRow]) -> None:
    assert found is not None
    assert set(found) == set(expected)
    for key, agg in expected.items():
        np.testing.assert_allclose(found[key].sums, agg.sums, rtol=1e-12, atol=1e-12, err_msg=repr(key))
        assert found[key].hist.tolist() == agg.hist.tolist(), key
        assert found[key].hist.dtype == agg.hist.dtype


def compare(store: SqliteCallStore, projection: ColumnProjection, seed: int, reads: int = 60) -> int:
    """Random reads through both paths; returns how many matched a call."""
    rnd = random.Random(seed)
    nonempty = 0
    for _ in range(reads):
        f = random_filter(rnd, rnd.choice(["w1", "w2", "w3"]))
        dims = rnd.sample(DIMENSIONS, rnd.randint(0, 3))
        meta_key = rnd.choice([*KEYS, "absent", None])
        expected = store.aggregate_calls_sql(f, dims, meta_key)
        assert_same(projection.aggregate(f, dims, meta_key), expected)
        nonempty += bool(expected)
    return nonempty


def test_the_projection_answers_what_the_sql_scan_answers(mgc: Metergraph) -> None:
    rnd = random.Random(4)
    ingest(mgc, "w1", random_rows(rnd, 1500))
    ingest(mgc, "w2", random_rows(rnd, 400))
    assert compare(mgc.calls, mgc.columns, seed=1, reads=300) > 50
    # Later batches are caught up before the next read.
    ingest(mgc, "w1", random_rows(rnd, 300))
    assert compare(mgc.calls, mgc.columns, seed=2) > 5


def test_every_metadata_class_is_counted_like_sql(mgc: Metergraph) -> None:
    rows = [
        {"tags": {"k": "v"}},
        {"tags": {"k": "V"}},
        {"tags": {"k": "x" * 1000}},
        {"tags": {"k": "x" * 1001}},
        {"tags": {"k": 1}},
        {"tags": {"k": None}},
        {"tags": {"k": ["v"]}},
        {"tags": {"other": "v"}},
        {},
    ]
    ingest(mgc, "w1", [{"ts": NOW.isoformat(), "route": "r", **r} for r in rows])
    f = CallFilter("w1", 0, int(NOW.timestamp() * 1000) + DAY)
    expected = mgc.calls.aggregate_calls_sql(f, [], "k")
    assert {k[0] for k in expected} == {"v", "m", "i"}
    assert_same(mgc.columns.aggregate(f, [], "k"), expected)
    for value in ("v", "V", "1", "x" * 1000):
        pair = CallFilter("w1", f.since_ms, f.until_ms, metadata=[("k", value)])
        assert_same(
            mgc.columns.aggregate(pair, ["route"], None), mgc.calls.aggregate_calls_sql(pair, ["route"], None)
        )


def test_aggregates_are_the_same_response_with_and_without_the_projection(mgc: Metergraph) -> None:
    ingest(mgc, "w1", random_rows(random.Random(8), 800))
    reads: list[dict[str, Any]] = [
        {"group_by": ["metadata.prompt_id"], "days": 7},
        {"group_by": ["route", "metadata.team"], "days": 3, "limit": 3},
        {"group_by": ["day", "provider", "metadata.a.b"], "days": 7, "environments": ["prod"]},
        {"group_by": ["model"], "days": 7, "metadata": {"prompt_id": "p-1"}},
        {
            "group_by": ["metadata.prompt_id"],
            "since": "2026-11-27T05:00:00Z",
            "until": "2026-11-30T07:30:00Z",
        },
    ]
    for read in reads:
        args: dict[str, Any] = {
            "group_by": None, "days": None, "since": None, "until": None, "routes": None, "providers": None,
            "models": None, "environments": None, "metadata": None, "limit": 100, **read,
        }  # fmt: skip
        with_columns = mgc.usage.aggregates(agent(), **args)
        columns, mgc.calls.columns = mgc.calls.columns, None
        try:
            without = mgc.usage.aggregates(agent(), **args)
        finally:
            mgc.calls.columns = columns
        assert with_columns == without
    usage = mgc.usage.usage(agent(), 7, 100, {"team": "p-2"})
    mgc.calls.columns = None
    assert usage == mgc.usage.usage(agent(), 7, 100, {"team": "p-2"})


class CountingSource:
    def __init__(self, store: SqliteCallStore) -> None:
        self.store = store
        self.fetched = 0

    def calls_after(self, after_id: int, limit: int) -> list[tuple[Any, ...]]:
        found = self.store.calls_after(after_id, limit)
        self.fetched += len(found)
        return found

    def max_call_id(self) -> int:
        return self.store.max_call_id()

    def call_ts(self, call_id: int) -> int | None:
        return self.store.call_ts(call_id)


def test_a_reopened_projection_reads_its_files_and_catches_up_only_new_calls(tmp_path: Path) -> None:
    rnd = random.Random(5)
    mg = open_mg(tmp_path)
    ingest(mg, "w1", random_rows(rnd, 700))
    ingest(mg, "w2", random_rows(rnd, 200))
    compare(mg.calls, mg.columns, seed=3, reads=5)
    mg.close()  # writes the files

    mg = open_mg(tmp_path)
    ingest(mg, "w1", random_rows(rnd, 50))
    mg.columns.close()  # never opened (it loads on first use): read its files through a counting source
    source = CountingSource(mg.calls)
    projection = ColumnProjection(tmp_path / COLUMNS_DIR, source)
    assert compare(mg.calls, projection, seed=4) > 5
    assert source.fetched == 50
    projection.close()
    mg.close()


def test_a_torn_append_is_truncated_to_the_last_state(tmp_path: Path) -> None:
    rnd = random.Random(6)
    mg = open_mg(tmp_path)
    ingest(mg, "w1", random_rows(rnd, 600))
    compare(mg.calls, mg.columns, seed=5, reads=3)
    mg.close()
    directory = tmp_path / COLUMNS_DIR / "0"
    sizes = {p.name: p.stat().st_size for p in directory.iterdir()}
    for name in ("ts_ms.bin", "cost_usd.bin", "p_row.bin", "tag_value.jsonl", "route.jsonl"):
        with open(directory / name, "ab") as torn:
            torn.write(b"\x01\x02\x03")
    mg = open_mg(tmp_path)
    source = CountingSource(mg.calls)
    projection = ColumnProjection(tmp_path / COLUMNS_DIR, source)
    mg.columns.close()
    ingest(mg, "w1", random_rows(rnd, 40))
    assert compare(mg.calls, projection, seed=6) > 5
    assert source.fetched == 40  # truncated, not rebuilt
    assert all(
        (directory / name).stat().st_size == size for name, size in sizes.items() if name.endswith(".bin")
    )
    projection.close()
    mg.close()


def test_a_file_shorter_than_its_state_rebuilds_from_the_calls(tmp_path: Path) -> None:
    mg = open_mg(tmp_path)
    ingest(mg, "w1", random_rows(random.Random(7), 300))
    compare(mg.calls, mg.columns, seed=7, reads=2)
    mg.close()
    path = tmp_path / COLUMNS_DIR / "0" / "model.bin"
    path.write_bytes(path.read_bytes()[:-4])
    mg = open_mg(tmp_path)
    source = CountingSource(mg.calls)
    projection = ColumnProjection(tmp_path / COLUMNS_DIR, source)
    mg.columns.close()
    assert compare(mg.calls, projection, seed=8) > 3
    assert source.fetched == 300
    projection.close()
    mg.close()


def test_a_second_process_on_the_same_files_scans_sql(mgc: Metergraph, tmp_path: Path) -> None:
    ingest(mgc, "w1", random_rows(random.Random(9), 200))
    f = CallFilter("w1", 0, int(NOW.timestamp() * 1000) + DAY)
    assert mgc.columns.aggregate(f, [], "prompt_id") is not None  # the owner
    other = ColumnProjection(tmp_path / COLUMNS_DIR, mgc.calls)  # flock: another open file, not the owner
    assert other.aggregate(f, [], "prompt_id") is None
    other.close()
    other_store = SqliteCallStore.open(tmp_path / "metergraph.db")
    other_store.columns = ColumnProjection(tmp_path / COLUMNS_DIR, other_store)
    assert_same(
        other_store.aggregate_raw(f, ["model"], "prompt_id"),
        mgc.calls.aggregate_calls_sql(f, ["model"], "prompt_id"),
    )
    other_store.close()


def test_far_behind_the_read_scans_sql_while_the_background_catches_up(
    mgc: Metergraph, tmp_path: Path
) -> None:
    ingest(mgc, "w1", random_rows(random.Random(10), 900))
    mgc.columns.close()
    projection = ColumnProjection(
        tmp_path / "lagging", mgc.calls, interval=0.05, read_catch_up_limit=100, chunk=64
    )
    f = CallFilter("w1", 0, int(NOW.timestamp() * 1000) + DAY)
    assert projection.aggregate(f, [], "team") is None
    for _ in range(200):
        if projection.status()["watermark"] == mgc.calls.max_call_id():
            break
        projection._stop.wait(0.05)
    assert_same(
        projection.aggregate(f, ["route"], "team"), mgc.calls.aggregate_calls_sql(f, ["route"], "team")
    )
    projection.close()


@pytest.mark.parametrize("bins", [1, 64, 4096])
def test_many_groups_are_counted_like_few(
    mgc: Metergraph, monkeypatch: pytest.MonkeyPatch, bins: int
) -> None:
    # A small bin budget takes the paths a request-id tag takes at scale: groups renumbered (by bincount
    # or by sorting) and counted without (group x code) bins.
    monkeypatch.setattr(column_scan, "_MAX_BINS", bins)
    rnd = random.Random(11)
    ingest(mgc, "w1", random_rows(rnd, 600))
    assert compare(mgc.calls, mgc.columns, seed=12, reads=120) > 10


def test_a_window_leaving_out_a_few_calls_drops_exactly_those(mgc: Metergraph) -> None:
    # Most calls selected: the scan runs over every row and drops the others as an extra group.
    rnd = random.Random(13)
    rows = random_rows(rnd, 400)
    ingest(mgc, "w1", rows)
    now_ms = int(NOW.timestamp() * 1000)
    for since in (now_ms - 5 * DAY, now_ms - 4 * DAY):
        f = CallFilter("w1", since, now_ms + DAY)
        for dims in ([], ["day"], ["route", "model"]):
            for meta_key in (None, "prompt_id"):
                expected = mgc.calls.aggregate_calls_sql(f, dims, meta_key)
                assert_same(mgc.columns.aggregate(f, dims, meta_key), expected)
