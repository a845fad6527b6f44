"""metronix_sync against real MCP sources: one over stdio, one over streamable HTTP on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from harness import TRIPTYCH, ServerProcess, free_port, mcp_session

SCRIPT = Path(__file__).parent / "scripts" / "resource_server.py"


def write(path: Path, resources: dict[str, tuple[str, str]]) -> None:
    path.write_text(
        json.dumps({uri: {"name": name, "text": text} for uri, (name, text) in resources.items()})
    )


@pytest.fixture
def http_source(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    resources = tmp_path / "wiki.json"
    write(resources, {"wiki://home": ("Home", "The wiki home page explains the deployment calendar.")})
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SCRIPT), str(resources), "--http", str(port)])
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=0.5)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield url, resources
    process.terminate()
    process.wait(timeout=10)


# Sleeps without reading stdin, so it outlives the closing of its stdin: only a kill stops it.
SILENT = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"


def register(data_dir: Path, *args: str) -> None:
    subprocess.run(
        [TRIPTYCH, "sources", "add", *args, "--data-dir", str(data_dir)], check=True, capture_output=True
    )


async def test_sync_ingests_updates_and_removes_resources_from_stdio_and_http_sources(
    tmp_path: Path, http_source: tuple[str, Path]
) -> None:
    url, wiki = http_source
    docs = tmp_path / "docs.json"
    write(
        docs,
        {
            "docs://a": ("Alpha", "Alpha explains how invoices are approved by finance."),
            "docs://b": ("Beta", "Beta covers the on-call rotation for the platform team."),
            "docs://c": ("Gamma", "Gamma lists the office plants and who waters them."),
        },
    )
    data = tmp_path / "data"
    register(data, "docs", "--command", sys.executable, "--arg", str(SCRIPT), "--arg", str(docs))
    register(data, "wiki", "--url", url)
    server = ServerProcess(data, {}).start()
    try:
        async with mcp_session(server.url + "/mcp") as mcp:
            before = await mcp.call("metronix_status")
            first = await mcp.call("metronix_sync")
            found = await mcp.call("metronix_search_fast", query="who approves invoices", top_k=1)
            got = await mcp.call("metronix_get", doc_label="mcp:wiki:wiki://home")
            after = await mcp.call("metronix_status")

            write(
                docs,
                {
                    "docs://a": ("Alpha", "Alpha explains how invoices are approved by the CFO only."),
                    "docs://b": ("Beta", "Beta covers the on-call rotation for the platform team."),
                    "docs://d": ("Delta", "Delta describes the new expense policy."),
                },
            )
            second = await mcp.call("metronix_sync", source="docs")
            gone = await mcp.call("metronix_get", doc_label="mcp:docs:docs://c")
            changed = await mcp.call("metronix_get", doc_label="mcp:docs:docs://a")
            full = await mcp.call("metronix_sync", source="docs", force_full=True)
    finally:
        server.stop()

    assert before.data["last_sync"] is None
    assert first.data["success"] is True and first.data["sources_synced"] == 2
    by_source = {d["source"]: d for d in first.data["details"]}
    assert by_source["docs"] == {
        "source": "docs", "transport": "stdio", "added": 3, "updated": 0, "unchanged": 0, "removed": 0, "failed": 0, "error": None,
    }  # fmt: skip
    assert by_source["wiki"]["added"] == 1 and by_source["wiki"]["transport"] == "http"
    assert found.data["results"][0]["doc_label"] == "mcp:docs:docs://a"
    assert got.data["title"] == "Home" and got.data["source_type"] == "mcp"
    assert after.data["last_sync"] is not None and after.data["documents"] == {"total": 4}

    assert second.data["details"] == [
        {
            "source": "docs",
            "transport": "stdio",
            "added": 1,
            "updated": 1,
            "unchanged": 1,
            "removed": 1,
            "failed": 0,
            "error": None,
        }
    ]
    assert gone.error_code == "DOCUMENT_NOT_FOUND"
    assert "CFO only" in changed.data["content"]
    assert full.data["details"][0]["updated"] == 3 and full.data["details"][0]["unchanged"] == 0


async def test_a_broken_source_fails_alone_and_loses_nothing_already_ingested(
    tmp_path: Path, http_source: tuple[str, Path]
) -> None:
    url, _ = http_source
    docs = tmp_path / "docs.json"
    write(docs, {"docs://a": ("Alpha", "Alpha explains the holiday policy.")})
    data = tmp_path / "data"
    register(data, "docs", "--command", sys.executable, "--arg", str(SCRIPT), "--arg", str(docs))
    register(data, "wiki", "--url", url)
    register(data, "missing", "--command", str(tmp_path / "no-such-binary"))
    register(data, "closed", "--url", f"http://127.0.0.1:{free_port()}/mcp")
    register(
        data,
        "garbage",
        "--command",
        sys.executable,
        "--arg",
        str(SCRIPT),
        "--arg",
        str(docs),
        "--arg=--garbage",
    )
    pid_file = tmp_path / "silent.pid"
    register(data, "silent", "--command", sys.executable, "--arg=-c", "--arg", SILENT, "--arg", str(pid_file))
    # A healthy stdio source must finish its handshake within the timeout, on a loaded CI machine too.
    server = ServerProcess(data, {"TRIPTYCH_SYNC_TIMEOUT": "6"}).start()
    try:
        async with mcp_session(server.url + "/mcp") as mcp:
            first = await mcp.call("metronix_sync")
            docs.unlink()  # the stdio source now crashes on every request
            second = await mcp.call("metronix_sync", source="docs")
            write(docs, {"docs://a": ("Alpha", "Alpha explains the new holiday policy.")})
            # ... and now prints garbage instead of speaking MCP.
            register(data, "docs", "--command", sys.executable, "--arg", str(SCRIPT), "--arg", str(docs),
                     "--arg=--garbage")  # fmt: skip
            third = await mcp.call("metronix_sync", source="docs")
            kept = await mcp.call("metronix_get", doc_label="mcp:docs:docs://a")
            unknown = await mcp.call("metronix_sync", source="nope")
    finally:
        server.stop()

    details = {d["source"]: d for d in first.data["details"]}
    assert first.data["success"] is False and first.data["sources_synced"] == 2
    assert details["docs"]["added"] == 1 and details["wiki"]["added"] == 1
    for broken in ("missing", "closed", "garbage", "silent"):
        assert details[broken]["error"], broken
        assert details[broken]["added"] == 0
    assert second.data["details"][0]["error"] and second.data["details"][0]["removed"] == 0
    # Garbage on stdout, or no answer at all, fails the handshake within the timeout (not the SDK's
    # 10 s discover probe on top of it), and says so.
    for failed in (details["garbage"], details["silent"], third.data["details"][0]):
        assert failed["error"] == (
            "the source did not answer MCP initialize within 6 s: check its command: "
            "it must start an MCP server that writes only JSON-RPC to stdout"
        )
        assert failed["updated"] == failed["removed"] == 0
    # The child that ignored its closed stdin was killed and reaped before the sync answered.
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
    assert kept.data["content"] == "Alpha explains the holiday policy."
    assert unknown.error_code == "INVALID_PARAMS" and "nope" in unknown.data["error"]["message"]
