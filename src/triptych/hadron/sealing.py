"""Encryption at rest for encrypted memories: the server key, per-memory keys, and the node sealer.

A node of an encrypted memory keeps its ``content`` and ``data`` sealed with AES-256-GCM in every
row that holds them (``nodes``, which the keyword index reads, and ``node_revisions`` snapshots). The
key of a memory is derived (HKDF-SHA256) from the server key and the memory id, so one leaked
memory key opens one memory. Each sealed value names the server key's id, and the associated
data binds it to its node and field, so a value copied onto another node does not open.

    hx1$<key id>$<base64(12-byte nonce || ciphertext || tag)>     content
    {"$sealed": "hx1$..."}                                         data (still a JSON object)

The server key comes from ``TRIPTYCH_HADRON_KEY`` (32 bytes, base64 or hex) or from the file
named by ``TRIPTYCH_HADRON_KEY_FILE``. The database records the id of the key in use
(``hadron_keys``); a server started with another key, or none while encrypted memories exist,
refuses to start (``check_key``) instead of serving garbage. ``rotate`` re-seals everything under
a new key in one transaction. Encrypted memories are never embedded (``services/embedding.py``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from triptych.core.db import Database
from triptych.core.pg import NativeDatabase
from triptych.hadron.dialect import dialect_of
from triptych.hadron.domain.model import NodeRecord
from triptych.hadron.errors import EncryptionKeyMismatch, EncryptionKeyMissing
from triptych.hadron.store import utcnow

ENV_KEY = "TRIPTYCH_HADRON_KEY"
ENV_KEY_FILE = "TRIPTYCH_HADRON_KEY_FILE"
PREFIX = "hx1$"
SEALED = "$sealed"
KEY_HINT = (
    f"Set {ENV_KEY_FILE} to the key file (or {ENV_KEY} to the key); `triptych hadron key new` makes one"
)

MIGRATIONS = [
    """
    CREATE TABLE hadron_keys (
        key_id TEXT PRIMARY KEY, created_at TEXT NOT NULL, retired_at TEXT
    );
    """,
    # Encrypted memories whose rows were all checked sealed once (rows from before encryption at rest).
    """
    CREATE TABLE hadron_sealed_memories (memory_id TEXT PRIMARY KEY, sealed_at TEXT NOT NULL);
    """,
]


class KeyConfigError(ValueError):
    """The server key is missing, malformed or not the one the database was sealed with (startup)."""


@dataclass(frozen=True, slots=True)
class ServerKey:
    raw: bytes

    @property
    def id(self) -> str:
        return hashlib.sha256(b"triptych-hadron-key-id\0" + self.raw).hexdigest()[:16]

    @classmethod
    def generate(cls) -> ServerKey:
        return cls(secrets.token_bytes(32))

    def encoded(self) -> str:
        return base64.urlsafe_b64encode(self.raw).decode()

    @classmethod
    def parse(cls, text: str, where: str) -> ServerKey:
        text = text.strip()
        raw: bytes | None = None
        if len(text) == 64:
            try:
                raw = bytes.fromhex(text)
            except ValueError:
                raw = None
        if raw is None:
            try:
                raw = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
            except (binascii.Error, ValueError):
                raw = None
        if raw is None or len(raw) != 32:
            raise KeyConfigError(
                f"{where} is not a 32-byte key (base64 or 64 hex digits); `triptych hadron key new` makes one"
            )
        return cls(raw)


def load_key(environ: Mapping[str, str] | None = None) -> ServerKey | None:
    """The server key from the environment or its key file; None when neither is set."""
    env = os.environ if environ is None else environ
    if env.get(ENV_KEY):
        return ServerKey.parse(env[ENV_KEY], ENV_KEY)
    if env.get(ENV_KEY_FILE):
        path = Path(env[ENV_KEY_FILE]).expanduser()
        try:
            text = path.read_text()
        except OSError as exc:
            raise KeyConfigError(f"{ENV_KEY_FILE}={path} cannot be read ({exc.strerror})") from exc
        return ServerKey.parse(text, f"the key file {path}")
    return None


def write_key_file(path: Path, key: ServerKey) -> None:
    """A new key file readable by its owner only; an existing file is never overwritten."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.encoded() + "\n")


