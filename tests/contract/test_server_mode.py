"""Server mode: two `triptych serve` processes on one PostgreSQL database behave like one server.

Each worker has its own data directory, so whatever one sees of the other's writes came through the
database: the knowledge base and agent memory live there, and each worker's in-process indexes follow
the generations it reads from it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hadron.test_migrate_to_postgres import answers as hadron_answers
from hadron.world import HADRON_KEY, build_world
from harness import TRIPTYCH, ServerProcess, free_port, mcp_session, run_threads
from postgres import PostgresCluster


@pytest.fixture(scope="module")
def workers(
    postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    url = postgres.create_database("workers")
    servers = [
        ServerProcess(
            tmp_path_factory.mktemp(f"worker{i}") / "data",
            {"TRIPTYCH_DATABASE_URL": url, "TRIPTYCH_AUTH_ENABLED": "false"},
        )
        for i in range(2)
    ]
    # Both start at once on the empty database: one migrates it, the other waits and finds it current.
    errors = run_threads(lambda i: servers[i].start(), 2)
    try:
        assert errors == [], [str(e) for e in errors]
        yield servers
    finally:
        for server in servers:
            server.stop()


def ws() -> str:
    return "mw-" + uuid.uuid4().hex[:8]


async def _search(server: ServerProcess, workspace: str, query: str) -> list[str]:
    """The labels the query matched by keyword, best first (dense retrieval returns everything else)."""
    async with mcp_session(server.url + "/mcp") as mcp:
        found = await mcp.call("metronix_search_fast", query=query, workspace_id=workspace, top_k=50)
    assert not found.is_error, found.data
    return [hit["doc_label"] for hit in found.data["results"] if hit["keyword_score"]]


async def _store(server: ServerProcess, workspace: str, label: str, content: str) -> None:
    async with mcp_session(server.url + "/mcp") as mcp:
        stored = await mcp.call("metronix_store", content=content, doc_label=label, workspace_id=workspace)
    assert not stored.is_error, stored.data


async def test_a_write_through_one_worker_is_found_by_the_other_on_its_next_call(
    workers: list[ServerProcess],
) -> None:
    first, second = workers
    workspace = ws()
    await _store(
        first, workspace, "zebra", "Zebras graze on the savanna; their stripes confuse biting flies."
    )
    # The second worker loads its keyword index now, before the next write.
    assert await _search(second, workspace, "zebra stripes") == ["zebra"]

    await _store(first, workspace, "qubit", "Quantum computers keep information in qubits.")
    assert await _search(second, workspace, "qubits") == ["qubit"]

    # A replacement on the second worker: the first one's cached index drops the old text.
    await _store(second, workspace, "zebra", "Okapis live in the rainforest of the Congo.")
    assert await _search(first, workspace, "okapis rainforest") == ["zebra"]
    assert "zebra" not in await _search(first, workspace, "stripes biting flies")
    async with mcp_session(first.url + "/mcp") as mcp:
        got = await mcp.call("metronix_get", doc_label="zebra", workspace_id=workspace)
        status = await mcp.call("metronix_status", workspace_id=workspace)
    assert got.data["content"] == "Okapis live in the rainforest of the Congo."
    assert status.data["documents"] == {"total": 2}


async def test_concurrent_writes_through_both_workers_all_land_and_both_find_them(
    workers: list[ServerProcess],
) -> None:
    workspace = ws()
    writes = [
        _store(workers[i % 2], workspace, f"note-{i}", f"Shared ledger entry number {i} about lighthouses.")
        for i in range(12)
    ]
    # And both workers replacing one label at once: one document survives, with one version's chunks.
    writes += [
        _store(w, workspace, "contested", f"Contested text from worker {n}.") for n, w in enumerate(workers)
    ]
    await asyncio.gather(*writes)
    for server in workers:
        labels = await _search(server, workspace, "lighthouses ledger")
        assert sorted(labels) == sorted(f"note-{i}" for i in range(12))
        assert await _search(server, workspace, "contested worker") == ["contested"]


async def test_workspaces_stay_apart_across_workers(workers: list[ServerProcess]) -> None:
    mine, theirs = ws(), ws()
    await _store(workers[0], mine, "secret", "The vault combination is hidden under the lighthouse.")
    assert await _search(workers[1], theirs, "vault combination lighthouse") == []
    async with mcp_session(workers[1].url + "/mcp") as mcp:
        got = await mcp.call("metronix_get", doc_label="secret", workspace_id=theirs)
    assert got.error_code == "DOCUMENT_NOT_FOUND"


async def _memory(server: ServerProcess, tool: str, **arguments: Any) -> dict[str, Any]:
    async with mcp_session(server.url + "/mcp") as mcp:
        result = await mcp.call(tool, **arguments)
    assert not result.is_error, result.data
    return result.data


async def test_memory_written_through_one_worker_is_searched_updated_and_reviewed_through_the_other(
    workers: list[ServerProcess],
) -> None:
    first, second = workers
    workspace = ws()
    mine = {"workspace_id": workspace, "agent_id": "hermes"}
    # The second worker loads its memory indexes of the workspace first.
    assert (await _memory(second, "memory_search", query="dark mode", **mine))["results"] == []
    dark = await _memory(first, "memory_store", content="User prefers dark mode", **mine)
    found = await _memory(second, "memory_search", query="which mode does the user prefer", **mine)
    assert [r["record"]["id"] for r in found["results"]] == [dark["id"]]

    await _memory(
        second,
        "memory_update",
        record_id=dark["id"],
        content="User prefers dark mode in the evening",
        workspace_id=workspace,
    )
    found = await _memory(first, "memory_search", query="evening", **mine)
    assert found["results"][0]["record"]["content"] == "User prefers dark mode in the evening"

    # A contradiction stored through one worker is filed once and listed by the other.
    light = await _memory(first, "memory_store", content="User prefers light mode in the evening", **mine)
    review = await _memory(second, "memory_review_list", workspace_id=workspace)
    assert [(e["target_id"], e["related_record_id"]) for e in review["entries"]] == [
        (light["id"], dark["id"])
    ]

    await _memory(second, "memory_delete", record_id=light["id"], workspace_id=workspace)
    listed = await _memory(first, "memory_list", **mine)
    assert [r["id"] for r in listed["records"]] == [dark["id"]]


async def test_memory_of_one_workspace_never_reaches_another_through_either_worker(
    workers: list[ServerProcess],
) -> None:
    mine, theirs = ws(), ws()
    await _memory(workers[0], "memory_store", content="The staging password rotates on Mondays",
                  workspace_id=mine, agent_id="hermes")  # fmt: skip
    for server in workers:
        found = await _memory(
            server, "memory_search", query="staging password", workspace_id=theirs, agent_id="hermes"
        )
        assert found["results"] == []


def _serve(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = [TRIPTYCH, "serve", "--port", str(free_port())]
    environ = {**os.environ, "TRIPTYCH_DATA_DIR": str(tmp_path / "data"), **env}
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)


def test_an_unreachable_database_stops_serve_with_what_to_check_and_no_password(tmp_path: Path) -> None:
    url = f"postgresql://triptych:s3cret@127.0.0.1:{free_port()}/nowhere"
    done = _serve({"TRIPTYCH_DATABASE_URL": url}, tmp_path)
    assert done.returncode == 1
    assert "cannot start" in done.stderr and "TRIPTYCH_DATABASE_URL" in done.stderr
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr


def test_a_database_url_of_another_kind_is_refused_at_start(tmp_path: Path) -> None:
    done = _serve({"TRIPTYCH_DATABASE_URL": "mysql://root@localhost/triptych"}, tmp_path)
    assert done.returncode == 2
    assert "must be a postgresql:// URL" in done.stderr and "Traceback" not in done.stderr


async def _answers(server: ServerProcess, workspace: str) -> list[Any]:
    """What the Metronix tools answer about a workspace (latencies aside)."""
    mine = {"workspace_id": workspace, "agent_id": "hermes"}
    async with mcp_session(server.url + "/mcp") as mcp:
        calls = [
            await mcp.call("metronix_search_fast", query="zebra stripes flies", workspace_id=workspace),
            await mcp.call("metronix_get", doc_label="zebra", workspace_id=workspace),
            await mcp.call("metronix_status", workspace_id=workspace),
            await mcp.call("memory_search", query="which mode does the user prefer", **mine),
            await mcp.call("memory_list", **mine),
            await mcp.call("memory_review_list", workspace_id=workspace),
        ]
    answers = []
    for result in calls:
        assert not result.is_error, result.data
        answers.append({k: v for k, v in result.data.items() if k != "latency_ms"})
    return answers


def _migrate(data_dir: Path, url: str) -> subprocess.CompletedProcess[str]:
    command = [TRIPTYCH, "migrate", "--to", url, "--data-dir", str(data_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


async def test_migrate_moves_the_embedded_data_and_the_tools_answer_the_same(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    workspace = ws()
    (tmp_path / "data").mkdir()
    build_world(tmp_path / "data")  # Hadron data too: server mode keeps Hadron in the database as well
    embedded = ServerProcess(tmp_path / "data", {"TRIPTYCH_AUTH_ENABLED": "false"}).start()
    try:
        await _store(
            embedded, workspace, "zebra", "Zebras graze on the savanna; their stripes confuse biting flies."
        )
        await _store(embedded, workspace, "qubit", "Quantum computers keep information in qubits.")
        mine = {"workspace_id": workspace, "agent_id": "hermes"}
        await _memory(embedded, "memory_store", content="User prefers dark mode", **mine)
        await _memory(embedded, "memory_store", content="User prefers light mode", **mine)  # a review
        before = await _answers(embedded, workspace)
    finally:
        embedded.stop()

    url = postgres.create_database("migrated")
    done = _migrate(embedded.data_dir, url)
    assert done.returncode == 0, done.stderr
    assert "copied 2 documents (2 chunks), 2 memory records and 1 review entries" in done.stdout
    assert "copied 2 orgs, 8 memories" in done.stdout  # Hadron's world, by the same command
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == (8,)
    assert "TRIPTYCH_DATABASE_URL" in done.stderr

    server = ServerProcess(
        tmp_path / "data", {"TRIPTYCH_AUTH_ENABLED": "false", "TRIPTYCH_DATABASE_URL": url}
    )
    server.start()
    try:
        assert await _answers(server, workspace) == before
        # New writes on PostgreSQL continue the copied ids and sequences.
        await _store(server, workspace, "okapi", "Okapis live in the rainforest of the Congo.")
        assert await _search(server, workspace, "okapis rainforest") == ["okapi"]
        await _memory(server, "memory_store", content="User works from Lisbon", **mine)
        on_postgres = await _answers(server, workspace)
    finally:
        server.stop()

    again = _migrate(embedded.data_dir, url)
    assert again.returncode == 1
    assert "already holds Metronix data: nothing was copied" in again.stderr
    assert "Traceback" not in again.stderr

    # And back: PostgreSQL into a new data directory answers as PostgreSQL did, writes included.
    back = _migrate_back(url, tmp_path / "back")
    assert back.returncode == 0, back.stderr
    assert "copied 3 documents (3 chunks), 3 memory records and 1 review entries" in back.stdout
    assert "copying memory_records" in back.stderr  # the progress bars
    assert f"--data-dir {tmp_path / 'back'}" in back.stderr
    assert "copied 2 orgs, 8 memories" in back.stdout and "copying nodes" in back.stderr  # Hadron came back
    hadron = _hadron(tmp_path / "back", None)
    assert hadron["memories"] and hadron == _hadron(tmp_path / "data", url)
    returned = ServerProcess(tmp_path / "back", {"TRIPTYCH_AUTH_ENABLED": "false"}).start()
    try:
        assert await _answers(returned, workspace) == on_postgres
        await _store(returned, workspace, "lynx", "Lynxes hunt hares in the boreal forest.")
        assert await _search(returned, workspace, "lynxes hares") == ["lynx"]
    finally:
        returned.stop()

    twice = _migrate_back(url, tmp_path / "back")
    assert twice.returncode == 1
    assert (
        f"data directory {tmp_path / 'back'} already holds Metronix data: nothing was copied" in twice.stderr
    )

    # A data directory without Metronix data but with Hadron's: Metronix comes back, Hadron is refused.
    (tmp_path / "third").mkdir()
    shutil.copy(tmp_path / "back" / "hadron.db", tmp_path / "third" / "hadron.db")
    partly = _migrate_back(url, tmp_path / "third")
    assert partly.returncode == 1 and "Traceback" not in partly.stderr
    assert "Metronix's data was copied, Hadron's was not" in partly.stderr
    assert "already holds Hadron data" in partly.stderr and "triptych hadron migrate --from" in partly.stderr


def _hadron(data_dir: Path, url: str | None) -> dict[str, object]:
    """What Hadron's services answer over a data directory (or the database ``url``)."""
    from triptych.hadron.surface import Hadron

    hadron = Hadron.open(data_dir / "hadron.db", key=HADRON_KEY, database_url=url)
    try:
        return hadron_answers(hadron)
    finally:
        hadron.close()


