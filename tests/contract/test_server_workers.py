"""`triptych serve --workers 2` on one PostgreSQL database behaves like one server.

Every response names the worker that gave it (``X-Triptych-Worker``), so each test writes through one
chosen worker and reads through the other, for each Metronix tool family (knowledge base, memory,
review queue), and checks that tenants stay apart whichever worker answers. The supervisor's own
duties (a crashed worker reported and replaced, SIGTERM stopping every worker, no orphan after a
``kill -9`` of the supervisor) have their own servers, and every test's processes are stopped, killed
if need be, even when it fails.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from hadron.push_client import NOTIFIED_WITHIN, Inbox, Subscriber, plain_then_mention, stream_opened
from hadron.world import HADRON_KEY, Session, build_world, user_headers
from harness import SECRET, TRIPTYCH, McpSession, ServerProcess, bearer, free_port, token
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from postgres import PostgresCluster

WORKER = "x-triptych-worker"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ADMIN = token("root", "admin")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def worker_pids(server: ServerProcess) -> set[int]:
    """Every worker pid the supervisor named in its log (first start and replacements)."""
    log = server.log()
    pids = {int(p) for banner in re.findall(r"pids ([\d, ]+);", log) for p in banner.split(", ")}
    return pids | {int(p) for p in re.findall(r"again \(pid (\d+)\)", log)}


def start_workers(server: ServerProcess, count: int = 2, timeout: float = 180.0) -> ServerProcess:
    """Start the supervisor and wait until it says every worker serves (``/health`` answers as soon as
    the first one does)."""
    server.env = {**server.env, "TRIPTYCH_WORKERS": str(count)}
    try:
        server.start(timeout=timeout)
        deadline = time.monotonic() + timeout
        while f"with {count} workers" not in server.log():
            if time.monotonic() > deadline or (server.process and server.process.poll() is not None):
                raise RuntimeError(f"the workers did not all start:\n{server.log()}")
            time.sleep(0.2)
    except BaseException:
        stop_all(server)
        raise
    return server


def stop_all(server: ServerProcess) -> None:
    """Stop the supervisor, then kill any worker it left (there should be none: the tests say so)."""
    server.stop()
    for pid in worker_pids(server):
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def workers(postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp("workers") / "data"
    data_dir.mkdir()
    url = postgres.create_database("workers2")
    # Hadron's organizations, users, apps and memories (tests/hadron/world.py), in the database the
    # workers share: in server mode Hadron lives there too.
    build_world(data_dir, url)
    env = {
        "TRIPTYCH_DATABASE_URL": url,
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": SECRET,
        "TRIPTYCH_HADRON_KEY": HADRON_KEY.encoded(),
    }
    server = ServerProcess(data_dir, env)
    start_workers(server)
    try:
        yield server
    finally:
        stop_all(server)


@asynccontextmanager
async def pinned(
    server: ServerProcess,
    worker: int,
    headers: dict[str, str],
    path: str = "/mcp",
    message_handler: Callable[[Any], Awaitable[None]] | None = None,
) -> AsyncIterator[Client]:
    """An MCP client whose every request is answered by ``worker``: the connection is kept open, and
    new connections are tried until the kernel hands one to that worker."""
    for _ in range(60):
        seen: list[str | None] = []

        async def note(response: httpx2.Response, seen: list[str | None] = seen) -> None:
            seen.append(response.headers.get(WORKER))

        async with httpx2.AsyncClient(
            headers=headers, timeout=60.0, event_hooks={"response": [note]}
        ) as http:
            await http.get(server.url + "/health")
            if seen != [str(worker)]:
                continue
            transport = streamable_http_client(server.url + path, http_client=http)
            async with Client(transport, message_handler=message_handler) as client:
                yield client
            assert set(seen) == {str(worker)}, f"a request left worker {worker}: {seen}"
            return
    raise AssertionError(f"no connection reached worker {worker} in 60 tries")


@asynccontextmanager
async def on_worker(server: ServerProcess, worker: int, tok: str = ADMIN) -> AsyncIterator[McpSession]:
    async with pinned(server, worker, bearer(tok)) as client:
        yield McpSession(client)


@asynccontextmanager
async def hadron_on_worker(
    server: ServerProcess, worker: int, headers: dict[str, str]
) -> AsyncIterator[Session]:
    async with pinned(server, worker, headers, "/hadron/mcp") as client:
        yield Session(client)


async def ok(session: McpSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call(tool, **arguments)
    assert not result.is_error, result.data
    return result.data


def ws() -> str:
    return "w2-" + uuid.uuid4().hex[:8]


async def test_both_workers_serve_and_each_response_names_its_worker(workers: ServerProcess) -> None:
    answered = set()
    for _ in range(40):
        with httpx.Client() as http:  # a new connection each time: the kernel spreads them
            answered.add(http.get(workers.url + "/health").headers[WORKER])
        if answered == {"1", "2"}:
            break
    assert answered == {"1", "2"}


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


def test_the_workers_share_the_cores_among_their_embedding_threads(workers: ServerProcess) -> None:
    # Two workers on C cores: C // 2 threads each for the bundled model, not C each.
    for pid in worker_pids(workers):
        assert _environ(pid)["TRIPTYCH_EMBED_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))


async def test_a_document_stored_through_one_worker_is_searched_and_replaced_through_the_other(
    workers: ServerProcess,
) -> None:
    w = ws()
    async with on_worker(workers, 2) as second:  # loads its keyword index of the workspace first
        assert (await ok(second, "metronix_search_fast", query="zebra stripes", workspace_id=w))[
            "results"
        ] == []
    async with on_worker(workers, 1) as first:
        await ok(first, "metronix_store", content="Zebras graze; their stripes confuse flies.", doc_label="z",
                 workspace_id=w)  # fmt: skip
    async with on_worker(workers, 2) as second:
        found = await ok(second, "metronix_search_fast", query="zebra stripes", workspace_id=w)
        assert [h["doc_label"] for h in found["results"] if h["keyword_score"]] == ["z"]
        await ok(second, "metronix_store", content="Okapis live in the Congo rainforest.", doc_label="z",
                 workspace_id=w)  # fmt: skip
    async with on_worker(workers, 1) as first:
        found = await ok(first, "metronix_search_fast", query="okapis rainforest", workspace_id=w)
        stale = await ok(first, "metronix_search_fast", query="zebra stripes", workspace_id=w)
        got = await ok(first, "metronix_get", doc_label="z", workspace_id=w)
    assert [h["doc_label"] for h in found["results"] if h["keyword_score"]] == ["z"]
    assert [h for h in stale["results"] if h["keyword_score"]] == []
    assert got["content"] == "Okapis live in the Congo rainforest."


async def test_a_memory_stored_through_one_worker_is_searched_updated_and_deleted_through_the_other(
    workers: ServerProcess,
) -> None:
    mine = {"workspace_id": ws(), "agent_id": "hermes"}
    async with on_worker(workers, 2) as second:
        assert (await ok(second, "memory_search", query="dark mode", **mine))["results"] == []
    async with on_worker(workers, 1) as first:
        dark = await ok(first, "memory_store", content="User prefers dark mode", **mine)
    async with on_worker(workers, 2) as second:
        found = await ok(second, "memory_search", query="which mode does the user prefer", **mine)
        assert [r["record"]["id"] for r in found["results"]] == [dark["id"]]
        await ok(second, "memory_update", record_id=dark["id"], content="User prefers dark mode at night",
                 workspace_id=mine["workspace_id"])  # fmt: skip
    async with on_worker(workers, 1) as first:
        found = await ok(first, "memory_search", query="night", **mine)
        assert found["results"][0]["record"]["content"] == "User prefers dark mode at night"
        await ok(first, "memory_delete", record_id=dark["id"], workspace_id=mine["workspace_id"])
    async with on_worker(workers, 2) as second:
        assert (await ok(second, "memory_list", **mine))["records"] == []


async def test_a_review_filed_through_one_worker_is_listed_and_resolved_through_the_other(
    workers: ServerProcess,
) -> None:
    mine = {"workspace_id": ws(), "agent_id": "hermes"}
    async with on_worker(workers, 1) as first:
        dark = await ok(first, "memory_store", content="User prefers dark mode in the evening", **mine)
        light = await ok(first, "memory_store", content="User prefers light mode in the evening", **mine)
    async with on_worker(workers, 2) as second:
        listed = await ok(second, "memory_review_list", workspace_id=mine["workspace_id"])
        assert [(e["target_id"], e["related_record_id"]) for e in listed["entries"]] == [
            (light["id"], dark["id"])
        ]
        await ok(second, "memory_review_resolve", review_id=listed["entries"][0]["id"], action="keep",
                 workspace_id=mine["workspace_id"])  # fmt: skip
    async with on_worker(workers, 1) as first:
        assert (await ok(first, "memory_review_list", workspace_id=mine["workspace_id"]))["entries"] == []


async def test_a_tenant_never_reaches_another_tenant_s_data_through_either_worker(
    workers: ServerProcess,
) -> None:
    a, b = ws(), ws()
    alice, bob = token("alice", "editor", [a]), token("bob", "editor", [b])
    async with on_worker(workers, 1, alice) as mcp:
        await ok(mcp, "metronix_store", content="Quarterly revenue grew by 12 percent.", doc_label="fin",
                 workspace_id=a)  # fmt: skip
        await ok(mcp, "memory_store", content="The staging password rotates on Mondays", workspace_id=a,
                 agent_id="hermes")  # fmt: skip
    for worker in (1, 2):
        async with on_worker(workers, worker, bob) as mcp:
            search = await ok(mcp, "metronix_search_fast", query="quarterly revenue", workspace_id=b)
            memories = await ok(mcp, "memory_search", query="staging password", workspace_id=b,
                                agent_id="hermes")  # fmt: skip
            into_a = await mcp.call("metronix_search_fast", query="quarterly revenue", workspace_id=a)
            memory_a = await mcp.call(
                "memory_search", query="staging password", workspace_id=a, agent_id="hermes"
            )
        assert search["results"] == [] and memories["results"] == []
        assert into_a.error_code == "WORKSPACE_NOT_FOUND"
        assert memory_a.is_error


async def test_hadron_selections_come_back_by_client_id_on_whichever_worker_takes_the_reconnect(
    workers: ServerProcess,
) -> None:
    client_id = "laptop-" + uuid.uuid4().hex[:8]
    async with hadron_on_worker(workers, 1, user_headers("carol", client_id)) as first:
        await first.ok("hadron_set_active_memory", memoryUrn="hrn:mem:acme.com:team")
        await first.ok("hadron_set_active_app", app="hrn:app:acme.com:bot")
    async with hadron_on_worker(workers, 2, user_headers("carol", client_id)) as second:
        listed = await second.ok("hadron_list_memories")
        apps = await second.ok("hadron_list_apps")
    assert [m["urn"] for m in listed.data["memories"] if m["active"]] == ["hrn:mem:acme.com:team"]
    assert [a["urn"] for a in apps.data["apps"] if a["active"]] == ["hrn:app:acme.com:bot"]
    async with hadron_on_worker(workers, 2, user_headers("dave", client_id)) as other_user:
        listed = await other_user.ok("hadron_list_memories")  # same client id, another user: nothing
    assert not [m for m in listed.data["memories"] if m["active"]]


def test_a_hadron_session_is_served_whichever_worker_a_connection_reaches_until_it_is_deleted(
    workers: ServerProcess,
) -> None:
    """Hadron keeps MCP sessions (by contract): a request of a session held by the other worker is
    relayed to it, GET stream included, and a DELETE through any connection ends it for all."""
    headers = {**MCP_HEADERS, **user_headers("carol")}
    for _ in range(60):  # open the session on worker 1
        opened = httpx.post(workers.url + "/hadron/mcp", json=INITIALIZE, headers=headers)
        if opened.headers[WORKER] == "1":
            break
    session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
    for n in range(12):  # new connections: about half reach worker 2, which relays them
        listed = httpx.post(
            workers.url + "/hadron/mcp",
            json={"jsonrpc": "2.0", "id": 2 + n, "method": "tools/list"},
            headers=session,
        )
        assert listed.status_code == 200, listed.text
        assert listed.headers[WORKER] == "1"
    with httpx.stream("GET", workers.url + "/hadron/mcp", headers=session, timeout=30) as stream:
        assert stream.status_code == 200 and stream.headers[WORKER] == "1"
    ended = httpx.delete(workers.url + "/hadron/mcp", headers=session)
    assert ended.status_code == 200
    for n in range(6):
        gone = httpx.post(
            workers.url + "/hadron/mcp",
            json={"jsonrpc": "2.0", "id": 50 + n, "method": "tools/list"},
            headers=session,
        )
        assert gone.status_code == 404  # the client opens a new session, as with one process


async def test_a_channel_post_through_one_worker_is_pushed_to_a_subscriber_held_by_the_other(
    workers: ServerProcess,
) -> None:
    """Issue 32: alice's session (and its subscription) lives on worker 1, bob posts through worker 2;
    PostgreSQL NOTIFY carries the post to worker 1, which pushes it to alice."""
    inbox = Inbox()
    async with hadron_on_worker(workers, 2, user_headers("bob")) as bob:  # bot's CONTRIBUTOR writes botmem
        made = await bob.ok("hadron_create_channel", memory="hrn:mem:acme.com:botmem",
                            loc=f"chats:{ws()}", name="handoffs")  # fmt: skip
        address = made.data["address"]
        async with (
            stream_opened() as opened,
            pinned(workers, 1, user_headers("alice"), "/hadron/mcp", inbox.handle) as alice,
        ):
            await asyncio.wait_for(opened.wait(), NOTIFIED_WITHIN)
            await Subscriber(Session(alice), inbox).subscribe(address)
            plain, _ = await plain_then_mention(bob, inbox, address)
            read = await Session(alice).ok("hadron_channel_read", channel=address, sinceSeq=plain)
            assert [m["body"] for m in read.data["messages"]] == ["@alice over to you"]


def test_a_session_opened_on_one_worker_is_served_by_the_other(workers: ServerProcess) -> None:
    """A 2025-06-18 client (sessions in the protocol) whose next request arrives on a new connection:
    no Mcp-Session-Id is issued in server mode, so whichever worker takes it answers."""
    headers = {**MCP_HEADERS, **bearer(ADMIN)}
    opened = httpx.post(workers.url + "/mcp", json=INITIALIZE, headers=headers)
    assert opened.status_code == 200 and "mcp-session-id" not in opened.headers
    answered: dict[str, int] = {}
    for n in range(30):
        listed = httpx.post(workers.url + "/mcp", json={"jsonrpc": "2.0", "id": 2 + n, "method": "tools/list"},
                            headers=headers)  # fmt: skip
        assert listed.status_code == 200, listed.text
        answered[listed.headers[WORKER]] = answered.get(listed.headers[WORKER], 0) + 1
        if len(answered) == 2:
            break
    assert set(answered) == {"1", "2"}
    assert httpx.get(workers.url + "/mcp", headers=headers).status_code == 405  # no idle stream to hold


# -- the supervisor -------------------------------------------------------------------------------------


@pytest.fixture
def own_workers(postgres: PostgresCluster, tmp_path: Path) -> Iterator[ServerProcess]:
    """A supervisor of two workers of its own, started as an operator who chose the embedding threads
    would start it (the tests below kill and stop it; the first also checks the threads were kept)."""
    env = {
        "TRIPTYCH_DATABASE_URL": postgres.create_database("own"),
        "TRIPTYCH_AUTH_ENABLED": "false",
        "TRIPTYCH_EMBED_THREADS": "3",
    }
    server = ServerProcess(tmp_path / "data", env)
    try:
        yield start_workers(server)
    finally:
        stop_all(server)


def _wait(condition: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_a_killed_worker_is_reported_and_replaced_and_sigterm_stops_every_worker(
    own_workers: ServerProcess,
) -> None:
    first = worker_pids(own_workers)
    assert len(first) == 2
    # Embedding threads set by the operator are kept, not shared out as the default is (a supervisor
    # of its own for this alone cost a start of three processes).
    assert [_environ(pid)["TRIPTYCH_EMBED_THREADS"] for pid in first] == ["3", "3"]
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    assert _wait(lambda: "again (pid" in own_workers.log()), own_workers.log()
    assert re.search(
        rf"worker \d \(pid {victim}\) was killed by SIGKILL; started worker \d again", own_workers.log()
    )
    replacement = worker_pids(own_workers) - first
    assert len(replacement) == 1
    for _ in range(20):  # the port keeps answering meanwhile and after
        assert httpx.get(own_workers.url + "/health", timeout=60).status_code in (200, 503)

    assert own_workers.process is not None
    own_workers.process.send_signal(signal.SIGTERM)
    assert own_workers.process.wait(timeout=60) == 0
    assert "SIGTERM: stopping 2 workers" in own_workers.log()
    assert [pid for pid in worker_pids(own_workers) if _alive(pid)] == []


def test_a_worker_that_keeps_dying_stops_the_supervisor_after_five_restarts(
    own_workers: ServerProcess,
) -> None:
    assert own_workers.process is not None
    killed: set[int] = set()
    for _ in range(6):  # each replacement is killed as soon as it appears, before it is ready
        victim = max(worker_pids(own_workers) - killed, default=None)
        assert victim is not None, own_workers.log()
        os.kill(victim, signal.SIGKILL)
        killed.add(victim)
        assert _wait(
            lambda: len(worker_pids(own_workers) - killed) == 2 or own_workers.process.poll() is not None
        )
    assert own_workers.process.wait(timeout=60) == 1
    assert "6 workers ended within 60 s: stopping" in own_workers.log()
    assert _wait(lambda: not any(_alive(pid) for pid in worker_pids(own_workers)), 30)


def test_a_kill_9_of_the_supervisor_leaves_no_worker_and_no_socket_behind(own_workers: ServerProcess) -> None:
    assert own_workers.process is not None
    environ = Path(f"/proc/{min(worker_pids(own_workers))}/environ").read_bytes().split(b"\0")
    run_dir = Path(
        next(v for v in environ if v.startswith(b"TRIPTYCH_WORKER_RUN_DIR=")).split(b"=", 1)[1].decode()
    )
    assert sorted(p.name for p in run_dir.iterdir()) == ["metrics", "worker-1.sock", "worker-2.sock"]
    own_workers.process.kill()
    own_workers.process.wait()
    assert _wait(lambda: not any(_alive(pid) for pid in worker_pids(own_workers)), 30)
    assert _wait(lambda: not run_dir.exists(), 10)


def _serve(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = [TRIPTYCH, "serve", "--port", str(free_port()), *args]
    environ = {**os.environ, "TRIPTYCH_DATA_DIR": str(tmp_path / "data"), **env}
    environ.pop("TRIPTYCH_DATABASE_URL", None) if "TRIPTYCH_DATABASE_URL" not in env else None
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)


def test_several_workers_on_the_embedded_engine_are_refused_in_one_line(tmp_path: Path) -> None:
    done = _serve(["--workers", "2"], {}, tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1].startswith("triptych: --workers 2 needs the PostgreSQL engine")
    )
    assert "TRIPTYCH_DATABASE_URL" in done.stderr and "Traceback" not in done.stderr


def test_a_worker_count_below_one_is_refused(tmp_path: Path) -> None:
    done = _serve(["--workers", "0"], {}, tmp_path)
    assert done.returncode == 2 and "whole number >= 1" in done.stderr


def test_workers_that_cannot_reach_the_database_stop_the_supervisor_with_the_reason(tmp_path: Path) -> None:
    url = f"postgresql://triptych:s3cret@127.0.0.1:{free_port()}/nowhere"
    done = _serve(["--workers", "2"], {"TRIPTYCH_DATABASE_URL": url}, tmp_path)
    assert done.returncode == 1
    assert "cannot start" in done.stderr and "before it was ready: stopping the others" in done.stderr
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr


def test_metrics_answered_by_any_worker_count_every_worker_s_calls(workers: ServerProcess) -> None:
    """``/metrics`` under several workers sums their files (core/metrics.py): whichever worker answers a
    scrape, a request counted by the other is in it."""
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> tuple[str, float]:
        # A new connection each time: the kernel hands it to either worker.
        response = httpx.get(workers.url + "/metrics")
        assert response.status_code == 200, response.text
        total = sum(
            s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples
            if s.name == "triptych_http_requests_total" and s.labels["surface"] == "metronix"
        )
        return response.headers[WORKER], total

    _, before = scrape()
    answered = set()
    for _ in range(12):
        response = httpx.get(workers.url + "/api/v1/auth/me", headers=bearer(token()))
        answered.add(response.headers[WORKER])
    assert len(answered) == 2, "twelve new connections all reached one worker"
    seen: dict[str, float] = {}
    for _ in range(40):
        worker, total = scrape()
        seen[worker] = total
        if len(seen) == 2:
            break
    assert len(seen) == 2, "forty scrapes all reached one worker"
    assert all(total - before == 12 for total in seen.values()), (before, seen)
