"""The scan behind a metadata aggregate: group and sum a snapshot of the columnar projection.

``columns.py`` keeps the columns up to date; this module holds how a call is encoded in them and how a
read turns them into ``aggregate_raw``'s groups: a filter mask, one mixed-radix group code per call,
and ``np.bincount`` passes for the counts, the measures and the fixed-size latency histogram.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from triptych.metergraph import histogram
from triptych.metergraph.call_model import SUMS, AggRow, CallFilter
from triptych.metergraph.scope import DAY_MS

# Summed as float64 weights (SQL's COALESCE(SUM(x), 0): a NULL adds nothing).
WEIGHTS = (
    "cost_usd", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "latency_ms",
)  # fmt: skip
# Every counted measure of a call folds into one small code, so a single bincount over
# (group, code) yields calls, errors, latency_count and the five pricing counts at once.
# flags = error | has_latency << 1 | cost_unknown << 2 | cost_class << 3
COST_CLASSES = {"priced": 0, "partial": 1, "zero": 2, "unpriced": 3}
OTHER_COST = 4
FLAG_CODES = 8 * (OTHER_COST + 1)
NO_BUCKET = histogram.BUCKETS  # the histogram gets one extra bucket for calls without a latency


def _flag_matrix() -> npt.NDArray[np.float64]:
    """(flag code, SUMS column) -> how much a call with that code adds to the column."""
    matrix = np.zeros((FLAG_CODES, len(SUMS)))
    col = SUMS.index
    for code in range(FLAG_CODES):
        error, has_latency, unknown, cost = code & 1, (code >> 1) & 1, (code >> 2) & 1, code >> 3
        matrix[code, col("calls")] = 1
        matrix[code, col("errors")] = error
        matrix[code, col("latency_count")] = has_latency
        matrix[code, col("priced")] = cost == 0
        matrix[code, col("partial")] = cost == 1
        matrix[code, col("zero")] = cost == 2
        matrix[code, col("unpriced")] = cost == 3 and not unknown
        matrix[code, col("unknown")] = unknown
    return matrix


FLAG_MATRIX = _flag_matrix()
_WEIGHT_SUMS = tuple(SUMS.index("latency_sum" if name == "latency_ms" else name) for name in WEIGHTS)
# Tag codes per call for one key (the group code of a metadata read): the key is missing, its value is
# ineligible (not a string, or too long), or VALUE_BASE + the value's id.
MISSING, INELIGIBLE, VALUE_BASE = 0, 1, 2


@dataclass
class Snapshot:
    """A read's consistent view of a workspace: its first n calls, and the dictionaries' first entries
    (dictionaries only grow, so the lists are shared, not copied, and read below ``sizes``)."""

    columns: dict[str, npt.NDArray[Any]]
    dicts: dict[str, list[str | None]]
    ids: dict[str, dict[str | None, int]]
    sizes: dict[str, int]
    tags: dict[str, npt.NDArray[np.int32]]  # per requested key: its tag codes
    ts_range: tuple[int, int]  # the lowest and highest ts_ms of the calls
    nonzero: frozenset[str]  # the WEIGHTS columns with a value other than 0 (the others sum to 0)

    def id_of(self, dictionary: str, value: str) -> int:
        """The value's id, or 0 when the snapshot has no such string."""
        found = self.ids[dictionary].get(value, 0)
        return found if found < self.sizes[dictionary] else 0


# -- the scan ---------------------------------------------------------------------------------------

_MAX_BINS = 1 << 22  # (group x code) bins one bincount may allocate; more groups are counted per column
_NONE: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
Decoder = Callable[[npt.NDArray[np.int64]], list[tuple[Any, ...]]]


