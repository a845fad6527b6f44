"""With ``TRIPTYCH_DATABASE_URL`` set, Metergraph's keys, sessions, routes and batch records are in
PostgreSQL: a server on another machine (another data directory) authenticates the same keys and sees
the same routes and ingestion health, while the embedded engine keeps the calls in its own file."""

from __future__ import annotations

from pathlib import Path

from mg_support import NOW, agent, row
from postgres import PostgresCluster

from triptych.metergraph.postgres_metadata_store import PostgresMetadataStore
from triptych.metergraph.service import Metergraph
from triptych.metergraph.settings import load_metergraph_settings


def open_on(path: Path, url: str) -> Metergraph:
    return Metergraph.open(path, load_metergraph_settings(max_rows=50), clock=lambda: NOW, database_url=url)


def test_keys_routes_and_batch_records_are_shared_through_postgresql(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    url = postgres.create_database()
    first = open_on(tmp_path / "one", url)
    try:
        assert isinstance(first.metadata, PostgresMetadataStore)
        _, app_token = first.keys.create_app_token("w1")
        _, agent_token = first.keys.create_agent_key("w1", "metadata", None)
        app = first.keys.app(app_token)
        first.ingest.ingest_document(app, {"rows": [row(route="support"), row(route="support")]})
        first.metadata.set_route("w1", "support", "answers customers", {"model": "m"}, NOW.isoformat())
        assert first.calls.count_calls("w1") == 2  # the calls stay in this data directory's file
    finally:
        first.close()
    second = open_on(tmp_path / "two", url)
    try:
        principal = second.keys.agent(agent_token)  # a key minted on the first machine
        assert (principal.workspace, principal.role) == ("w1", "metadata")
        assert second.metadata.route_config("w1") == {"support": {"model": "m"}}
        health = second.workspace.ingestion_health(agent("w1", "metadata"), 1)
        assert health["evidence"]["rows"] == 1  # the batch the first machine recorded
        [route] = second.workspace.routes(agent("w1", "metadata"))["routes"]
        assert (route["description"], route["calls"]) == ("answers customers", 0)  # no calls here
    finally:
        second.close()
