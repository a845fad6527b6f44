"""Issue 21, items 1-3: `triptych kb import` lost and garbled files.

What broke: files were labelled by their bare name, so every `README` of `kb import /usr/share/doc/*/README*`
replaced the previous one while the summary counted them all; `.gz` files went in as binary garbage and
came back in search results; an extensionless `README` was skipped without a word. Fixed in
metronix/importer.py (labels, summary, skips) and metronix/textfiles.py (text decided by content).
Each test runs the real `triptych kb import`; the first then searches through a real server and the
official MCP client.
"""

from __future__ import annotations

import bz2
import gzip
import os
import subprocess
from pathlib import Path

import pytest
from harness import TRIPTYCH, ServerProcess, mcp_session


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
