"""Import files and folders into the knowledge base: Markdown, plain text and HTML.

Each file becomes one document labelled ``file:<path relative to the imported root>``. Unchanged files
(same content hash) are skipped, so an interrupted import resumes where it stopped when run again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser

from triptych.core.auth import Principal
from triptych.core.errors import TriptychError
from triptych.metronix.knowledge import KnowledgeService

log = logging.getLogger(__name__)

SUFFIXES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
}


_BLOCKS = (
    "p, div, li, h1, h2, h3, h4, h5, h6, br, tr, td, th, pre, blockquote, section, article, table, dd, dt"
)
_SPACES = re.compile(r"[ \t]+")
_BLANK_LINES = re.compile(r"\s*\n\s*\n\s*")


@dataclass
class ImportSummary:
    documents: int = 0
    chunks: int = 0
    unchanged: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


def discover(paths: Iterable[Path]) -> Iterator[tuple[Path, Path]]:
    """(file, root) pairs for every importable file under the given files and folders, in a stable order."""
    for path in paths:
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                if file.is_file() and file.suffix.lower() in SUFFIXES and not _hidden(file.relative_to(path)):
                    yield file, path
        elif path.is_file():
            yield path, path.parent
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def extract(file: Path) -> tuple[str | None, str]:
    """(title, text) of a file, by its kind."""
    raw = file.read_text(encoding="utf-8", errors="replace")
    kind = SUFFIXES.get(file.suffix.lower(), "text")
    if kind == "html":
        tree = LexborHTMLParser(raw)
        title_node = tree.css_first("title") or tree.css_first("h1")
        title = title_node.text(strip=True) if title_node else None
        for node in tree.css("script, style, noscript, nav, header, footer"):
            node.decompose()
        # Blocks become paragraphs; inline tags (<b>, <a>) must not split words.
        for node in tree.css(_BLOCKS):
            node.insert_before("\n\n")
            node.insert_after("\n\n")
        body = tree.body or tree.root
        raw_text = body.text(separator="", strip=False) if body is not None else ""
        text = _BLANK_LINES.sub("\n\n", _SPACES.sub(" ", raw_text)).strip()
        return title or file.stem, text
    if kind == "markdown":
        for line in raw.splitlines():
            if line.startswith("# "):
                return line[2:].strip(), raw
    return file.stem, raw


def import_paths(
    service: KnowledgeService,
    principal: Principal,
    workspace: str,
    paths: Iterable[Path],
    progress: Callable[[Iterable[tuple[Path, Path]], int], Iterable[tuple[Path, Path]]] | None = None,
) -> ImportSummary:
    files = list(discover(paths))
    summary = ImportSummary()
    iterator: Iterable[tuple[Path, Path]] = progress(files, len(files)) if progress else files
    for file, root in iterator:
        label = "file:" + file.relative_to(root).as_posix()
        try:
            title, text = extract(file)
            if not text.strip():
                raise ValueError("no text")
            result = service.store_document(
                principal,
                workspace,
                text,
                title=title,
                doc_label=label,
                # Only what identifies the content goes in: a touched but unchanged file is skipped.
                metadata={"path": str(file.resolve())},
                source_type="file",
                skip_unchanged=True,
            )
        except (TriptychError, OSError, ValueError) as exc:
            summary.failed += 1
            summary.errors.append(f"{file}: {getattr(exc, 'message', exc)}")
            log.warning("import of %s failed: %s", file, exc)
            continue
        if result.unchanged:
            summary.unchanged += 1
        else:
            summary.documents += 1
            summary.chunks += result.chunks_stored
    return summary
