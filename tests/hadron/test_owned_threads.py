"""Every thread Hadron's search starts ends with the surface: its close stops a memory's vector graph build
(a usearch graph and numpy buffers the build would touch after the index is gone) and the query-embedding
threads before it closes the database, on every engine (decision 0420).

The build is held at a known step by wrapping ``VectorIndex._build_hnsw``, which then runs for real; the
graph threshold is lowered so a memory of 12 nodes gets one."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hadron.letters import LetterEmbedder
from held_builds import hold_builds

from triptych.core import search
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.search import FindQuery
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("sqlite", "postgresql")
NODES = 12
WORDS = "deploy rollback cache header badge facade bead chafe".split()
OWNED = ("hnsw-", "load-", "hadron-query-embed", "checkpoint-")  # what Hadron's search and database start


def _owned(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.name.startswith(OWNED))


def test_closing_hadron_during_a_graph_build_stops_it_and_leaves_no_thread(
    tmp_path: Path, database_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "HNSW_THRESHOLD", 8)
    held = hold_builds(monkeypatch)
    before = set(threading.enumerate())
    hadron = Hadron.open(tmp_path / "hadron.db", LetterEmbedder(), database_url=database_url)  # type: ignore[arg-type]
    admin = hadron.admin()
    admin.create_org("acme.com")
    admin.create_user("alice")
    admin.add_org_member("acme.com", "alice", "OWNER")
    admin.create_memory("specs", "knowledge", org="acme.com")  # knowledge: nodes are embedded
    caller = HadronCaller("user", "alice", user=hadron.tenancy.user_by_handle("alice"))
    state = hadron.selections.session(caller, "s", None)
    for i in range(NODES):
        words = [WORDS[(i + j) % len(WORDS)] for j in range(3)]
        values = {"name": f"specs {' '.join(words)}", "content": " ".join(words * 2)}
        hadron.nodes.create(
            caller, state, f"hrn:node:acme.com:specs:n{i}", NodeFields(values, frozenset(values)), None
        )
    # A hybrid search embeds its query in the executor and loads the memory's vectors: the graph
    # starts building in the background, and the search answers exactly meanwhile.
    found = hadron.search.find_nodes(
        caller, state, FindQuery("badge facade", mode="hybrid", memory_urn="hrn:mem:acme.com:specs")
    )
    assert found.hits
    assert held.building.wait(30)
    running = _owned(before)
    for prefix in ("hnsw-", "hadron-query-embed"):
        assert any(n.startswith(prefix) for n in running), running

    hadron.close()

    assert held.outcomes == ["Stopped"]  # the build ended at its first batch: nothing adopted
    assert _owned(before) == []
