"""Hadron's PostgreSQL engine itself: its migrations from an empty database, and two tenants in one
database that no store query lets meet (every statement is scoped by memory, as on SQLite, where each
tenant's rows also share one file)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from hadron.letters import LetterEmbedder

from triptych.core.regex import LinearPattern
from triptych.hadron.domain.where import compile_where
from triptych.hadron.engines import PG_COMPONENT as COMPONENT
from triptych.hadron.engines import open_stores
from triptych.hadron.identity import HadronCaller
from triptych.hadron.pg_schema import HADRON as PG_MIGRATIONS
from triptych.hadron.search_store import NodeFilter
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("postgresql")


def test_migrations_run_from_an_empty_database_once(tmp_path: Path, database_url: str | None) -> None:
    assert database_url is not None
    with psycopg.connect(database_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables is not None and tables[0] == 0
    first = open_stores(tmp_path / "hadron.db", database_url, None, None)
    assert first.pg is not None and first.engine == "postgresql"
    assert first.pg.version(COMPONENT) == len(PG_MIGRATIONS)
    for component in ("hadron-team", "hadron-actions", "hadron-abstracts", "hadron-git"):
        assert first.pg.version(component) >= 1, component
    # A second start (another worker) finds every version applied and changes nothing.
    assert first.pg.migrate(COMPONENT, PG_MIGRATIONS) == 0
    second = open_stores(tmp_path / "hadron.db", database_url, None, None)
    second.close()
    first.close()
    assert not (tmp_path / "hadron.db").exists()  # server mode writes nothing into the data directory


@pytest.fixture
def tenants(tmp_path: Path, database_url: str | None) -> Iterator[tuple[Hadron, dict[str, HadronCaller]]]:
    hadron = Hadron.open(tmp_path / "hadron.db", LetterEmbedder(), database_url=database_url)  # type: ignore[arg-type]
    admin = hadron.admin()
    callers = {}
    for root, handle in (("acme.com", "alice"), ("globex.com", "dave")):
        admin.create_org(root)
        admin.create_user(handle)
        admin.add_org_member(root, handle, "OWNER")
        admin.create_memory("plans", "knowledge", org=root)
        admin.set_embedding(f"hrn:mem:{root}:plans", "content")
        callers[root] = HadronCaller("user", handle, user=hadron.tenancy.user_by_handle(handle))
    for root, caller in callers.items():
        state = hadron.selections.session(caller, "s", None)
        for loc in ("merger", "merger:terms", "merger:terms:price"):
            values = {"name": f"{root} deal {loc}", "content": f"{root} bead cafe", "data": {"owner": root}}
            hadron.nodes.create(
                caller, state, f"hrn:node:{root}:plans:{loc}", NodeFields(values, frozenset(values)), None
            )
    yield hadron, callers
    hadron.close()


def test_two_tenants_in_one_database_never_meet_in_a_store_query(
    tenants: tuple[Hadron, dict[str, HadronCaller]],
) -> None:
    hadron, _ = tenants
    acme = hadron.admin().memory("hrn:mem:acme.com:plans")
    globex = hadron.admin().memory("hrn:mem:globex.com:plans")
    graph, store = hadron.graph, hadron.search.store

    def owners(rowids: Sequence[int]) -> set[str]:
        return {n.memory_id for n in store.nodes_by_rowid(list(rowids)).values()}

    node = graph.node_by_loc(acme.id, "merger:terms")
    assert node is not None and node.memory_id == acme.id and node.data == {"owner": "acme.com"}
    assert {n.memory_id for n in graph.subtree(acme.id, "merger")} == {acme.id}
    assert {n.memory_id for n in graph.children(acme.id, "merger")} == {acme.id}
    assert graph.count_descendants(acme.id, "merger") == 2
    assert set(graph.live_locs(acme.id, ["merger", "merger:terms"]).values()) <= {
        n.id for n in graph.subtree(acme.id, "merger")
    }
    only_acme = NodeFilter((acme.id,))
    assert owners(store.survey(only_acme, 100)) == {acme.id}
    assert owners([r for r, _ in store.keyword(only_acme, "deal merger globex", 100)]) == {acme.id}
    assert owners([r for r, _ in store.regex(only_acme, LinearPattern("globex|acme"), 100)]) == {acme.id}
    where = NodeFilter((acme.id,), where=compile_where({"path": "owner", "eq": "globex.com"}))
    assert store.survey(where, 100) == []
    query = LetterEmbedder().embed(["bead cafe"])[0]
    assert owners([r for r, _ in store.vector(acme.id, query, 100)]) == {acme.id}
    assert store.vector_count(acme.id) == store.vector_count(globex.id) == 3
    matched = store.nodes_matching([acme.id], ["name", "content"], "globex", True, 100)
    assert matched == []
    assert {n.memory_id for n in store.nodes_matching([globex.id], ["name"], "deal", False, 100)} == {
        globex.id
    }


def test_a_memory_s_survey_walks_its_loc_index_in_order_without_sorting(
    tenants: tuple[Hadron, dict[str, HadronCaller]], database_url: str | None
) -> None:
    """One memory is an equality, not a one-element array (``core/dialect.py``, ``one_of``): PostgreSQL
    plans ``memory_id = ANY('{m}')`` as a set, so the survey's ``ORDER BY loc LIMIT`` read and sorted the
    whole memory instead of walking ``nodes_live_loc`` (docs/decisions/0290). The plan is read with
    sequential scans off, so that a table of six rows shows the plan a large one gets."""
    assert database_url is not None
    hadron, _ = tenants
    acme = hadron.admin().memory("hrn:mem:acme.com:plans")
    store = hadron.search.store
    sent: list[tuple[str, Sequence[object]]] = []
    conn = hadron.stores.db.conn
    execute = conn.execute

    def recording(query: str, params: Sequence[object] = ()) -> object:
        sent.append((query, params))
        return execute(query, params)

    conn.execute = recording  # type: ignore[method-assign,assignment]
    try:
        assert len(store.survey(NodeFilter((acme.id,)), 2)) == 2
    finally:
        del conn.execute
    [(query, params)] = [(q, p) for q, p in sent if "ORDER BY n.loc" in q]
    with psycopg.connect(database_url) as pg:
        pg.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in pg.execute(("EXPLAIN " + query).encode(), params).fetchall())
    assert "nodes_live_loc" in plan and "Sort" not in plan, plan
