"""`triptych backup` while writers run on every surface, `triptych restore` into a new folder, and a server
on it: everything acknowledged before the backup began answers the same there, nothing is half-written;
a damaged, incomplete or unfinished backup and a non-empty target are refused (issue 31, item 1)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hadron.world import World, as_user, start_world
from harness import TRIPTYCH, ServerProcess, bearer, mcp_session, metergraph_key, token

SPECS = "hrn:mem:acme.com:specs"
NODES = "hrn:node:acme.com:specs:"
WORKSPACE = "backup-ws"
MG_WORKSPACE = "backup-mg"
BATCH = 5  # calls per ingest batch: a batch is in a restore whole or not at all
ADMIN = bearer(token(user="alice", role="admin"))


@dataclass
class Acks:
    """What each writer had acknowledged, in order; ``ready`` once each has a few."""

    items: dict[str, list[Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ready: dict[str, threading.Event] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)

    def add(self, kind: str, item: Any) -> None:
        with self.lock:
            found = self.items.setdefault(kind, [])
            found.append(item)
            if len(found) >= 3:
                self.ready[kind].set()

    def snapshot(self) -> dict[str, list[Any]]:
        with self.lock:
            return {kind: list(items) for kind, items in self.items.items()}


def run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPTYCH, *command], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )


def writers(world: World, acks: Acks, stop: threading.Event) -> list[threading.Thread]:
    """One thread per surface, each writing until ``stop``; an item counts once its write was answered."""
    url = world.server.url

    async def memories() -> None:
        async with mcp_session(url + "/mcp", headers=ADMIN) as mcp:
            while not stop.is_set():
                content = f"Backup fact {uuid.uuid4().hex}: the deploy window moved."
                stored = await mcp.call(
                    "memory_store", content=content, agent_id="saver", workspace_id=WORKSPACE
                )
                assert not stored.is_error, stored.data
                acks.add("memories", {"id": stored.data["id"], "content": content})

    async def documents() -> None:
        async with mcp_session(url + "/mcp", headers=ADMIN) as mcp:
            while not stop.is_set():
                label = f"doc-{uuid.uuid4().hex[:12]}"
                content = f"Runbook {label}.\n\n" + " ".join(
                    f"Step {i} of {label} checks the gauges." for i in range(60)
                )
                stored = await mcp.call(
                    "metronix_store", content=content, doc_label=label, workspace_id=WORKSPACE
                )
                assert not stored.is_error, stored.data
                acks.add("documents", {"doc_label": label, "content": content})

    async def nodes() -> None:
        async with as_user(world, "alice") as alice:
            while not stop.is_set():
                loc = f"backup:n{uuid.uuid4().hex[:10]}"
                await alice.ok(
                    "hadron_create_node", loc=loc, name=loc, content=f"Content of {loc}", memoryId=SPECS
                )
                acks.add("nodes", loc)

    def calls() -> None:
        app_token = metergraph_key(world.server.data_dir, MG_WORKSPACE, app=True)
        with httpx.Client(timeout=60.0, headers=bearer(app_token)) as http:
            while not stop.is_set():
                batch = uuid.uuid4().hex[:12]
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                rows = [{"ts": now, "provider": "openai", "model": "gpt-4o-mini", "input_tokens": 10 + i,
                         "output_tokens": 5, "tags": {"batch": batch}} for i in range(BATCH)]  # fmt: skip
                answer = http.post(url + "/v1/ingest", json={"rows": rows})
                assert answer.status_code == 202, answer.text
                acks.add("calls", batch)

    def thread(kind: str, work: Callable[[], Any]) -> threading.Thread:
        acks.ready[kind] = threading.Event()

        def body() -> None:
            try:
                result = work()
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
            except BaseException as exc:  # noqa: BLE001 - the fixture reports it
                acks.errors.append(exc)
            finally:
                acks.ready[kind].set()  # a writer that failed must not leave the test waiting

        return threading.Thread(target=body, name=f"writer-{kind}")

    return [thread("memories", memories), thread("documents", documents), thread("nodes", nodes),
            thread("calls", calls)]  # fmt: skip


@dataclass
class Backup:
    world: World
    folder: Path
    before: dict[str, list[Any]]  # acknowledged before the backup started
    attempted: dict[str, list[Any]]  # acknowledged by the end
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backup]:
    tmp = tmp_path_factory.mktemp("backup")
    world = start_world(tmp)
    try:
        yield backed_up_under_load(world, tmp / "backup")
    finally:
        world.server.stop()


def backed_up_under_load(world: World, folder: Path) -> Backup:
    acks, stop = Acks(), threading.Event()
    threads = writers(world, acks, stop)
    try:
        for t in threads:
            t.start()
        for event in acks.ready.values():
            assert event.wait(120), "a writer did not get going"
        calls_by_batch(world.server)  # a metadata read: the server now keeps the columnar projection
        before = acks.snapshot()
        assert set(before) == {"memories", "documents", "nodes", "calls"}, acks.errors
        result = run(["backup", str(folder), "--data-dir", str(world.server.data_dir)])
        seen = acks.snapshot()
        # The copy was taken under load: writes were acknowledged while it ran.
        grew = {k: len(seen[k]) - len(before[k]) for k in seen}
        assert sum(grew.values()) > 0, grew
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert acks.errors == [], acks.errors
    return Backup(world, folder, before, acks.snapshot(), result)


@pytest.fixture(scope="module")
def restored(made: Backup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    target = tmp_path_factory.mktemp("restored") / "data"
    done = run(["restore", str(made.folder), "--data-dir", str(target)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("restored ") and "every SHA-256 checked" in done.stdout
    server = ServerProcess(target, made.world.server.env).start()
    yield server
    server.stop()


def test_backup_says_what_it_copied_and_what_not_with_progress_on_stderr(made: Backup) -> None:
    assert made.result.returncode == 0, made.result.stderr
    out = made.result.stdout
    assert out.startswith(f"backed up {made.world.server.data_dir.resolve()} to {made.folder.resolve()}")
    for name in ("metronix.db", "hadron.db", "metergraph.db", "metergraph.columns/"):
        assert f"  {name}: " in out, out
    assert (made.folder / "data" / "metergraph.columns" / "state.json").is_file()
    assert "SQLite online backup; schema" in out
    assert "the Hadron encryption key: never copied" in out
    assert "metergraph.web-secret: a secret" in out
    assert "backing up" in made.result.stderr and "backing up" not in out  # the bar is on stderr only
    copied = sorted(
        p.relative_to(made.folder / "data").as_posix()
        for p in (made.folder / "data").rglob("*")
        if p.is_file()
    )
    assert not [p for p in copied if p.endswith(("-wal", "-shm", "LOCK", "web-secret"))], copied


async def test_a_restore_holds_everything_acknowledged_before_the_backup_and_nothing_half_written(
    made: Backup, restored: ServerProcess
) -> None:
    before, attempted = made.before, made.attempted
    async with mcp_session(restored.url + "/mcp", headers=ADMIN) as mcp:
        listed = await mcp.call(
            "memory_list", agent_id="saver", workspace_id=WORKSPACE, limit=100, status=["all"]
        )
        records = {r["id"]: r["content"] for r in listed.data["records"]}
        for page in range(100, listed.data["total"], 100):
            more = await mcp.call(
                "memory_list",
                agent_id="saver",
                workspace_id=WORKSPACE,
                limit=100,
                offset=page,
                status=["all"],
            )
            records |= {r["id"]: r["content"] for r in more.data["records"]}
        stored = {m["id"]: m["content"] for m in attempted["memories"]}
        assert {m["id"] for m in before["memories"]} <= set(records)
        assert set(records) <= set(stored) and all(records[i] == stored[i] for i in records)
        present = 0
        for doc in attempted["documents"]:
            got = await mcp.call("metronix_get", doc_label=doc["doc_label"], workspace_id=WORKSPACE)
            if doc in before["documents"]:
                assert not got.is_error, got.data
            if not got.is_error:
                present += 1
                assert got.data["content"] == doc["content"]
                # Its chunks are indexed too: the search finds the document by its own words.
                found = await mcp.call(
                    "metronix_search_fast", query=f"Runbook {doc['doc_label']}", workspace_id=WORKSPACE
                )
                assert doc["doc_label"] in [r["doc_label"] for r in found.data["results"]], found.data
        status = await mcp.call("metronix_status", workspace_id=WORKSPACE)
        assert status.data["documents"]["total"] == present >= len(before["documents"])
    async with as_user(restored_world(made, restored), "alice") as alice:
        for loc in attempted["nodes"]:
            got = await alice.call("hadron_get_node", loc=NODES + loc)
            assert not got.is_error or loc not in before["nodes"], got.text
            if not got.is_error:
                assert got.data["content"] == f"Content of {loc}" and len(got.data["revisions"]) == 1
    groups = calls_by_batch(restored)
    assert set(before["calls"]) <= set(groups) <= set(attempted["calls"])
    assert set(groups.values()) == {BATCH}, groups  # no batch torn


async def test_the_restored_server_answers_as_the_original_did(made: Backup, restored: ServerProcess) -> None:
    original = made.world.server
    answers = []
    for server in (original, restored):
        async with mcp_session(server.url + "/mcp", headers=ADMIN) as mcp:
            doc = made.before["documents"][0]["doc_label"]
            got = (await mcp.call("metronix_get", doc_label=doc, workspace_id=WORKSPACE)).data
            found = (
                await mcp.call("metronix_search_fast", query=f"Runbook {doc}", workspace_id=WORKSPACE)
            ).data
        async with as_user(restored_world(made, server), "alice") as alice:
            node = (await alice.ok("hadron_get_node", loc=NODES + made.before["nodes"][0])).data
        answers.append((got, found["results"][0]["doc_label"], node))
    assert answers[0] == answers[1]
    before = calls_by_batch(original)
    after = calls_by_batch(restored)
    assert {b: after[b] for b in made.before["calls"]} == {b: before[b] for b in made.before["calls"]}
    # The copied projection was taken up as it was, caught up from the calls after its watermark.
    assert "metergraph columns: rebuilding" not in restored.log()


def restored_world(made: Backup, server: ServerProcess) -> World:
    return World(server, made.world.app_key, made.world.other_app_key)


def calls_by_batch(server: ServerProcess) -> dict[str, int]:
    key = metergraph_key(server.data_dir, MG_WORKSPACE)
    answer = httpx.post(
        server.url + "/v1/agent/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "metergraph_get_usage_aggregates",
            "arguments": {"days": 2, "group_by": ["metadata.batch"], "limit": 200}}},
        headers={**bearer(key), "Accept": "application/json, text/event-stream"},
        timeout=60,
    )  # fmt: skip
    result = answer.json()["result"]
    assert not result.get("isError"), result
    document = result["structuredContent"]
    assert document["coverage"]["rows"]["truncated"] is False
    return {g["metadata.batch"]: g["calls"] for g in document["items"] if g["metadata.batch"] is not None}


# -- refusals -----------------------------------------------------------------------------------------


def damaged(made: Backup, tmp: Path, how: str) -> Path:
    copy = tmp / f"backup-{how}"
    shutil.copytree(made.folder, copy)
    victim = copy / "data" / "metronix.db"
    if how == "flipped byte":
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0x01
        victim.write_bytes(bytes(data))
    elif how == "missing file":
        (copy / "data" / "hadron.db").unlink()
    elif how == "truncated file":
        victim.write_bytes(victim.read_bytes()[:-4096])
    elif how == "no manifest":
        (copy / "manifest.json").unlink()
    elif how == "garbled manifest":
        (copy / "manifest.json").write_text('{"format": "triptych-backup", "version": 1, "files": [')
    return copy


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("flipped byte", "is damaged: data/metronix.db does not match its SHA-256 in the manifest"),
        ("missing file", "is incomplete: data/hadron.db is missing (the manifest lists it)"),
        ("truncated file", "is damaged: data/metronix.db has"),
        ("no manifest", "has no manifest.json: it is not a backup, or one that did not finish"),
        ("garbled manifest", "manifest.json is damaged (not a backup manifest"),
    ],
)
def test_a_damaged_or_partial_backup_is_refused_in_one_line_and_nothing_is_written(
    made: Backup, tmp_path: Path, how: str, says: str
) -> None:
    source = damaged(made, tmp_path, how)
    target = tmp_path / "new-data"
    refused = run(["restore", str(source), "--data-dir", str(target)])
    assert refused.returncode == 1
    said = [line for line in refused.stderr.splitlines() if line.startswith("triptych: cannot restore")]
    assert len(said) == 1 and says in said[0], refused.stderr
    assert "use another backup" in said[0]
    assert refused.stdout == ""
    assert not target.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_restore_refuses_a_target_that_is_not_empty(made: Backup, tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    refused = run(["restore", str(made.folder), "--data-dir", str(target)])
    assert refused.returncode == 1
    assert "is not empty: restore never writes over data; choose a new or empty folder" in refused.stderr
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_server_mode_backup_copies_what_is_local_and_names_the_engine_tools(
    made: Backup, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    assert run(["restore", str(made.folder), "--data-dir", str(data)]).returncode == 0
    (data / "hadron.key").write_text("not-a-real-key")
    env = {
        # Never contacted: the backup names what the engines hold without connecting to them.
        "TRIPTYCH_DATABASE_URL": "postgresql://triptych:s3cret@127.0.0.1:9/triptych",
        "TRIPTYCH_METERGRAPH_CLICKHOUSE_URL": "http://127.0.0.1:9/metergraph",
        "TRIPTYCH_HADRON_KEY_FILE": str(data / "hadron.key"),
    }
    done = run(["backup", str(tmp_path / "backup"), "--data-dir", str(data)], env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "postgresql://triptych:***@127.0.0.1:9/triptych: Metronix's and Hadron's data are in PostgreSQL"
        in out
    )
    assert "pg_dump" in out and "s3cret" not in out
    assert "Metergraph's calls and rollups are in ClickHouse: back them up with ClickHouse's BACKUP" in out
    assert "hadron.key: the Hadron encryption key: never in a backup" in out
    assert not (tmp_path / "backup" / "data" / "hadron.key").exists()
    assert (tmp_path / "backup" / "data" / "metergraph.db").is_file()


def test_the_backup_layout_names_the_surfaces_files() -> None:
    from triptych.backup_cli import COLUMNS_DIR
    from triptych.metergraph import service

    assert COLUMNS_DIR == service.COLUMNS_DIR


def test_backup_refuses_a_folder_that_is_not_empty(made: Backup, tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("keep")
    refused = run(["backup", str(tmp_path), "--data-dir", str(made.world.server.data_dir)])
    assert refused.returncode == 1
    assert "is not empty: backup never writes over a folder's files" in refused.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["old.txt"]
