"""Pricing agrees with genai-prices itself, caches one lookup per (provider, model, day), never says $0
for an unknown model, and prefers a cost reported with the call."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from genai_prices import Usage, calc_price
from genai_prices.data import providers

from triptych.metergraph.pricing import Pricer

NOON = datetime(2026, 11, 1, 12, tzinfo=UTC)
USAGES = [(1000, 200, 0, 0, 0), (300_000, 5000, 100_000, 2000, 1000), (5, 0, 5, 0, 0)]


def test_every_bundled_model_is_priced_exactly_as_the_library_prices_it() -> None:
    pricer = Pricer()
    compared = 0
    for provider in providers:
        for model in provider.models:
            for u in USAGES:
                usage = Usage(
                    input_tokens=u[0], output_tokens=u[1], cache_read_tokens=u[2] or None,
                    cache_write_tokens=u[3] or None, output_reasoning_tokens=u[4] or None,
                )  # fmt: skip
                try:
                    expected = calc_price(
                        usage, model_ref=model.id, provider_id=provider.id, genai_request_timestamp=NOON
                    )
                except Exception:
                    continue  # the library itself cannot price this usage (non-token units only)
                mine = pricer.price(provider.id, model.id, NOON, *u)
                assert mine.computed_cost_usd == pytest.approx(float(expected.total_price), rel=1e-9, abs=1e-12), (
                    provider.id, model.id, u,
                )  # fmt: skip
                compared += 1
    assert compared > 3000


def test_the_library_is_consulted_once_per_provider_model_and_day() -> None:
    pricer = Pricer()
    for _ in range(1000):
        pricer.price("openai", "gpt-4o", NOON, 100, 10)
    pricer.price("openai", "gpt-4o", NOON.replace(hour=23), 100, 10)
    assert pricer.lookups == 1
    pricer.price("openai", "gpt-4o", NOON.replace(day=2), 100, 10)
    assert pricer.lookups == 2


def test_an_unknown_model_is_unpriced_never_zero() -> None:
    price = Pricer().price("openai", "no-such-model-xyz", NOON, 1000, 100)
    assert price.status == "unpriced"
    assert price.cost_usd is None


def test_a_call_without_usage_or_model_is_unknown() -> None:
    assert Pricer().price("openai", None, NOON, 10, 10).unknown
    assert Pricer().price("openai", "gpt-4o", NOON, None, None).unknown


def test_cache_reads_are_part_of_input_at_their_own_rate() -> None:
    # gpt-4o: $2.5/M input, $1.25/M cached input, $10/M output.
    price = Pricer().price("openai", "gpt-4o", NOON, 1000, 100, cache_read_tokens=200)
    assert price.cost_usd == pytest.approx(800 * 2.5e-6 + 200 * 1.25e-6 + 100 * 10e-6)
    assert price.status == "priced"
    assert price.source is not None and price.source["model"] == "gpt-4o"
    assert price.source["library"].startswith("genai-prices ")


def test_a_reported_cost_is_kept_and_preferred_over_the_computed_one() -> None:
    price = Pricer().price("openai", "gpt-4o", NOON, 1000, 100, reported_cost_usd=0.5)
    assert price.cost_usd == 0.5
    assert price.computed_cost_usd == pytest.approx(0.0035)


def test_provider_spellings_from_otel_resolve_to_library_providers() -> None:
    assert Pricer().price("gcp.gemini", "gemini-1.5-flash", NOON, 1000, 100).status == "priced"
