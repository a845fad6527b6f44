"""The ClickHouse schema is created or upgraded by one process at a time across machines (decision record
0202): in server mode the lock is PostgreSQL's, so a machine with a data directory of its own waits for
another machine's upgrade instead of backfilling the rollups a second time; without PostgreSQL, a file
of the data directory (the workers of one server) as before."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
from clickhouse_endpoint import ClickHouseEndpoint
from postgres import PostgresCluster

from triptych.core.pg import PgDatabase
from triptych.metergraph.clickhouse_client import SCHEMA_LOCK, ClickHouseConnection


def _waiting_on_an_advisory_lock(url: str, me: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' AND pid <> %s", (me,)
        ).fetchone()
    return bool(row and row[0])


def test_a_machine_waits_for_the_schema_lock_another_machine_holds_in_postgres(
    postgres: PostgresCluster, clickhouse: ClickHouseEndpoint, tmp_path: Path
) -> None:
    url, ch = postgres.create_database("chlock"), clickhouse.database_url()
    other_machine = tmp_path / "machine-b"  # a data directory of its own: no file lock is shared
    other_machine.mkdir()
    shared = PgDatabase(url, max_size=2)
    opened = threading.Event()
    errors: list[BaseException] = []

    def open_on_machine_b() -> None:
        try:
            ClickHouseConnection(ch, other_machine, shared=shared).close()
            opened.set()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    with psycopg.connect(url, autocommit=True) as machine_a:  # machine A is upgrading the schema
        machine_a.execute("SELECT pg_advisory_lock(hashtext(%s))", (SCHEMA_LOCK,))
        worker = threading.Thread(target=open_on_machine_b)
        worker.start()
        try:
            deadline = time.monotonic() + 60
            while not _waiting_on_an_advisory_lock(url, machine_a.info.backend_pid):
                assert time.monotonic() < deadline and worker.is_alive(), errors
                time.sleep(0.05)
            assert not opened.is_set()  # machine B waits ...
        finally:
            machine_a.execute("SELECT pg_advisory_unlock(hashtext(%s))", (SCHEMA_LOCK,))
        worker.join(120)
    shared.close()
    assert errors == [] and opened.is_set()  # ... and goes on once machine A is done
    assert not (other_machine / SCHEMA_LOCK).exists()  # no file lock taken in server mode
