"""Channels: durable ordered message streams, each with a chat-root node at its address. The team
chat is the App's default Channel, ``chats:team`` in the Team Agent's shared app memory, bootstrapped
on its first post.

Who may post: on the team chat, the team (any AppMember, an org CONTRIBUTOR+, a user-owned App's
owner; never a pure App key); on any other Channel, whoever may write its host memory. A session
passed to a post must be yours, open, worker-bound and its worker not retired; a worker of another
App posts only when the session's user may write the host memory (``CHANNEL_HOST_NOT_WRITABLE``).
Omitting the session posts as the caller, with no error: the contract's quiet failure, kept.
A Channel's address is protected from generic node writes (``guard``, called by ``NodeService``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain import mentions as mention_rules
from triptych.hadron.domain.loc import check_loc, is_id, node_urn, parse_node_ref, strip_urn_prefix
from triptych.hadron.domain.model import App, Memory, NodeRecord
from triptych.hadron.domain.push import ChatEvent
from triptych.hadron.domain.team import Channel, Message, Worker
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import BadInput, Forbidden, LocProtected, NotFound, TeamRefusal, UrnAlreadyExists
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.services.sessions import SessionService
from triptych.hadron.services.workers import WorkerService
from triptych.hadron.store import GraphStore, TenancyStore, new_id, utcnow
from triptych.hadron.team_store import TeamStore

TEAM_LOC = "chats:team"
MAX_PAGE = 200


@dataclass(frozen=True, slots=True)
class Page:
    channel: Channel
    memory: Memory
    messages: list[Message]
    total: int


class ChannelService:
    def __init__(
        self,
        tenancy: TenancyStore,
        graph: GraphStore,
        team: TeamStore,
        access: AccessPolicy,
        selections: SelectionService,
        agents: AgentService,
        sessions: SessionService,
        workers: WorkerService,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.graph = graph
        self.team = team
        self.access = access
        self.selections = selections
        self.agents = agents
        self.sessions = sessions
        self.workers = workers
        self.clock = clock
        # Called after a post commits (push on the embedded engine; server mode hears NOTIFY instead).
        self.posted: list[Callable[[ChatEvent], None]] = []

    # ── protection of chat roots ─────────────────────────────────────────

    def guard(self, memory: Memory, loc: str, *, containing: bool = False) -> None:
        """Refuse a generic node write at (or under) a Channel's address; ``containing`` also refuses
        one whose subtree holds an address (a recursive delete, a move)."""
        channel = self.team.channel_overlapping(memory.id, loc, containing=containing)
        if channel is not None:
            raise LocProtected(
                f"{node_urn(memory.root, memory.slug, loc)} overlaps the Channel {channel.name!r} at "
                f"{node_urn(memory.root, memory.slug, channel.loc)}",
                details={"channelId": channel.id, "loc": channel.loc},
            )

    # ── channels ─────────────────────────────────────────────────────────

    def address(self, channel: Channel) -> str:
        memory = self.tenancy.memory(channel.memory_id)
        return node_urn(memory.root, memory.slug, channel.loc) if memory else channel.loc

    def _bootstrap(
        self, memory: Memory, app: App | None, loc: str, name: str, actor: str, *, existing: bool = False
    ) -> Channel:
        """The chat-root node and the Channel row, in one transaction. ``existing``: a Channel already
        at ``loc`` is the one wanted (the team chat's create-or-get), not a collision."""
        now = self.clock()
        with self.team.atomic(write_keys.memory(memory.id)):
            # Read again under the host memory's key: two first posts both saw no Channel before it;
            # the second one to get here finds the first's committed Channel and posts into it.
            found = self.team.channel_at(memory.id, loc) if existing else None
            if found is not None:
                return found
            if self.graph.node_by_loc(memory.id, loc) is not None:
                raise UrnAlreadyExists(f"{node_urn(memory.root, memory.slug, loc)} already exists")
            root = NodeRecord(
                id=new_id(), memory_id=memory.id, loc=loc, name=name, node_type="chat", object_type=None,
                description=f"Channel {name}", content=None, seq=None, tags=[], properties={},
                data={"scope": memory.memory_class, "channel": name}, llm_model=None, ai_agent=None, revision=1,
                created_at=now, updated_at=now, created_by=actor, updated_by=actor,
            )  # fmt: skip
            self.graph.insert_node(root)
            self.graph.add_revision(root, "create", actor, "chat root")
            channel = Channel(root.id, memory.id, loc, name, app.id if app else memory.app_id, 0, now)
            self.team.add_channel(channel, actor)
        return channel

    def team_chat(self, app: App, *, create: bool, actor: str = "system") -> tuple[Memory, Channel | None]:
        memory = self.agents.team_memory(app)
        channel = self.team.channel_at(memory.id, TEAM_LOC)
        if channel is None and create:
            channel = self._bootstrap(memory, app, TEAM_LOC, "team", actor, existing=True)
        return memory, channel

    def create_channel(
        self, caller: HadronCaller, memory_ref: str, loc: str, name: str
    ) -> tuple[Memory, Channel]:
        memory = self.access.write_memory(caller, memory_ref)
        if memory.memory_class != "app":
            raise BadInput(
                f"a Channel lives in an app-class memory; {memory.urn} is {memory.memory_class}",
                details={"memoryUrn": memory.urn},
            )
        try:
            loc = check_loc(loc.strip())
        except UrnError as exc:
            raise BadInput(str(exc), details={"field": "loc"}) from exc
        if not name.strip():
            raise BadInput("name must not be empty", details={"field": "name"})
        self.guard(memory, loc, containing=True)
        app = self.tenancy.app(memory.app_id) if memory.app_id else None
        return memory, self._bootstrap(memory, app, loc, name.strip(), caller.actor)

    def list_channels(
        self, caller: HadronCaller, state: SessionState, app_ref: str | None, memory_ref: str | None
    ) -> list[tuple[Channel, Memory]]:
        require_identity(caller)
        if memory_ref:
            memory = self.access.read_memory(caller, memory_ref)[0]
            channels = self.team.channels(memory_id=memory.id)
        else:
            app = (
                self.selections.resolve_app(caller, app_ref)[0]
                if app_ref
                else self.selections.active_app(caller, state)
            )
            channels = self.team.channels(app_id=app.id)
        out = []
        for channel in channels:
            host = self.tenancy.memory(channel.memory_id)
            if host is not None and self.access.memory_level(caller, host) is not None:
                out.append((channel, host))
        return out

    def resolve(self, caller: HadronCaller, ref: str) -> tuple[Channel, Memory]:
        """A Channel by id or chat-root URN whose host memory the caller may read; else not found."""
        require_identity(caller)
        ref = ref.strip()
        channel: Channel | None = None
        if is_id(ref):
            channel = self.team.channel(ref)
        else:
            try:
                node_ref = parse_node_ref(ref)
            except UrnError:
                node_ref = None
            if node_ref is not None and node_ref.memory is not None:
                found = self.tenancy.memory_by_key(node_ref.memory.root, node_ref.memory.slug)
                channel = self.team.channel_at(found.id, node_ref.loc) if found else None
        memory = self.tenancy.memory(channel.memory_id) if channel else None
        if channel is None or memory is None or self.access.memory_level(caller, memory) is None:
            raise NotFound("channel", ref, hint="hadron_list_channels prints the Channels you may read")
        return channel, memory

    # ── mentions ─────────────────────────────────────────────────────────

    def _roster(self, app: App | None) -> tuple[dict[str, Worker], dict[str, str]]:
        """Mentionable names of an App: worker names and slugs, and its people's handles."""
        workers: dict[str, Worker] = {}
        users: dict[str, str] = {}
        if app is None:
            return workers, users
        for worker in self.team.all_workers(app.id):
            workers[worker.slug] = worker
            workers[worker.name.lower()] = worker
        for user in self.tenancy.users_in_orgs([app.org_id] if app.org_id else []):
            users[user.handle.lower()] = user.id
        for user_id in self._app_member_ids(app):
            member = self.tenancy.user(user_id)
            if member is not None:
                users[member.handle.lower()] = member.id
        return workers, users

    def _app_member_ids(self, app: App) -> list[str]:
        return ([app.owner_user_id] if app.owner_user_id else []) + self.tenancy.app_member_ids(app.id)

    def _mentions(self, app: App | None, body: str) -> tuple[list[dict[str, Any]], list[str]]:
        workers, users = self._roster(app)
        found: list[dict[str, Any]] = []
        refs: list[str] = []
        for token in mention_rules.extract(body):
            if token in workers:
                w = workers[token]
                ref = f"w:{w.id}"
                entry: dict[str, Any] = {
                    "kind": "worker",
                    "id": w.id,
                    "name": w.name,
                    "slug": w.slug,
                    "urn": w.urn,
                }
            elif token in users:
                ref = f"u:{users[token]}"
                entry = {"kind": "user", "id": users[token], "handle": token}
            else:
                continue
            if ref not in refs:
                refs.append(ref)
                found.append(entry)
        return found, refs

    def _mention_filter(self, app: App | None, ref: str) -> str:
        token = ref.strip().lstrip("@")
        workers, users = self._roster(app)
        key = token.lower()
        for worker in set(workers.values()):
            if token in (worker.id, worker.urn):
                return f"w:{worker.id}"
        if key in workers:
            return f"w:{workers[key].id}"
        key = strip_urn_prefix(key, "user")
        if key in users:
            return f"u:{users[key]}"
        raise BadInput(
            f"mentions: {ref!r} is not on the App's roster (a worker's name, slug, URN or id, or a user handle)",
            details={"field": "mentions"},
        )

    # ── posting ──────────────────────────────────────────────────────────

    def _author(
        self,
        caller: HadronCaller,
        host_app: App | None,
        memory: Memory,
        session_id: str | None,
        team_chat: bool,
    ) -> tuple[dict[str, Any], str | None]:
        """Who a post is by (the caller, or the session's worker), after every refusal that applies."""
        if session_id is None:
            self._base_gate(caller, memory, host_app, team_chat)
            return self._caller_author(caller), None
        session = self.sessions.touch(caller, session_id)
        if session.ended:
            raise TeamRefusal(
                "SESSION_ENDED",
                f"session {session.id} has ended; posting needs a live session",
                hint="Start a new session (hadron_start_session with workerRef), or post as yourself",
                details={"sessionId": session.id},
            )
        if session.worker_id is None:
            raise TeamRefusal(
                "SESSION_NOT_WORKER_BOUND",
                f"session {session.id} is bound to no worker: there is no worker to author as",
                hint="Start a session with workerRef to post as a worker, or omit session to post as yourself",
                details={"sessionId": session.id},
            )
        worker = self.team.worker(session.worker_id)
        assert worker is not None
        if worker.retired:
            raise TeamRefusal("WORKER_RETIRED", f"{worker.name} is retired; its authorship ended",
                              details={"workerId": worker.id})  # fmt: skip
        if host_app is None or worker.app_id != host_app.id:
            self._cross_app_gate(session.user_id, worker, memory, host_app)
        else:
            self._base_gate(caller, memory, host_app, team_chat)
        author = {
            "kind": "worker", "workerId": worker.id, "workerUrn": worker.urn, "name": worker.name,
            "role": worker.role, "appId": worker.app_id, "drivenBy": self.sessions.handle(session.user_id),
        }  # fmt: skip
        return author, session.id

    def _base_gate(self, caller: HadronCaller, memory: Memory, app: App | None, team_chat: bool) -> None:
        if caller.kind == "app":
            raise Forbidden("a pure App-key principal cannot post; it may read its own App's chat")
        if team_chat and app is not None:
            if not self.access.team_member(caller, app):
                raise Forbidden(f"you are not on the team of {app.urn}", details={"appId": app.id})
            return
        self.access.write_memory(caller, memory)

    def _cross_app_gate(self, user_id: str | None, worker: Worker, memory: Memory, host: App | None) -> None:
        user = self.tenancy.user(user_id) if user_id else None
        writable = False
        if user is not None:
            driver = HadronCaller("user", user.handle, user=user)
            writable = self.access.memory_level(driver, memory) == "read-write"
        if not writable:
            data: dict[str, Any] = {"workerAppId": worker.app_id}
            if host is not None:
                data["appId"] = host.id
            raise TeamRefusal(
                "CHANNEL_HOST_NOT_WRITABLE",
                f"{worker.name} belongs to another App, and the session's user may not write this chat's host "
                f"memory {memory.urn}",
                hint="Post with a session bound to a worker of the chat's own App, post as yourself, or get write "
                "access to the host memory",
                details=data,
            )

    def _caller_author(self, caller: HadronCaller) -> dict[str, Any]:
        user = caller.user
        return {"kind": "user", "handle": caller.handle, "userId": user.id if user else None}

    def post(
        self, caller: HadronCaller, channel: Channel, memory: Memory, body: str, session_id: str | None,
        reply_to: int | None,
    ) -> tuple[int, dict[str, Any], list[dict[str, Any]], str]:  # fmt: skip
        """Post into a Channel: its host memory decides who may write."""
        _check_body(body)
        host_app = self.tenancy.app(channel.app_id) if channel.app_id else None
        author, sid = self._author(caller, host_app, memory, session_id, False)
        return self._append(channel, host_app, body, author, sid, reply_to)

    def _append(
        self, channel: Channel, host_app: App | None, body: str, author: dict[str, Any], sid: str | None,
        reply_to: int | None,
    ) -> tuple[int, dict[str, Any], list[dict[str, Any]], str]:  # fmt: skip
        if reply_to is not None and not self.team.has_message(channel.id, reply_to):
            raise BadInput(
                f"replyToSeq {reply_to} names no message of this Channel", details={"field": "replyToSeq"}
            )
        found, refs = self._mentions(host_app, body)
        now = self.clock()
        # The message, its session's usage event and its announcement (server mode: NOTIFY) commit together.
        # The Channel's host memory: its posts queue there (the seq is also taken under the channel row's
        # lock, so they commit in seq order), and posts to other memories' Channels run meanwhile.
        with self.team.atomic(write_keys.memory(channel.memory_id)):
            seq = self.team.post(channel.id, body, author, sid, reply_to, found, refs, now)
            if sid is not None:
                self.team.add_event(sid, now, "post", f"{channel.id}#{seq}")
            event = ChatEvent(channel.memory_id, channel.loc, channel.id, seq, tuple(refs))
            self.team.announce(event)
        for hook in self.posted:
            hook(event)
        return seq, author, found, now

    def read(
        self, caller: HadronCaller, channel: Channel, memory: Memory, since: int | None, before: int | None,
        mentions: str | None, limit: int, offset: int,
    ) -> Page:  # fmt: skip
        host_app = self.tenancy.app(channel.app_id) if channel.app_id else None
        ref = self._mention_filter(host_app, mentions) if mentions else None
        messages, total = self.team.read(channel, since, before, ref, min(limit, MAX_PAGE), offset)
        return Page(channel, memory, messages, total)

    # ── read receipts ────────────────────────────────────────────────────

    def acknowledge(self, caller: HadronCaller, session_id: str | None, page: Page | None) -> None:
        """A read through your live worker-bound session is that worker's read receipt: the highest seq the
        page returned (issue 32). Reads without a session, or through another's, acknowledge nothing."""
        if session_id is None or page is None or not page.messages:
            return
        session = self.team.session(session_id)
        user_id = caller.user.id if caller.user is not None else None
        if session is None or session.ended or session.worker_id is None or session.user_id != user_id:
            return
        seq = max(m.seq for m in page.messages)
        self.team.acknowledge(page.channel.id, f"w:{session.worker_id}", seq, self.clock())

    def receipts(self, channel: Channel) -> list[dict[str, Any]]:
        """Who has read how far: each worker's highest acknowledged seq, highest first."""
        out = []
        for reader, seq, at in self.team.receipts(channel.id):
            worker = self.team.worker(reader.removeprefix("w:"))
            if worker is not None:
                out.append({"workerId": worker.id, "workerUrn": worker.urn, "name": worker.name, "seq": seq,
                            "at": at})  # fmt: skip
        return out

    # ── the team chat, addressed by App ──────────────────────────────────

    def team_app(
        self, caller: HadronCaller, state: SessionState, app_ref: str | None, session_id: str | None
    ) -> App:
        return self.workers.app_context(caller, state, app_ref, session_id)

    def read_team(
        self, caller: HadronCaller, state: SessionState, app_ref: str | None, session_id: str | None,
        since: int | None, mentions: str | None, limit: int, offset: int,
    ) -> Page | None:  # fmt: skip
        app = self.team_app(caller, state, app_ref, session_id)
        if not self.access.team_reader(caller, app):
            raise Forbidden(f"you are not on the team of {app.urn}", details={"appId": app.id})
        memory, channel = self.team_chat(app, create=False)
        if channel is None:
            return None
        return self.read(caller, channel, memory, since, None, mentions, limit, offset)

    def post_team(
        self, caller: HadronCaller, state: SessionState, app_ref: str | None, session_id: str | None, body: str,
        reply_to: int | None,
    ) -> tuple[Channel, int, dict[str, Any], list[dict[str, Any]], str]:  # fmt: skip
        require_identity(caller)
        if app_ref:
            app = self.selections.resolve_app(caller, app_ref)[0]
        else:
            app = self.selections.active_app(caller, state)
        _check_body(body)
        memory, _ = self.team_chat(app, create=False)
        # Every refusal comes before the first-post bootstrap, so a refused post creates nothing.
        author, sid = self._author(caller, app, memory, session_id, True)
        if reply_to is not None and self.team.channel_at(memory.id, TEAM_LOC) is None:
            raise BadInput(
                f"replyToSeq {reply_to} names no message of this Channel", details={"field": "replyToSeq"}
            )
        _, channel = self.team_chat(app, create=True, actor=caller.actor)
        assert channel is not None
        seq, author, found, at = self._append(channel, app, body, author, sid, reply_to)
        return channel, seq, author, found, at


def _check_body(body: str) -> None:
    if not body.strip():
        raise BadInput("body must not be empty", details={"field": "body"})
