"""Every call records which catalogue and entry priced it and where its cost came from, on both engines,
and a database of the previous schema (SQLite migration 5, ClickHouse schema version 5) gains the
columns when opened, its calls answering null provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mg_support import NOW, agent, app, row

from triptych.metergraph.call_model import PRICING_COLUMNS
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings

GATEWAY = {
    "gateway": "openrouter",
    "endpoint": "chat.completions",
    "reported_cost_source": "openrouter.usage.cost",
}


def _rows() -> list[dict[str, Any]]:
    return [
        row(trace_id="core", provider="anthropic", model="claude-sonnet-4", input_tokens=4000, output_tokens=2000,
            cache_read_tokens=6000, cache_write_tokens=3000, cache_write_5m_tokens=1000, cache_write_1h_tokens=2000),
        row(trace_id="fallback", model="o3"),
        row(trace_id="unknown", model="in-house-7"),
        row(trace_id="gateway", reported_cost_usd=0.25, **GATEWAY),
        row(trace_id="estimate", reported_cost_usd=0.25, reported_cost_source="langfuse.observation.cost_details.total"),
    ]  # fmt: skip


def _pricing(mg: Metergraph, trace_id: str) -> dict[str, Any]:
    [span] = mg.traces.get_trace(agent(), trace_id)["spans"]
    return {"cost_usd": span["cost_usd"], "cost_status": span["cost_status"], **span["pricing"]}


def test_every_call_records_the_catalogue_entry_that_priced_it(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": _rows()})
    core = _pricing(mg, "core")
    assert core["catalog"] == "metergraph-core 0.7.4"
    assert (core["price_id"], core["model"], core["cost_provenance"]) == (
        "anthropic/claude-sonnet-4:anthropic-api:global:2025-05-14", "anthropic/claude-sonnet-4", "catalog",
    )  # fmt: skip
    # input 4,000 x $3 + output 2,000 x $15 + reads 6,000 x $0.30 + writes 1,000 x $3.75 and 2,000 x $6, per M
    assert core["cost_usd"] == pytest.approx(0.012 + 0.03 + 0.0018 + 0.00375 + 0.012, abs=1e-12)
    assert (core["cache_write_5m_tokens"], core["cache_write_1h_tokens"]) == (1000, 2000)
    fallback = _pricing(mg, "fallback")
    assert fallback["catalog"].startswith("genai-prices ") and fallback["price_id"] == "openai/o3"
    unknown = _pricing(mg, "unknown")
    assert (unknown["cost_usd"], unknown["cost_status"], unknown["catalog"], unknown["cost_provenance"]) == (
        None, "unpriced", None, "none",
    )  # fmt: skip
    gateway = _pricing(mg, "gateway")
    assert (gateway["cost_usd"], gateway["cost_provenance"], gateway["gateway"]) == (0.25, "gateway_reported",
                                                                                     "openrouter")  # fmt: skip
    assert gateway["catalog_cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)
    estimate = _pricing(mg, "estimate")  # an eval tool's estimate: kept as evidence, the catalogue bills
    assert (estimate["cost_provenance"], estimate["reported_cost_usd"]) == ("catalog", 0.25)
    assert estimate["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)


def test_a_database_of_the_previous_schema_gains_the_provenance_columns(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> None:
    url = request.getfixturevalue("clickhouse").database_url() if engine == "clickhouse" else None

    def reopen() -> Metergraph:  # the same database each time
        return Metergraph.open(tmp_path, load_metergraph_settings(clickhouse_url=url), clock=lambda: NOW)

    old = reopen()
    old.ingest.ingest_document(app(), {"rows": [row(trace_id="before")]})
    # The calls table as the previous schema left it: without the eight columns.
    if engine == "sqlite":
        with old.calls.db.transaction() as conn:  # type: ignore[attr-defined]
            for column in PRICING_COLUMNS:
                conn.execute(f"ALTER TABLE calls DROP COLUMN {column}")
            conn.execute("UPDATE schema_version SET version = 5 WHERE component = 'main'")
    else:
        for column in PRICING_COLUMNS:
            old.calls.client.command(f"ALTER TABLE calls DROP COLUMN {column}")  # type: ignore[attr-defined]
    old.close()
    new = reopen()
    try:
        before = _pricing(new, "before")
        assert before["cost_usd"] == pytest.approx(1000 * 2.5e-6 + 100 * 10e-6)  # its price kept
        assert (before["catalog"], before["price_id"], before["cost_provenance"]) == (None, None, None)
        new.ingest.ingest_document(app(), {"rows": [row(trace_id="after")]})
        after = _pricing(new, "after")
        assert after["price_id"] == "openai/gpt-4o:openai-api:global:2024-08-06"
        assert after["cost_provenance"] == "catalog"
    finally:
        new.close()
