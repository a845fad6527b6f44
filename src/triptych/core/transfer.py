"""What the engine-to-engine copies (``triptych migrate``, ``triptych hadron migrate``) share: the
progress callback they report to and the record of what they copied."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import Connection

from triptych.core.pg import PgDatabase

Progress = Callable[[str, int], Callable[[int], None]]  # (table, rows) -> advance(n)


@dataclass
class Copied:
    """Rows copied per table, to ``target`` (a redacted URL or a data directory)."""

    target: str
    # The surface's headline counts ("3 documents (9 chunks), ..."): each surface names its own tables.
    summary: Callable[[Mapping[str, int]], str]
    rows: dict[str, int] = field(default_factory=dict)

    def report(self) -> str:
        return f"copied {self.summary(self.rows)} to {self.target}"


def remove_database(path: Path) -> None:
    """Remove a SQLite file a failed copy created, with its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


@contextmanager
def snapshot(url: str) -> Iterator[Connection[Any]]:
    """A read-only transaction on the PostgreSQL database at ``url`` that sees one snapshot for every
    table: the way back copies a running server's rows all in or all out."""
    pg = PgDatabase(url, max_size=1)
    try:
        with pg.transaction() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn
    finally:
        pg.close()