class MemoryCipher:
    """AES-GCM under the memory keys derived from one server key."""

    def __init__(self, key: ServerKey) -> None:
        self.key = key
        self._ciphers: dict[str, AESGCM] = {}

    def _for(self, memory_id: str) -> AESGCM:
        cipher = self._ciphers.get(memory_id)
        if cipher is None:
            hkdf = HKDF(
                algorithm=hashes.SHA256(),
                length=32,
                salt=b"triptych-hadron",
                info=b"memory:" + memory_id.encode(),
            )
            cipher = self._ciphers[memory_id] = AESGCM(hkdf.derive(self.key.raw))
        return cipher

    def seal(self, memory_id: str, node_id: str, field: str, text: str) -> str:
        nonce = secrets.token_bytes(12)
        body = self._for(memory_id).encrypt(nonce, text.encode(), f"{node_id}:{field}".encode())
        return f"{PREFIX}{self.key.id}${base64.b64encode(nonce + body).decode()}"

    def open(self, memory_id: str, node_id: str, field: str, token: str) -> str:
        try:
            _, key_id, body = token.split("$", 2)
        except ValueError:
            raise EncryptionKeyMismatch(f"a sealed {field} of node {node_id} is malformed") from None
        if key_id != self.key.id:
            raise EncryptionKeyMismatch(
                f"node {node_id} was sealed under key {key_id}; this server holds key {self.key.id}"
            )
        raw = base64.b64decode(body)
        try:
            plain = self._for(memory_id).decrypt(raw[:12], raw[12:], f"{node_id}:{field}".encode())
        except InvalidTag:
            raise EncryptionKeyMismatch(
                f"the sealed {field} of node {node_id} does not authenticate"
            ) from None
        return plain.decode()


class NodeSealer:
    """Seals a node of an encrypted memory on its way to the store and opens it on its way back."""

    def __init__(self, key: ServerKey | None, encrypted: Callable[[str], bool]) -> None:
        self.cipher = MemoryCipher(key) if key is not None else None
        self._encrypted = encrypted
        self._known: dict[str, bool] = {}  # a memory's encryption is fixed when it is created

    def encrypted(self, memory_id: str) -> bool:
        known = self._known.get(memory_id)
        if known is None:
            known = self._known[memory_id] = self._encrypted(memory_id)
        return known

    def _cipher(self) -> MemoryCipher:
        if self.cipher is None:
            raise EncryptionKeyMissing("this server has no key for encrypted memories")
        return self.cipher

    def seal(self, node: NodeRecord) -> NodeRecord:
        if not self.encrypted(node.memory_id):
            return node
        cipher = self._cipher()
        content = node.content
        if content is not None:
            content = cipher.seal(node.memory_id, node.id, "content", content)
        data = node.data
        if data is not None:
            data = {
                SEALED: cipher.seal(node.memory_id, node.id, "data", json.dumps(data, ensure_ascii=False))
            }
        return replace(node, content=content, data=data)

    def seal_text(self, memory_id: str, owner: str, field: str, text: str) -> str:
        """One text of an encrypted memory that is not a node field (a Channel message body)."""
        return self._cipher().seal(memory_id, owner, field, text) if self.encrypted(memory_id) else text

    def open_text(self, memory_id: str, owner: str, field: str, text: str) -> str:
        if not (self.encrypted(memory_id) and text.startswith(PREFIX)):
            return text
        return self._cipher().open(memory_id, owner, field, text)

    def open(self, node: NodeRecord) -> NodeRecord:
        if not self.encrypted(node.memory_id):
            return node
        content, data = node.content, node.data
        if content is not None and content.startswith(PREFIX):
            content = self._cipher().open(node.memory_id, node.id, "content", content)
        if isinstance(data, dict) and isinstance(data.get(SEALED), str) and len(data) == 1:
            data = json.loads(self._cipher().open(node.memory_id, node.id, "data", data[SEALED]))
        return replace(node, content=content, data=data)


# ─── the key in use, checked at startup, and rotation ───────────────────────


def attach(db: Database | NativeDatabase) -> None:
    db.migrate("hadron-keys", MIGRATIONS)


def active_key_id(conn: Any) -> str | None:
    row = conn.execute("SELECT key_id FROM hadron_keys WHERE retired_at IS NULL").fetchone()
    return str(row[0]) if row else None


def check_key(db: Database | NativeDatabase, key: ServerKey | None) -> None:
    """Startup: refuse a missing or wrong key while encrypted memories exist, and record the key in use."""
    attach(db)
    conn = db.conn
    active = active_key_id(conn)
    # Deleted memories count: their rows are still sealed.
    encrypted = conn.execute("SELECT COUNT(*) FROM memories WHERE encrypted = 1").fetchone()[0]
    if key is None:
        if encrypted:
            raise KeyConfigError(
                f"{encrypted} encrypted memor{'y needs' if encrypted == 1 else 'ies need'} the server key "
                f"(key id {active or 'not yet recorded'}), and none is configured. {KEY_HINT}"
            )
        return
    if active == key.id:
        seal_clear_rows(db, key)
        return
    p = dialect_of(db).p
    if active is not None and encrypted:
        retired = conn.execute(f"SELECT retired_at FROM hadron_keys WHERE key_id = {p}", (key.id,)).fetchone()
        why = f" (it was retired by a key rotation at {retired[0]})" if retired else ""
        raise KeyConfigError(
            f"the configured Hadron key (id {key.id}) is not the key this database is sealed with "
            f"(id {active}){why}. Start with the right key; nothing was read or changed"
        )
    # Store-wide (the write_lock held exclusively): the key in use is one for the whole store.
    with db.transaction() as tx:  # nothing is sealed under another key: this one is the key in use
        tx.execute(f"UPDATE hadron_keys SET retired_at = {p} WHERE retired_at IS NULL", (utcnow(),))
        tx.execute(
            f"INSERT INTO hadron_keys VALUES ({p}, {p}, NULL) ON CONFLICT (key_id) DO UPDATE SET retired_at = NULL",
            (key.id, utcnow()),
        )
    seal_clear_rows(db, key)


