"""The primary catalogue: ``metergraph-core``, the product's own effective-dated prices and cost rules.

A call is priced as the product's ingest prices a row: ``CatalogSnapshot.cost`` with the row's provider,
model, time and token counts (the catalogue's (provider, model) aliases; cache reads taken out of the
input only where that provider's input counts them, per ``counts_cache_read_in_input``; 5-minute and
1-hour cache writes at their own rates; long-context, off-peak, batch and per-request rules).

The library is consulted once per (provider, model, UTC day) for the entry that prices the model that
day (``CoreEntry``). A call whose price cannot depend on anything but its token counts (one entry all
day, no off-peak hours, under any long-context threshold, not a batch call, no count the entry has no
rate for, no cache read larger than the input it is taken from) is then priced over whole columns in
exact integer arithmetic: each rate times 10**k is an integer, so the sum of counts times rates is an
integer too, rounded half up to the library's quantum (10**-8 USD) once, as the library rounds its
Decimal sum; the float stored is the one ``float(Decimal)`` gives for the library's result. Every other
call goes to ``CatalogSnapshot.cost`` itself. ``tests/metergraph/test_pricing.py`` checks the two agree
for every alias in the catalogue (decision 0035).
"""

from __future__ import annotations

import functools
import importlib.metadata
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import numpy as np
import yaml
from metergraph_core import (
    CatalogSnapshot,
    CostResult,
    LoadedCatalog,
    counts_cache_read_in_input,
    direct_channel_for_provider,
    load_catalog,
    normalize_provider,
)
from metergraph_core.loader import DEFAULT_CATALOG_PATH, load_catalog_document

CORE_VERSION = importlib.metadata.version("metergraph-core")
QUANTUM_DIGITS = 8  # the library rounds a call's cost to 10**-8 USD, half up
_MAX_SCALE = 8
# Endpoints whose output count leaves the model's thinking out (Gemini's native generateContent reports
# candidatesTokenCount and thoughtsTokenCount apart; the SDK sends them as output and reasoning tokens).
# The product bills thinking as output there (``metergraph_core.responses``); every other API's output
# count already includes reasoning tokens.
THINKING_OUTSIDE_OUTPUT = frozenset({
    "models.generate_content", "models.generate_content.stream", "generate_content", "generateContent",
    "streamGenerateContent",
})  # fmt: skip


_LOADING = threading.Lock()


def catalog() -> LoadedCatalog:
    """The catalogue bundled with metergraph-core, loaded once per process, at its first use: requests
    that price calls together wait for one load rather than each parsing it."""
    with _LOADING:
        return _load_catalog()


@functools.cache
def _load_catalog() -> LoadedCatalog:
    """The catalogue bundled with metergraph-core, loaded once per process.

    The library's ``load_catalog`` reads its 400 KB of YAML with PyYAML's pure-Python parser: about 1 s of
    CPU in every server start, a third of one. The same file parsed by libyaml (PyYAML's C parser, in its
    wheels) goes through the library's own validation and construction (``load_catalog_document``), so the
    prices and rules are the library's; only ``content_hash`` is then the hash of the document's canonical
    JSON rather than of the file's bytes, and nothing here reads it (docs/decisions/0231)."""
    parser = getattr(yaml, "CSafeLoader", None)
    if parser is None:
        return load_catalog(region="global")
    return load_catalog_document(yaml.load(DEFAULT_CATALOG_PATH.read_bytes(), Loader=parser), region="global")


def catalogue_name() -> str:
    return f"metergraph-core {CORE_VERSION}"  # its bundled prices are the release's (0.7.4: of 2026-10-25)


def input_counts_cache(provider: str | None) -> bool:
    """Whether ``provider``'s input count includes its cache reads (OpenAI, Google, ...) or leaves them
    out (Anthropic, Bedrock), by the library's own (publisher, direct channel) rule."""
    if not provider:
        return False
    publisher = normalize_provider(provider)
    return bool(counts_cache_read_in_input(publisher, direct_channel_for_provider(publisher), {}))


