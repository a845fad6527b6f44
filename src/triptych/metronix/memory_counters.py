"""Agent memory's cache counters: two generations per workspace, bumped inside each write's transaction.

Split from ``memory_store.py`` (issue 16): whatever the engine, the in-process caches of every worker
follow these two numbers. ``generation`` moves with new text and new rows (vector, keyword and adjacency
caches); ``attributes`` with every change to a record (the attribute cache), so a status change or a
TTL slide does not make every process reload its vector and keyword indexes.
"""

from __future__ import annotations

from typing import Any, Literal

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.metronix.dialect import Dialect

Counter = Literal["generation", "attributes"]


class WorkspaceCounters:
    """Both counters of each workspace, on the store's engine (its ``dialect``)."""

    def __init__(self, db: Database | NativeDatabase, dialect: Dialect) -> None:
        self.db = db
        p = dialect.p
        self._both = f"SELECT generation, attributes FROM memory_generations WHERE workspace_id = {p}"
        self._bump = {
            counter: f"INSERT INTO memory_generations (workspace_id, generation, attributes) VALUES ({p}, {p}, {p})"
            f" ON CONFLICT (workspace_id) DO UPDATE SET {counter} = memory_generations.{counter} + 1"
            for counter in ("generation", "attributes")
        }

    def both(self, workspace_id: str) -> tuple[int, int]:
        """(generation, attributes) in one read; (0, 0) for a workspace never written."""
        row = self.db.conn.execute(self._both, (workspace_id,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def get(self, workspace_id: str, counter: Counter) -> int:
        generation, attributes = self.both(workspace_id)
        return generation if counter == "generation" else attributes

    def bump(self, conn: Any, workspace_id: str, counter: Counter) -> int:
        """Inside the write's transaction (``conn``): add one to ``counter``; returns its new value."""
        first = (1, 0) if counter == "generation" else (0, 1)
        conn.execute(self._bump[counter], (workspace_id, *first))
        return self.get(workspace_id, counter)
