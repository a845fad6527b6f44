"""The store contract suites: one module per Hadron store protocol, written once and run against every
engine that implements it (``pytest.mark.engines`` in each module), as Kinto runs one storage test suite
against each backend. A store method is specified here once and proven on SQLite and PostgreSQL alike;
service tests need not repeat an engine parameter for what these cover.

Each test gets the stores of a fresh database (``open_stores``: a temporary ``hadron.db``, or an empty
PostgreSQL database of the session's cluster) holding one organization, one user, one App and one
knowledge memory (``Seed``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from postgres import PostgresCluster

from triptych.hadron.domain.model import App, Memory, NodeRecord, Org, User
from triptych.hadron.engines import Stores, open_stores
from triptych.hadron.store import new_id

AT = "2026-12-01T09:00:00.000Z"


@dataclass
class Seed:
    stores: Stores
    org: Org
    user: User
    app: App
    memory: Memory


def add_memory(stores: Stores, org: Org, slug: str, policy: str = "none") -> Memory:
    memory = Memory(new_id(), org.root, slug, slug.title(), "", "knowledge", org.id, None, None,
                    embedding_policy=policy)  # fmt: skip
    return stores.tenancy.add_memory(memory)


def node(memory: Memory, loc: str, **fields: object) -> NodeRecord:
    """A node record at ``loc`` (its name is the loc unless ``fields`` say otherwise)."""
    values: dict[str, object] = dict(
        id=new_id(), memory_id=memory.id, loc=loc, name=loc, node_type="info", object_type=None,
        description=None, content="x", seq=None, tags=[], properties={}, data=None, llm_model=None,
        ai_agent=None, revision=1, created_at=AT, updated_at=AT, created_by="a", updated_by="a",
    )  # fmt: skip
    values.update(fields)
    return NodeRecord(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def migrated_template(postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PostgreSQL database holding every Hadron migration and no rows: each test's database is a copy
    (``CREATE DATABASE ... TEMPLATE``), which spares each test the migrations (about a second each)."""
    url = postgres.create_database("hadron_template")
    open_stores(tmp_path_factory.mktemp("template") / "hadron.db", url, 4, "letters").close()
    return url.rsplit("/", 1)[1]


@pytest.fixture
def contract_database_url(request: pytest.FixtureRequest, storage_engine: str) -> str | None:
    """None on SQLite (a temporary ``hadron.db``); on PostgreSQL a fresh copy of ``migrated_template``."""
    if storage_engine == "sqlite":
        return None
    postgres: PostgresCluster = request.getfixturevalue("postgres")
    template = request.getfixturevalue("migrated_template")
    name = f"c_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'.encode())
    return postgres.url(name)


@pytest.fixture
def seed(tmp_path: Path, contract_database_url: str | None) -> Iterator[Seed]:
    stores = open_stores(tmp_path / "hadron.db", contract_database_url, 4, "letters")
    try:
        tenancy = stores.tenancy
        org = tenancy.add_org("acme.com", "Acme")
        user = tenancy.add_user("alice", "Alice")
        tenancy.set_org_member(org.id, user.id, "OWNER")
        app = tenancy.add_app("bot", "Bot", org, None)
        yield Seed(stores, org, user, app, add_memory(stores, org, "specs"))
    finally:
        stores.close()
