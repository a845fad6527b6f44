"""The fallback catalogue: ``genai-prices``' bundled data, one library lookup per (provider, model, UTC day).

It prices only what ``metergraph-core`` (``pricing_core.py``, the primary catalogue) does not know.

The library is asked once per key for the model's price table; each call is then priced from that
cached rate with the library's own rules: input tokens include cache reads and writes (each priced at
its own rate when the table has one, else at the input rate), reasoning tokens are part of output
(priced at a reasoning rate only when the table has one), tiered rates are chosen by the call's total
input tokens. ``tests/metergraph/test_pricing.py`` checks this against ``genai_prices.calc_price``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import genai_prices
import numpy as np
from genai_prices import data_snapshot, types

LIBRARY = f"genai-prices {genai_prices.__version__}"
# The price catalogue /healthz reports: the genai-prices release whose bundled snapshot prices calls.
CATALOG_VERSION = f"genai-prices-{genai_prices.__version__}"

# Common spellings of providers that genai-prices knows under another id.
_PROVIDER_ALIASES = {
    "gemini": "google",
    "google_genai": "google",
    "google-genai": "google",
    "vertex_ai": "google",
    "vertexai": "google",
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "azure.ai.openai": "azure",
    "az.ai.openai": "azure",
    "aws.bedrock": "aws",
    "bedrock": "aws",
    "mistralai": "mistral",
    "x_ai": "x-ai",
    "xai": "x-ai",
}

Rate = Decimal | types.TieredPrices | None


@dataclass(frozen=True, slots=True)
class ResolvedRate:
    """A model's per-million-token rates for one day, or why there is none."""

    provider_id: str | None
    model_id: str | None
    input: Rate = None
    output: Rate = None
    cache_read: Rate = None
    cache_write: Rate = None
    reasoning: Rate = None
    per_request: Decimal | None = None
    # Per-token float rates (input, output, cache_read, cache_write, reasoning, per_request) when no
    # rate is tiered: the hot path then prices a call with a few float multiplications.
    fast: tuple[float | None, ...] | None = None

    @property
    def found(self) -> bool:
        return self.model_id is not None

    @property
    def source(self) -> dict[str, Any]:
        return {"library": LIBRARY, "provider": self.provider_id, "model": self.model_id}

    @property
    def source_json(self) -> str:
        return json.dumps(self.source, sort_keys=True)


@dataclass(frozen=True, slots=True)
class Price:
    cost_usd: float | None
    computed_cost_usd: float | None
    status: str  # priced | partial | unpriced | zero
    missing_rates: tuple[str, ...]
    source: dict[str, Any] | None
    unknown: bool  # no model or no usage at all: the call cannot be told apart
    source_json: str | None = None


@dataclass(frozen=True, slots=True)
class PricedColumns:
    """The prices of a batch of calls, one list per stored column, in batch order."""

    cost_usd: list[float | None]
    computed_cost_usd: list[float | None]
    status: list[str]
    unknown: list[int]
    missing_rates: list[str | None]  # JSON list of the token kinds without a rate
    source_json: list[str | None]


# Float64 holds every integer up to 2**53 exactly: token counts below it price the same in NumPy as in
# Python's int * float; a batch with a larger count goes row by row.
_EXACT_INT = 2**53
_KINDS = ("input", "cache_read", "cache_write", "reasoning", "output")
_STATUS_NAMES = np.array(["priced", "zero", "partial"], dtype=object)


def _rate_per_token(rate: Rate, total_input: int) -> Decimal | None:
    if rate is None:
        return None
    if isinstance(rate, types.TieredPrices):
        applicable = rate.base
        for tier in reversed(rate.tiers):
            if total_input > tier.start:
                applicable = tier.price
                break
        return applicable / 1_000_000
    return rate / 1_000_000


