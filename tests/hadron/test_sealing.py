"""Encryption at rest on the service layer, on both engines: what lands on disk (the SQLite file and its
WAL, or the PostgreSQL database's own files), the key checks, rotation, and what an encrypted memory
refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hadron.world import HADRON_KEY
from harness import run_threads
from postgres import database_files

from triptych.hadron.errors import BadInput, EncryptionKeyMismatch, EncryptionKeyMissing
from triptych.hadron.identity import HadronCaller
from triptych.hadron.sealing import KeyConfigError, ServerKey, check_key, load_key, rotate
from triptych.hadron.services.nodes import NodeFields
from triptych.hadron.services.selection import SessionState
from triptych.hadron.surface import Hadron

KEY = ServerKey(b"k" * 32)
SECRET = "ZEBRA-QUASAR-7731"  # a word no sealed byte string will contain by chance
DATA_SECRET = "MANGO-VORTEX-4410"


pytestmark = pytest.mark.engines("sqlite", "postgresql")


def world(path: Path, key: ServerKey | None, url: str | None) -> Hadron:
    h = Hadron.open(path, key=key, database_url=url)
    admin = h.admin()
    admin.create_org("acme.com", "Acme")
    admin.create_user("alice")
    admin.add_org_member("acme.com", "alice", "OWNER")
    admin.create_memory("vault", "knowledge", org="acme.com", name="Vault", encrypted=True)
    admin.create_memory("open", "knowledge", org="acme.com", name="Open")
    return h


@pytest.fixture
def sealed(tmp_path: Path, database_url: str | None) -> Iterator[Hadron]:
    h = world(tmp_path / "hadron.db", KEY, database_url)
    check_key(h.db, KEY)
    yield h
    h.close()


def alice(h: Hadron) -> tuple[HadronCaller, SessionState]:
    caller = HadronCaller("user", "alice", user=h.tenancy.user_by_handle("alice"))
    return caller, h.selections.session(caller, "s", None)


def fields(**values: object) -> NodeFields:
    return NodeFields(dict(values), frozenset(values))


def write_secrets(h: Hadron, memory: str) -> None:
    caller, state = alice(h)
    loc = f"hrn:node:acme.com:{memory}:plans"
    h.nodes.create(
        caller, state, loc, fields(name="Plans", content=f"first {SECRET}", data={"k": DATA_SECRET}), None
    )
    h.nodes.update(caller, state, loc, fields(content=f"second {SECRET} draft"), None, "edit")
    h.nodes.merge_data(caller, state, loc, {"more": f"{DATA_SECRET} again"})


def reopen(h: Hadron, path: Path, key: ServerKey | None) -> Hadron:
    """Another start over the same stores (the same file, or the same PostgreSQL database)."""
    return Hadron.open(path, key=key, database_url=h.stores.pg.url if h.stores.pg is not None else None)


def flush(h: Hadron) -> None:
    """Everything committed onto the engine's files: the WAL into the SQLite file, or the PostgreSQL
    buffers into the database's files."""
    h.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)" if h.stores.pg is None else "CHECKPOINT")


def on_disk(h: Hadron, path: Path) -> bytes:
    """Every byte the engine holds for these stores: the SQLite file and its WAL, or every file of the
    PostgreSQL database (its tables, TOAST tables and indexes) after a checkpoint."""
    if h.stores.pg is None:
        return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())
    return database_files(h.stores.pg.url)


def test_an_encrypted_memory_leaves_no_plaintext_in_the_file_its_wal_or_its_fts(
    sealed: Hadron, tmp_path: Path
) -> None:
    write_secrets(sealed, "vault")
    path = tmp_path / "hadron.db"
    raw = on_disk(sealed, path)
    assert SECRET.encode() not in raw and DATA_SECRET.encode() not in raw
    flush(sealed)
    raw = on_disk(sealed, path)
    assert SECRET.encode() not in raw and DATA_SECRET.encode() not in raw
    assert b"quasar" not in raw and b"mango" not in raw  # nor lower-cased, as a keyword index would keep it
    assert sealed.db.conn.execute("SELECT count(*) FROM node_embeddings").fetchone()[0] == 0
    caller, state = alice(sealed)
    _, node = sealed.nodes.find(caller, state, "hrn:node:acme.com:vault:plans")
    assert node.content == f"second {SECRET} draft"
    assert node.data == {"k": DATA_SECRET, "more": f"{DATA_SECRET} again"}