@dataclass(frozen=True, slots=True)
class CoreEntry:
    """What prices one (provider, model) on one UTC day, and its rates in exact integer form."""

    found: bool  # some price applies at some time of the day
    canonical_model: str | None = None
    price_id: str | None = None
    ended: bool = False  # the last known price, ended and not replaced
    # Column pricing applies (see the module's docstring); the fields below only mean something then.
    linear: bool = False
    scale: int = 0  # every rate below is the catalogue's rate per million tokens times 10**scale
    rates: tuple[int | None, ...] = ()  # input, output, cache read, 5-minute write, 1-hour write
    fee: int = 0  # the per-call fee in 10**-(scale + 6) USD
    deduct_read: bool = False
    deduct_write: bool = False
    threshold: int | None = None  # long-context threshold on the prompt's tokens


def _digits(value: Decimal) -> int:
    exponent = value.normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else _MAX_SCALE + 1


class CoreCatalogue:
    """metergraph-core, consulted once per (provider, model, UTC day)."""

    def __init__(self) -> None:
        # The catalogue itself is read at the first price asked (``catalog``, once per process): about
        # 0.35 s of CPU that a server start no longer pays before its first ingest (docs/decisions/0310).
        self._entries: dict[tuple[str | None, str, int], CoreEntry] = {}
        self._lock = threading.Lock()
        self.lookups = 0

    @property
    def catalog(self) -> LoadedCatalog:
        return catalog()

    @property
    def snapshot(self) -> CatalogSnapshot:
        return catalog().snapshot

    def entry(self, provider: str | None, model: str, day: int) -> CoreEntry:
        key = (provider, model, day)
        found = self._entries.get(key)
        if found is None:
            with self._lock:
                found = self._entries.get(key)
                if found is None:
                    found = self._entries[key] = self._lookup(provider, model, day)
        return found

    def _lookup(self, provider: str | None, model: str, day: int) -> CoreEntry:
        self.lookups += 1
        start = datetime.fromtimestamp(day * 86_400, UTC)
        end = datetime.fromtimestamp(day * 86_400 + 86_399.999, UTC)
        first, last = (self._probe(provider, model, at) for at in (start, end))
        if first.price is None or last.price is None:
            return CoreEntry(found=first.price is not None or last.price is not None)
        price = first.price
        named = CoreEntry(True, first.canonical_model, price.id, "price_ended" in first.reasons)
        if last.price.id != price.id:
            return named  # the price changes during the day: call by call
        resolved = self.snapshot.resolve_price(model=model, channel=price.pricing_channel, at=start)
        if (
            resolved is None
            or resolved.price.id != price.id
            or resolved.canonical_model != first.canonical_model
        ):
            return named
        rules = resolved.rules
        discount = rules.get("off_peak_discount") or {}
        if discount.get("peak_hours_utc") or rules.get("uncaptured_fees"):
            return named  # priced by the hour, or always partial: call by call
        long_context = rules.get("long_context") or {}
        threshold = long_context.get("threshold")
        rates = (price.input_per_mtok, price.output_per_mtok, price.cache_read_per_mtok,
                 price.cache_write_5m_per_mtok, price.cache_write_1h_per_mtok)  # fmt: skip
        fee = price.request_fee_per_1k_usd
        scale = max([_digits(r) for r in rates if r is not None] + [_digits(fee) - 3 if fee else 0])
        if scale > _MAX_SCALE or (threshold is not None and not isinstance(threshold, int)):
            return named
        factor = Decimal(10) ** scale
        return CoreEntry(
            True,
            first.canonical_model,
            price.id,
            named.ended,
            linear=True,
            scale=scale,
            rates=tuple(None if r is None else int(r * factor) for r in rates),
            fee=int(fee * factor * 1000) if fee else 0,
            deduct_read=counts_cache_read_in_input(price.publisher, price.pricing_channel, rules),
            deduct_write=bool(rules.get("input_includes_cache_write")),
            threshold=threshold,
        )

    def _probe(self, provider: str | None, model: str, at: datetime) -> CostResult:
        return self.snapshot.cost(provider=provider, model=model, at=at, input_tokens=0, output_tokens=0)

    def cost(
        self,
        provider: str | None,
        model: str,
        ts_ms: int,
        tokens: Sequence[int | None],
        batch: bool,
    ) -> CostResult:
        """The library's own price of one call: ``tokens`` are input, billed output, cache read, cache
        write, 5-minute write and 1-hour write."""
        input_t, output_t, read, write, write_5m, write_1h = tokens
        return self.snapshot.cost(
            provider=provider, model=model, at=datetime.fromtimestamp(ts_ms / 1000, UTC),
            input_tokens=input_t, output_tokens=output_t, cache_read_tokens=read, cache_write_tokens=write,
            cache_write_5m_tokens=write_5m, cache_write_1h_tokens=write_1h, batch=batch,
        )  # fmt: skip