def _fast_compute(
    fast: tuple[float | None, ...],
    input_t: int,
    output_t: int,
    cache_read: int,
    cache_write: int,
    reasoning: int,
) -> tuple[float, tuple[str, ...]]:
    """``Pricer._compute`` with float rates (no tiers): the same rules, a few multiplications."""
    rate_in, rate_out, rate_read, rate_write, rate_reasoning, per_request = fast
    missing: list[str] = []
    total = 0.0
    uncached = max(0, input_t - cache_read - cache_write)
    for count, own, fallback, kind in (
        (uncached, rate_in, None, "input"),
        (cache_read, rate_read, rate_in, "cache_read"),
        (cache_write, rate_write, rate_in, "cache_write"),
        (reasoning if rate_reasoning is not None else 0, rate_reasoning, rate_out, "reasoning"),
        (max(0, output_t - reasoning) if rate_reasoning is not None else output_t, rate_out, None, "output"),
    ):
        if count <= 0:
            continue
        per = own if own is not None else fallback
        if per is None:
            missing.append(kind)
        else:
            total += per * count
    if per_request is not None:
        total += per_request
    return total, tuple(missing)


def _per_request(rate: Rate) -> Decimal | None:
    if isinstance(rate, Decimal):
        return rate / 1000
    return None


