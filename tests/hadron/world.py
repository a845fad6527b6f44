"""A Hadron world for contract tests: two organizations, users with different roles, an app with a key,
memories of every owner kind, and a real `triptych serve` over it (auth on)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from harness import SECRET, ServerProcess, token
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from triptych.hadron.sealing import ServerKey
from triptych.hadron.services.tenancy import TenancyAdmin
from triptych.hadron.surface import Hadron

# The server key of test worlds: acme.com:vault is an encrypted memory, sealed under it.
HADRON_KEY = ServerKey(bytes(range(32)))

SCHEMA = {
    "collections": {
        "competitor": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "price": {"type": "number"},
                "tier": {"enum": ["a", "b"]},
            },
            "required": ["name"],
        }
    }
}


@dataclass
class World:
    server: ServerProcess
    app_key: str
    other_app_key: str
    ids: dict[str, str] = field(default_factory=dict)
    database_url: str | None = None  # server mode: the PostgreSQL database the server stores Hadron in

    @property
    def url(self) -> str:
        return self.server.url + "/hadron/mcp"


def build_world(data_dir: Path, database_url: str | None = None) -> tuple[str, str]:
    """acme.com: alice OWNER, bob READER, carol CONTRIBUTOR; globex.com: dave ADMIN, carol CONTRIBUTOR;
    erin belongs nowhere. Memories: acme.com:specs (knowledge), acme.com:team (group: carol rw, bob ro),
    acme.com:botmem (app-owned by acme.com:bot), acme.com:catalog (knowledge, schema'd),
    acme.com:vault (knowledge, encrypted), globex.com:plans (knowledge), erin:notes (private),
    alice:journal (personal, shared read-only with bob). With ``database_url``, in that PostgreSQL
    database (server mode) instead of the data directory."""
    hadron = Hadron.open(data_dir / "hadron.db", database_url=database_url)
    admin = hadron.admin()
    try:
        admin.create_org("acme.com", "Acme")
        admin.create_org("globex.com", "Globex")
        for handle in ("alice", "bob", "carol", "dave", "erin"):
            admin.create_user(handle)
        admin.add_org_member("acme.com", "alice", "OWNER")
        admin.add_org_member("acme.com", "bob", "READER")
        admin.add_org_member("acme.com", "carol", "CONTRIBUTOR")
        admin.add_org_member("globex.com", "dave", "ADMIN")
        admin.add_org_member("globex.com", "carol", "CONTRIBUTOR")
        admin.create_app("bot", "Acme Bot", "acme.com", None)
        admin.create_app("helper", "Helper", "globex.com", None)
        admin.create_app("scratch", "Helper", None, "carol")  # same display name as globex's app
        admin.add_app_member("hrn:app:acme.com:bot", "bob", "CONTRIBUTOR")
        admin.create_memory("specs", "knowledge", org="acme.com", name="Specs")
        admin.create_memory("team", "group", org="acme.com", name="Team")
        admin.grant("hrn:mem:acme.com:team", "read-write", user="carol")
        admin.grant("hrn:mem:acme.com:team", "read-only", user="bob")
        admin.create_memory("botmem", "app", app="hrn:app:acme.com:bot", name="Bot memory")
        admin.create_memory("catalog", "knowledge", org="acme.com", name="Catalog")
        admin.set_schema("hrn:mem:acme.com:catalog", json.dumps(SCHEMA))
        admin.create_memory("vault", "knowledge", org="acme.com", name="Vault", encrypted=True)
        admin.create_memory("plans", "knowledge", org="globex.com", name="Plans")
        admin.create_memory("notes", "private", user="erin", name="Erin's notes")
        admin.create_memory("journal", "personal", user="alice", name="Journal")
        admin.grant("hrn:mem:alice:journal", "read-only", user="bob")
        admin.attach("hrn:app:acme.com:bot", "hrn:mem:acme.com:specs")
        _, key = admin.create_app_key("hrn:app:acme.com:bot", "tests")
        _, other = admin.create_app_key("hrn:app:globex.com:helper", "tests")
    finally:
        hadron.close()
    return key, other


def engine(database_url: str | None) -> dict[str, str]:
    """The server environment for the engine ``database_url`` selects (none: the embedded SQLite)."""
    return {"TRIPTYCH_DATABASE_URL": database_url} if database_url else {}


@contextmanager
def admin_of(data_dir: Path, database_url: str | None = None) -> Iterator[TenancyAdmin]:
    """The admin services over a world's stores (what `triptych hadron ...` runs), closed afterwards."""
    hadron = Hadron.open(data_dir / "hadron.db", database_url=database_url)
    try:
        yield hadron.admin()
    finally:
        hadron.close()


def serve(data_dir: Path, key: str, other: str, database_url: str | None = None) -> World:
    """A real `triptych serve` (auth on) over a world built in ``data_dir`` (or ``database_url``)."""
    env = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": SECRET, **engine(database_url)}
    return World(ServerProcess(data_dir, env).start(), key, other, database_url=database_url)


def start_world(tmp: Path, database_url: str | None = None) -> World:
    data_dir = tmp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    key, other = build_world(data_dir, database_url)
    env = {
        "TRIPTYCH_AUTH_ENABLED": "true",
        "TRIPTYCH_JWT_SECRET": SECRET,
        "TRIPTYCH_HADRON_KEY": HADRON_KEY.encoded(),
        **engine(database_url),
    }
    return World(ServerProcess(data_dir, env).start(), key, other, database_url=database_url)


class Session:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, tool: str, /, **arguments: Any) -> Result:
        result = await self.client.call_tool(tool, arguments)
        text = result.content[0].text  # type: ignore[union-attr]
        return Result(bool(result.is_error), text, result.structured_content or {})

    async def ok(self, tool: str, /, **arguments: Any) -> Result:
        result = await self.call(tool, **arguments)
        assert not result.is_error, f"{tool} refused: {result.text}"
        return result

    async def refused(self, tool: str, code: str, /, **arguments: Any) -> Result:
        result = await self.call(tool, **arguments)
        assert result.is_error, f"{tool} was not refused: {result.text}"
        assert result.code == code, f"{tool}: expected {code}, got {result.text}"
        return result

    async def tool_names(self) -> list[str]:
        return [tool.name for tool in (await self.client.list_tools()).tools]


@dataclass
class Result:
    is_error: bool
    text: str
    data: dict[str, Any]

    @property
    def code(self) -> str | None:
        return self.data.get("error", {}).get("code") if self.is_error else None


def user_headers(user: str, client_id: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token(user=user)}"}
    if client_id is not None:
        headers["X-Hadron-Client-Id"] = client_id
    return headers


@asynccontextmanager
async def connect(world: World, headers: dict[str, str] | None = None) -> AsyncIterator[Session]:
    async with httpx2.AsyncClient(headers=headers or {}, timeout=60.0) as http:
        async with Client(streamable_http_client(world.url, http_client=http)) as client:
            yield Session(client)


@asynccontextmanager
async def as_user(world: World, user: str, client_id: str | None = None) -> AsyncIterator[Session]:
    async with connect(world, user_headers(user, client_id)) as session:
        yield session


@asynccontextmanager
async def as_app(world: World, key: str | None = None) -> AsyncIterator[Session]:
    async with connect(world, {"Authorization": f"Bearer {key or world.app_key}"}) as session:
        yield session


def fresh() -> str:
    """A loc segment no other test uses."""
    return "t" + uuid.uuid4().hex[:10]


def node(memory: str, loc: str) -> str:
    """The node URN of ``loc`` in the memory whose URN is ``memory``."""
    return memory.replace("hrn:mem:", "hrn:node:") + ":" + loc