def _select(snap: Snapshot, f: CallFilter) -> npt.NDArray[np.bool_] | None:
    """Which rows the filter matches, or None for every row."""
    cols = snap.columns
    ts = cols["ts_ms"]
    low, high = snap.ts_range
    mask = np.ones(len(ts), dtype=np.bool_)
    if f.since_ms > low or f.until_ms <= high:
        mask = (ts >= f.since_ms) & (ts < f.until_ms)
    for name, wanted in (
        ("route", f.routes), ("provider", f.providers), ("model", f.models), ("environment", f.environments),
    ):  # fmt: skip
        if wanted is None:
            continue
        ids = [i for i in (snap.id_of(name, v) for v in wanted) if i]
        if not ids:
            return _NONE  # NULL never matches IN (...), nor does an unknown value
        allowed = np.zeros(snap.sizes[name], dtype=np.bool_)
        allowed[ids] = True
        mask &= allowed[cols[name]]
    if f.status is not None:
        status = snap.id_of("status", f.status)
        if not status:
            return _NONE
        mask &= cols["status"] == status
    for key, value in f.metadata:
        value_id = snap.id_of("tag_value", value)
        if not value_id:
            return _NONE
        mask &= snap.tags[key] == VALUE_BASE + value_id  # only a string equal to the value matches
    return None if mask.all() else mask


