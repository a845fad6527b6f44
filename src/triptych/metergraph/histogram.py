"""Mergeable fixed-size latency histograms: 96 log-scale buckets, growth 1.18 from 1 ms.

Bucket 0 holds calls under 1 ms; bucket i (1..95) holds [1.18**(i-1), 1.18**i) ms. A p95 read from the
merged histogram is off by at most one bucket width (18%), whatever the number of calls merged, which is
what lets rollups answer percentiles without the raw rows. Rollup rows store the buckets as integer
columns ``h0`` .. ``h95``, so SQLite adds them up itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

BUCKETS = 96
GROWTH = 1.18
_LOG_GROWTH = math.log(GROWTH)
DTYPE = np.dtype("<u4")

Hist = npt.NDArray[np.uint32]


def bucket_of(latency_ms: float | None) -> int | None:
    if latency_ms is None or latency_ms != latency_ms or latency_ms < 0:
        return None
    if latency_ms < 1.0:
        return 0
    return min(BUCKETS - 1, 1 + int(math.log(latency_ms) / _LOG_GROWTH))


# How near a whole number ``log(x) / log(GROWTH)`` must be for NumPy's log (within an ulp or two of the C
# library's) to be checked against ``math.log``: only there could the two land in different buckets.
_NEAR_EDGE = 1e-9


def buckets_of(latencies: Sequence[float | None]) -> list[int | None]:
    """``bucket_of`` of each finite latency (or None), in C: the same buckets, bit for bit."""
    x = np.array(latencies, dtype=np.float64)  # None -> NaN
    valid = x >= 0  # False for NaN
    ratio = np.log(np.where(x >= 1.0, x, 1.0)) / _LOG_GROWTH
    buckets = np.where(x < 1.0, 0, np.minimum(BUCKETS - 1, 1 + ratio.astype(np.int64)))
    for i in np.flatnonzero((x >= 1.0) & (np.abs(ratio - np.rint(ratio)) < _NEAR_EDGE)).tolist():
        buckets[i] = bucket_of(float(x[i]))
    out: list[int | None] = buckets.tolist()
    if not valid.all():
        for i in np.flatnonzero(~valid).tolist():
            out[i] = None
    return out


def empty() -> Hist:
    return np.zeros(BUCKETS, dtype=DTYPE)


def quantile(hist: Hist, q: float) -> int | None:
    """The q-quantile as the geometric middle of its bucket, in whole milliseconds; None when empty."""
    total = int(hist.sum())
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    index = int(np.searchsorted(np.cumsum(hist, dtype=np.int64), rank))
    if index == 0:
        return 0
    low, high = GROWTH ** (index - 1), GROWTH**index
    return round(math.sqrt(low * high))
