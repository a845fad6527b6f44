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
3. **Provenance.** Every call records the catalogue (``price_catalog``), its entry (``price_id``, and the
   catalogue's model id, ``canonical_model``) and where its cost came from (``cost_provenance``:
   ``catalog``, ``gateway_reported`` or ``none``), plus a JSON summary in ``price_source``.
"""

from __future__ import annotations

import functools
import json
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

# The price catalogues /healthz reports: the primary one, then the fallback.
CATALOG_VERSION = f"metergraph-core-{CORE_VERSION}"
DAY_MS = 86_400_000
_STATUS_NAMES = np.array(["priced", "zero"], dtype=object)

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

    def stored(self) -> dict[str, list[Any]]:
        """The stored columns by name."""
        return {
            "cost_usd": self.cost_usd, "computed_cost_usd": self.computed_cost_usd, "cost_status": self.status,
            "cost_unknown": self.unknown, "missing_rates": self.missing_rates, "price_source": self.source_json,
            "price_catalog": self.price_catalog, "price_id": self.price_id,
            "canonical_model": self.canonical_model, "cost_provenance": self.cost_provenance,
        }  # fmt: skip


def _status(status: str, cost: Decimal | float | None) -> str:
    return "zero" if status == "priced" and cost == 0 else status


def _summary(catalog: str, price_id: str | None, model: str | None, provenance: str, **extra: Any) -> str:
    return json.dumps(
        {"catalog": catalog, "price_id": price_id, "model": model, "provenance": provenance, **extra},
        sort_keys=True,
    )


class Pricer:
    """Prices calls (module docstring); each catalogue is consulted once per (provider, model, UTC day)."""

    def __init__(self) -> None:
        self.core = CoreCatalogue()
        self.genai = GenaiPricer()
        self.core_name = pricing_core.catalogue_name()
        self._group_json: dict[tuple[CoreEntry, bool], str] = {}
        self._genai_entries: dict[
            tuple[str | None, bool], tuple[str | None, str | None, str | None, str]
        ] = {}

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
        (``pricing_core.linear_costs``); the others, and every call with a reported cost, call by call.
        """
        provider, model, ts_ms = columns["provider"], columns["model"], columns["ts_ms"]
        n = len(model)
        none: list[Any] = [None] * n
        tokens = {name: columns.get(name) or none for name in TOKEN_COLUMNS}
        endpoint = columns.get("endpoint") or none
        batch = columns.get("batch") or none
        # None -> NaN, in C; counts below 2**53 come back exactly.
        floats = {name: np.array(col, dtype=np.float64) for name, col in tokens.items()}
        present = {name: ~np.isnan(f) for name, f in floats.items()}
        has_usage = np.logical_or.reduce(list(present.values()))
        has_model = np.array([bool(m) for m in model], dtype=bool)
        # Counts past int64 are capped (such a call is priced call by call, and refused by the store).
        ints = {
            name: np.minimum(np.nan_to_num(f, nan=0.0), 2.0**62).astype(np.int64)
            for name, f in floats.items()
        }
        # Gemini's native thinking tokens bill as output (pricing_core.THINKING_OUTSIDE_OUTPUT).
        billed_output: list[Any] = list(tokens["output_tokens"])
        thinking = [
            i for i, e in enumerate(endpoint)
            if e in pricing_core.THINKING_OUTSIDE_OUTPUT and tokens["reasoning_tokens"][i]
        ]  # fmt: skip
        if thinking:
            ints["output_tokens"] = ints["output_tokens"].copy()
            for i in thinking:
                if billed_output[i] is not None:
                    billed_output[i] += tokens["reasoning_tokens"][i]
                    ints["output_tokens"][i] = billed_output[i]

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
        if any(v is not None for v in reported):
            candidates &= np.fromiter((v is None for v in reported), bool, n)
        if any(batch):
            candidates &= np.fromiter((not b for b in batch), bool, n)
        order = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                 "cache_write_5m_tokens", "cache_write_1h_tokens")  # fmt: skip
        units, done = pricing_core.linear_costs(
            entries, codes, [ints[c] for c in order], [present[c] for c in order], candidates
        )

        cost: list[float | None] = (units / 1e8).tolist()
        zero = units == 0
        status: list[str] = _STATUS_NAMES[zero.astype(np.int64)].tolist()
        group_json = [self._entry_json(e) if e.linear else None for e in entries]
        source_json: list[str | None] = [group_json[c] for c in codes.tolist()]
        price_id: list[str | None] = [entries[c].price_id for c in codes.tolist()]
        canonical: list[str | None] = [entries[c].canonical_model for c in codes.tolist()]
        catalog: list[str | None] = [self.core_name] * n
        provenance = ["catalog"] * n
        computed = list(cost)
        unknown = [0] * n
        missing: list[str | None] = [None] * n

        known = has_model & has_usage
        found = np.array([e.found for e in entries], dtype=bool)[codes]
        # Not in metergraph-core at all: straight to genai-prices, which overwrites every column.
        fallback: list[int] = np.flatnonzero(known & ~found).tolist()
        results: dict[int, CostResult] = {}
        for i in np.flatnonzero(~known).tolist():
            cost[i] = computed[i] = source_json[i] = price_id[i] = canonical[i] = catalog[i] = None
            status[i], provenance[i], unknown[i] = "unpriced", "none", 1
        for i in np.flatnonzero(known & found & ~done).tolist():
            row = (tokens["input_tokens"][i], billed_output[i], tokens["cache_read_tokens"][i],
                   tokens["cache_write_tokens"][i], tokens["cache_write_5m_tokens"][i],
                   tokens["cache_write_1h_tokens"][i])  # fmt: skip
            result = self.core.cost(provider[i], model[i], ts_ms[i], row, bool(batch[i]))
            if result.status == "unpriced":
                fallback.append(i)  # not priced at this time of the day
                continue
            results[i] = result
            value = result.cost_usd
            cost[i] = computed[i] = None if value is None else float(value)
            status[i] = _status(result.status, value)
            reasons = [r for r in result.reasons if r != "price_ended"]
            missing[i] = json.dumps(reasons) if result.status == "partial" and reasons else None
            price_id[i], canonical[i], catalog[i] = result.price_id, result.canonical_model, self.core_name
            provenance[i] = "catalog" if value is not None else "none"
            source_json[i] = _summary("metergraph-core", result.price_id, result.canonical_model, provenance[i],
                                      reasons=list(result.reasons))  # fmt: skip
        if fallback:
            fallback.sort()
            self._fallback(fallback, columns, tokens, billed_output, ts_ms,
                           (cost, computed, status, missing, source_json, price_id, canonical, catalog,
                            provenance))  # fmt: skip

        if any(v is not None for v in reported):
            gateway = columns.get("gateway") or none
            cost_source = columns.get("reported_cost_source") or none
            for i, value in enumerate(reported):
                if value is None:
                    continue
                result = results.get(i) or CostResult(
                    canonical[i], price_id[i], None if computed[i] is None else Decimal(repr(computed[i])),
                    "priced" if status[i] == "zero" else status[i],
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
                cost[i] = None if charged is None else float(charged)
                status[i], provenance[i] = _status("priced", charged), "gateway_reported"
                source_json[i] = _summary(
                    catalog[i] or "none",
                    price_id[i],
                    canonical[i],
                    "gateway_reported",
                    gateway=evidence.gateway,
                    reported_cost_source=evidence.reported_cost_source,
                    reasons=list(decision.catalog_reasons),
                )
        return PricedColumns(cost, computed, status, unknown, missing, source_json, catalog, price_id, canonical,
                             provenance)  # fmt: skip

    def _entry_json(self, entry: CoreEntry) -> str:
        key = (entry, entry.ended)
        found = self._group_json.get(key)
        if found is None:
            extra = {"reasons": ["price_ended"]} if entry.ended else {}
            found = self._group_json[key] = _summary(
                "metergraph-core", entry.price_id, entry.canonical_model, "catalog", **extra
            )
        return found

    def _fallback(
        self,
        rows: list[int],
        columns: Mapping[str, Sequence[Any]],
        tokens: Mapping[str, Sequence[Any]],
        billed_output: list[Any],
        ts_ms: Sequence[int],
        out: tuple[list[Any], ...],
    ) -> None:
        """The calls metergraph-core does not price, priced by genai-prices over their columns. Its input
        count includes cache reads and writes: they are added back for a provider whose input leaves them
        out (Anthropic's)."""
        cost, computed, status, missing, source_json, price_id, canonical, catalog, provenance = out
        provider = [columns["provider"][i] for i in rows]
        used_in = [tokens["input_tokens"][i] for i in rows]
        read = [tokens["cache_read_tokens"][i] for i in rows]
        write = [tokens["cache_write_tokens"][i] for i in rows]
        five = [tokens["cache_write_5m_tokens"][i] for i in rows]
        hour = [tokens["cache_write_1h_tokens"][i] for i in rows]
        if five.count(None) != len(rows) or hour.count(None) != len(rows):
            for j, (w5, w1) in enumerate(zip(five, hour, strict=True)):
                if w5 is not None or w1 is not None:
                    write[j] = (w5 if w5 is not None else (write[j] or 0)) + (w1 or 0)
        for j, p in enumerate(provider):
            if used_in[j] is not None and (read[j] or write[j]) and not _input_counts_cache(p):
                used_in[j] += (read[j] or 0) + (write[j] or 0)
        priced = self.genai.price_columns(
            provider, [columns["model"][i] for i in rows], [ts_ms[i] // DAY_MS for i in rows],
            [used_in, [billed_output[i] for i in rows], read, write, [tokens["reasoning_tokens"][i] for i in rows]],
            [None] * len(rows),
        )  # fmt: skip
        for j, i in enumerate(rows):
            value, state = priced.cost_usd[j], priced.status[j]
            cost[i] = computed[i] = value
            status[i] = state
            missing[i] = priced.missing_rates[j]
            entry = self._genai_entry(priced.source_json[j], value is not None)
            price_id[i], canonical[i], catalog[i], source_json[i] = entry
            provenance[i] = "catalog" if value is not None else "none"

    def _genai_entry(
        self, source: str | None, priced: bool
    ) -> tuple[str | None, str | None, str | None, str]:
        """(price id, model id, catalogue, summary) of a genai-prices source, once per entry."""
        key = (source, priced)
        found = self._genai_entries.get(key)
        if found is None:
            parsed = json.loads(source) if source else {}
            model = parsed.get("model")
            entry_id = f"{parsed.get('provider')}/{model}" if model else None
            catalog = GENAI_LIBRARY if model else None
            summary = _summary(GENAI_LIBRARY, entry_id, model, "catalog" if priced else "none")
            found = self._genai_entries[key] = (entry_id, model, catalog, summary)
        return found


@functools.lru_cache(maxsize=1024)
def _input_counts_cache(provider: str | None) -> bool:
    return pricing_core.input_counts_cache(provider)
