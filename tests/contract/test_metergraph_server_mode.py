"""Metergraph in server mode: `triptych serve --workers 2` with ``TRIPTYCH_DATABASE_URL`` (PostgreSQL) and a
ClickHouse URL keeps its control data in PostgreSQL, and both workers answer from it. A webhook added by
the CLI, an analysis run started through the MCP client and its report, and a sign-in to the app pages are
read back through each worker; the data directory then holds none of Metergraph's control files and no
control table (decision record 0160). Keys, routes and batch records are there too (the metadata store,
decision record 0091): the agent keys minted for the test are PostgreSQL's rows."""

from __future__ import annotations

import base64
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from clickhouse_endpoint import ClickHouseEndpoint
from hadron.world import HADRON_KEY
from harness import SECRET, TRIPTYCH, ServerProcess, mcp_session
from postgres import PostgresCluster

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from provider_server import ProviderServer  # noqa: E402
from test_metergraph_analysis import Env, follow  # noqa: E402
from test_server_workers import WORKER, start_workers, stop_all  # noqa: E402

from triptych.metergraph.migrate import METADATA_TABLES, TABLES  # noqa: E402

WEBHOOK_KEY = base64.b64encode(bytes(range(32, 64))).decode()
CONTROL_FILES = ("metergraph-incidents.db", "metergraph-analysis.db", "metergraph.web-secret",
                 "metergraph-webhooks.key")  # fmt: skip


@pytest.fixture(scope="module")
def site(
    postgres: PostgresCluster, clickhouse: ClickHouseEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    url = postgres.create_database("mgserver")
    with ProviderServer() as provider:
        env = {
            "TRIPTYCH_DATABASE_URL": url,
            "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": clickhouse.database_url(),
            "AUTH_ENABLED": "true", "METRONIX_SECRET_KEY": SECRET, "TRIPTYCH_HADRON_KEY": HADRON_KEY.encoded(),
            "MG_WEB_SECRET": "a-web-secret-every-machine-shares", "MG_WEBHOOK_KEY": WEBHOOK_KEY,
            "MG_REPLAY_OPENAI_BASE_URL": provider.openai_url, "MG_REPLAY_OPENAI_API_KEY": "sk-test",
        }  # fmt: skip
        server = ServerProcess(tmp_path_factory.mktemp("mg-server") / "data", env)
        start_workers(server)
        try:
            yield Env(server, provider)
        finally:
            stop_all(server)


def _each_worker(request: Any) -> dict[str, httpx.Response]:
    """``request()`` (each call a new connection) until both workers have answered: worker -> answer."""
    answers: dict[str, httpx.Response] = {}
    for _ in range(80):
        response = request()
        answers.setdefault(response.headers[WORKER], response)
        if len(answers) == 2:
            return answers
    raise AssertionError(f"only workers {sorted(answers)} answered")


async def test_control_data_is_in_postgres_and_both_workers_answer_from_it(site: Env) -> None:
    workspace = "srv-" + uuid.uuid4().hex[:8]
    data_dir = site.server.data_dir
    database_url = site.server.env["TRIPTYCH_DATABASE_URL"]
    site.traffic(workspace, "support", 6)
    key = site.mint(workspace)

    # A webhook added by the CLI (which reaches the database the same way the server does).
    added = subprocess.run(
        [TRIPTYCH, "metergraph", "webhook", "add", "https://hooks.example.test/mg", "--workspace", workspace,
         "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "TRIPTYCH_DATABASE_URL": database_url, "MG_WEBHOOK_KEY": WEBHOOK_KEY},
    )  # fmt: skip
    assert added.returncode == 0, added.stderr

    # An analysis run through the official client: its progress and report are read by whichever worker.
    async with mcp_session(site.server.url + "/v1/agent/mcp", {"Authorization": f"Bearer {key}"}) as mcp:
        started = await mcp.call("metergraph_start_analysis", candidates=["gpt-4o-mini"], samples_per_workload=5,
                                 min_samples=5)  # fmt: skip
        run = await follow(mcp, started.data["run"]["run_id"])
    assert run["status"] == "succeeded", run
    headers = {"Authorization": f"Bearer {key}"}
    runs = _each_worker(lambda: httpx.get(f"{site.server.url}/v1/agent/analysis-runs/{run['run_id']}",
                                          headers=headers, timeout=30))  # fmt: skip
    assert all(r.status_code == 200 and r.json()["run"]["status"] == "succeeded" for r in runs.values())

    # A page session opened through one worker is honoured by both; the webhooks page lists the CLI's hook.
    signed = httpx.post(
        site.server.url + "/app/sign-in", data={"key": key}, follow_redirects=False, timeout=30
    )
    assert signed.status_code == 303, signed.text
    cookie = {"mg_app_session": signed.cookies["mg_app_session"]}
    pages = _each_worker(lambda: httpx.get(f"{site.server.url}/app/w/{workspace}/webhooks", cookies=cookie,
                                           follow_redirects=False, timeout=30))  # fmt: skip
    assert all(p.status_code == 200 and "https://hooks.example.test/" in p.text for p in pages.values())
    reports = _each_worker(lambda: httpx.get(f"{site.server.url}/app/w/{workspace}/analysis", cookies=cookie,
                                             follow_redirects=False, timeout=30))  # fmt: skip
    assert all(p.status_code == 200 and run["analysis_id"] in p.text for p in reports.values())

    # The rows are PostgreSQL's ...
    with psycopg.connect(database_url) as conn:
        conn.execute("SET search_path = metergraph")
        held = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE workspace = %s".encode(), (workspace,))
                .fetchone()[0] for t in ("webhook_endpoints", "analysis_runs", "reports")}  # fmt: skip
        keys = conn.execute("SELECT count(*) FROM keys WHERE workspace = %s", (workspace,)).fetchone()[0]
    assert held == {"webhook_endpoints": 1, "analysis_runs": 1, "reports": 1}
    assert keys >= 1  # the workers authenticated keys minted into PostgreSQL
    # ... and the data directory holds no Metergraph control file and no control table.
    present = sorted(p.name for p in data_dir.iterdir())
    assert not set(CONTROL_FILES) & set(present), present
    assert not any(p.name.startswith("metergraph.columns") for p in data_dir.iterdir())
    metadata = data_dir / "metergraph.db"
    if metadata.exists():
        with closing(sqlite3.connect(f"file:{metadata}?mode=ro", uri=True)) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            # The file's one schema has the metadata tables (the embedded engine's calls share it): empty.
            filled = [
                t for t in METADATA_TABLES if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchone()[0]
            ]
        control = set(TABLES) - set(METADATA_TABLES)
        assert not tables & control, sorted(tables & control)
        assert filled == [], filled
