"""What the PostgreSQL schemas of Hadron's team, action, abstract and git stores share."""

from __future__ import annotations


def binary_text(script: str) -> str:
    """DDL whose text columns compare and sort byte-wise, as SQLite's (BINARY) do: listings, channel address
    ranges and timestamp comparisons then answer as on the embedded engine."""
    return script.replace(" TEXT", ' TEXT COLLATE "C"')
