"""Metergraph's bookkeeping on PostgreSQL (server mode): ``MetadataStore`` with the SQL of
``metadata_store.MetadataSql`` spelled for PostgreSQL (``control_sql.POSTGRES``) and sent as written
through a ``core.pg.NativeDatabase``; its DDL is ``pg_schema.METADATA``.

The tables keep their SQLite names inside the ``metergraph`` schema, so none collides with another
surface's in ``public``: the connections search it first (``control_pg.open_control_database``, the
database the control stores share).
"""

from __future__ import annotations

from triptych.core.pg import NativeDatabase
from triptych.metergraph import pg_schema
from triptych.metergraph.control_sql import POSTGRES
from triptych.metergraph.metadata_store import MetadataSql

COMPONENT = "metergraph_metadata"


class PostgresMetadataStore(MetadataSql):
    """``MetadataStore`` in PostgreSQL's ``metergraph`` schema (``db``: ``control_pg.open_control_database``,
    shared with the control stores, and closed by whoever opened it)."""

    key_order = "created_at, seq"

    def __init__(self, db: NativeDatabase) -> None:
        super().__init__(POSTGRES)
        self.db: NativeDatabase = db
        db.migrate(COMPONENT, pg_schema.METADATA)

    def close(self) -> None:
        """Nothing: the database is the control stores' (``ControlStores.close``)."""
