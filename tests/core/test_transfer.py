"""The pieces both engine-to-engine copies share: the report, the clean-up of a failed target, the bars."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import psycopg
import pytest
from postgres import PostgresCluster
from tqdm import tqdm

from triptych.core.progress import TableBars
from triptych.core.transfer import Copied, remove_database, snapshot


def test_a_copy_reports_the_surface_s_counts_and_where_they_went() -> None:
    def summary(rows: Mapping[str, int]) -> str:
        return f"{rows.get('nodes', 0)} nodes of {len(rows)} tables"

    copied = Copied("/data", summary)
    copied.rows["nodes"] = 3
    copied.rows["edges"] = 0
    assert copied.report() == "copied 3 nodes of 2 tables to /data"


def test_removing_a_failed_database_takes_its_wal_and_shared_memory_files_too(tmp_path: Path) -> None:
    path = tmp_path / "hadron.db"
    for name in ("hadron.db", "hadron.db-wal", "hadron.db-shm", "metronix.db"):
        (tmp_path / name).write_bytes(b"x")
    remove_database(path)
    remove_database(path)  # nothing left to remove is no error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metronix.db"]


def test_table_bars_draw_one_bar_at_a_time_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    bars = TableBars()
    bars("nodes", 2)(2)
    first = bars._bar
    bars("edges", 1)(1)
    assert first not in tqdm._instances  # the first table's bar closed when the second began
    assert bars._bar in tqdm._instances
    bars.close()
    bars.close()  # closing twice is no error
    assert bars._bar is None and bars.tables == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "copying nodes (table 1)" in captured.err and "0/2" in captured.err
    assert "copying edges (table 2)" in captured.err
    # The last bar erased itself: the command's summary follows on a clean line.
    assert captured.err.endswith("\r")


def test_the_way_back_reads_one_snapshot_and_writes_nothing(postgres: PostgresCluster) -> None:
    url = postgres.create_database("snap")
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("CREATE TABLE a (n int)")
        other.execute("INSERT INTO a VALUES (1)")
        with snapshot(url) as conn:
            assert conn.execute("SELECT count(*) FROM a").fetchone() == (1,)
            other.execute("INSERT INTO a VALUES (2)")  # a running server writes meanwhile
            assert conn.execute("SELECT count(*) FROM a").fetchone() == (1,)
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute("INSERT INTO a VALUES (3)")
        assert other.execute("SELECT count(*) FROM a").fetchone() == (2,)
