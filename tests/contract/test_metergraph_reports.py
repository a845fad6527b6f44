"""Metergraph reports through a real `triptych serve`: an artifact imported with the CLI is read through
the official MCP client (list, report, suite results, evidence), downloaded over HTTP byte for byte, and
stays invisible to another workspace."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from harness import ServerProcess, mcp_session, open_metergraph
from mcp import Client, StdioServerParameters

from triptych.metergraph.contract import TOOLS_BY_NAME

sys.path.insert(0, str(Path(__file__).parent.parent / "metergraph"))
from report_support import NARRATIVE, artifact, raw  # noqa: E402
from shared_metergraph import PUBLIC_URL as PUBLIC  # noqa: E402


class Env:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.url = server.url + "/v1/agent/mcp"

    def mint(self, workspace: str, role: str = "debug", environments: list[str] | None = None) -> str:
        mg = open_metergraph(self.server)
        try:
            return mg.keys.create_agent_key(workspace, role, environments)[1]
        finally:
            mg.close()

    def import_report(self, workspace: str, path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "triptych", "metergraph", "report", "import", str(path), "--workspace", workspace,
             "--data-dir", str(self.server.data_dir)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip


@pytest.fixture(scope="module")
def env(shared_metergraph_sqlite: ServerProcess) -> Env:
    """The session's shared server (tests/shared_metergraph.py), its app links under ``PUBLIC``; each test
    imports into a workspace of its own. The embedded engine only: reports live in the metadata database
    (SQLite or PostgreSQL) whichever engine holds the calls, and no test here reads a call, so a ClickHouse
    run repeated these exactly (docs/decisions/0300-shared-test-servers.md)."""
    return Env(shared_metergraph_sqlite)


@pytest.fixture(scope="module")
def imported(env: Env, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    workspace = "rep-" + uuid.uuid4().hex[:8]
    path = tmp_path_factory.mktemp("artifact") / "report.json"
    path.write_bytes(raw(artifact()))
    done = env.import_report(workspace, path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "an-test-1"
    assert "imported report 'an-test-1'" in done.stderr and "sha256" in done.stderr
    return workspace, path.read_bytes()


def test_the_cli_refuses_an_invalid_artifact_saying_why(env: Env, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**artifact(), "outcome": "great"}))
    done = env.import_report("rep-bad", path)
    assert done.returncode == 2
    assert "invalid report artifact at outcome" in done.stderr and "Traceback" not in done.stderr


async def test_reports_read_through_the_official_client(env: Env, imported: tuple[str, bytes]) -> None:
    workspace, data = imported
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace, 'metadata')}"}) as mcp:
        names = await mcp.tool_names()
        listed = await mcp.call("metergraph_list_reports", limit=5)
        report = await mcp.call("metergraph_get_report", analysis_id="an-test-1")
        suite = await mcp.call(
            "metergraph_get_suite_results", analysis_id="an-test-1", workload_id="route:support"
        )
        caps = (await mcp.call("metergraph_get_capabilities")).data
    assert "metergraph_get_report_evidence" not in names
    for name in ("metergraph_list_reports", "metergraph_get_report", "metergraph_get_suite_results"):
        assert caps["agent"][TOOLS_BY_NAME[name].capability]["available"] is True
    [summary] = listed.data["reports"]
    assert summary["artifact"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert summary["artifact"]["bytes"] == len(data)
    assert listed.data["app_url"].startswith(PUBLIC) and listed.data["app_url"].endswith("/analysis")
    assert workspace in listed.data["app_url"]
    assert not report.is_error and NARRATIVE not in json.dumps(report.data)
    workload = report.data["workloads"][0]
    assert workload["app_url"].endswith(
        f"/{workspace}/reports/an-test-1/workloads/route%3Asupport/comparison"
    )
    assert workload["opportunities"][0]["app_url"].endswith("/opportunities/c1-swap")
    assert suite.data["available"] is True
    assert suite.data["app_url"].endswith("/workloads/route%3Asupport/suite")


async def test_evidence_pages_through_the_official_client(env: Env, imported: tuple[str, bytes]) -> None:
    workspace, _ = imported
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace, 'debug')}"}) as mcp:
        first = await mcp.call(
            "metergraph_get_report_evidence", analysis_id="an-test-1", workload_id="route:support", limit=2
        )
        rest = await mcp.call(
            "metergraph_get_report_evidence", analysis_id="an-test-1", workload_id="route:support",
            cursor=first.data["next_cursor"],
        )  # fmt: skip
    assert first.data["content_included"] is True and len(first.data["evidence"]) == 2
    assert rest.data["evidence"][0]["question"]["truncated"] is True
    assert first.data["metergraph_links"]["workload"].endswith("/workloads/route%3Asupport")


async def test_report_error_codes(env: Env, imported: tuple[str, bytes]) -> None:
    workspace, _ = imported
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace, 'metadata')}"}) as mcp:
        missing = await mcp.call("metergraph_get_report", analysis_id="an-nope")
        no_workload = await mcp.call(
            "metergraph_get_suite_results", analysis_id="an-test-1", workload_id="w-nope"
        )
        forbidden = await mcp.call("metergraph_get_report_evidence", analysis_id="an-test-1", workload_id="w")
    async with mcp_session(env.url, {"Authorization": f"Bearer {env.mint(workspace, 'debug')}"}) as mcp:
        bad_cursor = await mcp.call(
            "metergraph_get_report_evidence",
            analysis_id="an-test-1",
            workload_id="route:support",
            cursor="zzz",
        )
    assert missing.error_code == "not_found" and no_workload.error_code == "not_found"
    assert forbidden.error_code == "forbidden"
    assert bad_cursor.error_code == "invalid_argument"


async def test_another_workspace_sees_none_of_the_reports(env: Env, imported: tuple[str, bytes]) -> None:
    other = env.mint("rep-other-" + uuid.uuid4().hex[:6], "debug")
    async with mcp_session(env.url, {"Authorization": f"Bearer {other}"}) as mcp:
        listed = await mcp.call("metergraph_list_reports")
        report = await mcp.call("metergraph_get_report", analysis_id="an-test-1")
        suite = await mcp.call(
            "metergraph_get_suite_results", analysis_id="an-test-1", workload_id="route:support"
        )
        evidence = await mcp.call(
            "metergraph_get_report_evidence", analysis_id="an-test-1", workload_id="route:support"
        )
    assert listed.data["reports"] == []
    assert {report.error_code, suite.error_code, evidence.error_code} == {"not_found"}
    response = httpx.get(env.server.url + "/v1/agent/reports/an-test-1/artifact",
                         headers={"Authorization": f"Bearer {other}"}, timeout=30)  # fmt: skip
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def _download(env: Env, token: str, analysis_id: str = "an-test-1") -> httpx.Response:
    return httpx.get(
        f"{env.server.url}/v1/agent/reports/{analysis_id}/artifact",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_the_artifact_downloads_byte_for_byte_uncached_with_its_sha256(
    env: Env, imported: tuple[str, bytes]
) -> None:
    workspace, data = imported
    response = _download(env, env.mint(workspace, "debug"))
    assert response.status_code == 200
    assert response.content == data
    digest = hashlib.sha256(response.content).hexdigest()
    assert response.headers["etag"] == f'"{digest}"'
    assert response.headers["cache-control"] == "no-store"


def test_the_artifact_download_refuses_metadata_keys_and_long_ids(
    env: Env, imported: tuple[str, bytes]
) -> None:
    workspace, _ = imported
    refused = _download(env, env.mint(workspace, "metadata"))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    too_long = _download(env, env.mint(workspace, "debug"), "a" * 201)
    assert too_long.status_code == 422 and too_long.json()["error"]["code"] == "invalid_argument"
    anonymous = httpx.get(f"{env.server.url}/v1/agent/reports/an-test-1/artifact", timeout=30)
    assert anonymous.status_code == 401


async def test_the_stdio_bridge_reads_reports(env: Env, imported: tuple[str, bytes]) -> None:
    workspace, _ = imported
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "triptych.metergraph.bridge"],
        env={**os.environ, "METERGRAPH_URL": env.server.url, "METERGRAPH_AGENT_TOKEN": env.mint(workspace)},
    )
    async with Client(params) as client:
        listed = await client.call_tool("metergraph_list_reports", {})
        suite = await client.call_tool(
            "metergraph_get_suite_results", {"analysis_id": "an-test-1", "workload_id": "route:support"}
        )
        evidence = await client.call_tool(
            "metergraph_get_report_evidence",
            {"analysis_id": "an-test-1", "workload_id": "route:support", "limit": 1},
        )
        runs = await client.call_tool("metergraph_list_analysis_runs", {})
    text = [json.loads(r.content[0].text) for r in (listed, suite, evidence, runs)]  # type: ignore[union-attr]
    assert [r["analysis_id"] for r in text[0]["reports"]] == ["an-test-1"]
    assert text[1]["available"] is True
    assert len(text[2]["evidence"]) == 1 and text[2]["next_cursor"] is not None
    assert text[3]["runs"] == []