def test_the_same_writes_to_an_open_memory_are_visible_on_disk(sealed: Hadron, tmp_path: Path) -> None:
    """The control: the scan above would find plaintext if there were any."""
    write_secrets(sealed, "open")
    assert SECRET.encode() in on_disk(sealed, tmp_path / "hadron.db")


def test_a_missing_or_wrong_key_stops_the_start(tmp_path: Path, database_url: str | None) -> None:
    h = world(tmp_path / "hadron.db", KEY, database_url)
    try:
        with pytest.raises(KeyConfigError, match="1 encrypted memory needs the server key"):
            check_key(h.db, None)
        check_key(h.db, KEY)  # records the key in use
        with pytest.raises(KeyConfigError, match="not the key this database is sealed with"):
            check_key(h.db, ServerKey(b"w" * 32))
        check_key(h.db, KEY)
    finally:
        h.close()


def test_rows_written_in_clear_before_this_build_are_sealed_at_start(
    tmp_path: Path, database_url: str | None
) -> None:
    path = tmp_path / "hadron.db"
    old = world(path, KEY, database_url)
    old.graph.codec = None  # what a build without encryption at rest wrote into an encrypted memory
    write_secrets(old, "vault")
    flush(old)
    assert SECRET.encode() in on_disk(old, path)
    h = reopen(old, path, KEY)
    old.close()
    try:
        check_key(h.db, KEY)
        raw = on_disk(h, path)
        assert SECRET.encode() not in raw and DATA_SECRET.encode() not in raw
        assert b"quasar" not in raw.lower()  # nor the full-text index's lower-cased tokens
        caller, state = alice(h)
        _, node = h.nodes.find(caller, state, "hrn:node:acme.com:vault:plans")
        assert node.content == f"second {SECRET} draft" and node.data == {
            "k": DATA_SECRET,
            "more": f"{DATA_SECRET} again",
        }
        check_key(h.db, KEY)  # once per memory
    finally:
        h.close()


def test_two_servers_starting_at_once_seal_the_clear_rows_once(
    tmp_path: Path, database_url: str | None
) -> None:
    path = tmp_path / "hadron.db"
    old = world(path, KEY, database_url)
    old.graph.codec = None
    write_secrets(old, "vault")
    starting = [reopen(old, path, KEY) for _ in range(2)]
    old.close()
    try:
        assert run_threads(lambda i: check_key(starting[i].db, KEY), 2) == []
        assert SECRET.encode() not in on_disk(starting[0], path)
        caller, state = alice(starting[1])
        _, node = starting[1].nodes.find(caller, state, "hrn:node:acme.com:vault:plans")
        assert node.content == f"second {SECRET} draft"  # sealed once: a second sealing would not open
    finally:
        for h in starting:
            h.close()


def test_without_encrypted_memories_any_key_or_none_starts(tmp_path: Path, database_url: str | None) -> None:
    h = Hadron.open(tmp_path / "hadron.db", key=None, database_url=database_url)
    try:
        check_key(h.db, None)
        check_key(h.db, KEY)
        check_key(h.db, None)  # nothing is sealed: no key is needed
        other = ServerKey(b"o" * 32)
        check_key(h.db, other)  # nothing is sealed under KEY: the new key becomes the key in use
        h.admin().create_org("acme.com", "Acme")
        h.admin().create_memory("vault", "knowledge", org="acme.com", encrypted=True)
        with pytest.raises(KeyConfigError, match=f"id {other.id}"):
            check_key(h.db, KEY)
    finally:
        h.close()


def test_a_wrong_key_reads_as_a_refusal_never_as_garbage(sealed: Hadron, tmp_path: Path) -> None:
    write_secrets(sealed, "vault")
    memory = sealed.admin().memory("hrn:mem:acme.com:vault")
    other = reopen(sealed, tmp_path / "hadron.db", ServerKey(b"w" * 32))
    keyless = reopen(sealed, tmp_path / "hadron.db", None)
    try:
        with pytest.raises(EncryptionKeyMismatch):
            other.graph.node_by_loc(memory.id, "plans")
        with pytest.raises(EncryptionKeyMissing):
            keyless.graph.node_by_loc(memory.id, "plans")
        caller, state = alice(keyless)
        with pytest.raises(EncryptionKeyMissing):
            keyless.nodes.create(
                caller, state, "hrn:node:acme.com:vault:x", fields(name="x", content="y"), None
            )
    finally:
        other.close()
        keyless.close()