def seal_clear_rows(db: Database | NativeDatabase, key: ServerKey) -> int:
    """Seal what an encrypted memory still holds in clear (rows written before this build sealed them),
    once per memory; with ``secure_delete``, then a VACUUM, so no clear byte is left in a free page."""
    conn = db.conn
    unsealed = "SELECT id FROM memories WHERE encrypted = 1 AND id NOT IN (SELECT memory_id FROM hadron_sealed_memories)"
    todo = [r[0] for r in conn.execute(unsealed).fetchall()]
    if not todo:
        return 0
    cipher = MemoryCipher(key)

    def seal(memory_id: str, node_id: str, field: str, value: str) -> str:
        return cipher.seal(memory_id, node_id, field, value)

    def seal_body(memory_id: str, owner: str, body: str) -> str:
        return body if body.startswith(PREFIX) else seal(memory_id, owner, "body", body)

    sealed = 0
    postgres = isinstance(db, NativeDatabase)
    p = dialect_of(db).p
    if not postgres:
        conn.execute("PRAGMA secure_delete = ON")
    try:
        # Store-wide (the write_lock held exclusively): every unsealed encrypted memory at once, and a
        # worker starting at the same time must not seal them twice.
        with db.transaction() as tx:
            # Read again under the write lock: a worker starting at the same time may have sealed them.
            todo = [r[0] for r in tx.execute(unsealed).fetchall()]
            for memory_id in todo:
                rows = tx.execute(
                    f"SELECT id, content, data FROM nodes WHERE memory_id = {p}", (memory_id,)
                ).fetchall()
                for node_id, content, data in rows:
                    new = _seal_clear_fields(seal, memory_id, node_id, content, data)
                    if new != (content, data):
                        tx.execute(
                            f"UPDATE nodes SET content = {p}, data = {p} WHERE id = {p}", (*new, node_id)
                        )
                        sealed += 1
                    for rev_id, snapshot in tx.execute(
                        f"SELECT id, snapshot FROM node_revisions WHERE node_id = {p}", (node_id,)
                    ).fetchall():
                        snap = json.loads(snapshot)
                        if "content" not in snap and "data" not in snap:
                            continue
                        old = (snap.get("content"), snap.get("data"))
                        snap["content"], snap["data"] = _seal_clear_fields(seal, memory_id, node_id, *old)
                        if (snap["content"], snap["data"]) != old:
                            tx.execute(
                                f"UPDATE node_revisions SET snapshot = {p} WHERE id = {p}",
                                (json.dumps(snap, ensure_ascii=False, sort_keys=True), rev_id),
                            )
                sealed += _each_message_body(tx, p, memory_id, seal_body)
                tx.execute(f"INSERT INTO hadron_sealed_memories VALUES ({p}, {p})", (memory_id, utcnow()))
        if postgres:
            # An UPDATE leaves the clear row version in the table until a vacuum: FULL rewrites the
            # tables, with no copy of a dead version (the WAL's segments recycle on their own). Also
            # when a worker starting at the same time sealed them: its vacuum kept the versions this
            # worker's open transaction could still see.
            _await_older_transactions(conn, p)
            conn.execute("VACUUM FULL nodes, node_revisions, channel_messages")
        elif sealed:
            # Pages freed before this (an old full-text index, rows moved by an update) may still hold
            # clear bytes: rewrite the file once, then empty the WAL.
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        if not postgres:
            conn.execute("PRAGMA secure_delete = OFF")
    return sealed


def _await_older_transactions(conn: Any, p: str, timeout: float = 30.0) -> None:
    """Wait (bounded) until no other session of this database holds a transaction or snapshot begun before
    now: VACUUM keeps every row version such a session could still see, so a worker starting at the same
    time, whose check found nothing left to seal and so runs no vacuum, would leave the clear versions
    on disk."""
    import time

    since = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    older = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend' AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL) "
        f"AND xact_start < {p}"
    )
    deadline = time.monotonic() + timeout
    while conn.execute(older, (since,)).fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.05)


