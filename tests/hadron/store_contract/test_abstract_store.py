"""The ``AbstractStore`` contract on every engine: one abstract per node, upserted, read in chunks, and
listed only for live nodes in loc order."""

from __future__ import annotations

import pytest
from hadron.store_contract.conftest import AT, Seed, node

from triptych.hadron.abstract_store import Abstract

pytestmark = pytest.mark.engines("sqlite", "postgresql")


def test_an_abstract_is_replaced_read_back_and_deleted(seed: Seed) -> None:
    graph, abstracts = seed.stores.graph, seed.stores.abstracts
    written = node(seed.memory, "a")
    graph.insert_node(written)
    abstracts.put(seed.memory.id, Abstract(written.id, "first", "h1", "extractive", AT))
    abstracts.put(seed.memory.id, Abstract(written.id, "résumé", "h2", "llm:m", AT))
    assert abstracts.get([written.id, "nope"]) == {
        written.id: Abstract(written.id, "résumé", "h2", "llm:m", AT)
    }
    abstracts.delete(seed.memory.id, [written.id])
    assert abstracts.get([written.id]) == {}


def test_reads_of_many_nodes_go_in_chunks_and_live_nodes_come_in_loc_order(seed: Seed) -> None:
    graph, abstracts = seed.stores.graph, seed.stores.abstracts
    nodes = [node(seed.memory, f"n{i:04d}") for i in range(510)]
    with graph.atomic():
        for n in nodes:
            graph.insert_node(n)
            abstracts.put(seed.memory.id, Abstract(n.id, n.loc, "h", "extractive", AT))
    assert len(abstracts.get([n.id for n in nodes])) == 510
    graph.soft_delete([nodes[0].id], AT)
    listed = list(abstracts.live_nodes(seed.memory.id))
    assert [loc for _, loc, _, _ in listed] == [n.loc for n in nodes[1:]]
    assert listed[0][2] == "x" and listed[0][3].text == nodes[1].loc
