"""One stable default data directory: what a new user did (a token minted from one folder, the server
started from another) now lands in the same database, and every command names the directory it used."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
from clickhouse_endpoint import ClickHouseEndpoint
from harness import TRIPTYCH, ServerProcess, bearer
from postgres import PostgresCluster


def triptych(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPTYCH, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def user_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRIPTYCH_DATA_DIR"}
    return {**env, "HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share")}


def test_a_token_minted_in_one_folder_works_with_a_server_started_in_another(tmp_path: Path) -> None:
    home, here, there = tmp_path / "home", tmp_path / "project", tmp_path / "elsewhere"
    for folder in (home, here, there):
        folder.mkdir()
    env = user_env(home)
    expected = home / ".local" / "share" / "triptych"

    minted = triptych("metergraph", "app-token", "--workspace", "acme", cwd=here, env=env)
    assert minted.returncode == 0, minted.stderr
    assert f"data directory {expected} (new and empty" in minted.stderr
    app_token = minted.stdout.strip()
    assert not (here / "data").exists()  # nothing follows the current folder any more

    listed = triptych("metergraph", "key", "list", cwd=there, env=env)
    assert listed.returncode == 0, listed.stderr
    assert f"data directory {expected}\n" in listed.stderr and "new and empty" not in listed.stderr
    assert "acme" in listed.stdout

    server = ServerProcess(tmp_path / "logs" / "unused", {**env}, pass_data_dir=False, cwd=there)
    (tmp_path / "logs").mkdir()
    server.start()
    try:
        assert f"data directory {expected};" in server.log()
        accepted = httpx.post(
            server.url + "/v1/ingest",
            json={"schema_version": 1, "rows": [{"ts": "2026-11-30T12:00:00Z", "model": "gpt-4o"}]},
            headers=bearer(app_token),
        )
        assert accepted.status_code == 202, accepted.text
    finally:
        server.stop()


def test_triptych_data_dir_overrides_and_every_writing_command_names_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    chosen = tmp_path / "chosen"
    env = {**user_env(home), "TRIPTYCH_DATA_DIR": str(chosen)}
    doc = tmp_path / "note.md"
    doc.write_text("# Note\n\nThe data directory is chosen once.\n")

    first = triptych("kb", "import", str(doc), cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert f"data directory {chosen} (new and empty" in first.stderr
    again = triptych("sources", "add", "wiki", "--url", "http://127.0.0.1:9/mcp", cwd=tmp_path, env=env)
    assert again.returncode == 0 and f"data directory {chosen}\n" in again.stderr
    flag = tmp_path / "flag"
    created = triptych("hadron", "user", "create", "ana", "--data-dir", str(flag), cwd=tmp_path, env=env)
    assert created.returncode == 0, created.stderr
    assert f"data directory {flag} (new and empty" in created.stderr  # the flag wins over the variable
    assert not (home / ".local" / "share" / "triptych").exists()


def test_serve_says_when_it_starts_on_an_empty_data_directory(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", {}).start()
    try:
        assert f"data directory {tmp_path / 'data'} (new and empty" in server.log()
    finally:
        server.stop()
    again = ServerProcess(tmp_path / "data", {}).start()
    try:
        assert f"data directory {tmp_path / 'data'};" in again.log()
    finally:
        again.stop()


def test_serve_in_server_mode_names_each_surfaces_engine_and_where_its_data_is(
    tmp_path: Path, postgres: PostgresCluster, clickhouse: ClickHouseEndpoint
) -> None:
    database, calls = postgres.create_database("startline"), clickhouse.database_url()
    env = {"TRIPTYCH_DATABASE_URL": database, "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": calls}
    server = ServerProcess(tmp_path / "data", env).start()
    try:
        line = next(line for line in server.log().splitlines() if "serving on" in line)
    finally:
        server.stop()
    assert f"Metronix /mcp and Hadron /hadron/mcp on PostgreSQL {database}" in line
    assert f"Metergraph /v1/agent/mcp: calls on ClickHouse {calls}" in line
    assert (
        "keys, routes, incidents, webhooks, analysis runs and reports, workloads, import sync on PostgreSQL"
        in line
    )
    # Every surface's data is on the shared engines: the new data directory holds none of it, so the line
    # warns of no empty data directory (the warning would tell an operator the wrong thing to worry about).
    assert "new and empty" not in line and "data directory" not in line
