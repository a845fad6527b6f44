"""What a file holds as text, decided by its content: compressed text unpacked, binary refused with a reason.

The extension only names the kind of text (Markdown, HTML, plain); whether a file is text at all is read
from its bytes, so an extensionless ``README`` imports and a ``.txt`` holding a PNG does not.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from charset_normalizer import from_bytes

# The knowledge base stores documents of at most 5,000,000 characters (knowledge.MAX_CONTENT_CHARS);
# UTF-8 spends at most 4 bytes on one, so a larger file (or unpacked stream) cannot fit.
MAX_TEXT_BYTES = 20_000_000
SNIFF_BYTES = 8192

KINDS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
}

Opener = Callable[[IO[bytes]], io.BufferedIOBase]


@dataclass(frozen=True, slots=True)
class Compression:
    """A compressed stream read as the text it holds."""

    name: str
    magic: bytes
    suffix: str
    open: Opener


_COMPRESSED = (
    Compression("gzip", b"\x1f\x8b", ".gz", lambda f: gzip.GzipFile(fileobj=f)),
    Compression("bzip2", b"BZh", ".bz2", lambda f: bz2.BZ2File(f)),
    Compression("xz", b"\xfd7zXZ\x00", ".xz", lambda f: lzma.LZMAFile(f)),
)

# Formats named in the skip reason (anything else binary is caught by NUL bytes or its encoding).
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a ZIP archive (or an Office/OpenDocument file)"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\x7fELF", "an ELF executable"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"%!PS", "a PostScript document"),
)
_TAR_MAGIC = b"ustar"  # at offset 257 of a tar archive
# Control characters that never occur in text (tab, newlines, form feed and escape do).
_CONTROL = frozenset(chr(c) for c in range(32) if chr(c) not in "\t\n\r\f\v\x1b\x08") | {"\x7f"}
_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


class NotText(Exception):
    """The file is not importable text; ``reason`` says why, for the import's report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TextFile:
    text: str
    kind: str  # markdown, html or text
    name: str  # the file name without a compression suffix (README.md for README.md.gz)
    compression: str | None = None


def read_text_file(path: Path) -> TextFile:
    """The text of ``path``, or ``NotText`` with the reason it was refused. ``OSError`` passes through."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
        compression = _compression(head)
        if compression is None:
            _refuse_binary(head)
            raw = head + handle.read(MAX_TEXT_BYTES + 1 - len(head))
            if len(raw) > MAX_TEXT_BYTES:
                raise NotText(f"larger than {MAX_TEXT_BYTES:,} bytes (the limit of one document)")
            name = path.name
        else:
            handle.seek(0)
            raw = _unpack(handle, compression)
            name = path.name
            if name.lower().endswith(compression.suffix):
                name = name[: -len(compression.suffix)]
            _refuse_binary(raw[:SNIFF_BYTES], inside=f" inside {compression.name} data")
    packed = compression.name if compression else None
    text = _decode(raw, inside=f" inside {packed} data" if packed else "")
    if not text.strip():
        raise NotText(f"empty {packed} data (no text)" if packed else "empty (no text)")
    return TextFile(text=text, kind=kind_of(name, text), name=name, compression=packed)


def kind_of(name: str, text: str) -> str:
    """markdown, html or text: by the extension, and an extensionless page that starts like HTML."""
    suffix = Path(name).suffix.lower()
    if suffix in KINDS:
        return KINDS[suffix]
    start = text.lstrip()[:15].lower()
    return "html" if start.startswith(("<!doctype html", "<html")) else "text"


def _compression(head: bytes) -> Compression | None:
    return next((c for c in _COMPRESSED if head.startswith(c.magic)), None)


def _unpack(handle: IO[bytes], compression: Compression) -> bytes:
    # Read at most one byte past the limit: a small file that unpacks to gigabytes stops there.
    try:
        with compression.open(handle) as stream:
            raw = stream.read(MAX_TEXT_BYTES + 1)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
        raise NotText(f"corrupt {compression.name} data ({exc})") from exc
    if len(raw) > MAX_TEXT_BYTES:
        raise NotText(f"unpacks to more than {MAX_TEXT_BYTES:,} bytes (the limit of one document)")
    return raw


def _refuse_binary(head: bytes, inside: str = "") -> None:
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            raise NotText(f"binary content ({what}{inside})")
    if head[257:262] == _TAR_MAGIC:
        raise NotText(f"binary content (a tar archive{inside})")
    if any(head.startswith(bom) for bom, _ in _BOMS):
        return  # UTF-16/32 text holds NUL bytes; its byte-order mark says so
    if b"\x00" in head:
        raise NotText(f"binary content (NUL bytes{inside})")


def _decode(raw: bytes, inside: str) -> str:
    text: str | None = None
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise NotText(f"not valid {encoding} text{inside} ({exc.reason})") from exc
            break
    if text is None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            # A legacy 8-bit encoding (Latin-1, Windows-1252, ...), or binary data no encoding fits.
            text = _decode_legacy(raw)
            if text is None:
                raise NotText(f"binary content (no text encoding fits{inside})") from None
    sample = text[:SNIFF_BYTES]
    if sample and sum(ch in _CONTROL for ch in sample) > len(sample) * 0.05:
        raise NotText(f"binary content (control characters{inside})")
    return text


def _decode_legacy(raw: bytes) -> str | None:
    """Text in an 8-bit encoding, detected; None when no encoding makes text of it."""
    matches = from_bytes(raw)
    best = matches.best()
    if best is None:
        return None
    # Candidates the detector cannot tell apart (French read as Romanian Windows-1250 scores the same as
    # Windows-1252) go to Windows-1252, the commonest legacy encoding of documentation.
    for match in matches:
        if (match.chaos, match.coherence) == (best.chaos, best.coherence) and (
            "cp1252" in match.could_be_from_charset
        ):
            try:
                return raw.decode("cp1252")
            except UnicodeDecodeError:
                break
    return str(best)
