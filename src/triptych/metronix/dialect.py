"""Metronix's SQL dialect is ``core.dialect``'s (Metergraph's control stores share its spellings); the
names stay importable here for Metronix's stores (agent memory, review, the knowledge base)."""

from triptych.core.dialect import POSTGRES, SQLITE, Dialect

__all__ = ["POSTGRES", "SQLITE", "Dialect"]
