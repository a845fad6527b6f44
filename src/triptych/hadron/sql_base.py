"""The base of Hadron stores whose SQL runs unchanged on both engines: the embedded SQLite ``Database`` or,
in server mode, the one ``PortableDatabase`` every Hadron store of the process shares (``?`` placeholders
bound server-side, rows read by position or name). Sharing it is what makes ``atomic()`` span stores:
a service's ``team.atomic()`` around ``graph.insert_node`` and ``team.add_item`` is one transaction on
either engine, and on PostgreSQL it holds the Hadron write lock, SQLite's single writer across workers."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from triptych.core.db import Database
from triptych.core.pg import PortableConnection, PortableDatabase

AnyDatabase = Database | PortableDatabase
AnyConnection = sqlite3.Connection | PortableConnection


def binary_text(script: str) -> str:
    """PostgreSQL DDL whose text columns compare and sort byte-wise, as SQLite's (BINARY) do."""
    return script.replace(" TEXT", ' TEXT COLLATE "C"')


class SqlStore:
    def __init__(self, db: AnyDatabase) -> None:
        self.db = db

    @property
    def postgres(self) -> bool:
        return isinstance(self.db, PortableDatabase)

    @property
    def conn(self) -> AnyConnection:
        return self.db.conn

    @contextmanager
    def atomic(self) -> Iterator[AnyConnection]:
        """One transaction; nested calls (from this store or another on the same database) join it."""
        conn = self.conn
        if conn.in_transaction:
            yield conn
            return
        with self.db.transaction() as tx:
            yield tx
