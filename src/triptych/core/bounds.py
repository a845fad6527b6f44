"""Numeric bounds every door checks arguments against, before anything reaches an engine.

SQLite integers are signed 64-bit: a larger Python int fails inside the query (OverflowError), so every
integer a caller sends is bounded before it gets there. Offsets stop far below (a page past a billion rows
is a mistake, and offset + limit must not overflow either). Argument declarations import these from here,
not from ``core.db``: a tool module never imports the database layer (tests/test_boundaries.py)."""

from __future__ import annotations

SQLITE_MAX_INT = 2**63 - 1
MAX_OFFSET = 1_000_000_000
