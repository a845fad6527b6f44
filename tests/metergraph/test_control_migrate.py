"""``triptych migrate --to/--from`` carries Metergraph's control data (incidents, webhooks, reports and runs,
workloads, import sync) and its metadata (workspaces, keys, sessions, routes, batch records, import
identities, the call-id sequence) between the data directory and PostgreSQL, row for row, both ways; a
target that already holds some is refused with nothing copied."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from harness import TRIPTYCH  # noqa: E402
from postgres import PostgresCluster  # noqa: E402
from test_control_stores import _class_run, _run, _workload, incident, report  # noqa: E402

from triptych.core.db import Database  # noqa: E402
from triptych.core.transfer import snapshot  # noqa: E402
from triptych.metergraph.control_pg import schema_url  # noqa: E402
from triptych.metergraph.control_stores import ControlStores  # noqa: E402
from triptych.metergraph.import_events import ImportKey  # noqa: E402
from triptych.metergraph.import_sync import ImportSyncService  # noqa: E402
from triptych.metergraph.metadata_store import SqliteMetadataStore  # noqa: E402
from triptych.metergraph.migrate import FILES, TABLES  # noqa: E402
from triptych.metergraph.sqlite_schema import open_database  # noqa: E402
from triptych.metergraph.webhook_store import webhook_store  # noqa: E402


def _fill(data_dir: Path) -> None:
    """A little of every control and metadata table, through the stores."""
    metadata = open_database(data_dir / "metergraph.db")
    meta = SqliteMetadataStore(metadata)
    meta.insert_key("k1", "w1", "agent", "debug", ["prod"], "hash-1", "2026-12-01T00:00:00+00:00")
    meta.insert_key("k2", "w1", "app", None, None, "hash-2", "2026-12-01T00:00:00+00:00")
    meta.insert_session("s1", "w1", "app", "repo", "1.0", 2_000_000_000)
    meta.set_route("w1", "support", "answers", {"model": "m"}, "2026-12-01", {"pii": "forbidden"})
    batch = {"received_ms": 1, "processed_ms": 2, "ignored": 0, "dropped": 0, "transport_errors": 0,
             "unknown_attributes": 0, "content_dropped": 0}  # fmt: skip
    meta.record_batch("w1", "sdk", 3, batch, "2026-12-01")
    meta.record_failed_batch("w1", "otlp", 5, "permanent")
    meta.claim_imports("w1", [ImportKey("phoenix", "p", "e1")])
    meta.reserve_call_ids(41)
    stores = ControlStores.open(data_dir, None, metadata)
    try:
        webhooks = webhook_store(stores.incidents.db)
        webhooks.add_endpoint("e1", "w1", "https://example.test/hook", "ops", "sealed", 1_000)

        def outbox(conn: Any, event: str, inc: Any) -> None:
            webhooks.enqueue(conn, [{"id": "d1", "endpoint_id": "e1", "workspace": "w1", "event_type": event,
                                     "incident_id": inc.id, "body": "{}", "created_ms": 2_000}])  # fmt: skip

        stores.incidents.outbox = outbox
        stores.incidents.save("w1", "5m", (4, 3), [incident("i1")], {"i1"})
        stores.incidents.outbox = None
        stores.reports.insert_run("w1", _run("r1"))
        stores.reports.insert_report("w1", report("a1", "prod"), b"\x00artifact\xff")
        stores.workloads.replace_workloads("w1", "c1", [_workload("x", None, 3)], _class_run("c1"))
        sync = ImportSyncService(stores.import_sync)
        sync.acquire(
            "w1", {"source": "phoenix", "source_scope": "p", "initial_since": "2026-01-01T00:00:00Z"}
        )
    finally:
        stores.close()
        metadata.close()


def _embedded_rows(data_dir: Path) -> dict[str, list[tuple[Any, ...]]]:
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for name, tables in FILES.items():
        with closing(sqlite3.connect(data_dir / name)) as conn:
            for table in tables:
                columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
                rows[table] = sorted(
                    conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall(), key=repr
                )
    return rows


def _postgres_rows(url: str, columns_like: dict[str, list[str]]) -> dict[str, list[tuple[Any, ...]]]:
    with snapshot(schema_url(url)) as conn:
        return {
            table: sorted(
                (
                    tuple(r)
                    for r in conn.execute(f"SELECT {', '.join(columns_like[table])} FROM {table}".encode())
                ),
                key=repr,
            )
            for table in TABLES
        }


def _columns(data_dir: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, tables in FILES.items():
        with closing(sqlite3.connect(data_dir / name)) as conn:
            for table in tables:
                out[table] = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    return out


def _triptych(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TRIPTYCH, "migrate", *args], capture_output=True, text=True, timeout=300)


def test_control_data_goes_to_postgres_and_back_row_for_row(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    _fill(data)
    before = _embedded_rows(data)
    assert all(before[t] for t in TABLES), [t for t in TABLES if not before[t]]
    url = postgres.create_database("mgmig")

    there = _triptych("--to", url, "--data-dir", str(data))
    assert there.returncode == 0, there.stderr
    assert "copying Metergraph's alone" in there.stdout
    assert (
        "copied Metergraph's control data: 1 incidents, 1 webhook_endpoints, 1 reports, 1 analysis_runs,"
        in (there.stdout)
    )
    assert "copying webhook_deliveries" in there.stderr and "Traceback" not in there.stderr
    assert _postgres_rows(url, _columns(data)) == before

    refused = _triptych("--to", url, "--data-dir", str(data))
    assert refused.returncode == 1 and "already holds Metergraph control data" in refused.stderr
    assert "Traceback" not in refused.stderr

    # Server mode writes on: the copied delivery numbering continues.
    metadata = Database(tmp_path / "unused.db", [])
    stores = ControlStores.open(tmp_path, url, metadata)
    try:
        webhook_store(stores.incidents.db).record({
            "id": "d2", "endpoint_id": "e1", "workspace": "w1", "event_type": "ping", "incident_id": None,
            "body": "{}", "created_ms": 3_000, "status": "delivered", "last_status": 200, "last_error": None,
            "last_response": "ok",
        })  # fmt: skip
        assert [d["id"] for d in webhook_store(stores.incidents.db).deliveries("w1", None, None, 5)] == [
            "d2",
            "d1",
        ]
    finally:
        stores.close()
        metadata.close()

    back = tmp_path / "back"
    returned = _triptych("--from", url, "--data-dir", str(back))
    assert returned.returncode == 0, returned.stderr
    after = _embedded_rows(back)
    assert {t: rows for t, rows in after.items() if t != "webhook_deliveries"} == {
        t: rows for t, rows in before.items() if t != "webhook_deliveries"
    }
    assert len(after["webhook_deliveries"]) == 2
    with closing(sqlite3.connect(back / "metergraph.db")) as conn:  # ClickHouse's call ids go on
        assert conn.execute("SELECT next_id FROM clickhouse_call_ids").fetchall() == [(42,)]

    twice = _triptych("--from", url, "--data-dir", str(back))
    assert twice.returncode == 1 and "already holds Metergraph control data" in twice.stderr
