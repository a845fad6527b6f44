"""Two machines, simulated (issue 30, item 4): two `triptych serve` processes with data directories of
their own, sharing only PostgreSQL and ClickHouse, behind a round-robin balancer (tests/balancer.py).

Every surface is driven through the balancer with the official MCP client. Each test writes through one
machine and reads through the other at once (the balancer pins the connections of each step), per tool
family: Metronix's knowledge base and memory, Hadron's nodes, team chat and push, worker sessions and the
selections a client gets back by ``X-Hadron-Client-Id``, Metergraph's ingest and reads with keys and
tokens minted on the other machine, and its app-page sessions. Hadron clients whose every request takes
a new connection alternate between the machines: the machine not holding their session relays to the
one that does (``TRIPTYCH_PEERS``, decision record 0200). A machine told of peers without the shared
Metergraph secrets refuses to start (0201). The last test kills one machine with ``kill -9`` while
clients write through the balancer: every acknowledged write is read back through the survivor, and the
clients carry on there.

The contract suites themselves run through two machines too, as the ``two-machines`` engine of the
shared servers (tests/conftest.py, decision record 0350), behind the balancer's per-request mode, which
one test here checks on its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from balancer import Balancer
from clickhouse_endpoint import ClickHouseEndpoint
from hadron.push_client import NOTIFIED_WITHIN, Inbox, Subscriber, plain_then_mention, stream_opened
from hadron.team_world import CREW
from hadron.world import Session, node, user_headers
from harness import TRIPTYCH, McpSession, bearer, free_port, mcp_session, token
from machines import WEBHOOK_KEY, Machines, start_machines
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from postgres import PostgresCluster

sys.path.insert(0, str(Path(__file__).parent))
from test_server_workers import ok  # noqa: E402

ADMIN = token("root", "admin")
A, B = 0, 1
SPECS = "hrn:mem:acme.com:specs"


@pytest.fixture(scope="module")
def machines(
    postgres: PostgresCluster, clickhouse: ClickHouseEndpoint, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Machines]:
    pair = start_machines(
        tmp_path_factory.mktemp("two-machines"),
        postgres.create_database("twomachines"),
        clickhouse.database_url(),
    )
    try:
        yield pair
    finally:
        pair.stop()


@asynccontextmanager
async def metronix(machines: Machines, machine: int) -> AsyncIterator[McpSession]:
    """A Metronix client whose connections all go through the balancer to ``machine``."""
    with machines.balancer.pinned(machine):
        async with mcp_session(machines.url + "/mcp", bearer(ADMIN)) as session:
            yield session


@asynccontextmanager
async def hadron(
    machines: Machines,
    machine: int | None,
    user: str,
    client_id: str | None = None,
    message_handler: Callable[[Any], Awaitable[None]] | None = None,
) -> AsyncIterator[Session]:
    """A Hadron client through the balancer: pinned to ``machine``, or (None) with a new connection for
    each request, so that its requests alternate between the machines."""
    limits = httpx2.Limits(max_keepalive_connections=0 if machine is None else 20)
    async with httpx2.AsyncClient(headers=user_headers(user, client_id), timeout=60.0, limits=limits) as http:
        transport = streamable_http_client(machines.url + "/hadron/mcp", http_client=http)
        if machine is None:
            async with Client(transport, message_handler=message_handler) as client:
                yield Session(client)
            return
        with machines.balancer.pinned(machine):
            async with Client(transport, message_handler=message_handler) as client:
                yield Session(client)


def ws() -> str:
    return "tm-" + uuid.uuid4().hex[:8]


# -- Metronix ------------------------------------------------------------------------------------------


async def test_a_document_stored_through_one_machine_is_found_and_replaced_through_the_other(
    machines: Machines,
) -> None:
    w = ws()
    async with metronix(machines, B) as b:  # B loads its index of the workspace before the write
        assert (await ok(b, "metronix_search_fast", query="zebra stripes", workspace_id=w))["results"] == []
    async with metronix(machines, A) as a:
        await ok(a, "metronix_store", content="Zebras graze; their stripes confuse flies.", doc_label="z",
                 workspace_id=w)  # fmt: skip
    async with metronix(machines, B) as b:
        found = await ok(b, "metronix_search_fast", query="zebra stripes", workspace_id=w)
        assert [h["doc_label"] for h in found["results"] if h["keyword_score"]] == ["z"]
        await ok(b, "metronix_store", content="Okapis live in the Congo rainforest.", doc_label="z",
                 workspace_id=w)  # fmt: skip
    async with metronix(machines, A) as a:
        found = await ok(a, "metronix_search_fast", query="okapis rainforest", workspace_id=w)
        stale = await ok(a, "metronix_search_fast", query="zebra stripes", workspace_id=w)
    assert [h["doc_label"] for h in found["results"] if h["keyword_score"]] == ["z"]
    assert [h for h in stale["results"] if h["keyword_score"]] == []


async def test_a_memory_stored_through_one_machine_is_searched_and_updated_through_the_other(
    machines: Machines,
) -> None:
    mine = {"workspace_id": ws(), "agent_id": "hermes"}
    async with metronix(machines, B) as b:
        assert (await ok(b, "memory_search", query="dark mode", **mine))["results"] == []
    async with metronix(machines, A) as a:
        dark = await ok(a, "memory_store", content="User prefers dark mode", **mine)
    async with metronix(machines, B) as b:
        found = await ok(b, "memory_search", query="which mode does the user prefer", **mine)
        assert [r["record"]["id"] for r in found["results"]] == [dark["id"]]
        await ok(b, "memory_update", record_id=dark["id"], content="User prefers dark mode at night",
                 workspace_id=mine["workspace_id"])  # fmt: skip
    async with metronix(machines, A) as a:
        found = await ok(a, "memory_search", query="night", **mine)
    assert found["results"][0]["record"]["content"] == "User prefers dark mode at night"


# -- Hadron --------------------------------------------------------------------------------------------


async def test_a_node_created_through_one_machine_is_found_through_the_other(machines: Machines) -> None:
    word = "quasar" + uuid.uuid4().hex[:6]
    loc = "tm" + uuid.uuid4().hex[:8]
    async with hadron(machines, B, "alice") as b:  # B's index of the memory is loaded first
        assert (await b.ok("hadron_find_nodes", query=word, memoryUrn=SPECS)).data["hits"] == []
    async with hadron(machines, A, "alice") as a:
        await a.ok("hadron_create_node", loc=node(SPECS, loc), name="Quasars", content=f"{word} notes")
    async with hadron(machines, B, "alice") as b:
        found = await b.ok("hadron_find_nodes", query=word, memoryUrn=SPECS)
        got = await b.ok("hadron_get_node", loc=node(SPECS, loc))
        await b.ok("hadron_update_node", loc=node(SPECS, loc), content=f"{word} revised on b")
    assert [h["urn"] for h in found.data["hits"]] == [node(SPECS, loc)]
    assert got.data["content"] == f"{word} notes"
    async with hadron(machines, A, "alice") as a:
        assert (await a.ok("hadron_get_node", loc=node(SPECS, loc))).data["content"] == f"{word} revised on b"


async def test_team_chat_and_worker_sessions_started_on_one_machine_hold_on_the_other(
    machines: Machines,
) -> None:
    name = "Vega" + uuid.uuid4().hex[:4]
    async with hadron(machines, A, "alice") as a:
        await a.ok("hadron_set_active_app", app=CREW)
        await a.ok("hadron_cast_worker", name=name, role="backend-engineer")
        sid = (await a.ok("hadron_start_session", description="on a", workerRef=name)).data["sessionId"]
        posted = await a.ok("hadron_team_chat_post", body=f"{name} starts on a", session=sid)
    async with hadron(machines, B, "alice") as b:
        await b.ok("hadron_set_active_app", app=CREW)
        await b.refused("hadron_start_session", "WORKER_TAKEN", description="on b", workerRef=name)
        read = await b.ok("hadron_team_chat_read", sinceSeq=posted.data["seq"] - 1)
        reply = await b.ok("hadron_team_chat_post", body="seen on b", replyToSeq=posted.data["seq"])
    assert [m["body"] for m in read.data["messages"]] == [f"{name} starts on a"]
    async with hadron(machines, A, "alice") as a:
        await a.ok("hadron_set_active_app", app=CREW)
        since = await a.ok("hadron_team_chat_read", sinceSeq=posted.data["seq"])
        await a.ok("hadron_end_session", id=sid)
    assert [(m["seq"], m["body"]) for m in since.data["messages"]] == [(reply.data["seq"], "seen on b")]


async def test_selections_come_back_by_client_id_through_either_machine(machines: Machines) -> None:
    client_id = "laptop-" + uuid.uuid4().hex[:8]
    async with hadron(machines, A, "carol", client_id) as a:
        await a.ok("hadron_set_active_memory", memoryUrn="hrn:mem:acme.com:team")
    async with hadron(machines, B, "carol", client_id) as b:
        listed = await b.ok("hadron_list_memories")
    assert [m["urn"] for m in listed.data["memories"] if m["active"]] == ["hrn:mem:acme.com:team"]


async def test_a_hadron_session_whose_connections_alternate_between_the_machines_is_served(
    machines: Machines,
) -> None:
    """The client's session lives on the machine that opened it; its next connections reach either
    machine (the GET stream and each reconnect after an idle keep-alive): the other relays them."""
    loc = "alt" + uuid.uuid4().hex[:8]
    before = len(machines.balancer.served)
    async with hadron(machines, None, "alice") as s:
        await s.ok("hadron_set_active_memory", memoryUrn=SPECS)
        for n in range(6):
            await s.ok("hadron_create_node", loc=f"{loc}:n{n}", name=f"N{n}")
        listed = await s.ok("hadron_list_nodes", parentRel=node(SPECS, loc))
    assert {0, 1} <= set(machines.balancer.served[before:]), machines.balancer.served[before:]
    assert len(listed.data["nodes"]) == 6


async def test_the_balancer_per_request_sends_each_request_of_one_kept_connection_to_the_next_machine(
    machines: Machines,
) -> None:
    """The mode the contract suites run through (tests/conftest.py, decision 0350): a client that keeps
    its connection, as the MCP clients do, alternates anyway; an MCP session held by one machine is
    relayed by the other, and a streamed (SSE) answer comes back whole."""
    per_request = Balancer([("127.0.0.1", s.port) for s in machines.servers], per_request=True).start()
    try:
        with httpx.Client(base_url=per_request.url, timeout=30.0) as http:
            assert [http.get("/health").status_code for _ in range(4)] == [200] * 4
        assert per_request.served == [A, B, A, B]
        loc = "req" + uuid.uuid4().hex[:8]
        async with httpx2.AsyncClient(headers=user_headers("alice"), timeout=60.0) as http2:
            async with Client(
                streamable_http_client(per_request.url + "/hadron/mcp", http_client=http2)
            ) as c:
                s = Session(c)
                await s.ok("hadron_set_active_memory", memoryUrn=SPECS)
                for n in range(3):
                    await s.ok("hadron_create_node", loc=f"{loc}:n{n}", name=f"N{n}")
                listed = await s.ok("hadron_list_nodes", parentRel=node(SPECS, loc))
        assert len(listed.data["nodes"]) == 3
        assert per_request.served.count(A) >= 3 and per_request.served.count(B) >= 3
    finally:
        per_request.stop()


async def test_a_post_through_one_machine_is_pushed_to_a_subscriber_whose_connections_alternate(
    machines: Machines,
) -> None:
    """Alice's session lives on one machine, her GET stream may reach the other (relayed back, streamed);
    Bob posts through machine B: PostgreSQL's NOTIFY carries the post to the machine holding Alice's
    subscription, which pushes it."""
    inbox = Inbox()
    async with hadron(machines, B, "bob") as bob:
        made = await bob.ok("hadron_create_channel", memory="hrn:mem:acme.com:botmem",
                            loc=f"chats:{ws()}", name="handoffs")  # fmt: skip
        address = made.data["address"]
        async with stream_opened() as opened, hadron(machines, None, "alice", None, inbox.handle) as alice:
            await asyncio.wait_for(opened.wait(), NOTIFIED_WITHIN)
            await Subscriber(alice, inbox).subscribe(address)
            await plain_then_mention(bob, inbox, address)


# -- Metergraph ----------------------------------------------------------------------------------------


def _rows(route: str, n: int) -> list[dict[str, Any]]:
    return [{"ts": datetime.now(UTC).isoformat(), "route": route, "provider": "openai", "model": "gpt-4o",
             "input_tokens": 100, "output_tokens": 20, "latency_ms": 300, "request_id": uuid.uuid4().hex}
            for _ in range(n)]  # fmt: skip


async def test_calls_ingested_through_one_machine_are_read_through_the_other_with_keys_minted_there(
    machines: Machines,
) -> None:
    workspace = ws()
    mg = machines.metergraph(A)  # both tokens minted where machine A keeps its keys
    try:
        app_token = mg.keys.create_app_token(workspace)[1]
        agent_key = mg.keys.create_agent_key(workspace, "debug", None)[1]
    finally:
        mg.close()
    with machines.balancer.pinned(A):  # a session token minted by machine A ...
        session = httpx.post(machines.url + "/v1/ingest/sessions", headers=bearer(app_token), timeout=30,
                             json={"protocol_version": 2, "repository": "acme/app", "sdk_version": "1.0"})  # fmt: skip
    assert session.status_code in (200, 201), session.text
    with machines.balancer.pinned(B):  # ... ingests through machine B
        ingested = httpx.post(machines.url + "/v1/ingest", headers=bearer(session.json()["session_token"]), timeout=30,
                              json={"schema_version": 1, "rows": _rows("support", 5)})  # fmt: skip
        assert ingested.status_code == 202, ingested.text
        async with mcp_session(machines.url + "/v1/agent/mcp", bearer(agent_key)) as b:
            on_b = await ok(b, "metergraph_get_usage", days=1)
    with machines.balancer.pinned(A):
        ingested = httpx.post(machines.url + "/v1/ingest", headers=bearer(app_token), timeout=30,
                              json={"schema_version": 1, "rows": _rows("billing", 3)})  # fmt: skip
        assert ingested.status_code == 202, ingested.text
    with machines.balancer.pinned(B):
        async with mcp_session(machines.url + "/v1/agent/mcp", bearer(agent_key)) as b:
            routes = await ok(b, "metergraph_list_routes")
            usage = await ok(b, "metergraph_get_usage", days=1)
    assert sorted(r["route"] for r in routes["routes"]) == ["billing", "support"]
    assert _calls(on_b) == 5 and _calls(usage) == 8


def test_an_app_page_session_signed_in_through_one_machine_is_honoured_by_the_other(
    machines: Machines,
) -> None:
    workspace = ws()
    mg = machines.metergraph(B)
    try:
        key = mg.keys.create_agent_key(workspace, "debug", None)[1]
    finally:
        mg.close()
    with machines.balancer.pinned(A):
        signed = httpx.post(
            machines.url + "/app/sign-in", data={"key": key}, follow_redirects=False, timeout=30
        )
    assert signed.status_code == 303, signed.text
    cookie = {"mg_app_session": signed.cookies["mg_app_session"]}
    with machines.balancer.pinned(B):
        page = httpx.get(f"{machines.url}/app/w/{workspace}/webhooks", cookies=cookie, follow_redirects=False,
                         timeout=30)  # fmt: skip
    assert page.status_code == 200, page.status_code


def _calls(usage: dict[str, Any]) -> int:
    return int(usage["totals"]["calls"])


@pytest.mark.parametrize("unset", [("MG_WEBHOOK_KEY",), ("MG_WEB_SECRET", "MG_WEBHOOK_KEY")])
def test_a_machine_told_of_peers_refuses_to_start_with_secrets_of_its_own(
    unset: tuple[str, ...], tmp_path: Path
) -> None:
    """Unset, each secret falls back to a file of the machine's data directory: a page session signed or a
    webhook secret sealed on one machine would be refused by the other (decision record 0201)."""
    env = dict(os.environ)
    env.update({"TRIPTYCH_DATA_DIR": str(tmp_path / "data"), "TRIPTYCH_PEERS": "http://127.0.0.1:9",
                "MG_WEB_SECRET": "s" * 32, "MG_WEBHOOK_KEY": WEBHOOK_KEY})  # fmt: skip
    for name in unset:
        env.pop(name)
    done = subprocess.run([TRIPTYCH, "serve", "--port", str(free_port())], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("triptych: TRIPTYCH_PEERS names other machines, so set " + " and ".join(unset))
    assert "Traceback" not in done.stderr and not (tmp_path / "data").exists()


# -- kill -9 of one machine under load -----------------------------------------------------------------


async def test_a_machine_killed_under_load_loses_no_acknowledged_write_and_clients_carry_on(
    machines: Machines,
) -> None:
    """Last in the module: machine B stays dead. Eight clients write through the balancer (Metronix
    memories, Hadron nodes whose every request alternates between the machines, Metergraph ingest
    batches); B is killed with -9 once each kind has acknowledged writes; each kind then goes on until
    it has 20 more acknowledgements, through the survivor."""
    w = ws()
    mg = machines.metergraph(A)
    try:
        app_token = mg.keys.create_app_token(w)[1]
    finally:
        mg.close()
    acked: dict[str, list[str]] = {"memory": [], "node": [], "calls": []}
    after = dict.fromkeys(acked, 0)  # writes acknowledged after the kill
    reconnects: list[str] = []
    killed = asyncio.Event()

    async def writer(kind: str, connect: Any, write: Any) -> None:
        """``write(client)`` (the keys it acknowledged, or None) on clients from ``connect()``, a new one
        whenever the machine under the old one dies."""
        while after[kind] < 20:
            try:
                async with connect() as client:
                    while after[kind] < 20:
                        done = await write(client)
                        if done is not None:
                            acked[kind].extend(done)
                            after[kind] += killed.is_set()
            except Exception:  # noqa: BLE001 - the machine died under the client: reconnect
                reconnects.append(kind)
                await asyncio.sleep(0.05)

    async def memory(s: McpSession) -> list[str] | None:
        result = await s.call(
            "memory_store", content=f"note {uuid.uuid4().hex}", workspace_id=w, agent_id="load"
        )
        return None if result.is_error else [result.data["id"]]

    async def hadron_node(s: Session) -> list[str] | None:
        loc = node(SPECS, f"load{uuid.uuid4().hex[:10]}")
        return None if (await s.call("hadron_create_node", loc=loc, name=loc)).is_error else [loc]

    async def calls(http: httpx2.AsyncClient) -> list[str] | None:
        rows = _rows("load", 10)
        response = await http.post(machines.url + "/v1/ingest", json={"schema_version": 1, "rows": rows})
        return [r["request_id"] for r in rows] if response.status_code == 202 else None

    async def killer() -> None:
        while any(len(done) < 10 for done in acked.values()):
            await asyncio.sleep(0.05)
        victim = machines.servers[B].process
        assert victim is not None
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed.set()

    await asyncio.wait_for(
        asyncio.gather(
            killer(),
            *(writer("memory", lambda: mcp_session(machines.url + "/mcp", bearer(ADMIN)), memory) for _ in range(3)),
            *(writer("node", lambda: hadron(machines, None, "alice"), hadron_node) for _ in range(3)),
            *(writer("calls", lambda: httpx2.AsyncClient(headers=bearer(app_token), timeout=30), calls)
              for _ in range(2)),
        ),
        timeout=240,
    )  # fmt: skip
    # The clients that lost their machine (every alternating Hadron client did) reconnected through the
    # balancer and carried on, on the survivor.
    assert all(n >= 20 for n in after.values()), after
    assert "node" in reconnects and machines.balancer.dead == {B}
    with httpx.Client(base_url=machines.url, headers=bearer(ADMIN), timeout=30) as http:
        lost = [i for i in acked["memory"]
                if http.get(f"/api/v1/memory/records/{i}", params={"workspace_id": w}).status_code != 200]  # fmt: skip
    assert lost == []
    async with hadron(machines, None, "alice") as a:
        missing = [loc for loc in acked["node"] if (await a.call("hadron_get_node", loc=loc)).is_error]
    assert missing == []
    mg = machines.metergraph(A)
    try:
        stored = {row["request_id"] for row in mg.calls.raw_calls(w)}
    finally:
        mg.close()
    assert set(acked["calls"]) <= stored
