"""Issue 21, items 1-5 and 11: the knowledge base as a new user meets it, done the way the user did it.

Each test drives the real `triptych kb import` command and a real `triptych serve`, then searches
through the official MCP client over streamable HTTP.
"""

from __future__ import annotations

import bz2
import gzip
import http.client
import json
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from harness import ROOT, TRIPTYCH, ServerProcess, mcp_session

MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"


def ws() -> str:
    return "ws-" + uuid.uuid4().hex[:8]


def kb_import(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPTYCH, "kb", "import", *args, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )


def label(path: Path) -> str:
    return "file:" + path.resolve().as_posix()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """What /usr/share/doc looks like: a README per package, gzip'd changelogs, a binary or two."""
    root = tmp_path / "doc"
    for package in ("kite-tools", "lantern"):
        (root / package).mkdir(parents=True)
    (root / "kite-tools" / "README").write_text(
        "Kite tools measure the breeze before a launch and log every flight.\n"
    )
    (root / "lantern" / "README").write_text("Lantern lights the campsite and charges from the sun.\n")
    with gzip.open(root / "lantern" / "changelog.Debian.gz", "wt") as handle:
        handle.write("lantern (2.1) unstable; urgency=low\n\n  * Fixed the quokka dimmer flicker.\n")
    with bz2.open(root / "kite-tools" / "NEWS.bz2", "wt") as handle:
        handle.write("Kite tools 3.0 adds a wombat tail stabiliser.\n")
    (root / "lantern" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (root / "kite-tools" / "calibration.bin").write_bytes(bytes(range(256)) * 8)
    (root / "lantern" / "copyright").write_text("Copyright 2026 The Lantern authors. Licence: MIT.\n")
    (root / "lantern" / "empty").write_text("")
    return root


async def test_kb_import_of_a_doc_folder_then_a_search_finds_each_file_by_its_own_label(
    tmp_path: Path, docs: Path
) -> None:
    data = tmp_path / "data"

    first = kb_import(data, str(docs))

    assert first.returncode == 0, first.stderr
    # Two READMEs, the gzip'd changelog, the bzip2 NEWS and the extensionless copyright file.
    assert "stored 5 documents (5 new, 0 changed;" in first.stdout
    assert "0 unchanged, 3 skipped, 0 failed; the workspace holds 5 documents" in first.stdout
    for name, reason in (
        ("lantern/logo.png", "binary content (a PNG image)"),
        ("kite-tools/calibration.bin", "binary content (NUL bytes)"),
        ("lantern/empty", "empty (no text)"),
    ):
        assert f"skipped {docs / name}: {reason}" in first.stderr

    rerun = kb_import(data, str(docs))
    assert "stored 0 documents (0 new, 0 changed; 0 chunks), 5 unchanged, 3 skipped" in rerun.stdout

    server = ServerProcess(data, {"TRIPTYCH_AUTH_ENABLED": "false"}).start()
    try:
        async with mcp_session(server.url + "/mcp") as mcp:
            quokka = await mcp.call("metronix_search_fast", query="quokka dimmer flicker", top_k=3)
            wombat = await mcp.call("metronix_search_fast", query="wombat stabiliser", top_k=3)
            readmes = await mcp.call("metronix_search_fast", query="README", top_k=10)
            status = await mcp.call("metronix_status")
    finally:
        server.stop()
    top = quokka.data["results"][0]
    assert top["doc_label"] == label(docs / "lantern" / "changelog.Debian.gz")
    assert "Fixed the quokka dimmer flicker." in top["content"]  # the text, not gzip bytes
    assert wombat.data["results"][0]["doc_label"] == label(docs / "kite-tools" / "NEWS.bz2")
    found = {r["doc_label"] for r in readmes.data["results"]}
    assert {label(docs / "kite-tools" / "README"), label(docs / "lantern" / "README")} <= found
    assert not any(lbl.endswith((".png", ".bin")) for lbl in found)
    assert status.data["documents"]["total"] == 5


def test_files_given_one_by_one_with_the_same_name_stay_separate_documents(
    tmp_path: Path, docs: Path
) -> None:
    data = tmp_path / "data"
    readmes = sorted(str(p) for p in docs.glob("*/README*"))  # what the shell makes of doc/*/README*

    first = kb_import(data, *readmes)
    again = kb_import(data, *readmes)

    assert "stored 2 documents (2 new, 0 changed;" in first.stdout
    assert "the workspace holds 2 documents" in first.stdout
    assert "stored 0 documents (0 new, 0 changed; 0 chunks), 2 unchanged" in again.stdout
    # Changing one file updates that document only.
    (docs / "lantern" / "README").write_text("Lantern now runs on a hand crank.\n")
    changed = kb_import(data, *readmes)
    assert "stored 1 documents (0 new, 1 changed;" in changed.stdout and "1 unchanged" in changed.stdout


def test_a_folder_holding_only_an_extensionless_readme_imports_it(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README").write_text("Project Nimbus forecasts the weather for kite festivals.\n")

    result = kb_import(tmp_path / "data", str(folder))

    assert result.returncode == 0
    assert "stored 1 documents (1 new, 0 changed; 1 chunks), 0 unchanged, 0 skipped" in result.stdout


def test_a_folder_with_nothing_importable_says_why_and_exits_non_zero(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00")
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")

    result = kb_import(tmp_path / "data", str(folder))

    assert result.returncode == 1
    assert "stored 0 documents" in result.stdout and "2 skipped" in result.stdout
    assert f"skipped {folder / 'photo.jpg'}: binary content (a JPEG image)" in result.stderr
    assert f"skipped {folder / '.DS_Store'}: hidden (its name starts with '.')" in result.stderr


def test_kb_import_help_lists_what_it_reads_and_skips() -> None:
    result = subprocess.run([TRIPTYCH, "kb", "import", "--help"], capture_output=True, text=True, check=True)

    for words in (
        "Markdown",
        "HTML",
        "without an extension",
        "gzip (.gz)",
        "binary content",
        "file:<absolute path>",
    ):
        assert words in result.stdout


async def test_identical_documents_take_one_place_in_the_results_and_name_the_others(
    open_server: ServerProcess,
) -> None:
    workspace = ws()
    text = "The harbour ferry leaves at seven and returns at noon on weekdays."
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for copy in range(5):
            await mcp.call("metronix_store", content=text, doc_label=f"copy-{copy}", workspace_id=workspace)
        await mcp.call(
            "metronix_store",
            content="The harbour ferry does not run on public holidays.",
            doc_label="holidays",
            workspace_id=workspace,
        )
        await mcp.call(
            "metronix_store",
            content="Ferry tickets are sold at the harbour kiosk.",
            doc_label="tickets",
            workspace_id=workspace,
        )
        found = await mcp.call("metronix_search_fast", query="harbour ferry", workspace_id=workspace, top_k=3)

    results = found.data["results"]
    assert found.data["count"] == 3
    labels = [r["doc_label"] for r in results]
    assert set(labels) - {"copy-0", "copy-1", "copy-2", "copy-3", "copy-4"} == {"holidays", "tickets"}
    (copy,) = [r for r in results if r["doc_label"].startswith("copy-")]
    assert sorted([copy["doc_label"], *copy["duplicate_labels"]]) == [f"copy-{i}" for i in range(5)]
    assert all(r["duplicate_labels"] == [] for r in results if r is not copy)


async def test_keyword_scores_use_the_workspace_s_own_statistics(open_server: ServerProcess) -> None:
    small, big = ws(), ws()
    async with mcp_session(open_server.url + "/mcp") as mcp:
        for doc_label, content in (
            ("z", "The zeppelin hangar opens at dawn."),
            ("b", "Bikes wait by the gate."),
        ):
            await mcp.call("metronix_store", content=content, doc_label=doc_label, workspace_id=small)
        before = await mcp.call("metronix_search_fast", query="zeppelin", workspace_id=small)
        for i in range(12):
            await mcp.call(
                "metronix_store",
                content=f"Zeppelin flight {i} carried zeppelin mail over the zeppelin field.",
                doc_label=f"flight-{i}",
                workspace_id=big,
            )
        after = await mcp.call("metronix_search_fast", query="zeppelin", workspace_id=small)

    top = before.data["results"][0]
    assert top["doc_label"] == "z"
    assert top["keyword_score"] is not None and top["keyword_score"] > 0.0  # an exact match counts
    # Another workspace's documents change nothing here.
    drop = ("latency_ms",)
    assert {k: v for k, v in after.data.items() if k not in drop} == {
        k: v for k, v in before.data.items() if k not in drop
    }


# The 1.x client API, as in the contract's example (run in .venv-mcp1: 1.x cannot share a venv with 2.x).
MCP1_STORE = """
import asyncio, json, sys
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

async def main(url, workspace, chars):
    async with streamablehttp_client(url) as (r, w, _):
        async with ClientSession(r, w) as session:
            await session.initialize()
            result = await session.call_tool("metronix_store", {"content": "x" * chars, "workspace_id": workspace})
            print(json.dumps({"error": result.isError, "text": result.content[0].text}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_a_document_over_the_size_limit_is_refused_in_the_contract_s_shape_with_the_limit_named(
    open_server: ServerProcess,
) -> None:
    workspace = ws()
    too_long = 5_000_001
    async with mcp_session(open_server.url + "/mcp") as mcp:
        refused = await mcp.call(
            "metronix_store", content="word " * (too_long // 5 + 1), workspace_id=workspace
        )
        status = await mcp.call("metronix_status", workspace_id=workspace)

    assert refused.is_error and refused.error_code == "INVALID_PARAMS"
    error = refused.data["error"]
    assert "the limit of one document is 5,000,000" in error["message"]
    assert error["details"]["limit_chars"] == 5_000_000 and "doc_label" in error["hint"]
    assert status.data["documents"]["total"] == 0  # nothing half-written

    if not MCP1_PYTHON.exists():
        pytest.skip("the 1.x client venv is missing: run `python3 tasks.py test`")
    done = subprocess.run(
        [str(MCP1_PYTHON), "-c", MCP1_STORE, open_server.url + "/mcp", workspace, str(too_long)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown["error"] is True
    assert json.loads(shown["text"])["error"]["code"] == "INVALID_PARAMS"
    assert "the limit of one document is 5,000,000" in shown["text"]


def test_a_request_over_the_transport_limit_gets_a_json_rpc_error_naming_it(
    open_server: ServerProcess,
) -> None:
    declared = 40 * 1024 * 1024  # refused on the declared length: nothing more needs to be sent
    with socket.create_connection(("127.0.0.1", open_server.port), timeout=30) as sock:
        sock.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{open_server.port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {declared}\r\n\r\n{{".encode()
        )
        response = http.client.HTTPResponse(sock)
        response.begin()
        body = json.loads(response.read())

    assert response.status == 413 and response.getheader("content-type") == "application/json"
    assert body["error"]["code"] == -32600
    assert "32 MiB (33,554,432 bytes)" in body["error"]["message"]
    assert body["error"]["data"]["error"]["code"] == "INVALID_PARAMS"
    assert body["error"]["data"]["error"]["details"] == {"limit_bytes": 33_554_432, "request_bytes": declared}
