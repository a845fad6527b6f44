"""Git-backed memories and encrypted memories through the official MCP client, against real servers on
both engines: two organizations, readers and writers, an app key, real repositories, and what the engine
holds on disk read while the server runs (the SQLite file and its WAL, or the PostgreSQL database's files
after a checkpoint)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hadron.gitrepos import Repo
from hadron.test_cli import hadron as hadron_cli
from hadron.world import HADRON_KEY, World, as_app, as_user, build_world, node, start_world
from harness import SECRET as JWT_SECRET
from harness import ServerProcess
from postgres import database_files

from triptych.hadron.engines import open_stores
from triptych.hadron.sealing import ServerKey, rotate

pytestmark = [
    pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary"),
    pytest.mark.engines("sqlite", "postgresql"),
]

SPECS = "hrn:mem:acme.com:specs"
CATALOG = "hrn:mem:acme.com:catalog"
TEAM = "hrn:mem:acme.com:team"
VAULT = "hrn:mem:acme.com:vault"
PLANS = "hrn:mem:globex.com:plans"
GUIDES = "hrn:mem:acme.com:guides"
WORD = "OCELOT-PARSEC-9182"  # the plaintext that must never reach the disk
DATA_WORD = "TUNDRA-KESTREL-5520"


@contextmanager
def database(url: str | None) -> Iterator[None]:
    """The in-process CLI (``hadron_cli``) reads its engine from the environment, as `triptych hadron` does."""
    before = os.environ.pop("TRIPTYCH_DATABASE_URL", None)
    if url:
        os.environ["TRIPTYCH_DATABASE_URL"] = url
    try:
        yield
    finally:
        os.environ.pop("TRIPTYCH_DATABASE_URL", None)
        if before is not None:
            os.environ["TRIPTYCH_DATABASE_URL"] = before


def on_disk(data: Path, url: str | None) -> bytes:
    """What the engine holds on disk: the SQLite file and its WAL, or the PostgreSQL database's files."""
    if url is None:
        return b"".join(p.read_bytes() for p in data.glob("hadron.db*"))
    return database_files(url)


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory, storage_engine: str) -> dict[str, Repo]:
    """Fresh repositories per engine: the tests push to them."""
    root = tmp_path_factory.mktemp(f"repos-{storage_engine}")
    specs, plans, broken = Repo(root / "specs"), Repo(root / "plans"), Repo(root / "broken")
    specs.write("api/index.md", "---\ntitle: API\n---\nThe API.\n")
    specs.write("api/auth.md", "---\ntitle: Auth\nowner: security\n---\nTokens expire after an hour.\n")
    specs.write("api/limits.md", "Rate limits apply.\n")
    specs.commit("seed")
    plans.write("roadmap.md", "---\ntitle: Roadmap\n---\nGlobex plans.\n")
    plans.commit("seed")
    broken.write("x.md", "x\n")
    broken.commit("seed")
    return {"specs": specs, "plans": plans, "broken": broken}


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, repos: dict[str, Repo], module_database_url: str | None
) -> Iterator[World]:
    w = start_world(tmp_path_factory.mktemp("hadron-git"), module_database_url)
    data = w.server.data_dir
    for memory, repo in ((SPECS, "specs"), (PLANS, "plans"), (CATALOG, "broken")):
        with database(module_database_url):
            attached = hadron_cli(data, "source", "attach", memory, repos[repo].url, "--branch", "main")
        assert attached.returncode == 0, attached.stderr
    for obj in (repos["broken"].origin / "objects").rglob("*"):
        if obj.is_file() and obj.parent.name != "info":
            obj.write_bytes(b"not a git object")
    yield w
    w.server.stop()


async def test_server_info_advertises_git_sync_and_encryption(world: World) -> None:
    async with as_user(world, "bob") as bob:
        info = await bob.ok("hadron_server_info")
        assert {"git-sync", "encryption-at-rest"} <= set(info.data["capabilities"])
        assert "hadron_sync_graph" in await bob.tool_names()


