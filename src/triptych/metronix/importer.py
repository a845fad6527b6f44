"""Import files and folders into the knowledge base: Markdown, HTML and any other text, by content.

Each file becomes one document labelled ``file:<absolute path>``: unique within an import (two
``README`` files in different folders stay two documents) and the same on every rerun, from any
directory, so a rerun skips unchanged files (same content hash) and an interrupted import resumes where
it stopped. What a file holds is read from its bytes (``textfiles``): compressed text is unpacked,
binary content is skipped, and every file that is not imported is reported with its reason.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from selectolax.lexbor import LexborHTMLParser

from triptych.core.auth import Principal
from triptych.core.errors import NotFound, TriptychError
from triptych.metronix.knowledge import MAX_CONTENT_CHARS, KnowledgeService
from triptych.metronix.textfiles import NotText, TextFile, read_text_file

log = logging.getLogger(__name__)

LABEL_PREFIX = "file:"
HIDDEN = "hidden (its name starts with '.')"
LINKED_FOLDER = "a symbolic link to a folder (not followed; name the folder itself to import it)"

_BLOCKS = (
    "p, div, li, h1, h2, h3, h4, h5, h6, br, tr, td, th, pre, blockquote, section, article, table, dd, dt"
)
_SPACES = re.compile(r"[ \t]+")
_BLANK_LINES = re.compile(r"\s*\n\s*\n\s*")


@dataclass(frozen=True, slots=True)
class Outcome:
    """A file that was not imported, and why."""

    path: str
    reason: str


@dataclass
class ImportSummary:
    new: int = 0
    updated: int = 0
    chunks: int = 0
    unchanged: int = 0
    skipped: list[Outcome] = field(default_factory=list)
    failed: list[Outcome] = field(default_factory=list)
    # Documents the workspace holds after the import (what a search can find).
    workspace_documents: int = 0

    @property
    def stored(self) -> int:
        """Documents written by this import: new ones and changed ones."""
        return self.new + self.updated

    def report(self, workspace: str) -> list[str]:
        """The summary line, then one line per skipped or failed file."""
        head = (
            f"imported into workspace {workspace!r}: stored {self.stored} documents "
            f"({self.new} new, {self.updated} changed; {self.chunks} chunks), "
            f"{self.unchanged} unchanged, {len(self.skipped)} skipped, {len(self.failed)} failed; "
            f"the workspace holds {self.workspace_documents} documents"
        )
        return [
            head,
            *(f"  skipped {o.path}: {o.reason}" for o in self.skipped),
            *(f"  failed {o.path}: {o.reason}" for o in self.failed),
        ]


def label_for(file: Path) -> str:
    """The document label of a file: its absolute path, symlinks resolved."""
    return LABEL_PREFIX + file.resolve().as_posix()


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[Outcome]]:
    """Every candidate file under the given files and folders (each once, in a stable order), and what
    was left out on the way (hidden entries, links to nowhere, devices and pipes), with the reason.

    A file named on the command line is a candidate even when hidden: it was asked for.
    """
    files: list[Path] = []
    skipped: list[Outcome] = []
    seen: set[Path] = set()

    def add(file: Path) -> None:
        real = file.resolve()
        if real not in seen:
            seen.add(real)
            files.append(file)

    for path in paths:
        if path.is_dir():
            for top, dirs, names in os.walk(path):
                here = Path(top)
                for name in sorted(dirs):
                    if name.startswith("."):
                        skipped.append(Outcome(str(here / name), HIDDEN))
                    elif (here / name).is_symlink():
                        # Not followed: a link back up the tree would import it again and again.
                        skipped.append(Outcome(str(here / name), LINKED_FOLDER))
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (here / d).is_symlink())
                for name in sorted(names):
                    file = here / name
                    if name.startswith("."):
                        skipped.append(Outcome(str(file), HIDDEN))
                    elif file.is_file():
                        add(file)
                    elif file.is_symlink() and not file.exists():
                        skipped.append(Outcome(str(file), "a symbolic link to nothing"))
                    else:
                        skipped.append(Outcome(str(file), "not a regular file"))
        elif path.is_file():
            add(path)
        elif path.exists():
            skipped.append(Outcome(str(path), "not a regular file or folder"))
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return files, skipped


def extract(file: Path) -> tuple[str, str]:
    """(title, text) of a file, by its content and kind; ``NotText`` says why a file has none."""
    return title_and_text(read_text_file(file))


def title_and_text(found: TextFile) -> tuple[str, str]:
    stem = Path(found.name).stem or found.name
    if found.kind == "html":
        tree = LexborHTMLParser(found.text)
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
        return title or stem, text
    if found.kind == "markdown":
        for line in found.text.splitlines():
            if line.startswith("# "):
                return line[2:].strip(), found.text
    return stem, found.text


class ImportProgress(Protocol):
    """What ``import_paths`` tells as it goes: the total size first, then each file and its chunks."""

    def start(self, files: int, total_bytes: int) -> None: ...
    def file(self, path: Path, size: int) -> None: ...
    def chunks(self, done: int, total: int) -> None: ...
    def done(self, path: Path) -> None: ...


def import_paths(
    service: KnowledgeService,
    principal: Principal,
    workspace: str,
    paths: Iterable[Path],
    progress: ImportProgress | None = None,
) -> ImportSummary:
    """Import every candidate file; the summary counts what was stored and why anything else was not."""
    files, skipped = discover(paths)
    summary = ImportSummary(skipped=skipped)
    sizes = [_size(file) for file in files]
    if progress:
        progress.start(len(files), sum(sizes))
    for file, size in zip(files, sizes, strict=True):
        if progress:
            progress.file(file, size)
        try:
            outcome = _import_one(service, principal, workspace, file, summary, progress)
        except NotText as exc:
            outcome = exc.reason
        except (TriptychError, OSError) as exc:
            reason = exc.message if isinstance(exc, TriptychError) else (exc.strerror or str(exc))
            summary.failed.append(Outcome(str(file), reason))
            log.warning("import of %s failed: %s", file, reason)
            outcome = None
        finally:
            if progress:
                progress.done(file)
        if outcome is not None:
            summary.skipped.append(Outcome(str(file), outcome))
    summary.workspace_documents = service.store.count_documents(service.workspace(principal, workspace))
    return summary


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:  # gone since discovery: its import reports why
        return 0


def _import_one(
    service: KnowledgeService,
    principal: Principal,
    workspace: str,
    file: Path,
    summary: ImportSummary,
    progress: ImportProgress | None = None,
) -> str | None:
    """Store one file; the reason it was skipped, or None when it was stored or unchanged."""
    title, text = extract(file)
    if not text.strip():
        return "no text once the markup is removed"
    if len(text) > MAX_CONTENT_CHARS:
        return f"{len(text):,} characters; the limit of one document is {MAX_CONTENT_CHARS:,}"
    label = label_for(file)
    path = str(file.resolve())
    try:
        existing = service.get(principal, workspace, label)
    except NotFound:
        existing = None
    if existing is not None and existing["metadata"].get("path") != path:
        # Never replace a document this import did not write under the same label.
        return f"the label {label} already holds another document (not written by an import of this file)"
    result = service.store_document(
        principal,
        workspace,
        text,
        title=title,
        doc_label=label,
        # Only what identifies the content goes in: a touched but unchanged file is skipped.
        metadata={"path": path},
        source_type="file",
        skip_unchanged=True,
        on_chunks=progress.chunks if progress else None,
    )
    if result.unchanged:
        summary.unchanged += 1
    elif existing is None:
        summary.new += 1
        summary.chunks += result.chunks_stored
    else:
        summary.updated += 1
        summary.chunks += result.chunks_stored
    return None
