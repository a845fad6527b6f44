"""``triptych hadron migrate --to postgresql://...``: an embedded data directory's Hadron data moves into an
empty PostgreSQL database, and the services answer the same over both; ``--from`` brings it back into a new
data directory, which answers the same again (keyword and vector rankings on its first search, the
encrypted memory readable with the same key)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest
from hadron.letters import LetterEmbedder
from hadron.world import HADRON_KEY, build_world
from harness import TRIPTYCH
from postgres import PostgresCluster

from triptych.hadron.identity import HadronCaller
from triptych.hadron.search_store import NodeFilter
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.search import FindQuery
from triptych.hadron.surface import Hadron

pytestmark = pytest.mark.engines("postgresql")

SPECS, TEAM, VAULT = "hrn:mem:acme.com:specs", "hrn:mem:acme.com:team", "hrn:mem:acme.com:vault"


def migrate(data: Path, url: str) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it."""
    command = [TRIPTYCH, "hadron", "migrate", "--to", url, "--data-dir", str(data)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def migrate_back(url: str, data: Path) -> subprocess.CompletedProcess[str]:
    command = [TRIPTYCH, "hadron", "migrate", "--from", url, "--data-dir", str(data)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def answers(hadron: Hadron) -> dict[str, object]:
    """What the services answer about the world: nodes, revisions, edges, keyword and vector rankings."""
    alice = HadronCaller("user", "alice", user=hadron.tenancy.user_by_handle("alice"))
    state = hadron.selections.session(alice, "s", None)
    out: dict[str, object] = {"memories": [m.urn for m, _ in hadron.access.readable(alice)]}
    for urn in (SPECS, TEAM, VAULT):
        memory = hadron.admin().memory(urn)
        nodes = list(hadron.graph.memory_nodes(memory.id))
        out[urn] = [(n.id, n.loc, n.name, n.content, n.data, n.revision) for n in nodes]
        out[urn + " revisions"] = [[r.operation for r in hadron.graph.revisions(n.id)] for n in nodes]
        out[urn + " edges"] = {
            k: [e.target_ref for e in v] for k, v in hadron.graph.edges_from([n.id for n in nodes]).items()
        }
        rows = hadron.search.store.keyword(NodeFilter((memory.id,)), "deploy review", 10)
        found = hadron.search.store.nodes_by_rowid([r for r, _ in rows])
        out[urn + " keyword"] = [(found[r].loc, round(s, 9)) for r, s in rows]
    hits = hadron.search.find_nodes(alice, state, FindQuery("cafe bead", mode="vector", memory_urn=TEAM))
    out["vector"] = [(h.node.loc, round(h.score, 6)) for h in hits.hits]
    return out


def test_a_data_directory_moves_into_postgresql_and_answers_the_same(
    tmp_path: Path, database_url: str | None
) -> None:
    assert database_url is not None
    data = tmp_path / "data"
    data.mkdir()
    build_world(data)
    embedded = Hadron.open(data / "hadron.db", LetterEmbedder(), key=HADRON_KEY)  # type: ignore[arg-type]
    try:
        embedded.admin().set_embedding(TEAM, "content")
        alice = HadronCaller("user", "alice", user=embedded.tenancy.user_by_handle("alice"))
        state = embedded.selections.session(alice, "s", None)
        for memory, loc, content in (
            (SPECS, "deploy", "Deploys need a review."),
            (SPECS, "deploy:rollback", "Roll back a deploy."),
            (TEAM, "cafe", "bead cafe face"),
            (TEAM, "hedge", "hedge dead bad"),
            (VAULT, "codes", "launch codes"),
        ):
            values = {"name": loc, "content": content, "data": {"loc": loc}}
            embedded.nodes.create(
                alice,
                state,
                f"{memory.replace('mem', 'node')}:{loc}",
                NodeFields(values, frozenset(values)),
                None,
            )
        embedded.nodes.update(
            alice, state, "hrn:node:acme.com:specs:deploy",
            NodeFields({"description": "review first"}, frozenset({"description"})), None, "why",
        )  # fmt: skip
        before = answers(embedded)
        assert before["vector"] and before[SPECS + " keyword"] and before[VAULT]  # something to compare
    finally:
        embedded.close()

    done = migrate(data, database_url)
    assert done.returncode == 0, done.stderr
    assert "copied 2 orgs, 8 memories, 5 nodes" in done.stdout
    moved = Hadron.open(data / "hadron.db", LetterEmbedder(), key=HADRON_KEY, database_url=database_url)  # type: ignore[arg-type]
    try:
        assert answers(moved) == before
        stored = moved.db.conn.execute("SELECT content FROM nodes WHERE loc = 'codes'").fetchone()[0]
        assert "launch" not in stored  # sealed as it was in hadron.db
    finally:
        moved.close()

    again = migrate(data, database_url)
    assert again.returncode == 1 and "already holds Hadron data: nothing was copied" in again.stderr

    # And back into a new data directory: the same answers, the vault still sealed on disk.
    back = tmp_path / "back"
    returned = migrate_back(database_url, back)
    assert returned.returncode == 0, returned.stderr
    assert "copied 2 orgs, 8 memories, 5 nodes" in returned.stdout and str(back) in returned.stdout
    assert "copying nodes" in returned.stderr and f"--data-dir {back}" in returned.stderr
    embedded = Hadron.open(back / "hadron.db", LetterEmbedder(), key=HADRON_KEY)  # type: ignore[arg-type]
    try:
        assert answers(embedded) == before
        stored = embedded.db.conn.execute("SELECT content FROM nodes WHERE loc = 'codes'").fetchone()[0]
        assert "launch" not in stored
        # The copied rowids and ids carry on: a new node gets the next rowid, and is found.
        alice = HadronCaller("user", "alice", user=embedded.tenancy.user_by_handle("alice"))
        state = embedded.selections.session(alice, "s", None)
        values = {"name": "canary", "content": "A canary deploy first."}
        embedded.nodes.create(
            alice, state, "hrn:node:acme.com:specs:canary", NodeFields(values, frozenset(values)), None
        )
        memory = embedded.admin().memory(SPECS)
        rows = embedded.search.store.keyword(NodeFilter((memory.id,)), "canary", 10)
        (rowid,) = [r for r, _ in rows]
        assert rowid > max(
            r for (r,) in embedded.db.conn.execute("SELECT rowid FROM nodes WHERE loc != 'canary'")
        )
    finally:
        embedded.close()

    twice = migrate_back(database_url, back)
    assert twice.returncode == 1
    assert f"data directory {back} already holds Hadron data: nothing was copied" in twice.stderr


def test_the_way_back_refuses_a_database_without_hadron_and_leaves_no_file_behind(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    done = migrate_back(postgres.create_database("bare"), tmp_path / "new")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "holds no Hadron data" in done.stderr
    assert not list((tmp_path / "new").glob("hadron.db*"))


def test_a_way_back_that_fails_half_way_removes_the_new_hadron_db(
    tmp_path: Path, postgres: PostgresCluster
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    build_world(data)
    url = postgres.create_database("broken")
    assert migrate(data, url).returncode == 0
    with psycopg.connect(url, autocommit=True) as conn:  # an edge whose node is gone: SQLite refuses it
        conn.execute("ALTER TABLE edges DROP CONSTRAINT edges_source_id_fkey")
        conn.execute(
            "INSERT INTO edges (id, source_id, loc, target_ref, position) VALUES ('e', 'gone', 'x', 'y', 0)"
        )
    done = migrate_back(url, tmp_path / "new")
    assert done.returncode == 1 and "copying nodes" in done.stderr and "Traceback" not in done.stderr
    assert "refused a row" in done.stderr and "nothing was copied" in done.stderr
    assert not list((tmp_path / "new").glob("hadron.db*"))
