"""Importing folders of Markdown, text and HTML into a real knowledge store in tmp_path."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from triptych.core.auth import Principal, local_principal
from triptych.core.embed import Matrix
from triptych.metronix.importer import LINKED_FOLDER, discover, extract, import_paths, label_for
from triptych.metronix.knowledge import EMBED_SLICE, KnowledgeService
from triptych.metronix.store import SqliteKnowledgeStore

LOCAL = local_principal()

HTML = """<!doctype html>
<html>
<head>
  <title>Kite Guide</title>
  <style>body { color: red; }</style>
  <script>window.trackingSecret = "do-not-index";</script>
</head>
<body>
  <nav>Home | About | Contact</nav>
  <h1>Flying kites</h1>
  <p>Kites fly best in a steady breeze.</p>
  <script>console.log("inline script");</script>
  <noscript>Enable JavaScript please.</noscript>
  <p>Check the line before launch.</p>
  <footer>Copyright footer text</footer>
</body>
</html>
"""


class HashedWords:
    """A small deterministic embedder (hashed bag of words): the importer's tests are about files."""

    name = "hashed-words-test"
    dim = 32

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.texts.extend(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, 0] = 1e-3
            for word in re.findall(r"\w+", text.lower()):
                out[row, int(hashlib.sha1(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        normalised: Matrix = out / np.linalg.norm(out, axis=1, keepdims=True)
        return normalised


@pytest.fixture
def embedder() -> HashedWords:
    return HashedWords()


@pytest.fixture
def service(tmp_path: Path, embedder: HashedWords) -> Iterator[KnowledgeService]:
    store = SqliteKnowledgeStore(tmp_path / "metronix.db", embedder.dim)
    yield KnowledgeService(store, embedder)
    store.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / ".obsidian").mkdir()
    (root / "alpha.md").write_text("Intro line.\n\n# Alpha Notes\n\nRivers carry water to the sea.\n")
    (root / "beta.txt").write_text("Mountains are tall. Glaciers carve valleys.\n")
    (root / "sub" / "page.html").write_text(HTML)
    (root / "sub" / "empty.txt").write_text("")
    (root / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / ".obsidian" / "workspace.md").write_text("# Hidden\n\nEditor settings.\n")
    (root / ".draft.md").write_text("# Draft\n\nNot ready.\n")
    return root


def _labels(service: KnowledgeService, workspace: str = "default") -> set[str]:
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    rows = store.db.conn.execute("SELECT doc_label FROM documents WHERE workspace_id = ?", (workspace,))
    return {r[0] for r in rows}


def test_import_of_a_folder_stores_supported_files_and_counts_them(
    service: KnowledgeService, folder: Path
) -> None:
    summary = import_paths(service, LOCAL, "default", [folder])

    assert (summary.new, summary.updated, summary.unchanged, summary.failed) == (3, 0, 0, [])
    assert summary.chunks >= 3
    assert summary.chunks == service.store.count_chunks()
    assert summary.workspace_documents == 3
    # Labels are absolute paths; hidden entries, images and empty files are left out, each with a reason.
    assert _labels(service) == {label_for(folder / n) for n in ("alpha.md", "beta.txt", "sub/page.html")}
    assert {(Path(o.path).relative_to(folder).as_posix(), o.reason) for o in summary.skipped} == {
        (".obsidian", "hidden (its name starts with '.')"),
        (".draft.md", "hidden (its name starts with '.')"),
        ("picture.png", "binary content (a PNG image)"),
        ("sub/empty.txt", "empty (no text)"),
    }


def test_imported_documents_keep_their_titles_text_and_source(
    service: KnowledgeService, folder: Path
) -> None:
    import_paths(service, LOCAL, "default", [folder])

    alpha = service.get(LOCAL, None, label_for(folder / "alpha.md"))
    beta = service.get(LOCAL, None, label_for(folder / "beta.txt"))
    assert (alpha["title"], alpha["source_type"]) == ("Alpha Notes", "file")
    assert alpha["content"] == (folder / "alpha.md").read_text()
    assert alpha["metadata"] == {"path": str((folder / "alpha.md").resolve())}
    assert (beta["title"], beta["content"]) == ("beta", "Mountains are tall. Glaciers carve valleys.\n")


def test_imported_html_has_its_title_and_body_text_without_scripts_or_page_chrome(
    service: KnowledgeService, folder: Path
) -> None:
    import_paths(service, LOCAL, "default", [folder])

    page = service.get(LOCAL, None, label_for(folder / "sub" / "page.html"))

    assert page["title"] == "Kite Guide"
    content = page["content"]
    for kept in ("Flying kites", "Kites fly best in a steady breeze.", "Check the line before launch."):
        assert kept in content
    for dropped in ("trackingSecret", "do-not-index", "console.log", "color: red", "Enable JavaScript"):
        assert dropped not in content
    for chrome in ("Home | About", "Copyright footer"):
        assert chrome not in content
    assert _hits(service, "kites breeze") == [label_for(folder / "sub" / "page.html")]
    assert _hits(service, "trackingSecret") == []


def _hits(service: KnowledgeService, query: str) -> list[str]:
    results = service.search(LOCAL, None, query, top_k=10)["results"]
    return [r["doc_label"] for r in results if r["keyword_score"] is not None]


def test_html_without_a_title_is_named_by_its_first_heading_or_file_name(tmp_path: Path) -> None:
    with_heading = tmp_path / "with-heading.html"
    with_heading.write_text("<html><body><h1>Main Heading</h1><p>Body text.</p></body></html>")
    bare = tmp_path / "bare.htm"
    bare.write_text("<p>Only a paragraph.</p>")

    assert extract(with_heading) == ("Main Heading", "Main Heading\n\nBody text.")
    assert extract(bare) == ("bare", "Only a paragraph.")


def test_markdown_without_a_heading_is_named_by_its_file_name(tmp_path: Path) -> None:
    note = tmp_path / "plain-note.markdown"
    note.write_text("Just text, #not a heading.\n")

    assert extract(note) == ("plain-note", "Just text, #not a heading.\n")


def test_html_inline_markup_does_not_split_words(tmp_path: Path) -> None:
    page = tmp_path / "inline.html"
    page.write_text("<html><body><p>An un<b>believ</b>able <em>result</em>.</p></body></html>")

    _, text = extract(page)

    assert "unbelievable" in text.split()


def test_running_the_same_import_again_changes_nothing(
    service: KnowledgeService, folder: Path, embedder: HashedWords
) -> None:
    import_paths(service, LOCAL, "default", [folder])
    embedded = len(embedder.texts)
    chunk_ids = _chunk_ids(service)

    again = import_paths(service, LOCAL, "default", [folder])

    assert (again.stored, again.chunks, again.unchanged, len(again.skipped), again.failed) == (0, 0, 3, 4, [])
    assert len(embedder.texts) == embedded  # nothing re-embedded
    assert _chunk_ids(service) == chunk_ids  # nothing rewritten


def test_a_changed_file_is_imported_again_and_the_rest_are_skipped(
    service: KnowledgeService, folder: Path
) -> None:
    import_paths(service, LOCAL, "default", [folder])
    (folder / "beta.txt").write_text("Deserts are dry. Cacti store water.\n")

    again = import_paths(service, LOCAL, "default", [folder])

    assert (again.new, again.updated, again.unchanged, again.failed) == (0, 1, 2, [])
    beta = label_for(folder / "beta.txt")
    assert service.get(LOCAL, None, beta)["content"] == "Deserts are dry. Cacti store water.\n"
    assert _hits(service, "glaciers") == []
    assert _hits(service, "cacti") == [beta]


def test_empty_and_whitespace_only_files_are_skipped_with_a_reason(
    service: KnowledgeService, tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "empty.md").write_text("")
    (folder / "blank.txt").write_text("  \n\n\t \n")
    (folder / "script-only.html").write_text("<html><body><script>var x = 1;</script></body></html>")

    summary = import_paths(service, LOCAL, "default", [folder])

    assert (summary.stored, summary.failed) == (0, [])
    assert sorted((Path(o.path).name, o.reason) for o in summary.skipped) == [
        ("blank.txt", "empty (no text)"),
        ("empty.md", "empty (no text)"),
        ("script-only.html", "no text once the markup is removed"),
    ]
    assert service.store.count_documents("default") == 0


def test_a_single_file_is_labelled_by_its_absolute_path(service: KnowledgeService, folder: Path) -> None:
    summary = import_paths(service, LOCAL, "ws", [folder / "sub" / "page.html"])

    assert summary.new == 1
    assert _labels(service, "ws") == {"file:" + (folder / "sub" / "page.html").resolve().as_posix()}


def test_missing_path_is_refused(service: KnowledgeService, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        import_paths(service, LOCAL, "default", [tmp_path / "nowhere"])


def test_discover_lists_visible_files_in_a_stable_order_and_reports_hidden_ones(folder: Path) -> None:
    (folder / "UPPER.MD").write_text("# Upper\n\nCase suffix.\n")

    files, skipped = discover([folder])

    found = [file.relative_to(folder).as_posix() for file in files]
    assert found == ["UPPER.MD", "alpha.md", "beta.txt", "picture.png", "sub/empty.txt", "sub/page.html"]
    assert sorted(Path(o.path).name for o in skipped) == [".draft.md", ".obsidian"]


class Recorder:
    """An ``ImportProgress`` that writes down what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object, object]] = []

    def start(self, files: int, total_bytes: int) -> None:
        self.events.append(("start", files, total_bytes))

    def file(self, path: Path, size: int) -> None:
        self.events.append(("file", path.name, size))

    def chunks(self, done: int, total: int) -> None:
        self.events.append(("chunks", done, total))

    def done(self, path: Path) -> None:
        self.events.append(("done", path.name, None))


def test_import_reports_every_file_and_its_bytes_to_the_progress(
    service: KnowledgeService, folder: Path
) -> None:
    progress = Recorder()
    summary = import_paths(service, LOCAL, "default", [folder], progress=progress)

    files, _ = discover([folder])
    assert progress.events[0] == ("start", 5, sum(f.stat().st_size for f in files))
    begun = [e[1] for e in progress.events if e[0] == "file"]
    ended = [e[1] for e in progress.events if e[0] == "done"]
    assert begun == ended == [f.name for f in files]  # each file, skipped or failed ones too, begins and ends
    # Every candidate is accounted for: stored, unchanged, skipped (2 of the skips are hidden entries).
    assert summary.stored + summary.unchanged + len(summary.skipped) - 2 + len(summary.failed) == 5


def test_a_long_file_reports_its_chunks_as_they_are_embedded(
    service: KnowledgeService, tmp_path: Path
) -> None:
    long = tmp_path / "changelog.md"
    long.write_text(
        "\n\n".join(f"Release {i}: fixed bug number {i} in the parser module." * 12 for i in range(150))
    )
    progress = Recorder()
    summary = import_paths(service, LOCAL, "default", [long], progress=progress)

    reports = [(e[1], e[2]) for e in progress.events if e[0] == "chunks"]
    assert summary.new == 1 and summary.chunks > EMBED_SLICE
    assert len(reports) == -(-summary.chunks // EMBED_SLICE) >= 2  # a report per slice, before the file ends
    assert reports[0] == (EMBED_SLICE, summary.chunks) and reports[-1] == (summary.chunks, summary.chunks)


def test_import_as_a_viewer_stores_nothing_and_reports_every_file(
    service: KnowledgeService, folder: Path
) -> None:
    viewer = Principal(user="eve", role="viewer", workspace_ids=("default",))

    summary = import_paths(service, viewer, "default", [folder])

    assert (summary.stored, len(summary.failed)) == (0, 3)
    assert all("may read but not write" in outcome.reason for outcome in summary.failed)
    assert service.store.count_documents("default") == 0


def _chunk_ids(service: KnowledgeService) -> set[int]:
    store = service.store
    assert isinstance(store, SqliteKnowledgeStore)
    return {int(r[0]) for r in store.db.conn.execute("SELECT id FROM chunks")}


def test_two_files_of_the_same_name_in_different_folders_are_two_documents(
    service: KnowledgeService, tmp_path: Path
) -> None:
    for package in ("alpha", "beta"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "README").write_text(f"The {package} package reads its config at start.\n")

    summary = import_paths(service, LOCAL, "default", [tmp_path / "alpha" / "README", tmp_path / "beta"])

    assert (summary.new, summary.workspace_documents) == (2, 2)
    assert _labels(service) == {
        label_for(tmp_path / "alpha" / "README"),
        label_for(tmp_path / "beta" / "README"),
    }


def test_a_file_named_twice_is_imported_once(service: KnowledgeService, folder: Path) -> None:
    summary = import_paths(service, LOCAL, "default", [folder / "alpha.md", folder, folder / "alpha.md"])

    assert (summary.new, summary.workspace_documents) == (3, 3)


def test_a_label_holding_another_document_is_never_replaced(service: KnowledgeService, folder: Path) -> None:
    label = label_for(folder / "beta.txt")
    service.store_document(LOCAL, None, "Written by an agent, not by an import.", doc_label=label)

    summary = import_paths(service, LOCAL, "default", [folder / "beta.txt"])

    assert summary.stored == 0
    assert [(o.path, o.reason) for o in summary.skipped] == [
        (
            str(folder / "beta.txt"),
            f"the label {label} already holds another document (not written by an import of this file)",
        )
    ]
    assert service.get(LOCAL, None, label)["content"] == "Written by an agent, not by an import."


def test_a_linked_folder_inside_a_folder_is_reported_not_followed(
    service: KnowledgeService, folder: Path
) -> None:
    (folder / "sub" / "loop").symlink_to(folder)

    summary = import_paths(service, LOCAL, "default", [folder])

    assert summary.new == 3
    assert (str(folder / "sub" / "loop"), LINKED_FOLDER) in [(o.path, o.reason) for o in summary.skipped]
