"""Git-backed memories on the service layer, over real repositories: the layout, one sync at a time
(repo wins), renames, deletions, conflicts with Hadron edits, a corrupt repository, a file that fails
half way, and moves mirrored into the repositories."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hadron.gitrepos import Repo, git

from triptych.hadron.domain import gitlayout
from triptych.hadron.domain.model import Memory
from triptych.hadron.errors import GitSyncFailed, NoGitSource
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.nodes import EdgeInput, NodeFields
from triptych.hadron.surface import Hadron

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary"),
    pytest.mark.engines("sqlite", "postgresql"),
]


@pytest.fixture
def hadron(tmp_path: Path, database_url: str | None) -> Iterator[Hadron]:
    h = Hadron.open(tmp_path / "data" / "hadron.db", database_url=database_url)
    admin = h.admin()
    admin.create_org("acme.com", "Acme")
    admin.create_user("alice")
    admin.add_org_member("acme.com", "alice", "OWNER")
    admin.create_memory("docs", "knowledge", org="acme.com", name="Docs")
    admin.create_memory("plain", "knowledge", org="acme.com", name="Plain")
    yield h
    h.close()


def memory(h: Hadron, slug: str = "docs") -> Memory:
    return h.admin().memory(f"hrn:mem:acme.com:{slug}")


def attach(h: Hadron, repo: Repo, slug: str = "docs") -> Memory:
    mem = memory(h, slug)
    h.gitsync.store.attach(mem.id, repo.url, "main")
    return mem


def alice(h: Hadron) -> HadronCaller:
    return HadronCaller("user", "alice", user=h.tenancy.user_by_handle("alice"))


def seed(repo: Repo) -> str:
    repo.write("README.md", "# the repository's own page\n")
    repo.write("guides/index.md", "---\ntitle: Guides\n---\nAll the guides.\n")
    repo.write(
        "guides/install.md",
        "---\ntitle: Installing\ntype: task\ndescription: How to install\ntags: [setup, ops]\nowner: ops-team\n"
        "since: 2024-01-02\n---\n\nRun the installer.\n",
    )
    repo.write("guides/upgrade.md", "Upgrade with care.\n")
    repo.write("bad name.md", "a path with a space is not a loc\n")
    repo.write(".github/notes.md", "hidden\n")
    repo.write("logo.png", "not markdown")
    return repo.commit("seed")


def synced(h: Hadron, tmp_path: Path) -> tuple[Repo, Memory]:
    """A seeded repository backing acme.com:docs, synced once."""
    repo = Repo(tmp_path / "repo")
    seed(repo)
    mem = attach(h, repo)
    h.gitsync.sync_memory(mem, "test")
    return repo, mem


def test_layout_maps_paths_front_matter_and_body() -> None:
    assert gitlayout.loc_for("guides/index.md") == ("guides", None)
    assert gitlayout.loc_for("guides/setup/install.md") == ("guides:setup:install", None)
    assert gitlayout.loc_for("README.md")[0] is None
    parsed = gitlayout.parse("a.md", "a", "---\ntitle: A\ntags: [x]\nk: 1\n---\nbody\n")
    assert (parsed.name, parsed.tags, parsed.data, parsed.content) == ("A", ["x"], {"k": 1}, "body\n")
    text = gitlayout.render(parsed.name, "a", "info", None, parsed.tags, None, parsed.data, parsed.content)
    assert gitlayout.parse("a.md", "a", text) == parsed
    with pytest.raises(gitlayout.LayoutError, match="YAML mapping"):
        gitlayout.parse("a.md", "a", "---\n- a list\n---\n")


def test_first_sync_creates_nodes_and_records_the_commit(hadron: Hadron, tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    sha = seed(repo)
    mem = attach(hadron, repo)
    report = hadron.gitsync.sync_memory(mem, "test")
    assert report.commit == sha and report.previous is None
    assert sorted(report.created) == ["guides", "guides:install", "guides:upgrade"]
    assert {s["path"] for s in report.skipped} == {"README.md", "bad name.md", ".github/notes.md"}
    assert report.ignored == 1
    node = hadron.graph.node_by_loc(mem.id, "guides:install")
    assert node is not None
    assert (node.name, node.node_type, node.description, node.tags) == (
        "Installing",
        "task",
        "How to install",
        ["setup", "ops"],
    )
    assert node.data == {"owner": "ops-team", "since": "2024-01-02"}
    assert node.content == "Run the installer.\n"
    upgrade = hadron.graph.node_by_loc(mem.id, "guides:upgrade")
    assert upgrade is not None and upgrade.name == "upgrade" and upgrade.data is None
    revision = hadron.graph.revisions(node.id)[0]
    assert revision.operation == "sync_create" and revision.reason == f"git {sha} guides/install.md"
    assert hadron.gitsync.store.source(mem.id).commit == sha  # type: ignore[union-attr]


def test_resync_updates_deletes_creates_and_skips_unchanged(hadron: Hadron, tmp_path: Path) -> None:
    repo, mem = synced(hadron, tmp_path)
    kept = hadron.graph.node_by_loc(mem.id, "guides")
    repo.write("guides/upgrade.md", "Upgrade with great care.\n")
    repo.remove("guides/install.md")
    repo.write("faq.md", "---\ntitle: FAQ\n---\nQ and A\n")
    sha = repo.commit("second")
    report = hadron.gitsync.sync_memory(mem, "test")
    assert (report.created, report.updated, report.deleted) == (
        ["faq"],
        ["guides:upgrade"],
        ["guides:install"],
    )
    assert report.unchanged == 1 and report.previous is not None and report.commit == sha
    assert hadron.graph.node_by_loc(mem.id, "guides:install") is None
    upgrade = hadron.graph.node_by_loc(mem.id, "guides:upgrade")
    assert upgrade is not None and upgrade.content == "Upgrade with great care.\n" and upgrade.revision == 2
    assert hadron.graph.revisions(upgrade.id)[0].reason == f"git {sha} guides/upgrade.md"
    again = hadron.graph.node_by_loc(mem.id, "guides")
    assert again == kept  # an unchanged file writes nothing, not even a revision
    nothing = hadron.gitsync.sync_memory(mem, "test")
    assert (nothing.created, nothing.updated, nothing.deleted, nothing.unchanged) == ([], [], [], 3)


def test_a_renamed_file_moves_its_node_and_keeps_its_id_and_edges(hadron: Hadron, tmp_path: Path) -> None:
    repo, mem = synced(hadron, tmp_path)
    caller = alice(hadron)
    state = hadron.selections.session(caller, "s", None)
    hadron.nodes.create(
        caller, state, "hrn:node:acme.com:plain:pointer", NodeFields({"name": "p"}, frozenset({"name"})),
        [EdgeInput("hrn:node:acme.com:docs:guides:upgrade")],
    )  # fmt: skip
    before = hadron.graph.node_by_loc(mem.id, "guides:upgrade")
    assert before is not None
    repo.move("guides/upgrade.md", "howto/upgrading.md")
    repo.commit("rename")
    report = hadron.gitsync.sync_memory(mem, "test")
    assert report.renamed == [{"from": "guides:upgrade", "to": "howto:upgrading"}]
    assert report.deleted == [] and report.created == []
    after = hadron.graph.node_by_loc(mem.id, "howto:upgrading")
    assert after is not None and after.id == before.id and after.name == "upgrading"
    pointer = hadron.graph.node_by_loc(memory(hadron, "plain").id, "pointer")
    assert pointer is not None
    edge = hadron.graph.edges_from([pointer.id])[pointer.id][0]
    assert edge.target_id == before.id and edge.target_loc == "howto:upgrading"


def test_repo_wins_over_a_hadron_edit_and_reports_the_conflict(hadron: Hadron, tmp_path: Path) -> None:
    repo, mem = synced(hadron, tmp_path)
    caller = alice(hadron)
    state = hadron.selections.session(caller, "s", None)
    loc = "hrn:node:acme.com:docs:guides:upgrade"
    hadron.nodes.update(
        caller, state, loc, NodeFields({"content": "edited in Hadron"}, frozenset({"content"})), None, None
    )
    hadron.nodes.create(
        caller, state, "hrn:node:acme.com:docs:notes", NodeFields({"name": "n"}, frozenset({"name"})), None
    )
    hadron.nodes.create(
        caller, state, "hrn:node:acme.com:docs:faq", NodeFields({"name": "f"}, frozenset({"name"})), None
    )
    repo.write("guides/upgrade.md", "The repository's version.\n")
    repo.write("faq.md", "From the repo\n")
    repo.commit("conflicting")
    report = hadron.gitsync.sync_memory(mem, "test")
    reasons = {c["loc"]: c["reason"] for c in report.conflicts}
    assert "edited in Hadron" in reasons["guides:upgrade"] and "made in Hadron" in reasons["faq"]
    upgrade = hadron.graph.node_by_loc(mem.id, "guides:upgrade")
    assert upgrade is not None and upgrade.content == "The repository's version.\n"
    faq = hadron.graph.node_by_loc(mem.id, "faq")
    assert faq is not None and faq.content == "From the repo\n"
    # a node no file ever described is not the repository's to delete
    assert hadron.graph.node_by_loc(mem.id, "notes") is not None


def test_a_file_that_fails_half_way_leaves_the_memory_as_it_was(hadron: Hadron, tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    seed(repo)
    mem = attach(hadron, repo)
    first = hadron.gitsync.sync_memory(mem, "test")
    snapshot = list(hadron.graph.memory_nodes(mem.id))
    repo.write("aaa.md", "a new node, written before the broken file is reached\n")
    repo.write("guides/upgrade.md", "changed\n")
    repo.write("zzz.md", "---\ntitle: [unclosed\n---\nbody\n")
    repo.remove("guides/install.md")
    repo.commit("broken")
    with pytest.raises(GitSyncFailed) as refused:
        hadron.gitsync.sync_memory(mem, "test")
    assert refused.value.code == "GIT_SYNC_FAILED" and refused.value.details["path"] == "zzz.md"
    assert list(hadron.graph.memory_nodes(mem.id)) == snapshot
    source = hadron.gitsync.store.source(mem.id)
    assert source is not None and source.commit == first.commit and "zzz.md" in (source.last_error or "")
    repo.remove("zzz.md")
    repo.commit("fixed")
    fixed = hadron.gitsync.sync_memory(mem, "test")
    assert fixed.created == ["aaa"] and fixed.deleted == ["guides:install"]


def test_a_corrupt_or_missing_repository_is_refused_and_changes_nothing(
    hadron: Hadron, tmp_path: Path
) -> None:
    repo, mem = synced(hadron, tmp_path)
    snapshot = list(hadron.graph.memory_nodes(mem.id))
    repo.write("new.md", "new\n")
    repo.commit("more")
    for obj in (repo.origin / "objects").rglob("*"):
        if obj.is_file() and obj.parent.name != "info":
            obj.write_bytes(b"garbage")  # every object of the origin is now corrupt
    with pytest.raises(GitSyncFailed, match="cannot read"):
        hadron.gitsync.sync_memory(mem, "test")
    assert list(hadron.graph.memory_nodes(mem.id)) == snapshot
    hadron.gitsync.store.attach(mem.id, (tmp_path / "nowhere").as_uri(), None)
    with pytest.raises(GitSyncFailed):
        hadron.gitsync.sync_memory(mem, "test")
    with pytest.raises(NoGitSource):
        hadron.gitsync.sync_memory(memory(hadron, "plain"), "test")


def test_moves_touching_git_backed_memories_are_mirrored(hadron: Hadron, tmp_path: Path) -> None:
    docs_repo, plain_repo = Repo(tmp_path / "docs"), Repo(tmp_path / "plain")
    seed(docs_repo)
    plain_repo.write("start.md", "start\n")
    plain_repo.commit("seed")
    docs, plain = attach(hadron, docs_repo), attach(hadron, plain_repo, "plain")
    hadron.gitsync.sync_memory(docs, "test")
    hadron.gitsync.sync_memory(plain, "test")
    caller = alice(hadron)
    state = hadron.selections.session(caller, "s", None)
    hadron.nodes.move(
        caller, state, "hrn:node:acme.com:docs:guides", "hrn:node:acme.com:plain:manual", False, False
    )
    docs_repo.pull()
    plain_repo.pull()
    assert docs_repo.read("guides/install.md") is None and docs_repo.read("guides/index.md") is None
    assert plain_repo.read("manual/index.md") is not None
    installed = plain_repo.read("manual/install.md")
    assert installed is not None and "Run the installer." in installed and "title: Installing" in installed
    # the next syncs agree with the database: nothing is re-minted in the source, nothing duplicated
    again_docs = hadron.gitsync.sync_memory(docs, "test")
    again_plain = hadron.gitsync.sync_memory(plain, "test")
    assert (again_docs.created, again_docs.deleted) == ([], [])
    assert (again_plain.created, again_plain.deleted, again_plain.updated) == ([], [], [])
    moved = hadron.graph.node_by_loc(plain.id, "manual:install")
    assert moved is not None and moved.content == "Run the installer.\n"
    # a move inside one Git-backed memory renames the file
    hadron.nodes.move(
        caller, state, "hrn:node:acme.com:plain:start", "hrn:node:acme.com:plain:begin", False, False
    )
    plain_repo.pull()
    # the node keeps its name across the move, so the file names it
    assert (
        plain_repo.read("start.md") is None
        and plain_repo.read("begin.md") == "---\ntitle: start\n---\nstart\n"
    )
    log = git(plain_repo.work, "log", "-1", "--format=%s")
    assert log.startswith("hadron: move hrn:node:acme.com:plain:start")


def test_an_unreachable_repository_leaves_the_database_authoritative(hadron: Hadron, tmp_path: Path) -> None:
    repo, mem = synced(hadron, tmp_path)
    shutil.rmtree(repo.origin)
    caller = alice(hadron)
    state = hadron.selections.session(caller, "s", None)
    hadron.nodes.move(
        caller, state, "hrn:node:acme.com:docs:guides:upgrade", "hrn:node:acme.com:plain:up", False, False
    )
    assert hadron.graph.node_by_loc(memory(hadron, "plain").id, "up") is not None
    source = hadron.gitsync.store.source(mem.id)
    assert source is not None and "mirroring a move failed" in (source.last_error or "")


def test_a_file_at_a_channels_address_is_skipped_not_written(hadron: Hadron, tmp_path: Path) -> None:
    admin = hadron.admin()
    admin.create_app("bot", "Bot", "acme.com", None)
    admin.create_memory("botmem", "app", app="hrn:app:acme.com:bot")
    caller = alice(hadron)
    hadron.team.channels.create_channel(caller, "hrn:mem:acme.com:botmem", "ops", "Ops")
    repo = Repo(tmp_path / "repo")
    repo.write("ops/index.md", "would overwrite the Channel's root\n")
    repo.write("notes.md", "fine\n")
    repo.commit()
    mem = attach(hadron, repo, "botmem")
    report = hadron.gitsync.sync_memory(mem, "test")
    assert report.created == ["notes"]
    assert [s["path"] for s in report.skipped] == ["ops/index.md"]
    assert report.skipped[0]["reason"].startswith("loc_protected")
    root = hadron.graph.node_by_loc(mem.id, "ops")
    assert root is not None and root.content != "would overwrite the Channel's root\n"