async def test_sync_graph_maps_files_to_nodes_and_the_repo_wins(world: World, repos: dict[str, Repo]) -> None:
    repo = repos["specs"]
    async with as_user(world, "alice") as alice:
        first = await alice.ok("hadron_sync_graph", memoryUrn=SPECS)
        assert sorted(first.data["created"]) == ["api", "api:auth", "api:limits"]
        assert first.data["previousCommit"] is None
        auth = await alice.ok("hadron_get_node", loc=node(SPECS, "api:auth"))
        assert (auth.data["name"], auth.data["data"]) == ("Auth", {"owner": "security"})
        assert auth.data["content"] == "Tokens expire after an hour.\n"
        assert auth.data["revisions"][0]["reason"] == f"git {first.data['commit']} api/auth.md"
        await alice.ok("hadron_update_node", loc=node(SPECS, "api:limits"), content="edited in Hadron")
        repo.write("api/limits.md", "Rate limits: 100 per minute.\n")
        repo.remove("api/auth.md")
        repo.write("api/errors.md", "Errors are JSON.\n")
        sha = repo.commit("second")
        second = await alice.ok("hadron_sync_graph", memoryUrn=SPECS)
        assert second.data["commit"] == sha and second.data["previousCommit"] == first.data["commit"]
        assert (second.data["created"], second.data["updated"], second.data["deleted"]) == (
            ["api:errors"], ["api:limits"], ["api:auth"],
        )  # fmt: skip
        assert [c["loc"] for c in second.data["conflicts"]] == ["api:limits"]
        assert "conflict: api:limits" in second.text
        limits = await alice.ok("hadron_get_node", loc=node(SPECS, "api:limits"))
        assert limits.data["content"] == "Rate limits: 100 per minute.\n"
        await alice.refused("hadron_get_node", "node_not_found", loc=node(SPECS, "api:auth"))
        # the active memory is the default
        await alice.ok("hadron_set_active_memory", memoryUrn=SPECS)
        third = await alice.ok("hadron_sync_graph")
        assert third.data["counts"]["unchanged"] == 3 and third.data["created"] == []


async def test_a_move_in_a_git_backed_memory_is_mirrored_to_its_repository(
    world: World, tmp_path: Path
) -> None:
    # A memory and a repository of its own: the test passes alone and in any order of the module's tests.
    repo = Repo(tmp_path / "guides")
    repo.write("api/errors.md", "Errors are JSON.\n")
    repo.commit("seed")
    with database(world.database_url):
        made = hadron_cli(
            world.server.data_dir, "memory", "create", "guides", "--class", "knowledge", "--org", "acme.com"
        )
        assert made.returncode == 0, made.stderr
        attached = hadron_cli(world.server.data_dir, "source", "attach", GUIDES, repo.url, "--branch", "main")
        assert attached.returncode == 0, attached.stderr
    async with as_user(world, "alice") as alice:
        synced = await alice.ok("hadron_sync_graph", memoryUrn=GUIDES)
        assert synced.data["created"] == ["api:errors"]
        await alice.ok(
            "hadron_move_node", urn=node(GUIDES, "api:errors"), targetUrn=node(GUIDES, "reference:errors")
        )
        repo.pull()
        assert repo.read("api/errors.md") is None
        assert repo.read("reference/errors.md") == "Errors are JSON.\n"
        again = await alice.ok("hadron_sync_graph", memoryUrn=GUIDES)
        assert (again.data["created"], again.data["deleted"]) == ([], [])


