"""SQL helpers of the embedded engine's stores: placeholders, multi-row inserts and SQLite's
``call_filters.Dialect`` (``?`` placeholders, JSON metadata)."""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from triptych.metergraph.call_filters import filter_clauses, key_clauses
from triptych.metergraph.call_model import CALL_COLUMNS, CallFilter
from triptych.metergraph.workload_match import KEYS_SQL


def placeholders(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


@functools.lru_cache(maxsize=256)
def insert_call(present: tuple[bool, ...], rows: int = 1) -> str:
    """An INSERT of ``rows`` rows naming the columns marked present (the others default to NULL)."""
    columns = list(itertools.compress(CALL_COLUMNS, present))
    one = f"({', '.join('?' * len(columns))})"
    return f"INSERT INTO calls ({', '.join(columns)}) VALUES {', '.join([one] * rows)}"


# Rows per multi-row INSERT: one statement step inserts them all in C with the GIL released, so another
# batch's decoding and normalisation runs meanwhile (``executemany`` takes the GIL back after every row,
# and then waits for it behind the other thread). Bounded by SQLite's limit on bound parameters. The
# sizes are powers of two, so each table needs only a few prepared statements (the sqlite3 module keeps
# 128 per connection), whatever the number of rows.
_ROWS_PER_INSERT = 1024
_MAX_PARAMS = 32_766  # SQLITE_MAX_VARIABLE_NUMBER's default since SQLite 3.32


def insert_many(
    conn: sqlite3.Connection, sql: Callable[[int], str], rows: Sequence[Sequence[Any]], width: int
) -> None:
    """``rows`` (each ``width`` values) inserted in order by multi-row statements; ``sql(n)`` inserts n."""
    limit = min(_MAX_PARAMS, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))  # 999 before 3.32
    per = _ROWS_PER_INSERT
    while per > 1 and per * width > limit:
        per //= 2
    start = 0
    while start < len(rows):
        while per > len(rows) - start:
            per //= 2
        chunk = rows[start : start + per]
        conn.execute(sql(per), list(itertools.chain.from_iterable(chunk)))
        start += per


def _json_path(key: str) -> str | None:
    # SQLite JSON paths cannot quote a label containing '"' or '\'; those keys use json_each instead.
    if '"' in key or "\\" in key:
        return None
    return '$."' + key + '"'


def meta_exprs(key: str) -> tuple[str, str, str]:
    """(type SQL, value SQL, the one argument each of them takes) for one tags key of a ``calls`` row."""
    path = _json_path(key)
    if path is not None:
        return "json_type(tags, ?)", "json_extract(tags, ?)", path
    return (
        "(SELECT type FROM json_each(calls.tags) WHERE key = ?)",
        "(SELECT value FROM json_each(calls.tags) WHERE key = ?)",
        key,
    )


class SqliteParams:
    """``call_filters.Dialect`` for SQLite: ``?`` placeholders, their arguments appended to ``params``."""

    keys_sql = KEYS_SQL

    def __init__(self, params: list[Any]) -> None:
        self.params = params

    def param(self, value: Any, kind: str) -> str:
        self.params.append(value)
        return "?"

    def one_of(self, column: str, values: Sequence[Any], kind: str) -> str:
        self.params.extend(values)
        return f"{column} IN ({placeholders(values)})"

    def metadata_equals(self, key: str, value: str) -> str:
        type_sql, value_sql, arg = meta_exprs(key)
        self.params.extend([arg, arg, value])
        return f"{type_sql} = 'text' AND {value_sql} = ?"


def rollup_key_clauses(f: CallFilter, clauses: list[str], params: list[Any]) -> None:
    """The route, provider, model and environment filters, shared by raw calls and rollups."""
    clauses.extend(key_clauses(f, SqliteParams(params)))


def call_where(f: CallFilter, params: list[Any]) -> str:
    return " AND ".join(filter_clauses(f, SqliteParams(params)))