def _migrate_back(url: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [TRIPTYCH, "migrate", "--from", url, "--data-dir", str(data_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_migrate_back_from_a_database_without_metronix_leaves_no_data_directory_behind(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    done = _migrate_back(postgres.create_database("bare"), tmp_path / "new")
    assert done.returncode == 1
    assert "holds no Metronix data" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "new" / "metronix.db").exists()


def test_migrate_without_embedded_data_says_where_it_looked(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    done = _migrate(tmp_path / "empty", postgres.create_database("unused"))
    assert done.returncode == 1
    assert f"no Metronix database at {tmp_path / 'empty' / 'metronix.db'}" in done.stderr
    assert "Traceback" not in done.stderr


def test_migrate_moves_hadron_alone_where_there_is_no_metronix_data(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    build_world(tmp_path / "data")  # a hadron.db and no metronix.db
    url = postgres.create_database("hadron_only")
    there = _migrate(tmp_path / "data", url)
    assert there.returncode == 0, there.stderr
    assert (
        f"{tmp_path / 'data'} holds no Metronix data (no metronix.db): copying Hadron's alone" in there.stdout
    )
    assert "copied 2 orgs, 8 memories" in there.stdout and "TRIPTYCH_DATABASE_URL" in there.stderr
    with psycopg.connect(url) as conn:  # Hadron's tables and none of Metronix's: what the way back meets
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert "nodes" in tables and "kb_meta" not in tables

    back = _migrate_back(url, tmp_path / "back")
    assert back.returncode == 0, back.stderr
    assert "holds no Metronix data (no table kb_meta): copying Hadron's alone" in back.stdout
    assert "copied 2 orgs, 8 memories" in back.stdout and "copying nodes" in back.stderr
    assert f"--data-dir {tmp_path / 'back'}" in back.stderr and "Traceback" not in back.stderr
    assert not (tmp_path / "back" / "metronix.db").exists()
    hadron = _hadron(tmp_path / "back", None)
    assert hadron["memories"] and hadron == _hadron(tmp_path / "data", None)

    # Hadron alone is still all or nothing: a data directory holding Hadron data is refused, and said so.
    again = _migrate_back(url, tmp_path / "back")
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert "already holds Hadron data: nothing was copied" in again.stderr
    assert "Metronix's data was copied" not in again.stderr
