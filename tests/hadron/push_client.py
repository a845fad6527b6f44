"""An official MCP client that subscribes to Hadron chat resources and collects the
``notifications/resources/updated`` it is sent (issue 32's push)."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import mcp_types as types
from hadron.world import Session
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning

# A liveness bound, not a speed check (bench/hadron_push.py measures latency): a notification that has
# not come by then never will.
NOTIFIED_WITHIN = 5.0
TRANSPORT_LOG = "mcp.client.streamable_http"


@dataclass(frozen=True)
class Update:
    uri: str
    seq: int
    channel_id: str
    mentioned: bool


class Inbox:
    """The resource updates a client was sent, in arrival order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Update] = asyncio.Queue()

    async def handle(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            meta = message.params.meta or {}
            update = Update(
                message.params.uri, int(meta["hadron/seq"]), str(meta["hadron/channelId"]),
                bool(meta["hadron/mentioned"]),
            )  # fmt: skip
            self.queue.put_nowait(update)

    async def next(self, timeout: float = NOTIFIED_WITHIN) -> Update:
        return await asyncio.wait_for(self.queue.get(), timeout)

    async def until_seq(self, seq: int, timeout: float = NOTIFIED_WITHIN) -> list[Update]:
        """Every update up to the one naming ``seq`` (or later): a burst may be folded."""
        got: list[Update] = []
        while not got or got[-1].seq < seq:
            got.append(await self.next(timeout))
        return got

    def empty(self) -> bool:
        return self.queue.empty()


class _Established(logging.Handler):
    """Set when the client's GET stream (where the server's notifications travel) is open."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.opened = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        if "GET SSE connection established" in record.getMessage():
            self.loop.call_soon_threadsafe(self.opened.set)


@dataclass
class Subscriber:
    session: Session
    inbox: Inbox

    @property
    def client(self) -> Client:
        return self.session.client

    async def subscribe(self, uri: str) -> None:
        # resources/subscribe is the handshake-era way (Hadron serves only that era): the SDK marks it
        # deprecated in favour of the 2026-07-28 subscriptions/listen.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.client.subscribe_resource(uri)

    async def unsubscribe(self, uri: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.client.unsubscribe_resource(uri)


async def plain_then_mention(poster: Session, inbox: Inbox, address: str) -> tuple[int, int]:
    """``poster`` posts a plain message, then one mentioning alice, to the channel at ``address``; each
    reaches ``inbox`` (alice's) with its seq and whether it mentions her. The two seqs."""
    plain = await poster.ok("hadron_channel_post", channel=address, body="deploy done")
    update = await inbox.next()
    assert (update.uri, update.seq, update.mentioned) == (address, plain.data["seq"], False)
    mention = await poster.ok("hadron_channel_post", channel=address, body="@alice over to you")
    update = await inbox.next()
    assert (update.seq, update.mentioned) == (mention.data["seq"], True)
    return plain.data["seq"], mention.data["seq"]


@asynccontextmanager
async def stream_opened() -> AsyncIterator[asyncio.Event]:
    """An event set when the next client to connect has its GET stream open: a notification sent before
    that has nowhere to go (the MCP transport keeps no backlog without an event store). Connect one
    client at a time while it is held."""
    handler = _Established()
    logger = logging.getLogger(TRANSPORT_LOG)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.opened
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@asynccontextmanager
async def listening(client: Client) -> AsyncIterator[None]:
    """Enter ``client`` and return once its GET stream is open."""
    async with stream_opened() as opened:
        async with client:
            await asyncio.wait_for(opened.wait(), NOTIFIED_WITHIN)
            yield


@asynccontextmanager
async def subscriber(url: str, headers: dict[str, str]) -> AsyncIterator[Subscriber]:
    inbox = Inbox()
    async with httpx2.AsyncClient(headers=headers, timeout=60.0) as http:
        client = Client(streamable_http_client(url, http_client=http), message_handler=inbox.handle)
        async with listening(client):
            yield Subscriber(Session(client), inbox)