async def test_sync_graph_refusals(world: World) -> None:
    async with as_user(world, "bob") as bob:  # READER of acme.com: reads specs, may not sync it
        await bob.refused("hadron_sync_graph", "FORBIDDEN", memoryUrn=SPECS)
    async with as_user(world, "dave") as dave:  # another organization: acme's memory does not exist for him
        await dave.refused("hadron_sync_graph", "memory_not_found", memoryUrn=SPECS)
    async with as_app(world, world.other_app_key) as helper:  # globex's app key
        await helper.refused("hadron_sync_graph", "memory_not_found", memoryUrn=SPECS)
    async with as_user(world, "alice") as alice:
        missing = await alice.refused("hadron_sync_graph", "NO_GIT_SOURCE", memoryUrn=TEAM)
        assert "source attach" in missing.text
        before = await alice.ok("hadron_list_nodes", memoryUrn=CATALOG)
        failed = await alice.refused("hadron_sync_graph", "GIT_SYNC_FAILED", memoryUrn=CATALOG)
        assert "left as it was" in failed.text
        after = await alice.ok("hadron_list_nodes", memoryUrn=CATALOG)
        assert after.data == before.data
        await alice.refused("hadron_sync_graph", "no_active_memory")


async def test_each_organization_syncs_its_own_repository(world: World) -> None:
    async with as_user(world, "dave") as dave:
        synced = await dave.ok("hadron_sync_graph", memoryUrn=PLANS)
        assert synced.data["created"] == ["roadmap"]
    async with as_user(world, "alice") as alice:
        await alice.refused("hadron_get_node", "memory_not_found", loc=node(PLANS, "roadmap"))
        await alice.refused("hadron_sync_graph", "memory_not_found", memoryUrn=PLANS)


async def test_an_encrypted_memory_is_unreadable_on_disk_and_readable_through_the_server(
    world: World,
) -> None:
    async with as_user(world, "alice") as alice:
        await alice.ok(
            "hadron_create_node", loc=node(VAULT, "keys"), name="Keys", content=f"the code is {WORD}",
            data={"pin": DATA_WORD},
        )  # fmt: skip
        await alice.ok(
            "hadron_update_node_data", nodeUrn=node(VAULT, "keys"), data={"backup": DATA_WORD + "-2"}
        )
        got = await alice.ok("hadron_get_node", loc=node(VAULT, "keys"))
        assert got.data["content"] == f"the code is {WORD}"
        assert got.data["data"] == {"pin": DATA_WORD, "backup": DATA_WORD + "-2"}
        # the keyword index holds only sealed text: the plaintext finds nothing
        search = await alice.ok("hadron_find_nodes", query=WORD, memoryUrn=VAULT, mode="keyword")
        assert search.data["hits"] == []
    raw = on_disk(world.server.data_dir, world.database_url)
    assert WORD.encode() not in raw and DATA_WORD.encode() not in raw
    assert b"ocelot" not in raw.lower()  # nor as the full-text index's lower-cased tokens
    async with as_user(world, "bob") as bob:  # READER: reads in clear, may not write
        seen = await bob.ok("hadron_get_node", loc=node(VAULT, "keys"))
        assert seen.data["content"] == f"the code is {WORD}"
        await bob.refused("hadron_update_node", "FORBIDDEN", loc=node(VAULT, "keys"), content="x")
    async with as_user(world, "dave") as dave:
        await dave.refused("hadron_get_node", "memory_not_found", loc=node(VAULT, "keys"))


async def test_moves_into_or_out_of_an_encrypted_memory_are_refused(world: World) -> None:
    async with as_user(world, "alice") as alice:
        await alice.ok("hadron_create_node", loc=node(VAULT, "outbound"), name="Out", content="sealed")
        await alice.ok("hadron_create_node", loc=node(SPECS, "inbound"), name="In", content="clear")
        for urn, target in (
            (node(VAULT, "outbound"), node(SPECS, "out")),
            (node(SPECS, "inbound"), node(VAULT, "in")),
        ):
            refused = await alice.refused("hadron_move_node", "BAD_USER_INPUT", urn=urn, targetUrn=target)
            assert refused.data["error"]["data"]["reason"] == "encrypted_memory"
        await alice.ok("hadron_get_node", loc=node(VAULT, "outbound"))


