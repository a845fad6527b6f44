"""Push for the team chat and Channels (issue 32): MCP sessions subscribed to a Channel's address are told
when a message lands, at once and named as such when it mentions the session's worker or user.

The notification is a hint, never the message: it carries the new ``seq`` and the reader fetches since its
watermark with ``hadron_team_chat_read`` / ``hadron_channel_read``, which stay the source of truth. So a
lost notification (a worker restarting, a dropped stream) costs latency, never a message.

A subscription is keyed by the Channel's place (host memory id, loc), so the team chat can be subscribed
to before its first post creates it. Events reach ``publish`` from the post itself (one process: the
embedded engine) or from PostgreSQL ``LISTEN`` (server mode: every worker hears every post, its own
included; see ``pg_listen``). One dispatcher thread takes them off a queue, so a post never waits on
its subscribers, authenticates each subscriber's credential again and re-checks its read access (both can
change after subscribing), and hands the send to the event loop the subscription came from.

Per subscription, a burst folds: while one notification is being written, later seqs wait and only the
newest goes next. A message that mentions the subscriber is never folded: it is sent on its own.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import node_urn, parse_node_ref
from triptych.hadron.domain.model import App, Memory
from triptych.hadron.domain.push import ChatEvent
from triptych.hadron.domain.team import Channel
from triptych.hadron.domain.urn import UrnError
from triptych.hadron.errors import BadInput, NotFound, TeamRefusal
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.channels import TEAM_LOC, ChannelService
from triptych.hadron.services.selection import SessionState
from triptych.hadron.store import TenancyStore
from triptych.hadron.team_store import TeamStore

log = logging.getLogger(__name__)

# The keys of a notification's ``_meta``.
SEQ_META = "hadron/seq"
CHANNEL_META = "hadron/channelId"
MENTIONED_META = "hadron/mentioned"
# Bounds: a session holds at most this many subscriptions, a process at most that many in all (a session
# that ends without a DELETE is noticed only when a send to it fails).
MAX_PER_SESSION = 64
MAX_SUBSCRIPTIONS = 10_000

# Sends one ``notifications/resources/updated``: (uri, meta).
Sender = Callable[[str, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Target:
    """What a resource URI names: a Channel's place, its Channel once created, and the App whose team
    chat it is (None for any other Channel)."""

    uri: str
    memory: Memory
    loc: str
    channel: Channel | None
    team_app: App | None


@dataclass(eq=False)
class Subscription:
    uri: str
    memory_id: str
    loc: str
    team_app_id: str | None
    caller: HadronCaller
    credential: str | None  # the Authorization header it subscribed with: authenticated again per message
    state: SessionState  # read at send time: the worker session bound in this MCP session may change
    mcp_session: str
    send: Sender
    loop: asyncio.AbstractEventLoop
    # Touched on ``loop`` only: a send in flight, and the newest seq folded meanwhile.
    sending: bool = False
    pending: int = 0
    sent: int = 0


class PushService:
    def __init__(
        self, tenancy: TenancyStore, team: TeamStore, access: AccessPolicy, channels: ChannelService
    ) -> None:
        self.tenancy = tenancy
        self.team = team
        self.access = access
        self.channels = channels
        self._lock = threading.Lock()
        self._by_place: dict[tuple[str, str], list[Subscription]] = {}
        self._by_session: dict[str, dict[str, Subscription]] = {}
        self._queue: queue.SimpleQueue[ChatEvent | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # The endpoint's authenticator (set where the endpoint is mounted): each message authenticates a
        # subscriber's credential again, so an expired token or a revoked key hears nothing more.
        self.authenticate: Callable[[str | None], HadronCaller] | None = None

    # ── what a URI names, and who may read it ──────────────────────────────

    def resolve(self, caller: HadronCaller, uri: str) -> Target:
        """The Channel place ``uri`` names, if the caller may read it; else ``[channel_not_found]``, the
        answer ``hadron_channel_read`` gives for a Channel that is not there or may not be read."""
        require_identity(caller)
        target = self._target(uri)
        if target is None or not self._readable(caller, target.memory, target.team_app):
            raise NotFound("channel", uri, hint="resources/list lists the chats you may subscribe to")
        return target

    def _target(self, uri: str) -> Target | None:
        try:
            ref = parse_node_ref(uri)
        except UrnError:
            return None
        if ref.memory is None:
            return None
        memory = self.tenancy.memory_by_key(ref.memory.root, ref.memory.slug)
        if memory is None:
            return None
        channel = self.team.channel_at(memory.id, ref.loc)
        team_app = self._team_app(memory) if ref.loc == TEAM_LOC else None
        if channel is None and team_app is None:
            return None
        return Target(uri, memory, ref.loc, channel, team_app)

    def _team_app(self, memory: Memory) -> App | None:
        """The App whose team chat lives in ``memory`` (its Team Agent's shared app memory), if any."""
        app = self.tenancy.app(memory.app_id) if memory.app_id else None
        if app is None:
            return None
        try:
            return app if self.channels.agents.team_memory(app).id == memory.id else None
        except TeamRefusal:  # no Team Agent, or two: this memory hosts no team chat
            return None

    def _readable(self, caller: HadronCaller, memory: Memory, team_app: App | None) -> bool:
        """Whoever one of the read tools would serve: ``hadron_team_chat_read`` (the team and the App's
        own key) for a team chat, ``hadron_channel_read`` (readers of the host memory) for any Channel."""
        if team_app is not None and self.access.team_reader(caller, team_app):
            return True
        return self.access.memory_level(caller, memory) is not None

    def address(self, memory: Memory, loc: str) -> str:
        return node_urn(memory.root, memory.slug, loc)

    def listed(self, caller: HadronCaller) -> list[tuple[str, str, int]]:
        """(uri, name, last seq) of every team chat and Channel of the caller's Apps it may read; none
        before authentication (hosts list resources on connect: not an error to show)."""
        if caller.kind == "anonymous":
            return []
        out: dict[str, tuple[str, str, int]] = {}
        for app, _role in self.access.visible_apps(caller):
            try:
                memory = self.channels.agents.team_memory(app)
            except TeamRefusal:  # an App without a (single) Team Agent has no team chat
                memory = None
            if memory is not None and self._readable(caller, memory, app):
                uri = self.address(memory, TEAM_LOC)
                channel = self.team.channel_at(memory.id, TEAM_LOC)
                out[uri] = (uri, f"{app.name} team chat", channel.last_seq if channel else 0)
            for channel in self.team.channels(app_id=app.id):
                host = self.tenancy.memory(channel.memory_id)
                if host is not None and self.access.memory_level(caller, host) is not None:
                    uri = self.address(host, channel.loc)
                    out.setdefault(uri, (uri, f"Channel {channel.name}", channel.last_seq))
        return list(out.values())

    # ── subscriptions ──────────────────────────────────────────────────────

    def subscribe(
        self,
        target: Target,
        caller: HadronCaller,
        state: SessionState,
        mcp_session: str,
        send: Sender,
        credential: str | None = None,
    ) -> None:
        """Register a subscription to a ``resolve``d target; called on the event loop its sends run on."""
        uri = target.uri
        sub = Subscription(
            uri, target.memory.id, target.loc, target.team_app.id if target.team_app else None, caller,
            credential, state, mcp_session, send, asyncio.get_running_loop(),
        )  # fmt: skip
        with self._lock:
            mine = self._by_session.setdefault(mcp_session, {})
            if uri not in mine:
                total = sum(len(s) for s in self._by_session.values())
                if len(mine) >= MAX_PER_SESSION or total >= MAX_SUBSCRIPTIONS:
                    raise BadInput(
                        f"too many subscriptions: {MAX_PER_SESSION} per session, {MAX_SUBSCRIPTIONS} per worker",
                        hint="Unsubscribe (resources/unsubscribe) from chats you no longer follow",
                        details={"limit": MAX_PER_SESSION},
                    )
            old = mine.get(uri)
            if old is not None:
                self._by_place[(old.memory_id, old.loc)].remove(old)
            mine[uri] = sub
            self._by_place.setdefault((sub.memory_id, sub.loc), []).append(sub)

    def unsubscribe(self, mcp_session: str, uri: str) -> None:
        with self._lock:
            sub = self._by_session.get(mcp_session, {}).pop(uri, None)
            if sub is not None:
                self._drop(sub)

    def end_session(self, mcp_session: str) -> None:
        """The MCP session ended (DELETE, or unknown here): its subscriptions go with it."""
        with self._lock:
            for sub in self._by_session.pop(mcp_session, {}).values():
                self._drop(sub)

    def _drop(self, sub: Subscription) -> None:
        place = self._by_place.get((sub.memory_id, sub.loc), [])
        if sub in place:
            place.remove(sub)
        if not place:
            self._by_place.pop((sub.memory_id, sub.loc), None)

    def count(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._by_session.values())

    # ── delivery ───────────────────────────────────────────────────────────

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hadron-push", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)
            self._thread = None

    def publish(self, event: ChatEvent) -> None:
        """A message landed (called from any thread; never blocks). Dropped when nothing is started."""
        if self._thread is not None:
            self._queue.put(event)

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            try:
                self._dispatch(event)
            except Exception:  # one bad event must not stop the others' delivery
                log.exception("push of %s#%s failed", event.channel_id, event.seq)

    def _dispatch(self, event: ChatEvent) -> None:
        with self._lock:
            subs = list(self._by_place.get((event.memory_id, event.loc), ()))
        if not subs:
            return
        memory = self.tenancy.memory(event.memory_id)
        if memory is None:
            return
        refs = event.refs if event.refs is not None else self._refs(event)
        apps: dict[str, App | None] = {}
        callers: dict[str | None, HadronCaller | None] = {}
        for sub in subs:
            if sub.credential not in callers:
                callers[sub.credential] = self._authenticated(sub)
            caller = callers[sub.credential]
            if caller is None or caller.key != sub.caller.key:
                # An expired token, a revoked key: the session could not read any more, nor hears.
                self.unsubscribe(sub.mcp_session, sub.uri)
                continue
            team_app = None
            if sub.team_app_id is not None:
                if sub.team_app_id not in apps:
                    apps[sub.team_app_id] = self.tenancy.app(sub.team_app_id)
                team_app = apps[sub.team_app_id]
            # Access is checked again now: a member removed since subscribing hears nothing more.
            if not self._readable(caller, memory, team_app):
                continue
            mentioned = bool(set(refs) & self._mentionable(sub))
            asyncio.run_coroutine_threadsafe(self._deliver(sub, event, mentioned), sub.loop)

    def _authenticated(self, sub: Subscription) -> HadronCaller | None:
        """Who ``sub``'s credential names now (None: refused); its caller as subscribed when this process
        does not authenticate (the embedded services without an endpoint)."""
        if self.authenticate is None:
            return sub.caller
        try:
            return self.authenticate(sub.credential)
        except Exception:  # AuthRequired, and whatever a verifier raises: not a reader any more
            return None

    def _refs(self, event: ChatEvent) -> tuple[str, ...]:
        """The mention refs of a message whose event came without them (too many for a NOTIFY)."""
        channel = self.team.channel(event.channel_id)
        if channel is None:
            return ()
        messages, _ = self.team.read(channel, event.seq - 1, event.seq + 1, None, 1, 0)
        refs = []
        for message in messages:
            for m in message.mentions:
                refs.append(f"{'w' if m.get('kind') == 'worker' else 'u'}:{m.get('id')}")
        return tuple(refs)

    def _mentionable(self, sub: Subscription) -> set[str]:
        """The refs that name this subscriber: its user, and the worker its live worker session drives."""
        refs = set()
        if sub.caller.user is not None:
            refs.add(f"u:{sub.caller.user.id}")
        work = sub.state.work_session_id
        session = self.team.session(work) if work else None
        if session is not None and not session.ended and session.worker_id:
            refs.add(f"w:{session.worker_id}")
        return refs

    async def _deliver(self, sub: Subscription, event: ChatEvent, mentioned: bool) -> None:
        if mentioned:  # never folded: the subscriber learns which seq names it
            await self._send(sub, event.channel_id, event.seq, True)
            return
        if sub.sending:
            sub.pending = max(sub.pending, event.seq)  # folded: the send in flight is followed by the newest
            return
        sub.sending = True
        try:
            await self._send(sub, event.channel_id, event.seq, mentioned)
            while sub.pending > sub.sent:
                await self._send(sub, event.channel_id, sub.pending, False)
        finally:
            sub.sending = False

    async def _send(self, sub: Subscription, channel_id: str, seq: int, mentioned: bool) -> None:
        meta = {SEQ_META: seq, CHANNEL_META: channel_id, MENTIONED_META: mentioned}
        try:
            await sub.send(sub.uri, meta)
        except Exception:  # the session is gone (closed stream): forget it
            log.debug("push to session %s failed; its subscriptions are dropped", sub.mcp_session)
            self.end_session(sub.mcp_session)
            return
        sub.sent = max(sub.sent, seq)
