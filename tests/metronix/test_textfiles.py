"""Deciding what a file holds as text from its bytes: encodings, compressed text, binary refused with a reason."""

from __future__ import annotations

import gzip
import io
import lzma
import tarfile
from pathlib import Path

import pytest

from triptych.metronix import textfiles
from triptych.metronix.textfiles import NotText, read_text_file


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(NotText) as refused:
        read_text_file(path)
    return refused.value.reason


def test_an_extensionless_utf8_file_is_plain_text(tmp_path: Path) -> None:
    found = read_text_file(write(tmp_path / "README", "Café au lait, naïve résumé.\n".encode()))

    assert (found.text, found.kind, found.name, found.compression) == (
        "Café au lait, naïve résumé.\n",
        "text",
        "README",
        None,
    )


def test_an_extensionless_page_that_starts_like_html_is_html(tmp_path: Path) -> None:
    found = read_text_file(write(tmp_path / "index", b"  <!DOCTYPE html><html><body>Hi</body></html>"))

    assert found.kind == "html"


def test_legacy_and_utf16_encodings_are_decoded(tmp_path: Path) -> None:
    latin = "Le garçon a mangé une crème brûlée près de la fenêtre, à côté du château. " * 4
    cp1252 = read_text_file(write(tmp_path / "notes.txt", latin.encode("cp1252")))
    utf16 = read_text_file(write(tmp_path / "wide.txt", "Wide text with a BOM.\n".encode("utf-16")))

    assert cp1252.text == latin
    assert utf16.text == "Wide text with a BOM.\n"


def test_gzip_and_xz_text_is_read_as_the_text_it_holds_and_named_without_the_suffix(tmp_path: Path) -> None:
    gz = read_text_file(write(tmp_path / "guide.md.gz", gzip.compress(b"# Guide\n\nUnpacked.\n")))
    xz = read_text_file(write(tmp_path / "NEWS.xz", lzma.compress(b"News of the week.\n")))

    assert (gz.text, gz.kind, gz.name, gz.compression) == (
        "# Guide\n\nUnpacked.\n",
        "markdown",
        "guide.md",
        "gzip",
    )
    assert (xz.text, xz.name, xz.compression) == ("News of the week.\n", "NEWS", "xz")


def test_binary_files_are_refused_with_what_they_are(tmp_path: Path) -> None:
    assert refusal(write(tmp_path / "paper.txt", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj")) == (
        "binary content (a PDF document)"
    )
    assert refusal(write(tmp_path / "blob", bytes(range(256)))) == "binary content (NUL bytes)"
    assert refusal(write(tmp_path / "ctl", b"\x01\x02\x03\x04\x05 some \x06\x07\x0e\x0f text" * 20)) == (
        "binary content (control characters)"
    )
    assert refusal(write(tmp_path / "data.gz", gzip.compress(bytes(range(256))))) == (
        "binary content (NUL bytes inside gzip data)"
    )


def test_a_compressed_archive_is_refused_as_an_archive(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))

    assert refusal(write(tmp_path / "bundle.tar.gz", gzip.compress(buffer.getvalue()))) == (
        "binary content (a tar archive inside gzip data)"
    )


def test_corrupt_and_empty_compressed_files_are_refused(tmp_path: Path) -> None:
    assert refusal(write(tmp_path / "broken.gz", gzip.compress(b"some text here")[:12])).startswith(
        "corrupt gzip data"
    )
    assert refusal(write(tmp_path / "nothing.gz", gzip.compress(b""))) == "empty gzip data (no text)"
    assert refusal(write(tmp_path / "blank.txt", b" \n\t\n")) == "empty (no text)"


def test_files_and_unpacked_streams_over_the_limit_are_refused_without_reading_them_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(textfiles, "MAX_TEXT_BYTES", 1000)
    bomb = write(tmp_path / "bomb.gz", gzip.compress(b"a" * 10_000_000))

    assert refusal(bomb) == "unpacks to more than 1,000 bytes (the limit of one document)"
    assert (
        refusal(write(tmp_path / "big.txt", b"b" * 1001))
        == "larger than 1,000 bytes (the limit of one document)"
    )
