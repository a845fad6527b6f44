"""The test tree's ClickHouse HTTP endpoint (tests/clickhouse_endpoint.py) speaks what the real client
needs: query parameters, FORMAT negotiation, Native inserts, databases, and errors with ClickHouse's codes."""

from __future__ import annotations

import threading
from typing import Any

import clickhouse_connect
import httpx
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError
from clickhouse_endpoint import AsyncInserts, ClickHouseEndpoint


def test_the_real_client_binds_parameters_server_side_and_round_trips_native_inserts(
    clickhouse: ClickHouseEndpoint,
) -> None:
    database = clickhouse.database_url().rsplit("/", 1)[1]
    admin = clickhouse_connect.get_client(dsn=clickhouse.url, compress=False, autogenerate_session_id=False)
    admin.command(f"CREATE DATABASE {database}")
    client = clickhouse_connect.get_client(
        dsn=clickhouse.url, database=database, compress=False, autogenerate_session_id=False
    )
    client.command(
        "CREATE TABLE t (a UInt32, s LowCardinality(String), m Map(LowCardinality(String), String),"
        " x Nullable(Float64)) ENGINE = MergeTree ORDER BY a"
    )
    client.insert("t", [[1, "it's", {"k": "v"}, None], [2, "b", {}, 1.5]], column_names=["a", "s", "m", "x"])
    found = client.query("SELECT a, m, x FROM t WHERE s = {s:String}", parameters={"s": "it's"})
    assert found.result_rows == [(1, {"k": "v"}, None)]
    # The table lives in the client's database, not in the default one.
    assert admin.query(f"SELECT count() FROM {database}.t").result_rows == [(2,)]
    listed = client.query(
        "SELECT a FROM t WHERE a IN {ids:Array(UInt32)} ORDER BY a", parameters={"ids": [2]}
    )
    assert listed.result_rows == [(2,)]


def test_the_format_named_by_the_query_or_default_format_is_what_comes_back(
    clickhouse: ClickHouseEndpoint,
) -> None:
    answer = httpx.post(
        clickhouse.url, params={"param_n": "3"}, content=b"SELECT {n:UInt8} + 1 AS v FORMAT JSONEachRow"
    )
    assert answer.status_code == 200
    assert answer.json() == {"v": 4}
    assert answer.headers["X-ClickHouse-Format"] == "JSONEachRow"
    csv = httpx.get(clickhouse.url, params={"query": "SELECT 'a', 2", "default_format": "CSV"})
    assert csv.text == '"a",2\n'
    assert httpx.get(clickhouse.url + "/ping").text == "Ok.\n"


@pytest.mark.parametrize(
    ("sql", "status", "code"),
    [("SELECT * FROM no_such_table", 404, "60"), ("SELEC 1", 400, "62"), ("SELECT throwIf(1)", 500, "395")],
)
def test_errors_carry_clickhouses_code_in_the_header_and_the_body(
    clickhouse: ClickHouseEndpoint, sql: str, status: int, code: str
) -> None:
    answer = httpx.post(clickhouse.url, content=sql.encode())
    assert answer.status_code == status
    assert answer.headers["X-ClickHouse-Exception-Code"] == code
    assert answer.text.startswith(f"Code: {code}. DB::Exception:")


def test_the_client_raises_the_servers_error_code(clickhouse: ClickHouseEndpoint) -> None:
    client = clickhouse_connect.get_client(dsn=clickhouse.url, compress=False, autogenerate_session_id=False)
    with pytest.raises(DatabaseError, match="code: 60"):
        client.query("SELECT * FROM no_such_table")


def test_a_compressed_body_is_refused_plainly(clickhouse: ClickHouseEndpoint) -> None:
    answer = httpx.post(clickhouse.url, content=b"x", headers={"Content-Encoding": "lz4"})
    assert answer.status_code == 400
    assert answer.headers["X-ClickHouse-Exception-Code"] == "1"


def _scratch_table(clickhouse: ClickHouseEndpoint) -> tuple[str, Any]:
    """A new database with table ``t (a UInt32)`` whose merges are stopped, so its parts show how many
    INSERTs wrote; and an admin client."""
    database = clickhouse.database_url().rsplit("/", 1)[1]
    admin = clickhouse_connect.get_client(dsn=clickhouse.url, compress=False, autogenerate_session_id=False)
    admin.command(f"CREATE DATABASE {database}")
    admin.command(f"CREATE TABLE {database}.t (a UInt32) ENGINE = MergeTree ORDER BY a")
    admin.command(f"SYSTEM STOP MERGES {database}.t")
    return database, admin


def _client(clickhouse: ClickHouseEndpoint, database: str) -> Any:
    return clickhouse_connect.get_client(
        dsn=clickhouse.url, database=database, compress=False, autogenerate_session_id=False
    )


def _run_together(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def test_async_inserts_waiting_together_are_written_as_one_and_a_bad_one_fails_alone(
    clickhouse: ClickHouseEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    database, admin = _scratch_table(clickhouse)
    # A buffer that flushes when it holds four inserts (its timeout far away): all four wait together.
    monkeypatch.setattr(clickhouse.engine, "inserts", AsyncInserts(clickhouse.engine, 60.0, 1 << 30, 4))
    outcomes: dict[int, object] = {}

    def good(i: int) -> None:
        client = _client(clickhouse, database)
        client.insert(
            "t", [[i]], column_names=["a"], settings={"async_insert": 1, "wait_for_async_insert": 1}
        )
        outcomes[i] = "stored"

    def bad() -> None:
        truncated = b"\x01\x01\x01a\x06UInt32"  # a Native block whose column data is missing
        answer = httpx.post(
            clickhouse.url,
            params={"database": database, "async_insert": "1"},
            content=b"INSERT INTO `t` (`a`) FORMAT Native\n" + truncated,
            timeout=60,
        )
        outcomes[0] = answer.status_code

    threads = [threading.Thread(target=good, args=(i,)) for i in (1, 2, 3)] + [threading.Thread(target=bad)]
    _run_together(threads)
    assert outcomes == {1: "stored", 2: "stored", 3: "stored", 0: 500}
    rows = admin.query(f"SELECT a FROM {database}.t ORDER BY a").result_rows
    assert rows == [(1,), (2,), (3,)]
    # The shared INSERT was refused (the bad body), so each went alone: one part per good insert.
    parts = admin.query(
        "SELECT count() FROM system.parts WHERE database = {d:String} AND table = 't' AND active",
        parameters={"d": database},
    ).result_rows
    assert parts == [(3,)]


def test_async_inserts_of_good_data_share_one_part(
    clickhouse: ClickHouseEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    database, admin = _scratch_table(clickhouse)
    monkeypatch.setattr(clickhouse.engine, "inserts", AsyncInserts(clickhouse.engine, 60.0, 1 << 30, 3))

    def good(i: int) -> None:
        client = _client(clickhouse, database)
        client.insert("t", [[i], [i + 10]], column_names=["a"], settings={"async_insert": 1})

    threads = [threading.Thread(target=good, args=(i,)) for i in (1, 2, 3)]
    _run_together(threads)
    assert admin.query(f"SELECT count(), uniqExact(_part) FROM {database}.t").result_rows == [(6, 1)]
