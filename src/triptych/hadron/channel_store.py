"""Channels, their messages, read receipts and registers: the part of the team SQL both engines run that
``team_store.TeamSql`` takes in (one class would pass 400 lines). A message body of a Channel hosted in
an encrypted memory is sealed on its way in and opened on its way out (``codec``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from triptych.hadron import write_keys
from triptych.hadron.dialect import EngineStore
from triptych.hadron.domain.team import Channel, Message, RegisterEntry
from triptych.hadron.sealing import PREFIX as SEALED_PREFIX

# Read receipts (issue 32): per Channel, the highest seq each worker has read; a migration component of
# its own on both engines (no foreign keys: it may be created before the team tables).
RECEIPTS_COMPONENT = "hadron-receipts"
_CHANNEL = "SELECT id, memory_id, loc, name, app_id, last_seq, created_at FROM channels"
_MESSAGE = "SELECT channel_id, seq, body, author, session_id, reply_to_seq, mentions, created_at FROM channel_messages"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _channel(r: Sequence[Any]) -> Channel:
    return Channel(*r)


def _message(r: Sequence[Any]) -> Message:
    return Message(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], json.loads(r[6]), r[7])


class TextCodec(Protocol):
    """Seals a Channel message body of an encrypted memory and opens it again (``sealing.NodeSealer``)."""

    def seal_text(self, memory_id: str, owner: str, field: str, text: str) -> str: ...
    def open_text(self, memory_id: str, owner: str, field: str, text: str) -> str: ...


class ChannelSql(EngineStore):
    # Seals the message bodies of Channels hosted in encrypted memories (issue 18); None: clear.
    codec: TextCodec | None = None

    def _message(self, memory_id: str, r: Sequence[Any]) -> Message:
        message = _message(r)
        if self.codec is None or not r[2].startswith(SEALED_PREFIX):
            return message  # clear text opens to itself: no need to ask whether the memory is encrypted
        return replace(message, body=self.codec.open_text(memory_id, f"{r[0]}#{r[1]}", "body", r[2]))

    # ── channels and messages ────────────────────────────────────────────────

    def add_channel(self, channel: Channel, created_by: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.memory(channel.memory_id)) as tx:
            tx.execute(
                f"INSERT INTO channels VALUES ({p}, {p}, {p}, {p}, {p}, 0, {p}, {p})",
                (channel.id, channel.memory_id, channel.loc, channel.name, channel.app_id, channel.created_at,
                 created_by),
            )  # fmt: skip

    def channel(self, channel_id: str) -> Channel | None:
        p = self.dialect.p
        row = self.conn.execute(_CHANNEL + f" WHERE id = {p}", (channel_id,)).fetchone()
        return _channel(row) if row else None

    def channel_at(self, memory_id: str, loc: str) -> Channel | None:
        p = self.dialect.p
        row = self.conn.execute(
            _CHANNEL + f" WHERE memory_id = {p} AND loc = {p}", (memory_id, loc)
        ).fetchone()
        return _channel(row) if row else None

    def channels(self, *, app_id: str | None = None, memory_id: str | None = None) -> list[Channel]:
        p = self.dialect.p
        if memory_id is not None:
            rows = self.conn.execute(
                _CHANNEL + f" WHERE memory_id = {p} ORDER BY loc", (memory_id,)
            ).fetchall()
        else:
            # An App may host several memories.
            query = _CHANNEL + f" WHERE app_id = {p} ORDER BY loc, memory_id"
            rows = self.conn.execute(query, (app_id,)).fetchall()
        return [_channel(r) for r in rows]

    def channel_overlapping(self, memory_id: str, loc: str, *, containing: bool) -> Channel | None:
        """A channel whose address is ``loc`` or lies above it; with ``containing`` also one below it."""
        p = self.dialect.p
        sql = (
            _CHANNEL
            + f" WHERE memory_id = {p} AND (loc = {p} OR substr({p}, 1, length(loc) + 1) = loc || ':'"
        )
        args: list[Any] = [memory_id, loc, loc]
        if containing:
            sql += f" OR (loc > {p} AND loc < {p})"
            args += [loc + ":", loc + ";"]
        row = self.conn.execute(sql + ") LIMIT 1", tuple(args)).fetchone()
        return _channel(row) if row else None

    def post(
        self,
        channel_id: str,
        body: str,
        author: dict[str, Any],
        session_id: str | None,
        reply_to_seq: int | None,
        mentions: list[dict[str, Any]],
        mention_refs: Sequence[str],
        at: str,
    ) -> int:
        """Append a message; its ``seq`` is the channel's next, taken under the write lock."""
        p = self.dialect.p
        with self.atomic() as tx:
            taken = tx.execute(
                f"UPDATE channels SET last_seq = last_seq + 1 WHERE id = {p} RETURNING last_seq, memory_id",
                (channel_id,),
            ).fetchone()
            seq = int(taken[0])
            if self.codec is not None:
                body = self.codec.seal_text(taken[1], f"{channel_id}#{seq}", "body", body)
            tx.execute(
                f"INSERT INTO channel_messages VALUES ({self.dialect.marks(8)})",
                (channel_id, seq, body, _dumps(author), session_id, reply_to_seq, _dumps(mentions), at),
            )
            tx.executemany(
                f"INSERT INTO message_mentions VALUES ({self.dialect.marks(3)}) ON CONFLICT DO NOTHING",
                [(channel_id, r, seq) for r in mention_refs],
            )
        return seq

    def acknowledge(self, channel_id: str, reader: str, seq: int, at: str) -> None:
        """Raise ``reader``'s receipt to ``seq`` (never lowers it: an older page re-read is no news)."""
        p = self.dialect.p
        held = self.conn.execute(
            f"SELECT seq FROM channel_receipts WHERE channel_id = {p} AND reader = {p}", (channel_id, reader)
        ).fetchone()
        if held is not None and int(held[0]) >= seq:
            return  # no write (and on PostgreSQL no wait for the writers' lock) for a page already read
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(
                f"INSERT INTO channel_receipts VALUES ({self.dialect.marks(4)}) ON CONFLICT (channel_id, reader) DO UPDATE "
                "SET seq = excluded.seq, at = excluded.at WHERE excluded.seq > channel_receipts.seq",
                (channel_id, reader, seq, at),
            )

    def receipts(self, channel_id: str) -> list[tuple[str, int, str]]:
        """(reader, seq, at) of a Channel, highest seq first."""
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT reader, seq, at FROM channel_receipts WHERE channel_id = {p} ORDER BY seq DESC, reader",
            (channel_id,),
        ).fetchall()
        return [(str(r[0]), int(r[1]), str(r[2])) for r in rows]

    def has_message(self, channel_id: str, seq: int) -> bool:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT 1 FROM channel_messages WHERE channel_id = {p} AND seq = {p}", (channel_id, seq)
        ).fetchone()
        return row is not None

    def read(
        self,
        channel: Channel,
        since: int | None,
        before: int | None,
        mention_ref: str | None,
        limit: int,
        offset: int,
    ) -> tuple[list[Message], int]:
        """Oldest first. With only ``before``, the page just before it (the tail of what precedes it)."""
        p = self.dialect.p
        low = since if since is not None else 0
        high = before if before is not None else channel.last_seq + 1
        if mention_ref is None:
            total = channel.last_seq  # gap-free: the count is the last seq
            if before is not None and since is None:
                rows = self.conn.execute(
                    _MESSAGE
                    + f" WHERE channel_id = {p} AND seq < {p} ORDER BY seq DESC LIMIT {p} OFFSET {p}",
                    (channel.id, high, limit, offset),
                ).fetchall()
                rows.reverse()
            else:
                rows = self.conn.execute(
                    _MESSAGE
                    + f" WHERE channel_id = {p} AND seq > {p} AND seq < {p} ORDER BY seq LIMIT {p} OFFSET {p}",
                    (channel.id, low, high, limit, offset),
                ).fetchall()
            return [self._message(channel.memory_id, r) for r in rows], total
        total = self.conn.execute(
            f"SELECT COUNT(*) FROM message_mentions WHERE channel_id = {p} AND ref = {p}",
            (channel.id, mention_ref),
        ).fetchone()[0]
        order = "DESC" if before is not None and since is None else ""
        seqs = self.conn.execute(
            f"SELECT seq FROM message_mentions WHERE channel_id = {p} AND ref = {p} AND seq > {p} AND seq < {p} "
            f"ORDER BY seq {order} LIMIT {p} OFFSET {p}",
            (channel.id, mention_ref, low, high, limit, offset),
        ).fetchall()
        wanted = sorted(r[0] for r in seqs)
        if not wanted:
            return [], int(total)
        among, params = self.dialect.one_of("seq", wanted)
        rows = self.conn.execute(
            _MESSAGE + f" WHERE channel_id = {p} AND {among} ORDER BY seq", (channel.id, *params)
        ).fetchall()
        return [self._message(channel.memory_id, r) for r in rows], int(total)

    # ── registers ───────────────────────────────────────────────────────────

    def add_register(self, entry: RegisterEntry, created_by: str) -> None:
        with self.atomic(write_keys.team(entry.owner_app_id)) as tx:
            tx.execute(
                f"INSERT INTO registers VALUES ({self.dialect.marks(8)})",
                (entry.id, entry.owner_app_id, entry.channel_id, entry.attendee, entry.role,
                 int(entry.mention_only), entry.created_at, created_by),
            )  # fmt: skip

    def register_entry(self, entry_id: str) -> RegisterEntry | None:
        p = self.dialect.p
        row = self.conn.execute(
            "SELECT id, owner_app_id, channel_id, attendee, role, mention_only, created_at FROM registers "
            f"WHERE id = {p}",
            (entry_id,),
        ).fetchone()
        return RegisterEntry(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6]) if row else None

    def registers(self, owner_app_ids: Sequence[str], channel_id: str | None) -> list[RegisterEntry]:
        p = self.dialect.p
        if not owner_app_ids:
            return []
        among, args = self.dialect.one_of("owner_app_id", owner_app_ids)
        sql = (
            "SELECT id, owner_app_id, channel_id, attendee, role, mention_only, created_at FROM registers "
            f"WHERE {among}"
        )
        if channel_id is not None:
            sql += f" AND channel_id = {p}"
            args.append(channel_id)
        rows = self.conn.execute(sql + " ORDER BY created_at, id", tuple(args)).fetchall()
        return [RegisterEntry(r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6]) for r in rows]

    def remove_register(self, entry_id: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(f"DELETE FROM registers WHERE id = {p}", (entry_id,))