# Counts at or above this go call by call: the integer sums below stay inside int64.
_COUNT_LIMIT = 2**31


def linear_costs(
    entries: Sequence[CoreEntry],
    codes: np.ndarray,
    counts: Sequence[np.ndarray],
    present: Sequence[np.ndarray],
    candidates: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(costs in 10**-8 USD, which calls they hold) for the ``candidates`` calls of linear entries.

    ``counts`` are the int64 columns input, billed output, cache read, cache write, 5-minute write and
    1-hour write (0 where absent), ``present`` says where each was sent, ``codes`` the entry of each call.
    A call is left out (False in the second array) where the library would not price it by its counts
    alone: a missing input or output count, a count with no rate, a cache read or write larger than the
    input it is taken from, a prompt over the long-context threshold. Each entry's terms are gathered per
    call, so the whole batch is priced in a few passes whatever the number of entries.
    """
    table = np.zeros((len(entries), 10), dtype=np.int64)
    for g, entry in enumerate(entries):
        if not entry.linear or sum(r or 0 for r in entry.rates) * _COUNT_LIMIT + entry.fee >= 2**62:
            table[g, 0] = 0  # not linear: never done here
            continue
        rates = [-1 if r is None else r for r in entry.rates]
        threshold = _COUNT_LIMIT * 4 if entry.threshold is None else entry.threshold
        table[g] = [1, *rates, entry.fee, entry.scale - (QUANTUM_DIGITS - 6),
                    int(entry.deduct_read) + 2 * int(entry.deduct_write), threshold]  # fmt: skip
    per = table[codes].T
    linear, r_in, r_out, r_read, r_5m, r_1h, fee, shift, deduct, threshold = per
    input_t, output_t, read, write, write_5m, write_1h = counts
    has_input, has_output, _, _, has_5m, _ = present
    # The library's split: the 5-minute count when sent, else the undivided write count.
    five = np.where(has_5m, write_5m, write)
    writes = five + write_1h
    ok = candidates & (linear == 1) & has_input & has_output
    for column in (input_t, output_t, read, five, write_1h):
        ok &= column < _COUNT_LIMIT
    deduct_read, deduct_write = (deduct & 1) == 1, (deduct & 2) == 2
    deducted = np.where(deduct_read, read, 0)
    ok &= ~deduct_read | (read <= input_t)
    ok &= ~deduct_write | (writes <= input_t - deducted)
    deducted = np.where(deduct_write, deducted + writes, deducted)
    ok &= input_t + read + writes <= threshold
    total = fee.copy()
    for count, rate in ((input_t - deducted, r_in), (output_t, r_out), (read, r_read), (five, r_5m),
                        (write_1h, r_1h)):  # fmt: skip
        ok &= (rate >= 0) | (count == 0)  # a count with no rate: partial, the library says why
        total += count * np.maximum(rate, 0)
    # total is the cost in 10**-(scale + 6) USD: to the quantum, half up (total >= 0 where ok).
    up = np.power(10, np.maximum(-shift, 0))
    divisor = np.power(10, np.maximum(shift, 0))
    units = np.where(ok, (total * up + divisor // 2) // divisor, 0)
    return units, ok
