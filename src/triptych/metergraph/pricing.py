"""What a call costs, and which catalogue entry says so: the product's rules in one place.

1. **The catalogue price.** ``metergraph-core`` (the product's own catalogue, ``pricing_core.py``) prices
   every model it knows, as the product's ingest does; ``genai-prices`` (``pricing_genai.py``) prices
   only the models it does not know (decision 0035). Token semantics are each provider's own, as the
   SDK and the relay send them: Anthropic's input count leaves cache reads and writes out, OpenAI's and
   Google's include cache reads (metergraph-core takes them out where that provider's input counts them);
   5-minute and 1-hour cache writes are priced at their own rates; Gemini's native thinking tokens are
   billed as output (``pricing_core.THINKING_OUTSIDE_OUTPUT``).
2. **The charged cost.** A cost reported with the call is the charged cost only where metergraph-core's
   ``resolve_billing`` accepts it: a qualified gateway (OpenRouter, Portkey) on one of its endpoints,
   with the source field the gateway's figure is read from, and not disputed by the catalogue for that
   publisher. Any other reported figure (an observability tool's estimate, a client's own number) is kept
   as ``reported_cost_usd`` and the catalogue price stands (decision 0037).
3. **Provenance.** Every call records the catalogue (``price_catalog``), its entry (``price_id``, which
   starts with the catalogue's model id) and where its cost came from (``cost_provenance``: ``catalog``,
   ``gateway_reported`` or ``none``, stored only when it is ``gateway_reported``: decision 0036);
   ``price_source`` holds the catalogue's reasons where there are some (a partial or ended price, a
   gateway's charge declined or disputed).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import numpy as np
from metergraph_core import CostResult, normalize_gateway_evidence, resolve_billing

from triptych.metergraph import pricing_core
from triptych.metergraph.pricing_core import CORE_VERSION, CoreCatalogue, CoreEntry
from triptych.metergraph.pricing_genai import LIBRARY as GENAI_LIBRARY
from triptych.metergraph.pricing_genai import GenaiPricer, ResolvedRate
from triptych.metergraph.pricing_genai import PricedColumns as GenaiColumns

# The price catalogues /healthz reports: the primary one, then the fallback.
CATALOG_VERSION = f"metergraph-core-{CORE_VERSION}"
DAY_MS = 86_400_000
GATEWAY_REPORTED = "gateway_reported"
_STATUS_NAMES = np.array(["priced", "zero", "partial", "unpriced"], dtype=object)
_STATUS_CODES = {name: i for i, name in enumerate(_STATUS_NAMES.tolist())}
_PROVENANCE = np.array(["none", "catalog"], dtype=object)

# The token columns a price depends on, in the order ``price_columns`` reads them.
TOKEN_COLUMNS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "cache_write_5m_tokens", "cache_write_1h_tokens",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Price:
    cost_usd: float | None
    computed_cost_usd: float | None  # the catalogue's price, whatever was charged
    status: str  # priced | partial | unpriced | zero
    missing_rates: tuple[str, ...]  # why a price is partial (the catalogue's reasons)
    source: dict[str, Any] | None
    unknown: bool  # no model or no usage at all: the call cannot be told apart
    source_json: str | None = None
    catalog: str | None = None
    price_id: str | None = None
    canonical_model: str | None = None
    provenance: str = "none"  # catalog | gateway_reported | none


@dataclass(frozen=True, slots=True)
class PricedColumns:
    """The prices of a batch of calls, one list per stored column, in batch order."""

    cost_usd: list[float | None]
    computed_cost_usd: list[float | None]
    status: list[str]
    unknown: list[int]
    missing_rates: list[str | None]  # JSON list of the catalogue's reasons for a partial price
    source_json: list[str | None]
    price_catalog: list[str | None]
    price_id: list[str | None]
    canonical_model: list[str | None]
    cost_provenance: list[str]

    def set(
        self,
        i: int,
        cost: float | None,
        status: str,
        catalog: str | None,
        price_id: str | None,
        model: str | None,
        source: str | None,
    ) -> None:
        """Call ``i``'s catalogue price and where it came from."""
        self.cost_usd[i] = self.computed_cost_usd[i] = cost
        self.status[i], self.price_catalog[i], self.price_id[i] = status, catalog, price_id
        self.canonical_model[i], self.source_json[i] = model, source
        self.cost_provenance[i] = "none" if cost is None else "catalog"

    def stored(self) -> dict[str, list[Any]]:
        """The stored columns by name. The catalogue's model id is not stored (the price id starts with
        it), nor a provenance the other columns imply: only ``gateway_reported`` is
        (``traces.pricing_provenance`` reads them back)."""
        provenance: list[str | None] = [None] * len(self.cost_provenance)
        if GATEWAY_REPORTED in self.cost_provenance:
            for i, value in enumerate(self.cost_provenance):
                if value == GATEWAY_REPORTED:
                    provenance[i] = value
        return {
            "cost_usd": self.cost_usd, "computed_cost_usd": self.computed_cost_usd, "cost_status": self.status,
            "cost_unknown": self.unknown, "missing_rates": self.missing_rates, "price_source": self.source_json,
            "price_catalog": self.price_catalog, "price_id": self.price_id, "cost_provenance": provenance,
        }  # fmt: skip


