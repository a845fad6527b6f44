"""The column-by-column normalisation stores exactly what the row-by-row code stored, and refuses a bad
batch with the same message: compared with the previous code, kept verbatim in ``reference_ingest.py``,
over random batches full of unusual values (types, lengths, blanks, missing keys, outcomes, content)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import reference_ingest
from mg_support import app

from triptych.metergraph.call_model import HIST_COLUMNS, ROLLUP_KEY, ROLLUPS, SUMS, CallBatch
from triptych.metergraph.errors import BadBatch
from triptych.metergraph.ingest import (
    _FLOAT_FIELDS,
    _INT_FIELDS,
    _STR_FIELDS,
    IngestService,
    _iso_utc_ms,
    parse_ts,
)
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.sqlite_rollups import ROLLUP_PARAMS, rollup_deltas

BASE = datetime(2026, 11, 1, tzinfo=UTC)
PAIRS = [("openai", "gpt-4o"), ("anthropic", "claude-3-5-haiku-latest"), ("OpenAI", "GPT-4o-mini"),
         ("in-house", "ft-unknown"), ("gemini", "gemini-2.5-pro"), (None, "gpt-4.1"), ("openai", None)]  # fmt: skip
ODD = [None, "", " ", "x", "ERROR", "é中", "a" * 600, 0, 7, -3, 1.5, float("nan"), float("inf"), True,
       False, {"k": "v"}, [1, 2], 2**70, "2026-11-01T10:00:00Z"]  # fmt: skip


def _odd(rnd: random.Random) -> Any:
    return rnd.choice(ODD)


def _row(rnd: random.Random, odd: float) -> Any:
    if rnd.random() < odd / 10:
        return rnd.choice(["not a row", 3, None, [1]])
    provider, model = rnd.choice(PAIRS)
    ts: Any = (BASE + timedelta(seconds=rnd.randint(0, 3 * 86_400))).isoformat()
    if rnd.random() < 0.3:
        ts = rnd.choice([ts.replace("+00:00", "Z"), ts.replace("+00:00", ""), ts.replace("+00:00", "+02:00"),
                         1_790_000_000.5, 1_790_000_000_123, 1_790_000_000, "2026-11-01"])  # fmt: skip
    row: dict[str, Any] = {
        "ts": ts, "route": rnd.choice(["a", "b", None, "c" * 40]), "provider": provider, "model": model,
        "input_tokens": rnd.choice([0, 5, 1200, 300_000, None]), "output_tokens": rnd.choice([0, 80, None]),
        "latency_ms": rnd.choice([0.4, 12.5, 812.0, 812, None, 1.0, 1.18]), "status": rnd.choice(["success", "error", None]),
        "trace_id": f"t{rnd.randint(0, 30)}", "environment": rnd.choice(["prod", "dev", None, "  ", ""]),
        "sdk": "python", "sdk_version": "0.6.12",
    }  # fmt: skip
    for name, values in (
        ("cache_read_tokens", [10, 400, None]), ("cache_write_tokens", [5, None]), ("reasoning_tokens", [30, None]),
        ("ttft_ms", [3.5, 9, None]), ("unit_count", [1, 2.5]), ("status_code", ["error", "200", 500, None]),
        ("error", [True, False, "boom", None, 0, 1]), ("error_type", ["Timeout", None, ""]),
        ("tags", [{"prompt_id": "p-1", "team": "a"}, {}, None, {"n": 1}, {"k": "é\u2028"}, {"s": "\ud800"}]),
        ("metadata", [{"m": "1"}, None]), ("reported_cost_usd", [0.25, 0, None, "0.0125", "1E-7", "-1", "1e9"]),
        ("cost_usd", [1.5, None, "0.30"]),
        ("stream", [True, False, None, 1]), ("batch", [False, None]), ("tool_names", [["a", "b"], None, "x"]),
        ("tool_calls", [[{"name": "a"}], [], None, {"x": 1}]), ("request_json", ["{}", {"m": 1}, None]),
        ("response_text", ["hi", None]), ("content_opted_in", [False, True]), ("event_type", ["outcome", "call"]),
        ("span_id", ["s1", None]), ("operation", ["chat", None]), ("runtime", ["cpython", None]),
    ):  # fmt: skip
        if rnd.random() < 0.15:
            row[name] = rnd.choice(values)
    if rnd.random() < odd:
        row[rnd.choice(["ts", *_STR_FIELDS, *_INT_FIELDS, *_FLOAT_FIELDS, "tags", "reported_cost_usd"])] = (
            _odd(rnd)
        )
    return row


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def _compare(rows: list[Any], retain: bool) -> str:
    """Normalise with both implementations; assert identical results. Returns what happened."""
    expected_error = got_error = None
    try:
        expected = reference_ingest.normalize_rows(Pricer(), app(), rows, "sdk", retain)
    except Exception as exc:  # BadBatch, or what the previous code let through (a year past 9999)
        expected_error = (type(exc), str(exc))
    service = IngestService(None, None, Pricer(), 5000)  # type: ignore[arg-type]  # normalize() needs no store
    try:
        got = service.normalize(app(), rows, "sdk", retain)
    except Exception as exc:
        got_error = (type(exc), str(exc))
    if expected_error is not None and expected_error[0] is not BadBatch:
        # The previous code crashed (a NaN or infinite timestamp, a day past year 9999 priced): the new
        # code refuses such a batch too, or ignores the rows it cannot read.
        assert got_error is not None or got.ignored > 0
        return "failed"
    assert got_error == expected_error
    if expected_error is not None:
        return "refused" if expected_error[0] is BadBatch else "failed"
    calls, contents, ignored, dropped = expected
    assert (got.calls.size, got.ignored, got.content_dropped) == (len(calls), ignored, dropped)
    faulty = ignored - sum(isinstance(r, dict) and r.get("event_type") == "outcome" for r in rows)
    assert got.contents == contents
    for want, have in zip(calls, got.calls.rows(), strict=True):
        assert set(have) >= set(want)
        for name, value in want.items():
            assert _same(have[name], value), (name, have[name], value)
    want_deltas = reference_ingest.rollup_deltas(calls)
    try:
        have_deltas = rollup_deltas(got.calls, "w1")
    except OverflowError:
        # A timestamp past int64: SQLite refuses the row too (OverflowError), so the batch fails as before.
        assert any(abs(t) >= 2**63 for t in got.calls.column("ts_ms"))
        return "failed"
    for table in ROLLUPS:
        assert len(want_deltas[table]) == len(have_deltas[table])
        for w, h in zip(want_deltas[table], have_deltas[table], strict=True):
            named = dict(zip(ROLLUP_PARAMS, h, strict=True))
            assert named.pop("workspace") == "w1"
            h = [named[name] for name in ("bucket", *ROLLUP_KEY, *SUMS, *HIST_COLUMNS)]
            assert all(_same(x, y) for x, y in zip(w, h, strict=True)), (table, w, h)
    return "partly" if faulty else "stored"


@pytest.mark.parametrize("odd", [0.0, 0.02, 0.2])
def test_columnar_normalisation_stores_ignores_and_refuses_exactly_as_the_row_by_row_code(odd: float) -> None:
    rnd = random.Random(int(odd * 1000) + 11)
    outcomes = {"stored": 0, "partly": 0, "refused": 0, "failed": 0}
    for _ in range(300):
        rows = [_row(rnd, odd) for _ in range(rnd.randint(1, 40))]
        outcomes[_compare(rows, retain=rnd.random() < 0.5)] += 1
    # Every kind of batch was exercised: whole, with rows ignored, refused (a row that is not an object).
    assert outcomes["stored"] > 20
    assert odd < 0.2 or (outcomes["partly"] > 20 and outcomes["refused"] > 20)


def test_columnar_normalisation_matches_on_benchmark_shaped_batches() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    import metergraph_bench

    for batch in metergraph_bench.generate(10_000, seed=3):
        assert _compare(batch, retain=False) == "stored"


def test_call_batch_round_trips_rows() -> None:
    rows = [{"ts_ms": 1, "route": "a"}, {"ts_ms": 2, "route": None}]
    batch = CallBatch.from_rows(rows, ("ts_ms", "route"))
    assert batch.columns == {"ts_ms": [1, 2], "route": ["a", None]}


def _row_by_row(values: list[str]) -> list[int | str]:
    out: list[int | str] = []
    for i, value in enumerate(values):
        try:
            out.append(parse_ts(value, i))
        except BadBatch as exc:
            out.append(str(exc))
    return out


@pytest.mark.parametrize(
    "values",
    [
        # float64 holds the microseconds exactly only between about 1685 and 2255: outside, the column
        # parse would round twice and be 1 ms off, so those columns go row by row.
        ["4546-08-15T16:15:47.502999Z", "2024-01-01T00:00:00Z"],
        ["0178-11-28T07:50:28.507005Z"],
        # NumPy's strings drop trailing NULs; the row-by-row rules decide on the text as sent.
        ["2024-01-01T00:00:00+00:00\x00\x00", "2024-01-01T00:00:01+00:00"],
        ["2024-02-29T23:59:59.999999+00:00", "1969-12-31T23:59:59.999+00:00"],
    ],
)
def test_the_timestamp_column_fast_path_answers_as_the_row_by_row_rules(values: list[str]) -> None:
    fast = _iso_utc_ms(values)
    if fast is not None:
        assert fast == _row_by_row(values)
    rng = random.Random(7)  # and a spread of years across the exact range's edges
    many = [
        (datetime(1600, 1, 1, tzinfo=UTC) + timedelta(microseconds=rng.randrange(10**17))).isoformat()
        for _ in range(2000)
    ]
    many = [v for v in many if v[:4] < "9999"]
    fast_many = _iso_utc_ms(many)
    assert fast_many is None or fast_many == _row_by_row(many)
    in_range = [v for v in many if "1700" <= v[:4] <= "2250"]
    assert _iso_utc_ms(in_range) == _row_by_row(in_range)  # the fast path does serve these


def test_a_column_of_decimal_string_costs_is_read_as_each_value_alone() -> None:
    service = IngestService(None, None, Pricer(), 5000)  # type: ignore[arg-type]  # normalize() needs no store
    sent: list[Any] = ["0.0438", None, "1E-7", "1000000", ".5", "0.1000000000000000055511151231257827"]
    odd: list[Any] = ["1\n2", "1000000.0000001", "1e99999", "+1", "1_000", "0x10", "", "Infinity", 1e300]
    rows = [{"ts": "2026-11-01T10:00:00Z", "reported_cost_usd": v} for v in [*sent, *odd]]
    got = service.normalize(app(), rows, "sdk", False)
    assert got.ignored == len(odd)
    assert got.calls.column("reported_cost_usd") == [None if v is None else float(Decimal(v)) for v in sent]
