"""``TRIPTYCH_INDEX_MEMORY_MB`` through a real server and the MCP client, on every engine: with a budget
smaller than any workspace, searching two workspaces in turn forgets each for the other, every search of a
forgotten one returns the same hits and says how it answered, and ``/metrics`` shows the budget working."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from harness import ServerProcess, mcp_session
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.engines("sqlite", "postgresql")
BUDGET_MB = 0.001  # about 1 KB: smaller than any workspace's indexes
TEXTS = {
    "ws-a": [
        "Zebras graze on the savanna grass.",
        "Their stripes confuse biting flies.",
        "Lions hunt zebras.",
    ],
    "ws-b": ["Qubits hold superposed states.", "Quantum computers factor numbers.", "Zebras are not qubits."],
}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, storage_engine: str, module_database_url: str | None
) -> Iterator[ServerProcess]:
    env = {"TRIPTYCH_INDEX_MEMORY_MB": str(BUDGET_MB)}
    if module_database_url is not None:
        env["TRIPTYCH_DATABASE_URL"] = module_database_url
    started = ServerProcess(Path(tmp_path_factory.mktemp("budget")) / "data", env).start()
    yield started
    started.stop()


def _metrics(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(server.url + "/metrics")
    assert response.status_code == 200, response.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


async def test_searches_of_forgotten_workspaces_answer_alike_and_the_metrics_show_the_evictions(
    server: ServerProcess, storage_engine: str
) -> None:
    async with mcp_session(server.url + "/mcp") as mcp:
        for workspace, texts in TEXTS.items():
            for i, text in enumerate(texts):
                stored = await mcp.call(
                    "metronix_store", content=text, doc_label=f"d{i}", workspace_id=workspace
                )
                assert not stored.is_error, stored.data
        first: dict[str, list[str]] = {}
        hows: list[dict[str, str]] = []
        for _ in range(2):
            for workspace in TEXTS:  # each search forgets the other workspace's indexes
                found = await mcp.call("metronix_search_fast", query="zebra stripes", workspace_id=workspace)
                assert not found.is_error, found.data
                labels = [r["doc_label"] for r in found.data["results"]]
                assert labels == first.setdefault(workspace, labels) and labels
                hows.append(found.data["retrieval"])
        # Asked for again and again, ws-b becomes the hotter workspace: server mode loads it now too.
        for _ in range(3):
            found = await mcp.call("metronix_search_fast", query="zebra stripes", workspace_id="ws-b")
            assert [r["doc_label"] for r in found.data["results"]] == first["ws-b"]
    # Each side says how it answered: loaded in the search (embedded), or by PostgreSQL while the worker's
    # copies load (server mode), never "loading" with nothing, at this size.
    on_postgres = storage_engine == "postgresql"
    dense, keyword = ({"pgvector", "exact"}, {"sql", "bm25"}) if on_postgres else ({"exact"}, {"bm25"})
    assert all(how["dense"] in dense and how["keyword"] in keyword for how in hows), hows
    metrics = _metrics(server)
    for _ in range(100):  # a load in the background (server mode) evicts when it lands
        if any(name == "triptych_index_evictions_total" for name, _ in metrics):
            break
        await anyio.sleep(0.1)
        metrics = _metrics(server)
    assert metrics[("triptych_index_memory_budget_bytes", ())] == int(BUDGET_MB * 1024 * 1024)
    evicted = sum(v for (name, _), v in metrics.items() if name == "triptych_index_evictions_total")
    # Embedded: every search loads its workspace and forgets the other's. Server mode: PostgreSQL answers
    # a workspace asked for while the budget is full, and loads it only once it is the hotter one.
    assert evicted >= (1 if on_postgres else 4)
    resident = {labels: v for (name, labels), v in metrics.items() if name == "triptych_index_resident_bytes"}
    assert sum(resident.values()) > 0  # the partition just installed stays, even over the budget