def test_rotation_reseals_nodes_and_revisions_under_the_new_key(sealed: Hadron, tmp_path: Path) -> None:
    write_secrets(sealed, "vault")
    new = ServerKey(b"n" * 32)
    done = rotate(sealed.db, KEY, new)
    assert (done.memories, done.nodes, done.old, done.new) == (1, 1, KEY.id, new.id)
    assert done.revisions >= 3
    stored = " ".join(
        str(r[0])
        for r in sealed.db.conn.execute(
            "SELECT content FROM nodes UNION ALL SELECT snapshot FROM node_revisions"
        ).fetchall()
    )
    assert KEY.id not in stored and new.id in stored
    with pytest.raises(KeyConfigError, match="retired by a key rotation"):
        check_key(sealed.db, KEY)
    rotated = reopen(sealed, tmp_path / "hadron.db", new)
    try:
        check_key(rotated.db, new)
        memory = rotated.admin().memory("hrn:mem:acme.com:vault")
        node = rotated.graph.node_by_loc(memory.id, "plans")
        assert node is not None and node.content == f"second {SECRET} draft"
    finally:
        rotated.close()
    with pytest.raises(KeyConfigError, match="the new key is the key in use"):
        rotate(sealed.db, new, new)


def test_moves_into_and_out_of_an_encrypted_memory_are_refused(sealed: Hadron) -> None:
    write_secrets(sealed, "vault")
    write_secrets(sealed, "open")
    caller, state = alice(sealed)
    for src, dst in (("vault", "open"), ("open", "vault")):
        with pytest.raises(BadInput) as refused:
            sealed.nodes.move(
                caller,
                state,
                f"hrn:node:acme.com:{src}:plans",
                f"hrn:node:acme.com:{dst}:moved",
                False,
                False,
            )
        assert refused.value.details["reason"] == "encrypted_memory"


def test_keys_load_from_the_environment_or_a_key_file(tmp_path: Path) -> None:
    assert load_key() == HADRON_KEY  # what tests/conftest.py gives every server the tests start
    assert load_key({}) is None
    assert load_key({"TRIPTYCH_HADRON_KEY": KEY.encoded()}) == KEY
    assert load_key({"TRIPTYCH_HADRON_KEY": KEY.raw.hex()}) == KEY
    file = tmp_path / "key"
    file.write_text(KEY.encoded() + "\n")
    assert load_key({"TRIPTYCH_HADRON_KEY_FILE": str(file)}) == KEY
    with pytest.raises(KeyConfigError, match="not a 32-byte key"):
        load_key({"TRIPTYCH_HADRON_KEY": "c2hvcnQ="})
    with pytest.raises(KeyConfigError, match="cannot be read"):
        load_key({"TRIPTYCH_HADRON_KEY_FILE": str(tmp_path / "missing")})


def test_channel_messages_of_an_encrypted_memory_are_sealed_too(
    tmp_path: Path, database_url: str | None
) -> None:
    path = tmp_path / "hadron.db"
    h = world(path, KEY, database_url)
    try:
        admin = h.admin()
        admin.create_app("bot", "Bot", "acme.com", None)
        admin.create_memory("botsafe", "app", app="hrn:app:acme.com:bot", encrypted=True)
        check_key(h.db, KEY)
        caller, _ = alice(h)
        memory, channel = h.team.channels.create_channel(caller, "hrn:mem:acme.com:botsafe", "ops", "Ops")
        h.team.channels.post(caller, channel, memory, f"deploy key is {SECRET}", None, None)
        flush(h)
        assert SECRET.encode() not in on_disk(h, path)
        fresh = h.team.store.channel(channel.id)  # with its last seq
        assert fresh is not None
        page = h.team.channels.read(caller, fresh, memory, None, None, None, 10, 0)
        assert [m.body for m in page.messages] == [f"deploy key is {SECRET}"]
        new = ServerKey(b"c" * 32)
        assert rotate(h.db, KEY, new).messages == 1
        rotated = reopen(h, path, new)
    finally:
        h.close()
    try:
        caller, _ = alice(rotated)
        memory = rotated.admin().memory("hrn:mem:acme.com:botsafe")
        rows = rotated.db.conn.execute("SELECT body FROM channel_messages").fetchall()
        assert [r[0].split("$")[1] for r in rows] == [new.id]
        channel = rotated.team.store.channel_at(memory.id, "ops")
        assert channel is not None
        page = rotated.team.channels.read(caller, channel, memory, None, None, None, 10, 0)
        assert [m.body for m in page.messages] == [f"deploy key is {SECRET}"]
    finally:
        rotated.close()