def _each_message_body(tx: Any, p: str, memory_id: str, change: Callable[[str, str, str], str]) -> int:
    """Rewrite the body of every message of the memory's Channels through ``change(memory, owner, body)``
    (``p``: the engine's placeholder)."""
    rows = tx.execute(
        "SELECT m.channel_id, m.seq, m.body FROM channel_messages m JOIN channels c ON c.id = m.channel_id "
        f"WHERE c.memory_id = {p}",
        (memory_id,),
    ).fetchall()
    changed = 0
    for channel_id, seq, body in rows:
        new = change(memory_id, f"{channel_id}#{seq}", body)
        if new != body:
            tx.execute(
                f"UPDATE channel_messages SET body = {p} WHERE channel_id = {p} AND seq = {p}",
                (new, channel_id, seq),
            )
            changed += 1
    return changed


def _seal_clear_fields(
    seal: Callable[[str, str, str, str], str], memory_id: str, node_id: str, content: Any, data: Any
) -> tuple[Any, Any]:
    if isinstance(content, str) and not content.startswith(PREFIX):
        content = seal(memory_id, node_id, "content", content)
    if isinstance(data, str):
        bag = json.loads(data)
        if not (isinstance(bag, dict) and len(bag) == 1 and isinstance(bag.get(SEALED), str)):
            data = json.dumps({SEALED: seal(memory_id, node_id, "data", json.dumps(bag, ensure_ascii=False))})
    return content, data


@dataclass(frozen=True, slots=True)
class Rotation:
    old: str
    new: str
    memories: int
    nodes: int
    revisions: int
    messages: int


def rotate(db: Database | NativeDatabase, old: ServerKey, new: ServerKey) -> Rotation:
    """Re-seal every node and revision of every encrypted memory under ``new``, in one transaction."""
    check_key(db, old)
    if old.id == new.id:
        raise KeyConfigError("the new key is the key in use; make a new one with `triptych hadron key new`")
    before, after = MemoryCipher(old), MemoryCipher(new)

    def reseal(memory_id: str, node_id: str, field: str, token: str) -> str:
        return after.seal(memory_id, node_id, field, before.open(memory_id, node_id, field, token))

    def reseal_body(memory_id: str, owner: str, body: str) -> str:
        return reseal(memory_id, owner, "body", body) if body.startswith(PREFIX) else body

    nodes = revisions = messages = 0
    p = dialect_of(db).p
    # Store-wide (the write_lock held exclusively): a rotation re-seals every encrypted memory under the
    # new key in one transaction; no memory may be read or written half-rotated.
    with db.transaction() as tx:
        memories = [r[0] for r in tx.execute("SELECT id FROM memories WHERE encrypted = 1").fetchall()]
        for memory_id in memories:
            rows = tx.execute(
                f"SELECT id, content, data FROM nodes WHERE memory_id = {p}", (memory_id,)
            ).fetchall()
            for node_id, content, data in rows:
                content, data = _reseal_fields(reseal, memory_id, node_id, content, data)
                tx.execute(
                    f"UPDATE nodes SET content = {p}, data = {p} WHERE id = {p}", (content, data, node_id)
                )
                nodes += 1
                for rev_id, snapshot in tx.execute(
                    f"SELECT id, snapshot FROM node_revisions WHERE node_id = {p}", (node_id,)
                ).fetchall():
                    snap = json.loads(snapshot)
                    if "content" not in snap and "data" not in snap:
                        continue  # an address-only revision (move, delete) holds nothing sealed
                    snap["content"], snap["data"] = _reseal_fields(
                        reseal, memory_id, node_id, snap.get("content"), snap.get("data")
                    )
                    tx.execute(
                        f"UPDATE node_revisions SET snapshot = {p} WHERE id = {p}",
                        (json.dumps(snap, ensure_ascii=False, sort_keys=True), rev_id),
                    )
                    revisions += 1
            messages += _each_message_body(tx, p, memory_id, reseal_body)
        now = utcnow()
        tx.execute(f"UPDATE hadron_keys SET retired_at = {p} WHERE key_id = {p}", (now, old.id))
        tx.execute(
            f"INSERT INTO hadron_keys VALUES ({p}, {p}, NULL) ON CONFLICT (key_id) DO UPDATE SET retired_at = NULL",
            (new.id, now),
        )
    return Rotation(old.id, new.id, len(memories), nodes, revisions, messages)


def _reseal_fields(
    reseal: Callable[[str, str, str, str], str], memory_id: str, node_id: str, content: Any, data: Any
) -> tuple[Any, Any]:
    if isinstance(content, str) and content.startswith(PREFIX):
        content = reseal(memory_id, node_id, "content", content)
    if isinstance(data, str):
        bag = json.loads(data)
        if isinstance(bag, dict) and isinstance(bag.get(SEALED), str):
            data = json.dumps({SEALED: reseal(memory_id, node_id, "data", bag[SEALED])}, sort_keys=True)
    return content, data
