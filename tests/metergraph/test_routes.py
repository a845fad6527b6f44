"""Routes as ``metergraph_list_routes`` reads them: description, constraints and evaluation contract from the
route's configuration, on both engines, and constraints kept by ``route set --config`` until now moved out of
the config by the migration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mg_support import NOW, agent, app, row

from triptych.core.db import Database
from triptych.metergraph.errors import InvalidArgument
from triptych.metergraph.service import Metergraph
from triptych.metergraph.sqlite_call_store import SqliteCallStore
from triptych.metergraph.sqlite_schema import MIGRATIONS
from triptych.metergraph.workspace import route_settings

CONSTRAINTS = {"max_cost_usd": 0.01, "allowed_models": ["gpt-4o-mini", "gpt-4o"], "pii": "forbidden"}


def test_constraints_are_stored_and_returned_with_the_route(mg: Metergraph) -> None:
    mg.ingest.ingest_document(app(), {"rows": [row(route="support"), row(route="triage")]})
    constraints, config = route_settings({"model": "gpt-4o-mini", "constraints": CONSTRAINTS})
    mg.metadata.set_route("w1", "support", "answers customers", config, NOW.isoformat(), constraints)
    routes = {r["route"]: r for r in mg.workspace.routes(agent(role="metadata"))["routes"]}
    assert routes["support"]["constraints"] == CONSTRAINTS
    assert routes["support"]["description"] == "answers customers" and routes["support"]["calls"] == 1
    assert routes["triage"]["constraints"] == {}
    assert mg.metadata.route_config("w1") == {"support": {"model": "gpt-4o-mini"}}  # what SDKs poll
    assert mg.workspace.routes(agent("w2"))["routes"] == []  # another workspace sees none of it


@pytest.mark.parametrize("config", [[1], {"constraints": [1]}, {"constraints": "max 1 cent"}])
def test_constraints_that_are_not_an_object_are_refused(config: object) -> None:
    with pytest.raises(InvalidArgument):
        route_settings(config)


def test_the_migration_moves_constraints_kept_inside_a_config_into_their_column(tmp_path: Path) -> None:
    path = tmp_path / "metergraph.db"
    old = Database(path, MIGRATIONS[:5])  # the schema before constraints had a reader
    with old.transaction() as conn:
        conn.execute(
            "INSERT INTO routes (workspace, route, config, updated_at) VALUES ('w1', 'support', ?, 'x')",
            (json.dumps({"model": "m", "constraints": CONSTRAINTS}),),
        )
        conn.execute(
            "INSERT INTO routes (workspace, route, config, updated_at) VALUES ('w1', 'plain', '{}', 'x')"
        )
    old.close()
    store = SqliteCallStore.open(path)
    try:
        rows = {r["route"]: r for r in store.metadata.configured_routes("w1")}
        assert rows["support"]["constraints"] == CONSTRAINTS and rows["plain"]["constraints"] == {}
        assert store.metadata.route_config("w1") == {"support": {"model": "m"}, "plain": {}}
    finally:
        store.close()
