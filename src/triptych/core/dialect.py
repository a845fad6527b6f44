"""What SQL says differently on SQLite and PostgreSQL, once, for every store that writes its statements once
for both engines (Metronix's memory, review and knowledge stores; Metergraph's control and metadata stores).

A store writes each statement in the SQL SQLite 3.35+ and PostgreSQL share, with the few spellings that
differ taken from its ``Dialect`` — the way ``metergraph/call_filters.py`` builds one WHERE for two
engines. Each engine's store sends its statements as written: SQLite's ``sqlite3`` connection,
PostgreSQL's psycopg through ``core.pg.NativeDatabase`` (nothing is rewritten on the way). A surface whose
statements need more spellings of their own extends this class in its dialect module
(``metergraph/control_sql.py``).

What the two engines already spell alike is written plainly in the statements, not here: ``ON CONFLICT
... DO UPDATE SET c = excluded.c`` and ``DO NOTHING`` (upserts), ``RETURNING``, ``IS NOT DISTINCT FROM``,
``CAST(... AS TEXT)``, ``COALESCE``, ``CASE``, JSON kept as text (both engines store the text the service
wrote, so answers are byte for byte the same), and timestamps made in Python (no ``now()`` in SQL). A
literal ``%`` in a statement with parameters is written ``%%`` on PostgreSQL (psycopg's rule); the shared
statements hold none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    # One positional placeholder: sqlite3's ``?``, psycopg's ``%s``.
    p: str
    # Whether a list of values is one array parameter (PostgreSQL's ``= ANY(%s)``: one statement text
    # whatever the list's length, so psycopg prepares it once) or one placeholder per value (SQLite).
    arrays: bool
    # What a SELECT appends to hold the rows it read until commit: PostgreSQL's ``FOR UPDATE``; nothing
    # on SQLite, whose one writer at a time holds the whole database.
    lock_rows: str
    # A named placeholder (parameters passed as a dict), ``{}`` standing for the name: sqlite3's
    # ``:name``, psycopg's ``%(name)s``.
    named_mark: str

    def named(self, name: str) -> str:
        """The placeholder of the parameter ``name`` of a dict of parameters."""
        return self.named_mark.format(name)

    def marks(self, n: int) -> str:
        """``n`` placeholders, comma-separated (a VALUES row)."""
        return ",".join([self.p] * n)

    def one_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` equal to one of ``values`` (never empty), and the parameters that clause takes.

        One value is an equality on every engine: PostgreSQL plans ``= ANY('{x}')`` as a set, so an index
        on (column, order) no longer yields its order and no constant narrows the plan (a Hadron memory's
        survey, ``ORDER BY loc LIMIT``, read and sorted the whole memory: 87 ms against 0.03 ms at 50,000
        nodes, decision 0290)."""
        if len(values) == 1:
            return f"{column} = {self.p}", [values[0]]
        if self.arrays:
            return f"{column} = ANY({self.p})", [list(values)]
        return f"{column} IN ({self.marks(len(values))})", list(values)

    def none_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` equal to none of ``values`` (never empty, no NULLs), and its parameters (one value:
        an inequality, as ``one_of``)."""
        if len(values) == 1:
            return f"{column} <> {self.p}", [values[0]]
        if self.arrays:
            return f"{column} <> ALL({self.p})", [list(values)]
        return f"{column} NOT IN ({self.marks(len(values))})", list(values)


SQLITE = Dialect("sqlite", p="?", arrays=False, lock_rows="", named_mark=":{}")
POSTGRES = Dialect("postgresql", p="%s", arrays=True, lock_rows=" FOR UPDATE", named_mark="%({})s")
