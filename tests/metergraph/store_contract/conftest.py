"""One contract suite per Metergraph store protocol, run against every engine that implements it (the
way Kinto runs one storage test suite against each backend): a new store method is written once here
and proven on every engine.

``call_store``: ``CallStore`` on SQLite and on ClickHouse (the chdb endpoint), each with the SQLite
``MetadataStore`` it records its batches in. ``metadata_store``: ``MetadataStore`` on SQLite and on
PostgreSQL (tests/postgres.py: a fresh database of the session's cluster per test).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from triptych.metergraph.call_store import CallStore
from triptych.metergraph.metadata_store import MetadataStore, SqliteMetadataStore
from triptych.metergraph.sqlite_call_store import SqliteCallStore
from triptych.metergraph.sqlite_schema import open_database

CALL_ENGINES = ("sqlite", "clickhouse")
METADATA_ENGINES = ("sqlite", "postgresql")


@pytest.fixture(params=METADATA_ENGINES)
def open_metadata(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], MetadataStore]]:
    """Opens a ``MetadataStore`` on one fresh database of the engine (each call: another process's
    store on the same data), closing them all at the end."""
    opened: list[MetadataStore] = []
    closing: list[Callable[[], None]] = []
    if request.param == "sqlite":

        def opener() -> MetadataStore:
            opened.append(SqliteMetadataStore(open_database(tmp_path / "metergraph.db")))
            return opened[-1]

    else:
        from triptych.metergraph.control_pg import close_control_database, open_control_database
        from triptych.metergraph.postgres_metadata_store import PostgresMetadataStore

        url = request.getfixturevalue("postgres").create_database()

        def opener() -> MetadataStore:
            db = open_control_database(url)
            closing.append(lambda: close_control_database(db))
            opened.append(PostgresMetadataStore(db))
            return opened[-1]

    yield opener
    for store in opened:
        store.close()
    for close in closing:
        close()


@pytest.fixture
def metadata_store(open_metadata: Callable[[], MetadataStore]) -> MetadataStore:
    return open_metadata()


@pytest.fixture(params=CALL_ENGINES)
def call_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CallStore]:
    """A fresh, empty call store; its ``metadata`` is the store its batch records go to."""
    metadata = SqliteMetadataStore(open_database(tmp_path / "metergraph.db"))
    store: CallStore
    if request.param == "sqlite":
        store = SqliteCallStore(metadata.db, metadata)
    else:
        from triptych.metergraph.clickhouse_call_store import ClickHouseCallStore

        url = request.getfixturevalue("clickhouse").database_url()
        store = ClickHouseCallStore(url, metadata, tmp_path)
    yield store
    store.close()
    metadata.close()
