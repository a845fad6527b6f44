"""Team persistence: agents, AI service configs, workers, worker sessions and their events, channels and
messages, registers and the worklog. ``TeamStore`` is the engine-neutral interface; ``TeamSql`` (with
``channel_store.ChannelSql``) holds the SQL, written once for both engines; ``SqliteTeamStore`` runs it
over ``hadron.db`` (tables from the third migration in ``sqlite_schema.HADRON``), ``PostgresTeamStore``
over ``pg_schema.TEAM`` and announces posts to the other workers. A channel's ``seq``
is taken inside the posting transaction (``UPDATE ... RETURNING`` holds the channel's row, under
``BEGIN IMMEDIATE`` on SQLite and the Hadron write lock on PostgreSQL), so it is gap-free and strictly
increasing under concurrent posters, in one process or several."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from triptych.hadron import pg_schema, sqlite_schema, write_keys
from triptych.hadron.channel_store import RECEIPTS_COMPONENT, ChannelSql, _dumps
from triptych.hadron.dialect import POSTGRES, SQLITE
from triptych.hadron.domain.loc import agent_urn, ai_config_urn, worker_urn
from triptych.hadron.domain.push import NOTIFY_CHANNEL, ChatEvent
from triptych.hadron.domain.team import (
    Agent,
    AiServiceConfig,
    Channel,
    Message,
    RegisterEntry,
    Worker,
    WorkItem,
    WorkSession,
)

_AGENT = (
    "SELECT g.id, g.app_id, g.slug, g.name, g.persona_role, g.system_prompt, g.is_team_agent, g.memory_id, "
    "a.root, a.slug FROM agents g JOIN apps a ON a.id = g.app_id"
)
_WORKER = (
    "SELECT w.id, w.app_id, w.agent_id, w.name, w.slug, w.role, w.prompt_override, w.held_by, w.retired_at, "
    "w.created_at, a.root, a.slug FROM workers w "
    "JOIN apps a ON a.id = w.app_id"
)
TEAM_COMPONENT = "hadron-team"  # PostgreSQL's team tables (SQLite's are in the "main" component)
_SESSION_COLUMNS = (
    "id, app_id, user_id, worker_id, description, type, repo, branch, pr_number, language, llm_model, "
    "parent_session_id, prev_session_id, started_at, last_active_at, ended_at, end_reason, expires_at, "
    "summary, handoff, error_count, turn_count, input_tokens, output_tokens"
)
_ITEM = "SELECT id, app_id, session_id, user_id, worker_id, tool, kind, ref, action, detail, created_at FROM work_items"


def _agent(r: Sequence[Any]) -> Agent:
    return Agent(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7], agent_urn(r[8], r[9], r[2]))


def _worker(r: Sequence[Any]) -> Worker:
    return Worker(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], worker_urn(r[10], r[11], r[4]))


def _session(r: Sequence[Any]) -> WorkSession:
    return WorkSession(*r)


def _item(r: Sequence[Any]) -> WorkItem:
    detail = json.loads(r[9]) if r[9] else None
    return WorkItem(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], detail, r[10])


class TeamStore(Protocol):
    """What the team services need of a store (``SqliteTeamStore``, ``PostgresTeamStore``)."""

    def atomic(self, *tenants: str) -> Any: ...
    def add_agent(self, agent: Agent, at: str) -> None: ...
    def agent(self, agent_id: str) -> Agent | None: ...
    def agent_by_slug(self, app_id: str, slug: str) -> Agent | None: ...
    def agents(self, app_ids: Sequence[str] | None = None) -> list[Agent]: ...
    def add_ai_config(self, config: AiServiceConfig, at: str) -> None: ...
    def ai_configs(self, app_ids: Sequence[str]) -> list[AiServiceConfig]: ...
    def add_worker(self, worker: Worker, created_by: str) -> None: ...
    def worker(self, worker_id: str) -> Worker | None: ...
    def worker_named(self, app_id: str, name: str) -> Worker | None: ...
    def workers(
        self, app_id: str, include_retired: bool, limit: int, offset: int
    ) -> tuple[list[Worker], int]: ...
    def all_workers(self, app_id: str) -> list[Worker]: ...
    def set_prompt_override(self, worker_id: str, text: str | None) -> None: ...
    def set_holder(self, worker_id: str, user_id: str | None) -> None: ...
    def retire(self, worker_id: str, at: str) -> None: ...
    def add_session(self, session: WorkSession) -> None: ...
    def session(self, session_id: str) -> WorkSession | None: ...
    def heartbeat(self, session_id: str, at: str) -> None: ...
    def end_session(self, session_id: str, at: str, reason: str, fields: dict[str, Any]) -> None: ...
    def expire_sessions(self, at: str) -> int: ...
    def set_pr_number(self, session_id: str, number: int) -> None: ...
    def worker_sessions(self, worker_id: str) -> list[WorkSession]: ...
    def last_handoff(self, worker_id: str) -> WorkSession | None: ...
    def sessions_of(
        self, user_id: str | None, app_id: str | None, include_ended: bool, limit: int
    ) -> list[WorkSession]: ...
    def add_event(self, session_id: str, at: str, kind: str, ref: str | None) -> None: ...
    def events(self, session_id: str) -> list[str]: ...
    def attribute_node(self, node_id: str, session_id: str, at: str) -> None: ...
    def node_session(self, node_id: str) -> str | None: ...
    def add_channel(self, channel: Channel, created_by: str) -> None: ...
    def channel(self, channel_id: str) -> Channel | None: ...
    def channel_at(self, memory_id: str, loc: str) -> Channel | None: ...
    def channels(self, *, app_id: str | None = None, memory_id: str | None = None) -> list[Channel]: ...
    def channel_overlapping(self, memory_id: str, loc: str, *, containing: bool) -> Channel | None: ...
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
    ) -> int: ...
    def announce(self, event: ChatEvent) -> None: ...
    def acknowledge(self, channel_id: str, reader: str, seq: int, at: str) -> None: ...
    def receipts(self, channel_id: str) -> list[tuple[str, int, str]]: ...
    def has_message(self, channel_id: str, seq: int) -> bool: ...
    def read(
        self,
        channel: Channel,
        since: int | None,
        before: int | None,
        mention_ref: str | None,
        limit: int,
        offset: int,
    ) -> tuple[list[Message], int]: ...
    def add_register(self, entry: RegisterEntry, created_by: str) -> None: ...
    def register_entry(self, entry_id: str) -> RegisterEntry | None: ...
    def registers(self, owner_app_ids: Sequence[str], channel_id: str | None) -> list[RegisterEntry]: ...
    def remove_register(self, entry_id: str) -> None: ...
    def add_item(self, item: WorkItem) -> None: ...
    def items(
        self,
        app_id: str,
        refs: Sequence[str] | None,
        session_id: str | None,
        tool: str | None,
        kind: str | None,
        limit: int,
        offset: int,
    ) -> tuple[list[WorkItem], int]: ...


class TeamSql(ChannelSql):
    """The team SQL both engines run: agents, workers, sessions and the worklog here, Channels, messages,
    receipts and registers in ``ChannelSql``. A tie of timestamps between sessions or worklog items goes
    by insertion order (``Dialect.insertion_order``), so both engines list ties alike (a fixed clock or
    one millisecond makes ties)."""

    def announce(self, event: ChatEvent) -> None:
        """Tell the other processes serving this database that a message landed: each engine's class."""
        raise NotImplementedError

    # ── agents and AI service configs ──────────────────────────────────────

    def add_agent(self, agent: Agent, at: str) -> None:
        with self.atomic(write_keys.team(agent.app_id)) as tx:
            tx.execute(
                f"INSERT INTO agents VALUES ({self.dialect.marks(9)})",
                (agent.id, agent.app_id, agent.slug, agent.name, agent.persona_role, agent.system_prompt,
                 int(agent.is_team_agent), agent.memory_id, at),
            )  # fmt: skip

    def agent(self, agent_id: str) -> Agent | None:
        p = self.dialect.p
        row = self.conn.execute(_AGENT + f" WHERE g.id = {p}", (agent_id,)).fetchone()
        return _agent(row) if row else None

    def agent_by_slug(self, app_id: str, slug: str) -> Agent | None:
        p = self.dialect.p
        row = self.conn.execute(_AGENT + f" WHERE g.app_id = {p} AND g.slug = {p}", (app_id, slug)).fetchone()
        return _agent(row) if row else None

    def agents(self, app_ids: Sequence[str] | None = None) -> list[Agent]:
        if app_ids is not None and not app_ids:
            return []  # PostgreSQL refuses an empty IN ()
        if app_ids is None:
            rows = self.conn.execute(_AGENT + " ORDER BY a.root, a.slug, g.slug").fetchall()
        else:
            among, params = self.dialect.one_of("g.app_id", app_ids)
            rows = self.conn.execute(
                _AGENT + f" WHERE {among} ORDER BY a.root, a.slug, g.slug", params
            ).fetchall()
        return [_agent(r) for r in rows]

    def add_ai_config(self, config: AiServiceConfig, at: str) -> None:
        with self.atomic(write_keys.team(config.app_id)) as tx:
            tx.execute(
                f"INSERT INTO ai_service_configs VALUES ({self.dialect.marks(6)})",
                (config.id, config.app_id, config.name, config.provider, config.model, at),
            )

    def ai_configs(self, app_ids: Sequence[str]) -> list[AiServiceConfig]:
        if not app_ids:
            return []
        among, params = self.dialect.one_of("c.app_id", app_ids)
        rows = self.conn.execute(
            "SELECT c.id, c.app_id, c.name, c.provider, c.model, "
            "a.root, a.slug FROM ai_service_configs c "
            f"JOIN apps a ON a.id = c.app_id WHERE {among} ORDER BY c.name, c.id",
            params,
        ).fetchall()
        return [AiServiceConfig(r[0], r[1], r[2], r[3], r[4], ai_config_urn(r[5], r[6], r[2])) for r in rows]

    # ── workers ─────────────────────────────────────────────────────────────

    def add_worker(self, worker: Worker, created_by: str) -> None:
        with self.atomic(write_keys.team(worker.app_id)) as tx:
            tx.execute(
                "INSERT INTO workers (id, app_id, agent_id, name, name_key, slug, role, prompt_override, held_by, "
                f"retired_at, created_at, created_by) VALUES ({self.dialect.marks(12)})",
                (worker.id, worker.app_id, worker.agent_id, worker.name, worker.name.casefold(), worker.slug,
                 worker.role, worker.prompt_override, worker.held_by, worker.retired_at, worker.created_at,
                 created_by),
            )  # fmt: skip

    def worker(self, worker_id: str) -> Worker | None:
        p = self.dialect.p
        row = self.conn.execute(_WORKER + f" WHERE w.id = {p}", (worker_id,)).fetchone()
        return _worker(row) if row else None

    def worker_named(self, app_id: str, name: str) -> Worker | None:
        """By name (case-insensitive) or by slug: the two ways a person spells a worker."""
        p = self.dialect.p
        row = self.conn.execute(
            _WORKER + f" WHERE w.app_id = {p} AND (w.name_key = {p} OR w.slug = {p})",
            (app_id, name.casefold(), name.lower()),
        ).fetchone()
        return _worker(row) if row else None

    def workers(
        self, app_id: str, include_retired: bool, limit: int, offset: int
    ) -> tuple[list[Worker], int]:
        p = self.dialect.p
        where = f" WHERE w.app_id = {p}" + ("" if include_retired else " AND w.retired_at IS NULL")
        total = self.conn.execute("SELECT COUNT(*) FROM workers w" + where, (app_id,)).fetchone()[0]
        rows = self.conn.execute(
            _WORKER + where + f" ORDER BY w.name_key LIMIT {p} OFFSET {p}", (app_id, limit, offset)
        ).fetchall()
        return [_worker(r) for r in rows], int(total)

    def all_workers(self, app_id: str) -> list[Worker]:
        p = self.dialect.p
        return [
            _worker(r) for r in self.conn.execute(_WORKER + f" WHERE w.app_id = {p}", (app_id,)).fetchall()
        ]

    def set_prompt_override(self, worker_id: str, text: str | None) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(f"UPDATE workers SET prompt_override = {p} WHERE id = {p}", (text, worker_id))

    def set_holder(self, worker_id: str, user_id: str | None) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(f"UPDATE workers SET held_by = {p} WHERE id = {p}", (user_id, worker_id))

    def retire(self, worker_id: str, at: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(
                f"UPDATE workers SET retired_at = COALESCE(retired_at, {p}) WHERE id = {p}", (at, worker_id)
            )

    # ── worker sessions ──────────────────────────────────────────────────────

    def add_session(self, session: WorkSession) -> None:
        values = tuple(getattr(session, c) for c in _SESSION_COLUMNS.split(", "))
        with self.atomic(write_keys.team(session.app_id)) as tx:
            tx.execute(
                f"INSERT INTO work_sessions ({_SESSION_COLUMNS}) VALUES ({self.dialect.marks(len(values))})",
                values,
            )

    def session(self, session_id: str) -> WorkSession | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM work_sessions WHERE id = {p}", (session_id,)
        ).fetchone()
        return _session(row) if row else None

    def heartbeat(self, session_id: str, at: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(
                f"UPDATE work_sessions SET last_active_at = {p} WHERE id = {p} AND ended_at IS NULL AND last_active_at < {p}",
                (at, session_id, at),
            )

    def end_session(self, session_id: str, at: str, reason: str, fields: dict[str, Any]) -> None:
        p = self.dialect.p
        sets = ", ".join(f"{k} = {p}" for k in fields)
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(
                # Ending is the driver's last act: it is also the last heartbeat.
                f"UPDATE work_sessions SET ended_at = {p}, end_reason = {p}, "
                f"last_active_at = CASE WHEN last_active_at > {p} THEN last_active_at ELSE {p} END"
                f"{', ' if sets else ''}{sets} WHERE id = {p} AND ended_at IS NULL",
                (at, reason, at, at, *fields.values(), session_id),
            )

    def expire_sessions(self, at: str) -> int:
        """End sessions past a hard ``expiresAt``; the cleanup write overwrites the heartbeat, as upstream."""
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            cursor = tx.execute(
                f"UPDATE work_sessions SET ended_at = {p}, end_reason = 'expired', last_active_at = {p} "
                f"WHERE ended_at IS NULL AND expires_at IS NOT NULL AND expires_at <= {p}",
                (at, at, at),
            )
            return int(cursor.rowcount)

    def set_pr_number(self, session_id: str, number: int) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(f"UPDATE work_sessions SET pr_number = {p} WHERE id = {p}", (number, session_id))

    def worker_sessions(self, worker_id: str) -> list[WorkSession]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM work_sessions WHERE worker_id = {p} "
            f"ORDER BY started_at, {self.dialect.insertion_order}",
            (worker_id,),
        ).fetchall()
        return [_session(r) for r in rows]

    def last_handoff(self, worker_id: str) -> WorkSession | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM work_sessions WHERE worker_id = {p} AND handoff IS NOT NULL "
            # NULLS LAST: SQLite's order for a NULL, which PostgreSQL sorts first when descending.
            f"ORDER BY ended_at DESC NULLS LAST, {self.dialect.insertion_order} DESC LIMIT 1",
            (worker_id,),
        ).fetchone()
        return _session(row) if row else None

    def sessions_of(
        self, user_id: str | None, app_id: str | None, include_ended: bool, limit: int
    ) -> list[WorkSession]:
        """A user's sessions, or (``user_id`` None) an App's key-started ones, newest first."""
        p = self.dialect.p
        args: list[Any]
        if user_id is not None:
            where, args = f"user_id = {p}", [user_id]
        else:
            where, args = f"user_id IS NULL AND app_id = {p}", [app_id]
        if not include_ended:
            where += " AND ended_at IS NULL"
        rows = self.conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM work_sessions WHERE {where} "
            f"ORDER BY started_at DESC, {self.dialect.insertion_order} DESC LIMIT {p}",
            (*args, limit),
        ).fetchall()
        return [_session(r) for r in rows]

    def add_event(self, session_id: str, at: str, kind: str, ref: str | None) -> None:
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(
                f"INSERT INTO session_events VALUES ({self.dialect.marks(4)})", (session_id, at, kind, ref)
            )

    def events(self, session_id: str) -> list[str]:
        p = self.dialect.p
        rows = self.conn.execute(
            f"SELECT at FROM session_events WHERE session_id = {p} ORDER BY at", (session_id,)
        ).fetchall()
        return [r[0] for r in rows]

    def attribute_node(self, node_id: str, session_id: str, at: str) -> None:
        p = self.dialect.p
        with self.atomic(write_keys.ROWS) as tx:
            tx.execute(
                f"INSERT INTO session_nodes VALUES ({self.dialect.marks(3)}) ON CONFLICT DO NOTHING",
                (node_id, session_id, at),
            )
            tx.execute(
                f"INSERT INTO session_events VALUES ({p}, {p}, 'node', {p})", (session_id, at, node_id)
            )

    def node_session(self, node_id: str) -> str | None:
        p = self.dialect.p
        row = self.conn.execute(
            f"SELECT session_id FROM session_nodes WHERE node_id = {p}", (node_id,)
        ).fetchone()
        return str(row[0]) if row else None

    # ── worklog ─────────────────────────────────────────────────────────────

    def add_item(self, item: WorkItem) -> None:
        with self.atomic(write_keys.team(item.app_id)) as tx:
            tx.execute(
                "INSERT INTO work_items (id, app_id, session_id, user_id, worker_id, tool, kind, ref, action, "
                f"detail, created_at) VALUES ({self.dialect.marks(11)})",
                (item.id, item.app_id, item.session_id, item.user_id, item.worker_id, item.tool, item.kind,
                 item.ref, item.action, _dumps(item.detail) if item.detail is not None else None, item.created_at),
            )  # fmt: skip

    def items(
        self,
        app_id: str,
        refs: Sequence[str] | None,
        session_id: str | None,
        tool: str | None,
        kind: str | None,
        limit: int,
        offset: int,
    ) -> tuple[list[WorkItem], int]:
        p = self.dialect.p
        where = f"app_id = {p}"
        args: list[Any] = [app_id]
        if refs is not None:
            if not refs:
                return [], 0
            among, values = self.dialect.one_of("ref", refs)
            where += f" AND {among}"
            args += values
        for column, value in (("session_id", session_id), ("tool", tool), ("kind", kind)):
            if value is not None:
                where += f" AND {column} = {p}"
                args.append(value)
        # SQLite's planner, seeing ORDER BY n, would walk the whole App newest first and filter; the ref
        # (or session) index finds the few matches directly, and sorting them is cheap. PostgreSQL's
        # indexes end in n (pg_schema.TEAM), so its planner walks the matches already in order.
        index = (
            "work_items_by_ref"
            if refs is not None
            else "work_items_by_session"
            if session_id
            else "work_items_by_app"
        )
        table = self.dialect.indexed("work_items", index)
        # The total rides along as an uncorrelated scalar subquery (evaluated once): one round trip, not two,
        # on PostgreSQL; a page past the end has no row to carry it, so it is counted on its own.
        count = f"SELECT COUNT(*) FROM {table} WHERE {where}"
        rows = self.conn.execute(
            _ITEM.replace("FROM work_items", f", ({count}) FROM {table}")
            + f" WHERE {where} ORDER BY n DESC LIMIT {p} OFFSET {p}",
            (*args, *args, limit, offset),
        ).fetchall()
        if rows:
            return [_item(r) for r in rows], int(rows[0][11])
        total = self.conn.execute(count, tuple(args)).fetchone()[0] if offset else 0
        return [], int(total)


class SqliteTeamStore(TeamSql):
    dialect = SQLITE
    schema = ((RECEIPTS_COMPONENT, sqlite_schema.RECEIPTS),)

    def announce(self, event: ChatEvent) -> None:
        """Nothing: on the embedded engine one process serves, and ``ChannelService.posted`` tells it."""


class PostgresTeamStore(TeamSql):
    """The team store on PostgreSQL: its tables are a migration component of their own (``hadron-team``),
    created after the graph's (they reference apps, users and memories)."""

    dialect = POSTGRES
    schema = ((RECEIPTS_COMPONENT, pg_schema.RECEIPTS), (TEAM_COMPONENT, pg_schema.TEAM))

    def announce(self, event: ChatEvent) -> None:
        """``NOTIFY`` every worker (``pg_listen``), in the post's own transaction: PostgreSQL delivers it
        at commit, and never for a post rolled back."""
        p = self.dialect.p
        with self.atomic() as tx:
            tx.execute(f"SELECT pg_notify({p}, {p})", (NOTIFY_CHANNEL, event.payload()))