class GenaiPricer:
    """Prices calls; the library is consulted once per (provider, model, day) and the rate cached."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, int], ResolvedRate] = {}
        self._exact: dict[tuple[str | None, str, int], ResolvedRate] = {}
        self._json_cache: dict[int, str] = {}
        self._lock = threading.Lock()
        self.lookups = 0  # library consultations, for tests and the benchmark

    def resolve(self, provider: str | None, model: str, ts: datetime) -> ResolvedRate:
        return self.resolve_day(provider, model, int(ts.timestamp() // 86_400))

    def resolve_day(self, provider: str | None, model: str, day: int) -> ResolvedRate:
        """The rate of (provider, model) on a UTC day (days since the epoch)."""
        exact = self._exact.get((provider, model, day))
        if exact is not None:
            return exact  # the spelling seen before: no case folding on the hot path
        key = ((provider or "").lower(), model.lower(), day)
        cached = self._cache.get(key)
        if cached is None:
            with self._lock:
                cached = self._cache.get(key)
                if cached is None:
                    cached = self._lookup(provider, model, datetime.fromtimestamp(day * 86_400 + 43_200, UTC))
                    self._cache[key] = cached
        self._exact[(provider, model, day)] = cached
        return cached

    def _lookup(self, provider: str | None, model: str, when: datetime) -> ResolvedRate:
        self.lookups += 1
        snapshot = data_snapshot.get_snapshot()
        provider_id = _PROVIDER_ALIASES.get((provider or "").lower(), provider or None)
        try:
            found_provider, found_model = snapshot.find_provider_model(model, None, provider_id, None)
        except LookupError:
            if provider_id is None:
                return ResolvedRate(None, None)
            try:  # an unknown provider name: let the model name find its provider
                found_provider, found_model = snapshot.find_provider_model(model, None, None, None)
            except LookupError:
                return ResolvedRate(None, None)
        prices = found_model.get_prices(when)

        def rate(name: str) -> Rate:
            value = getattr(prices, name, None)
            return value if isinstance(value, Decimal | types.TieredPrices) else None

        rates = [rate(k) for k in ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok",
                                       "output_reasoning_mtok")]  # fmt: skip
        per_request = _per_request(rate("requests_kcount"))
        fast: tuple[float | None, ...] | None = None
        if not any(isinstance(r, types.TieredPrices) for r in rates):
            fast = (*(float(r) / 1_000_000 if isinstance(r, Decimal) else None for r in rates),
                    None if per_request is None else float(per_request))  # fmt: skip
        return ResolvedRate(
            found_provider.id,
            found_model.id,
            input=rates[0],
            output=rates[1],
            cache_read=rates[2],
            cache_write=rates[3],
            reasoning=rates[4],
            per_request=per_request,
            fast=fast,
        )

    def price_on_day(
        self,
        provider: str | None,
        model: str | None,
        day: int,
        input_tokens: int | None,
        output_tokens: int | None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        reported_cost_usd: float | None = None,
    ) -> Price:
        """A call's price on a UTC day (days since the epoch)."""
        has_usage = not (
            input_tokens is None
            and output_tokens is None
            and cache_read_tokens is None
            and cache_write_tokens is None
            and reasoning_tokens is None
        )
        computed: Decimal | None = None
        missing: tuple[str, ...] = ()
        status = "unpriced"
        source: dict[str, Any] | None = None
        source_json: str | None = None
        if model and has_usage:
            resolved = self.resolve_day(provider, model, day)
            source = resolved.source
            source_json = self._source_json(resolved)
            if resolved.found and resolved.fast is not None:
                cost, missing = _fast_compute(
                    resolved.fast,
                    input_tokens or 0,
                    output_tokens or 0,
                    cache_read_tokens or 0,
                    cache_write_tokens or 0,
                    reasoning_tokens or 0,
                )
                status = "partial" if missing else ("zero" if cost == 0 else "priced")
                if reported_cost_usd is None:
                    return Price(cost, cost, status, missing, source, False, source_json)
                computed = Decimal(repr(cost))
            elif resolved.found:
                computed, missing = self._compute(
                    resolved,
                    input_tokens or 0,
                    output_tokens or 0,
                    cache_read_tokens or 0,
                    cache_write_tokens or 0,
                    reasoning_tokens or 0,
                )
                status = "partial" if missing else ("zero" if computed == 0 else "priced")
        computed_f = float(computed) if computed is not None else None
        if reported_cost_usd is not None:
            # A cost reported with the call is the provider's own figure: kept and preferred.
            status = "zero" if reported_cost_usd == 0 else "priced"
            source = {**(source or {}), "reported": True}
            return Price(
                reported_cost_usd,
                computed_f,
                status,
                missing,
                source,
                False,
                json.dumps(source, sort_keys=True),
            )
        return Price(computed_f, computed_f, status, missing, source, not (model and has_usage), source_json)

    def price_columns(
        self,
        provider: Sequence[str | None],
        model: Sequence[str | None],
        day: Sequence[int],
        tokens: Sequence[Sequence[int | None]],
        reported_cost_usd: Sequence[float | None],
    ) -> PricedColumns:
        """``price_on_day`` for a whole batch, column by column, with the same results.

        ``tokens`` holds the input, output, cache read, cache write and reasoning columns. Calls with a
        model, some usage, no reported cost and untiered rates (nearly all) are priced over NumPy arrays,
        term by term in ``_fast_compute``'s order, so every float comes out bit for bit the same; the
        others go through ``price_on_day`` one by one.
        """
        n = len(model)
        keys = list(zip(provider, model, day, strict=True))
        groups = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        codes = np.fromiter(map(groups.__getitem__, keys), dtype=np.int64, count=n)
        counts = [np.array(column, dtype=np.float64) for column in tokens]  # None -> NaN
        has_usage = np.logical_or.reduce([~np.isnan(c) for c in counts])
        for c in counts:
            np.nan_to_num(c, copy=False, nan=0.0)
        # As price_on_day: the library is consulted only for a model some call with usage names.
        wanted = np.zeros(len(groups), dtype=bool)
        wanted[codes[has_usage]] = True
        rates = np.full((len(groups), 6), np.nan)
        vector_group = np.zeros(len(groups), dtype=bool)
        sources: list[str | None] = []
        for (p, m, d), g in groups.items():
            resolved = self.resolve_day(p, m, d) if m and wanted[g] else None
            sources.append(self._source_json(resolved) if resolved is not None else None)
            if resolved is not None and resolved.found and resolved.fast is not None:
                vector_group[g] = True
                rates[g] = [np.nan if r is None else r for r in resolved.fast]
        vector = vector_group[codes] & has_usage
        if None not in reported_cost_usd:
            vector[:] = False
        elif any(v is not None for v in reported_cost_usd):
            vector &= np.array([v is None for v in reported_cost_usd], dtype=bool)
        if any(float(c.max(initial=0.0)) >= _EXACT_INT for c in counts):
            vector[:] = False
        input_t, output_t, cache_read, cache_write, reasoning = counts
        r_in, r_out, r_read, r_write, r_reason, r_request = rates[codes].T
        has_reason = ~np.isnan(r_reason)
        terms = (
            (np.maximum(0.0, input_t - cache_read - cache_write), r_in),
            (cache_read, np.where(np.isnan(r_read), r_in, r_read)),
            (cache_write, np.where(np.isnan(r_write), r_in, r_write)),
            (np.where(has_reason, reasoning, 0.0), r_reason),
            (np.where(has_reason, np.maximum(0.0, output_t - reasoning), output_t), r_out),
        )
        total = np.zeros(n)
        missing = []
        for count, per in terms:
            active = count > 0
            rated = ~np.isnan(per)
            missing.append(active & ~rated)
            total = np.where(active & rated, total + per * count, total)
        total = np.where(np.isnan(r_request), total, total + r_request)
        any_missing = np.logical_or.reduce(missing)
        status = np.where(any_missing, 2, np.where(total == 0, 1, 0))
        cost: list[float | None] = list(total.tolist())
        computed = list(cost)
        statuses: list[str] = _STATUS_NAMES[status].tolist()
        unknown = [0] * n
        missing_rates: list[str | None] = [None] * n
        for i in np.flatnonzero(any_missing & vector).tolist():
            missing_rates[i] = json.dumps([k for k, m in zip(_KINDS, missing, strict=True) if m[i]])
        source_json: list[str | None] = np.array(sources, dtype=object)[codes].tolist()
        for i in np.flatnonzero(~vector).tolist():
            used_in, used_out, used_read, used_write, used_reasoning = (column[i] for column in tokens)
            price = self.price_on_day(
                provider[i],
                model[i],
                day[i],
                used_in,
                used_out,
                used_read,
                used_write,
                used_reasoning,
                reported_cost_usd[i],
            )
            cost[i], computed[i], statuses[i] = price.cost_usd, price.computed_cost_usd, price.status
            unknown[i] = int(price.unknown)
            missing_rates[i] = json.dumps(list(price.missing_rates)) if price.missing_rates else None
            source_json[i] = price.source_json
        return PricedColumns(cost, computed, statuses, unknown, missing_rates, source_json)

    def _source_json(self, resolved: ResolvedRate) -> str:
        # Resolved rates live in self._cache for the process's lifetime, so their ids are stable keys.
        cached = self._json_cache.get(id(resolved))
        if cached is None:
            cached = self._json_cache[id(resolved)] = resolved.source_json
        return cached

    @staticmethod
    def _compute(
        rate: ResolvedRate, input_t: int, output_t: int, cache_read: int, cache_write: int, reasoning: int
    ) -> tuple[Decimal, tuple[str, ...]]:
        missing: list[str] = []
        input_rate = _rate_per_token(rate.input, input_t)
        uncached = max(0, input_t - cache_read - cache_write)
        total = Decimal(0)

        def add(count: int, own: Rate, fallback: Decimal | None, kind: str) -> None:
            nonlocal total
            if count <= 0:
                return
            per = _rate_per_token(own, input_t)
            if per is None:
                per = fallback
            if per is None:
                missing.append(kind)
                return
            total += per * count

        add(uncached, rate.input, None, "input")
        add(cache_read, rate.cache_read, input_rate, "cache_read")
        add(cache_write, rate.cache_write, input_rate, "cache_write")
        output_rate = _rate_per_token(rate.output, input_t)
        if rate.reasoning is not None:
            add(reasoning, rate.reasoning, output_rate, "reasoning")
            add(max(0, output_t - reasoning), rate.output, None, "output")
        else:
            add(output_t, rate.output, None, "output")
        if rate.per_request is not None:
            total += rate.per_request
        return total, tuple(missing)
