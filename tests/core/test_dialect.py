"""The shared SQL dialect's spellings of lists of values (``core/dialect.py``)."""

from __future__ import annotations

import sqlite3

import pytest

from triptych.core.dialect import POSTGRES, SQLITE, Dialect


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRES], ids=lambda d: d.name)
def test_one_value_is_an_equality_on_every_engine(dialect: Dialect) -> None:
    assert dialect.one_of("m", ["a"]) == (f"m = {dialect.p}", ["a"])
    assert dialect.none_of("m", ["a"]) == (f"m <> {dialect.p}", ["a"])


def test_several_values_are_one_array_on_postgresql_and_one_mark_each_on_sqlite() -> None:
    assert POSTGRES.one_of("m", ["a", "b"]) == ("m = ANY(%s)", [["a", "b"]])
    assert POSTGRES.none_of("m", ("a", "b")) == ("m <> ALL(%s)", [["a", "b"]])
    assert SQLITE.one_of("m", ["a", "b"]) == ("m IN (?,?)", ["a", "b"])
    assert SQLITE.none_of("m", ["a", "b"]) == ("m NOT IN (?,?)", ["a", "b"])


@pytest.mark.parametrize("values", [["b"], ["a", "c"], ["a", "b", "c"]])
def test_the_clauses_select_what_they_say_on_sqlite(values: list[str]) -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript("CREATE TABLE t (m TEXT); INSERT INTO t VALUES ('a'), ('b'), ('c');")
    inside, params = SQLITE.one_of("m", values)
    outside, others = SQLITE.none_of("m", values)
    chosen = [r[0] for r in conn.execute(f"SELECT m FROM t WHERE {inside} ORDER BY m", params)]
    rest = [r[0] for r in conn.execute(f"SELECT m FROM t WHERE {outside} ORDER BY m", others)]
    assert chosen == sorted(values)
    assert rest == sorted({"a", "b", "c"} - set(values))
