"""``kb import``'s bar: bytes of the files, a long file advancing with its chunks, the rate in chunks/s."""

from __future__ import annotations

from pathlib import Path

import pytest

from triptych.core.progress import ImportBar


def test_import_bar_advances_inside_a_file_and_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    bar = ImportBar()
    bar.start(2, 1000)
    bar.file(Path("/docs/CHANGELOG-with-a-rather-long-name-for-the-release-notes.md"), 900)
    bar.chunks(64, 128)
    assert bar._bar.n == 450 and bar.embedded == 64  # half its chunks: half its bytes, before it ends
    bar.chunks(128, 128)
    bar.done(Path("CHANGELOG.md"))
    bar.file(Path("notes.txt"), 100)
    bar.done(Path("notes.txt"))  # unchanged or skipped: its bytes count all the same
    assert bar._bar.n == 1000 and bar.embedded == 128 and bar.rate() > 0
    bar.close()
    err = capsys.readouterr().err
    assert "importing 2 files" in err and "chunks/s" in err and "CHANGELOG-with-a-r…" in err
