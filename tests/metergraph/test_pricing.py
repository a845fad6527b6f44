"""Pricing is the product's own: metergraph-core's ``CatalogSnapshot.cost`` for every model it knows (its
token semantics, 5-minute and 1-hour cache writes, long-context, batch and off-peak rules), genai-prices
for the others, a reported cost charged only on metergraph-core's qualified gateway evidence, and the
catalogue entry recorded with every price. One lookup per (provider, model, day); never $0 for an
unknown model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from genai_prices.data import providers

from triptych.metergraph import pricing_core
from triptych.metergraph.pricing import Pricer
from triptych.metergraph.pricing_genai import GenaiPricer

NOON = datetime(2026, 11, 1, 12, tzinfo=UTC)
DAY = int(NOON.timestamp() // 86_400)
# input, output, cache read, cache write, 5-minute write, 1-hour write: plain, cache-heavy, a read larger
# than the input (OpenAI-style input: partial), split writes, a long prompt, tiny counts.
USAGES: list[tuple[int | None, ...]] = [
    (1000, 200, None, None, None, None),
    (300_000, 5000, 100_000, 2000, None, None),
    (5, 0, 5, 0, None, None),
    (4000, 2000, 6000, None, None, None),
    (4000, 2000, 600, 3000, 1000, 2000),
    (50, 10, None, 100, None, None),
    (1_200_000, 900, 0, None, None, None),
    (None, 300, None, None, None, None),
]
TOKEN_NAMES = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
               "cache_write_5m_tokens", "cache_write_1h_tokens")  # fmt: skip


def _aliases() -> list[tuple[str, str]]:
    catalog = pricing_core.catalog()
    return [
        (str(alias.get("provider")), str(alias["alias"]))
        for model in catalog.document["models"]
        for alias in model.get("aliases") or []
    ]


def _library(
    provider: str, model: str, at: datetime, usage: tuple[int | None, ...], batch: bool = False
) -> Any:
    return pricing_core.catalog().snapshot.cost(
        provider=provider, model=model, at=at, batch=batch, **dict(zip(TOKEN_NAMES, usage, strict=True))
    )


@pytest.mark.parametrize("at", [NOON, NOON.replace(hour=3, minute=17), NOON + timedelta(days=40)])
def test_every_catalogue_alias_is_priced_exactly_as_metergraph_core_prices_it(at: datetime) -> None:
    """A whole batch (the column path and the call-by-call one) against the library, call by call: the
    same float, status and price id for every alias of the catalogue and every usage above."""
    pairs = _aliases()
    assert len(pairs) > 1000
    calls = [(p, m, u) for p, m in pairs for u in USAGES]
    columns: dict[str, list[Any]] = {
        "provider": [c[0] for c in calls], "model": [c[1] for c in calls],
        "ts_ms": [int(at.timestamp() * 1000)] * len(calls),
        **{name: [c[2][k] for c in calls] for k, name in enumerate(TOKEN_NAMES)},
    }  # fmt: skip
    out = Pricer().price_columns(columns, [None] * len(calls))
    compared = 0
    for i, (provider, model, usage) in enumerate(calls):
        expected = _library(provider, model, at, usage)
        if expected.status == "unpriced":
            assert out.price_catalog[i] != pricing_core.catalogue_name()  # left to the fallback
            continue
        want = None if expected.cost_usd is None else float(expected.cost_usd)
        got_status = "priced" if out.status[i] == "zero" else out.status[i]
        assert (out.cost_usd[i], got_status, out.price_id[i]) == (want, expected.status, expected.price_id), (
            provider, model, usage,
        )  # fmt: skip
        assert out.canonical_model[i] == expected.canonical_model
        assert out.cost_provenance[i] == ("catalog" if want is not None else "none")
        compared += 1
    assert compared > 5000


def test_batch_and_off_peak_calls_are_priced_by_the_library_rules() -> None:
    pricer = Pricer()
    usage = (120_000, 4000, 20_000, None, None, None)
    for provider, model in _aliases():
        for at in (NOON.replace(hour=2), NOON.replace(hour=20)):
            expected = _library(provider, model, at, usage, batch=True)
            got = pricer.price(provider, model, at, *usage[:4], batch=1, cache_write_5m_tokens=None)
            if expected.status != "unpriced":
                assert got.cost_usd == (None if expected.cost_usd is None else float(expected.cost_usd))


def test_anthropic_cache_reads_are_billed_on_top_of_the_input_the_product_way() -> None:
    """The issue's own example: claude-sonnet-4, input 4,000 + cache read 6,000 + output 2,000 is $0.0438
    (Anthropic's input count leaves cache reads out; it was $0.0318 with genai-prices' semantics)."""
    price = Pricer().price("anthropic", "claude-sonnet-4", NOON, 4000, 2000, cache_read_tokens=6000)
    assert price.cost_usd == 0.0438
    assert price.price_id == "anthropic/claude-sonnet-4:anthropic-api:global:2025-05-14"
    assert price.catalog is not None and price.catalog.startswith("metergraph-core 0.7.4")
    # OpenAI's prompt count includes its cached tokens: they come out of the input before its rate.
    openai = Pricer().price("openai", "gpt-4o", NOON, 1000, 100, cache_read_tokens=200)
    assert openai.cost_usd == pytest.approx(800 * 2.5e-6 + 200 * 1.25e-6 + 100 * 10e-6, abs=1e-12)


def test_one_hour_cache_writes_are_priced_at_their_own_rate() -> None:
    # claude-sonnet-4: $3.75/M for a 5-minute write, $6/M for a 1-hour one.
    split = Pricer().price("anthropic", "claude-sonnet-4", NOON, 4000, 2000, None, 3000,
                           cache_write_5m_tokens=1000, cache_write_1h_tokens=2000)  # fmt: skip
    assert split.cost_usd == pytest.approx(0.012 + 0.03 + 1000 * 3.75e-6 + 2000 * 6e-6, abs=1e-12)
    undivided = Pricer().price("anthropic", "claude-sonnet-4", NOON, 4000, 2000, None, 3000)
    assert undivided.cost_usd == pytest.approx(0.012 + 0.03 + 3000 * 3.75e-6, abs=1e-12)


def test_a_stale_alias_follows_the_catalogue_to_the_model_it_names_now() -> None:
    price = Pricer().price("mistral", "mistral-large-latest", NOON, 4000, 2000)
    assert price.canonical_model == "mistral/mistral-large-4"
    assert price.cost_usd == float(_library("mistral", "mistral-large-latest", NOON, (4000, 2000, None, None, None,
                                                                                      None)).cost_usd)  # fmt: skip


def test_gemini_thinking_is_billed_as_output_on_its_native_api_only() -> None:
    pricer = Pricer()
    native = pricer.price("google", "gemini-2.5-flash", NOON, 1000, 100, None, None, 400,
                          endpoint="models.generate_content")  # fmt: skip
    compat = pricer.price(
        "google", "gemini-2.5-flash", NOON, 1000, 100, None, None, 400, endpoint="chat.completions"
    )
    assert native.cost_usd == float(_library("google", "gemini-2.5-flash", NOON, (1000, 500, None, None, None,
                                                                                   None)).cost_usd)  # fmt: skip
    assert compat.cost_usd == float(_library("google", "gemini-2.5-flash", NOON, (1000, 100, None, None, None,
                                                                                   None)).cost_usd)  # fmt: skip


def test_a_reported_cost_is_charged_only_on_qualified_gateway_evidence() -> None:
    pricer = Pricer()
    catalogue = 1000 * 2.5e-6 + 100 * 10e-6
    gateway = pricer.price("openai", "gpt-4o", NOON, 1000, 100, reported_cost_usd=0.5, gateway="openrouter",
                           endpoint="chat.completions", reported_cost_source="openrouter.usage.cost")  # fmt: skip
    assert (gateway.cost_usd, gateway.provenance) == (0.5, "gateway_reported")
    assert gateway.computed_cost_usd == pytest.approx(catalogue)
    # An eval tool's estimate, a gateway on an endpoint it is not qualified for, a bare figure: the
    # catalogue's price stands.
    for evidence in (
        {"reported_cost_source": "langfuse.observation.cost_details.total"},
        {"gateway": "openrouter", "endpoint": "embeddings", "reported_cost_source": "openrouter.usage.cost"},
        {"gateway": "openrouter", "endpoint": "chat.completions", "reported_cost_source": "client"},
        {},
    ):
        price = pricer.price("openai", "gpt-4o", NOON, 1000, 100, reported_cost_usd=0.5, **evidence)
        assert (price.cost_usd, price.provenance) == (pytest.approx(catalogue), "catalog"), evidence
    # A model no catalogue prices keeps the gateway's charge.
    unknown = pricer.price("portkey-only", "house-model-x", NOON, 10, 10, reported_cost_usd="0.0125",
                           gateway="portkey", endpoint="messages", reported_cost_source="portkey.cost")  # fmt: skip
    assert (unknown.cost_usd, unknown.status, unknown.provenance) == (0.0125, "priced", "gateway_reported")


def test_a_model_only_genai_prices_knows_is_priced_by_it_with_anthropic_semantics_kept() -> None:
    pricer = Pricer()
    price = pricer.price("openai", "o3", NOON, 1000, 100)
    assert price.catalog is not None and price.catalog.startswith("genai-prices ")
    assert price.price_id == "openai/o3"
    assert price.cost_usd == pytest.approx(
        GenaiPricer().price_on_day("openai", "o3", DAY, 1000, 100).cost_usd
    )


def test_each_catalogue_is_consulted_once_per_provider_model_and_day() -> None:
    pricer = Pricer()
    for i in range(200):
        pricer.price("openai", "gpt-4o", NOON, 100 + i, 10)
    pricer.price("openai", "gpt-4o", NOON.replace(hour=23), 100, 10)
    assert pricer.lookups == 1
    pricer.price("openai", "gpt-4o", NOON.replace(day=2), 100, 10)
    assert pricer.lookups == 2


def test_an_unknown_model_is_unpriced_never_zero() -> None:
    price = Pricer().price("openai", "no-such-model-xyz", NOON, 1000, 100)
    assert (price.status, price.cost_usd, price.provenance) == ("unpriced", None, "none")


def test_a_call_without_usage_or_model_is_unknown() -> None:
    assert Pricer().price("openai", None, NOON, 10, 10).unknown
    assert Pricer().price("openai", "gpt-4o", NOON, None, None).unknown


def test_the_fallback_prices_every_bundled_model_exactly_as_genai_prices_does() -> None:
    """The fallback catalogue is genai-prices' own arithmetic (``pricing_genai.py``)."""
    pricer = GenaiPricer()
    compared = 0
    for provider in providers:
        for model in provider.models:
            for u in [(1000, 200, 0, 0, 0), (300_000, 5000, 100_000, 2000, 1000)]:
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
                mine = pricer.price_on_day(provider.id, model.id, DAY, *u)
                assert mine.computed_cost_usd == pytest.approx(
                    float(expected.total_price), rel=1e-9, abs=1e-12
                )
                compared += 1
    assert compared > 2000


def test_the_catalogue_parsed_by_libyaml_is_the_one_the_library_loads_itself() -> None:
    """``pricing_core.catalog()`` parses the bundled YAML with libyaml (a third of a server start saved):
    the document, the metadata and every alias's price for every usage above equal the library's own
    ``load_catalog``."""
    from metergraph_core import load_catalog

    ours, theirs = pricing_core.catalog(), load_catalog(region="global")
    assert ours is not theirs
    assert ours.document == theirs.document
    assert (ours.version, ours.currency, ours.pricing_verified_at, ours.disputes) == (
        theirs.version, theirs.currency, theirs.pricing_verified_at, theirs.disputes,
    )  # fmt: skip
    assert ours.canonical_ids == theirs.canonical_ids
    for provider, model in _aliases():
        for usage in USAGES:
            counts = dict(zip(TOKEN_NAMES, usage, strict=True))
            assert ours.snapshot.cost(
                provider=provider, model=model, at=NOON, **counts
            ) == theirs.snapshot.cost(provider=provider, model=model, at=NOON, **counts), (
                provider,
                model,
                usage,
            )