def _status(status: str, cost: Decimal | float | None) -> str:
    return "zero" if status == "priced" and cost == 0 else status


class Pricer:
    """Prices calls (module docstring); each catalogue is consulted once per (provider, model, UTC day)."""

    def __init__(self) -> None:
        self.core = CoreCatalogue()
        self.genai = GenaiPricer()
        self.core_name = pricing_core.catalogue_name()
        self._genai_entries: dict[str | None, tuple[str | None, str | None, str | None]] = {}

    @property
    def lookups(self) -> int:
        """Catalogue consultations (both catalogues), for tests and the benchmark."""
        return self.core.lookups + self.genai.lookups

    def resolve(self, provider: str | None, model: str, ts: datetime) -> ResolvedRate:
        """The genai-prices entry of a model: its provider, for choosing an API (replay, analysis)."""
        return self.genai.resolve(provider, model, ts)

    def price(
        self,
        provider: str | None,
        model: str | None,
        ts: datetime,
        input_tokens: int | None,
        output_tokens: int | None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        reported_cost_usd: float | None = None,
        **call: Any,
    ) -> Price:
        """One call's price; ``call`` takes the other columns ``price_columns`` reads (``endpoint``,
        ``cache_write_5m_tokens``, ``gateway``, ``reported_cost_source``, ...)."""
        columns: dict[str, list[Any]] = {
            "provider": [provider], "model": [model], "ts_ms": [int(ts.timestamp() * 1000)],
            "input_tokens": [input_tokens], "output_tokens": [output_tokens],
            "cache_read_tokens": [cache_read_tokens], "cache_write_tokens": [cache_write_tokens],
            "reasoning_tokens": [reasoning_tokens], **{k: [v] for k, v in call.items()},
        }  # fmt: skip
        out = self.price_columns(columns, [reported_cost_usd])
        source_json = out.source_json[0]
        reasons = json.loads(out.missing_rates[0]) if out.missing_rates[0] else []
        return Price(
            out.cost_usd[0], out.computed_cost_usd[0], out.status[0], tuple(reasons),
            json.loads(source_json) if source_json else None, bool(out.unknown[0]), source_json,
            out.price_catalog[0], out.price_id[0], out.canonical_model[0], out.cost_provenance[0],
        )  # fmt: skip

    def price_columns(self, columns: Mapping[str, Sequence[Any]], reported: Sequence[Any]) -> PricedColumns:
        """The prices of a batch from its stored columns (``provider``, ``model``, ``ts_ms``, the
        ``TOKEN_COLUMNS``, ``endpoint``, ``batch``, ``gateway``, ``reported_cost_source``; a missing one
        is all None) and its reported costs.

        Calls the catalogue can price by their counts alone go over whole columns
        (``pricing_core.linear_costs``), the calls metergraph-core does not know over genai-prices'
        columns; the others, and every call with a reported cost, call by call. Each group's catalogue,
        entry and model id are gathered onto its calls by their group codes (one pass per column), and
        only the calls priced one by one are written individually.
        """
        provider, model, ts_ms = columns["provider"], columns["model"], columns["ts_ms"]
        n = len(model)
        none: list[Any] = [None] * n
        tokens = {name: columns.get(name) or none for name in TOKEN_COLUMNS}
        endpoint = columns.get("endpoint") or none
        batch = columns.get("batch") or none
        zeros, absent = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
        ints: dict[str, np.ndarray] = {}
        present: dict[str, np.ndarray] = {}
        for name, col in tokens.items():
            if col.count(None) == n:
                ints[name], present[name] = zeros, absent
                continue
            f = np.array(col, dtype=np.float64)  # None -> NaN, in C; counts below 2**53 exactly
            present[name] = ~np.isnan(f)
            # Counts past int64 are capped (such a call is priced call by call, and refused by the store).
            ints[name] = np.minimum(np.nan_to_num(f, nan=0.0), 2.0**62).astype(np.int64)
        has_usage = np.logical_or.reduce(list(present.values()))
        has_model = np.fromiter(map(bool, model), dtype=bool, count=n)
        # Gemini's native thinking tokens bill as output (pricing_core.THINKING_OUTSIDE_OUTPUT).
        billed_output: Sequence[Any] = tokens["output_tokens"]
        if not pricing_core.THINKING_OUTSIDE_OUTPUT.isdisjoint(endpoint):
            billed = list(billed_output)
            ints["output_tokens"] = ints["output_tokens"].copy()
            thinking = tokens["reasoning_tokens"]
            for i, e in enumerate(endpoint):
                if e in pricing_core.THINKING_OUTSIDE_OUTPUT and thinking[i] and billed[i] is not None:
                    billed[i] += thinking[i]
                    ints["output_tokens"][i] = billed[i]
            billed_output = billed

        days = [t // DAY_MS for t in ts_ms]
        keys = list(zip(provider, model, days, strict=True))
        groups = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        codes = np.fromiter(map(groups.__getitem__, keys), dtype=np.int64, count=n)
        wanted = np.zeros(len(groups), dtype=bool)
        wanted[codes[has_usage & has_model]] = True
        entries = [
            self.core.entry(p, m, d) if m and wanted[g] else CoreEntry(False)
            for (p, m, d), g in groups.items()
        ]
        linear = np.array([e.linear for e in entries], dtype=bool)
        candidates = linear[codes] & has_usage & has_model
        if list(reported).count(None) != n:
            candidates &= np.fromiter((v is None for v in reported), dtype=bool, count=n)
        if any(batch):
            candidates &= np.fromiter((not b for b in batch), dtype=bool, count=n)
        order = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                 "cache_write_5m_tokens", "cache_write_1h_tokens")  # fmt: skip
        units, done = pricing_core.linear_costs(
            entries, codes, [ints[c] for c in order], [present[c] for c in order], candidates
        )

        known = has_model & has_usage
        found = np.array([e.found for e in entries], dtype=bool)
        # Each group's catalogue, entry and model id: metergraph-core's, or genai-prices' for a model it
        # does not know (priced below over genai-prices' columns).
        group_catalog = _objects([self.core_name if e.found else None for e in entries])
        group_id = _objects([e.price_id for e in entries])
        group_model = _objects([e.canonical_model for e in entries])
        for (p, m, d), g in groups.items():
            if m and wanted[g] and not found[g]:
                resolved = self.genai.resolve_day(p, m, d)
                if resolved.found:
                    group_catalog[g], group_model[g] = GENAI_LIBRARY, resolved.model_id
                    group_id[g] = f"{resolved.provider_id}/{resolved.model_id}"
        fallback = np.flatnonzero(known & ~found[codes])
        cost = np.where(done, units / 1e8, np.nan)
        status = np.where(units == 0, 1, 0)
        missing: list[str | None] = [None] * n
        if len(fallback):
            priced = self._fallback(fallback, columns, tokens, billed_output, ts_ms, present)
            cost[fallback] = np.array(priced.cost_usd, dtype=np.float64)
            status[fallback] = [_STATUS_CODES[x] for x in priced.status]
            for i, value in zip(fallback.tolist(), priced.missing_rates, strict=True):
                if value is not None:
                    missing[i] = value
        has_cost = ~np.isnan(cost)
        costs: list[float | None] = cost.tolist()
        for i in np.flatnonzero(~has_cost).tolist():
            costs[i] = None
        out = PricedColumns(
            costs, list(costs), _STATUS_NAMES[status].tolist(), [0] * n, missing, [None] * n,
            group_catalog[codes].tolist(), group_id[codes].tolist(), group_model[codes].tolist(),
            _PROVENANCE[has_cost.astype(np.int64)].tolist(),
        )  # fmt: skip
        if any(e.ended for e in entries):
            ended = np.array([e.ended for e in entries], dtype=bool)[codes] & done
            for i in np.flatnonzero(ended).tolist():
                out.source_json[i] = _ENDED
        for i in np.flatnonzero(~known).tolist():
            out.set(i, None, "unpriced", None, None, None, None)
            out.unknown[i] = 1

        results: dict[int, CostResult] = {}
        late: list[int] = []
        for i in np.flatnonzero(known & found[codes] & ~done).tolist():
            row = (tokens["input_tokens"][i], billed_output[i], tokens["cache_read_tokens"][i],
                   tokens["cache_write_tokens"][i], tokens["cache_write_5m_tokens"][i],
                   tokens["cache_write_1h_tokens"][i])  # fmt: skip
            result = self.core.cost(provider[i], model[i], ts_ms[i], row, bool(batch[i]))
            if result.status == "unpriced":
                late.append(i)  # not priced at this time of the day
                continue
            results[i] = result
            price = None if result.cost_usd is None else float(result.cost_usd)
            reasons = list(result.reasons)
            partial = [r for r in reasons if r != "price_ended"]
            out.set(i, price, _status(result.status, result.cost_usd), self.core_name, result.price_id,
                    result.canonical_model, json.dumps({"reasons": reasons}) if reasons else None)  # fmt: skip
            out.missing_rates[i] = json.dumps(partial) if result.status == "partial" and partial else None
        if late:
            idx = np.array(late, dtype=np.int64)
            priced = self._fallback(idx, columns, tokens, billed_output, ts_ms, present)
            for j, i in enumerate(late):
                entry = self._genai_entry(priced.source_json[j])
                out.set(i, priced.cost_usd[j], priced.status[j], entry[2], entry[0], entry[1], None)
                out.missing_rates[i] = priced.missing_rates[j]

        if list(reported).count(None) != n:
            gateway = columns.get("gateway") or none
            cost_source = columns.get("reported_cost_source") or none
            for i, value in enumerate(reported):
                if value is None:
                    continue
                computed = out.computed_cost_usd[i]
                state = out.status[i]
                result = results.get(i) or CostResult(
                    out.canonical_model[i], out.price_id[i], None if computed is None else Decimal(repr(computed)),
                    "priced" if state == "zero" else state,
                )  # fmt: skip
                evidence = normalize_gateway_evidence({
                    "gateway": gateway[i], "endpoint": endpoint[i], "reported_cost_usd": value,
                    "reported_cost_source": cost_source[i],
                })  # fmt: skip
                at = datetime.fromtimestamp(ts_ms[i] / 1000, UTC)
                decision = resolve_billing(result, evidence, disputes=self.core.catalog.disputes, at=at)
                if decision.cost_provenance != "gateway_reported":
                    continue  # the catalogue's price stands; the figure is kept as reported_cost_usd
                charged = decision.cost_usd
                out.cost_usd[i] = None if charged is None else float(charged)
                out.status[i], out.cost_provenance[i] = _status("priced", charged), "gateway_reported"
                reasons = list(decision.catalog_reasons)
                out.source_json[i] = json.dumps({"reasons": reasons}) if reasons else None
        return out

    def _fallback(
        self,
        idx: np.ndarray,
        columns: Mapping[str, Sequence[Any]],
        tokens: Mapping[str, Sequence[Any]],
        billed_output: Sequence[Any],
        ts_ms: Sequence[int],
        present: Mapping[str, np.ndarray],
    ) -> GenaiColumns:
        """The calls ``idx`` metergraph-core does not price, priced by genai-prices over their columns.
        Its input count includes cache reads and writes: they are added back for a provider whose input
        leaves them out (Anthropic's)."""
        rows = idx.tolist()
        pick = operator.itemgetter(*rows)

        def take(column: Sequence[Any]) -> list[Any]:
            return [column[rows[0]]] if len(rows) == 1 else list(pick(column))

        provider, used_in, read = (
            take(columns["provider"]),
            take(tokens["input_tokens"]),
            take(tokens["cache_read_tokens"]),
        )
        write = take(tokens["cache_write_tokens"])
        cached = (present["cache_read_tokens"] | present["cache_write_tokens"] | present["cache_write_5m_tokens"]
                  | present["cache_write_1h_tokens"])[idx]  # fmt: skip
        if cached.any():
            five, hour = take(tokens["cache_write_5m_tokens"]), take(tokens["cache_write_1h_tokens"])
            for j in np.flatnonzero(cached).tolist():
                if five[j] is not None or hour[j] is not None:  # the split, as metergraph-core reads it
                    write[j] = (five[j] if five[j] is not None else (write[j] or 0)) + (hour[j] or 0)
                if used_in[j] is not None and not _input_counts_cache(provider[j]):
                    used_in[j] += (read[j] or 0) + (write[j] or 0)
        return self.genai.price_columns(
            provider, take(columns["model"]), [ts_ms[i] // DAY_MS for i in rows],
            [used_in, take(billed_output), read, write, take(tokens["reasoning_tokens"])], [None] * len(rows),
        )  # fmt: skip

    def _genai_entry(self, source: str | None) -> tuple[str | None, str | None, str | None]:
        """(price id, model id, catalogue) of a genai-prices source, once per entry."""
        found = self._genai_entries.get(source)
        if found is None:
            parsed = json.loads(source) if source else {}
            model: str | None = parsed.get("model")
            entry_id = f"{parsed.get('provider')}/{model}" if model else None
            found = self._genai_entries[source] = (entry_id, model, GENAI_LIBRARY if model else None)
        return found


# A price that ended and was not replaced still prices its calls; the catalogue says so.
_ENDED = json.dumps({"reasons": ["price_ended"]})


def _objects(values: Sequence[Any]) -> np.ndarray:
    """``values`` as a one-dimensional object array (never a two-dimensional one)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


@functools.lru_cache(maxsize=1024)
def _input_counts_cache(provider: str | None) -> bool:
    return pricing_core.input_counts_cache(provider)