def aggregate(
    snap: Snapshot, f: CallFilter, dims: Sequence[str], meta_key: str | None
) -> dict[tuple[Any, ...], AggRow] | None:
    cols = snap.columns
    mask = _select(snap, f)
    selected = len(cols["ts_ms"]) if mask is None else int(np.count_nonzero(mask))
    if selected == 0:
        return {}
    # A few rows are gathered; most of them (a 90-day window that starts inside the first day) are
    # scanned in place, the others sent to an extra group that is dropped: gathers cost more than that.
    rows = None if mask is None or selected * 2 > len(mask) else np.flatnonzero(mask)
    dropped = None if mask is None or rows is not None else ~mask

    def take(column: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return column if rows is None else column[rows]

    count = len(cols["ts_ms"]) if rows is None else len(rows)
    # One group code per call: a mixed-radix number over the dimensions' ids.
    parts: list[tuple[npt.NDArray[np.int64], int, Decoder]] = []
    for dim in dims:
        if dim == "day":
            day = _sql_day(take(cols["ts_ms"]))
            first = int(day.min())
            parts.append((day - first, int(day.max()) - first + 1, _day_decoder(first)))
        else:
            parts.append(
                (take(cols[dim]).astype(np.int64), snap.sizes[dim], _string_decoder(snap.dicts[dim]))
            )
    if meta_key is not None:
        codes = take(snap.tags[meta_key]).astype(np.int64)
        parts.append((codes, snap.sizes["tag_value"] + VALUE_BASE, _meta_decoder(snap.dicts["tag_value"])))
    radix = 1
    for _, size, _ in parts:
        radix *= size
    if radix > 1 << 62:
        return None  # too many combinations for one int64 code: the SQL scan answers
    if len(parts) == 1:
        code = parts[0][0]
    else:
        code = np.zeros(count, dtype=np.int64)
        for values, size, _ in parts:
            code *= size
            code += values
    if dropped is not None:
        code = np.where(dropped, radix, code)  # the dropped rows' group: one past the last code
    groups, code, group_codes = _renumber(code, radix + (dropped is not None))
    sums, hist = _sums(code, groups, rows, cols, snap.nonzero)
    present = np.flatnonzero((sums[:, 0] > 0) & (group_codes < radix))
    keys = _decode(group_codes[present], parts)
    return {key: AggRow(key, sums[g], hist[g]) for g, key in zip(present.tolist(), keys, strict=True)}


def _sql_day(ts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """ts_ms / 86400000 as SQLite computes it: integer division truncating toward zero."""
    day = ts // DAY_MS
    if len(ts) and ts.min() < 0:
        day = np.where((ts < 0) & (ts % DAY_MS != 0), day + 1, day)
    return day


def _day_decoder(first: int) -> Decoder:
    return lambda codes: [(day,) for day in (codes + first).tolist()]


def _string_decoder(values: list[str | None]) -> Decoder:
    return lambda codes: [(values[i],) for i in codes.tolist()]


def _meta_decoder(values: list[str | None]) -> Decoder:
    def decode(codes: npt.NDArray[np.int64]) -> list[tuple[Any, ...]]:
        return [
            ("m", None) if c == MISSING else ("i", None) if c == INELIGIBLE else ("v", values[c - VALUE_BASE])
            for c in codes.tolist()
        ]

    return decode


def _renumber(
    code: npt.NDArray[np.int64], radix: int
) -> tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(number of groups, group per call, the mixed-radix code of each group); groups are renumbered to
    the codes that occur when the code space is large."""
    if radix * FLAG_CODES <= _MAX_BINS:
        return radix, code, np.arange(radix, dtype=np.int64)
    if radix <= _MAX_BINS * 16:
        present = np.bincount(code, minlength=radix) > 0
        renumber = np.cumsum(present) - 1
        return int(present.sum()), renumber[code], np.flatnonzero(present)
    unique, inverse = np.unique(code, return_inverse=True)
    return len(unique), inverse.astype(np.int64), unique


def _sums(
    code: npt.NDArray[np.int64],
    groups: int,
    rows: npt.NDArray[np.intp] | None,
    cols: dict[str, npt.NDArray[Any]],
    nonzero: frozenset[str],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.uint32]]:
    """Per group: the SUMS columns and the latency histogram."""
    width = histogram.BUCKETS + 1
    sums = np.zeros((groups, len(SUMS)))
    if groups * width <= _MAX_BINS:
        # Few groups: one bincount over (group, flag code) and one over (group, bucket), a chunk of
        # calls at a time so a chunk's temporaries stay in cache.
        flags = np.zeros(groups * FLAG_CODES, dtype=np.int64)
        cells = np.zeros(groups * width, dtype=np.int64)
        step = max(1 << 18, 8 * len(cells))
        for start in range(0, len(code), step):
            g = code[start : start + step]
            part = slice(start, start + step) if rows is None else rows[start : start + step]
            flags += np.bincount(g * FLAG_CODES + cols["flags"][part], minlength=len(flags))
            cells += np.bincount(g * width + cols["bucket"][part], minlength=len(cells))
            _add_weights(sums, g, part, cols, nonzero)
        sums += flags.reshape(groups, FLAG_CODES).astype(np.float64) @ FLAG_MATRIX
        hist = cells.reshape(groups, width)
    else:
        # Many groups (a request-id tag): (group x code) bins would not fit, so each count is its own
        # bincount, and the histogram comes from the distinct (group, bucket) pairs.
        part = slice(None) if rows is None else rows
        flag = cols["flags"][part]
        for j in range(len(SUMS)):
            if FLAG_MATRIX[:, j].any():
                sums[:, j] = np.bincount(code, weights=FLAG_MATRIX[flag, j], minlength=groups)
        _add_weights(sums, code, part, cols, nonzero)
        pairs, counts = np.unique(code * width + cols["bucket"][part], return_counts=True)
        hist = np.zeros((groups, width), dtype=np.int64)
        hist[pairs // width, pairs % width] = counts
    return sums, hist[:, : histogram.BUCKETS].astype(histogram.DTYPE)


def _add_weights(
    sums: npt.NDArray[np.float64],
    g: npt.NDArray[np.int64],
    part: slice | npt.NDArray[np.intp],
    cols: dict[str, npt.NDArray[Any]],
    nonzero: frozenset[str],
) -> None:
    for name, column in zip(WEIGHTS, _WEIGHT_SUMS, strict=True):
        if name in nonzero:  # a measure no call has sums to 0 without a pass
            sums[:, column] += np.bincount(g, weights=cols[name][part], minlength=len(sums))


def _decode(
    group_codes: npt.NDArray[np.int64], parts: Sequence[tuple[npt.NDArray[np.int64], int, Decoder]]
) -> list[tuple[Any, ...]]:
    """Each group's key: the decoded value of every part, in order."""
    if not parts:
        return [() for _ in range(len(group_codes))]
    decoded: list[list[tuple[Any, ...]]] = []
    rest = group_codes
    for _, size, decode in reversed(parts):
        decoded.append(decode(rest % size))
        rest = rest // size
    decoded.reverse()
    return [sum(pieces, ()) for pieces in zip(*decoded, strict=True)]