# ─── the key: missing, wrong, rotated ────────────────────────────────────────


def small_world(data: Path, url: str | None) -> None:
    from triptych.hadron.surface import Hadron

    h = Hadron.open(data / "hadron.db", database_url=url)
    admin = h.admin()
    admin.create_org("acme.com", "Acme")
    admin.create_user("alice")
    admin.add_org_member("acme.com", "alice", "OWNER")
    admin.create_memory("notes", "knowledge", org="acme.com", name="Notes")
    h.close()


def env(key: ServerKey | None, url: str | None) -> dict[str, str]:
    out = {"TRIPTYCH_AUTH_ENABLED": "true", "TRIPTYCH_JWT_SECRET": JWT_SECRET, "TRIPTYCH_HADRON_KEY": ""}
    if key is not None:
        out["TRIPTYCH_HADRON_KEY"] = key.encoded()
    if url is not None:
        out["TRIPTYCH_DATABASE_URL"] = url
    return out


async def test_a_server_without_a_key_refuses_an_encrypted_memory_made_while_it_runs(
    tmp_path: Path, database_url: str | None
) -> None:
    data = tmp_path / "data"
    small_world(data, database_url)
    server = ServerProcess(data, env(None, database_url)).start()
    try:
        w = World(server, "", "")
        async with as_user(w, "alice") as alice:
            info = await alice.ok("hadron_server_info")
            assert "encryption-at-rest" not in info.data["capabilities"]
            create = ("memory", "create", "safe", "--class", "knowledge", "--org", "acme.com", "--encrypted")
            with database(database_url):  # the admin command acts on the server's engine
                made = hadron_cli(data, *create)
            assert made.returncode == 0
            refused = await alice.refused(
                "hadron_create_node", "ENCRYPTION_KEY_MISSING", loc=node("hrn:mem:acme.com:safe", "a"), name="A",
                content="never stored in clear",
            )  # fmt: skip
            assert "TRIPTYCH_HADRON_KEY_FILE" in refused.text
    finally:
        server.stop()
    with pytest.raises(
        RuntimeError, match=r"encrypted memory needs the server key \(key id not yet recorded\)"
    ):
        ServerProcess(data, env(None, database_url)).start()


async def test_a_rotated_or_wrong_key_is_refused_never_read_as_garbage(
    tmp_path: Path, database_url: str | None
) -> None:
    data = tmp_path / "data"
    build_world(data, database_url)
    first = ServerProcess(data, env(HADRON_KEY, database_url)).start()
    new = ServerKey(b"r" * 32)
    try:
        w = World(first, "", "")
        async with as_user(w, "alice") as alice:
            await alice.ok("hadron_create_node", loc=node(VAULT, "k"), name="K", content=WORD)
            stores = open_stores(data / "hadron.db", database_url, None, None)  # the key table's engine
            try:
                rotate(stores.db, HADRON_KEY, new)  # while this server still holds the old key
            finally:
                stores.close()
            stale = await alice.refused("hadron_get_node", "ENCRYPTION_KEY_MISMATCH", loc=node(VAULT, "k"))
            assert WORD not in stale.text
    finally:
        first.stop()
    with pytest.raises(
        RuntimeError, match=f"id {HADRON_KEY.id}\\) is not .* \\(id {new.id}\\) .*retired by a key rotation"
    ):
        ServerProcess(data, env(HADRON_KEY, database_url)).start()
    wrong = ServerKey(b"x" * 32)
    with pytest.raises(
        RuntimeError, match=f"id {wrong.id}\\) is not the key this database is sealed with \\(id {new.id}\\)"
    ):
        ServerProcess(data, env(wrong, database_url)).start()
    rotated = ServerProcess(data, env(new, database_url)).start()
    try:
        async with as_user(World(rotated, "", ""), "alice") as alice:
            got = await alice.ok("hadron_get_node", loc=node(VAULT, "k"))
            assert got.data["content"] == WORD
    finally:
        rotated.stop()
