"""The team chat and Channels as MCP resources, for push (issue 32): ``resources/list``,
``resources/templates/list``, ``resources/read``, ``resources/subscribe`` and ``resources/unsubscribe``
on the Hadron endpoint. The MCP adapter of ``services/push.py``, as the tools are of the other services.

A resource's URI is the Channel's address, the chat-root URN ``hadron_list_channels`` prints
(``hrn:node:<root>:<memory>:<loc>``); the team chat's is ``hrn:node:<root>:<team memory>:chats:team``,
subscribable before its first post creates it. ``resources/read`` gives the newest messages and the
read receipts (each worker's highest seq read through its worker-bound session). ``notifications/resources/updated`` then carries the new
seq in ``_meta`` (``hadron/seq``, ``hadron/channelId``, ``hadron/mentioned``); the reader fetches since
its watermark with the chat tools. A URI the caller may not read is refused as ``[channel_not_found]``
(JSON-RPC -32002, the contract's error in ``data``), exactly like one that names nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from triptych.core.errors import TriptychError
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.push import PushService
from triptych.hadron.services.selection import SessionState
from triptych.hadron.tools.chat import message_view

RESOURCE_NOT_FOUND = -32002  # MCP's code for a resource that is not there
INVALID_PARAMS = -32602
MIME = "application/json"
READ_PAGE = 50  # resources/read returns the newest messages; the chat tools page through the rest

# The caller, its MCP session id and its session state, from a request's context.
Identify = Callable[[ServerRequestContext[Any, Any]], tuple[HadronCaller, str, SessionState]]

TEMPLATE = types.ResourceTemplate(
    uri_template="hrn:node:{root}:{memory}:{loc}",
    name="channel",
    title="A Channel or the team chat, by its address",
    description=(
        "A Channel's chat-root URN as hadron_list_channels prints it; an App's team chat is "
        "hrn:node:<root>:<team memory>:chats:team. Subscribe (resources/subscribe) to be told, in "
        "notifications/resources/updated, the seq of each new message (_meta hadron/seq; hadron/mentioned "
        "is true when it mentions your worker or you), then read since your watermark with "
        "hadron_channel_read or hadron_team_chat_read."
    ),
    mime_type=MIME,
)


def refusal(exc: TriptychError) -> MCPError:
    code = RESOURCE_NOT_FOUND if exc.kind == "not_found" else INVALID_PARAMS
    return MCPError(code, exc.message, exc.to_dict())


def register(server: Server[Any], push: PushService, identify: Identify) -> None:
    """Serve the chat resources on ``server`` (which then advertises ``resources.subscribe``)."""

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        caller, _, _ = await anyio.to_thread.run_sync(identify, ctx)
        try:
            rows = await anyio.to_thread.run_sync(push.listed, caller)
        except TriptychError as exc:
            raise refusal(exc) from exc
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=name, mime_type=MIME, description=f"last seq {last}")
                for uri, name, last in rows
            ]
        )

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[TEMPLATE])

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        caller, _, _ = await anyio.to_thread.run_sync(identify, ctx)

        def read() -> dict[str, Any]:
            target = push.resolve(caller, params.uri)
            if target.channel is None:  # the team chat before its first post
                return {"channelId": None, "lastSeq": 0, "total": 0, "messages": [], "receipts": []}
            last = target.channel.last_seq
            page = push.channels.read(
                caller, target.channel, target.memory, max(0, last - READ_PAGE), None, None, READ_PAGE, 0
            )
            return {"channelId": target.channel.id, "lastSeq": page.channel.last_seq, "total": page.total,
                    "messages": [message_view(m) for m in page.messages],
                    "receipts": push.channels.receipts(target.channel)}  # fmt: skip

        try:
            data = await anyio.to_thread.run_sync(read)
        except TriptychError as exc:
            raise refusal(exc) from exc
        text = json.dumps(data, ensure_ascii=False)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type=MIME, text=text)]
        )

    async def subscribe(
        ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        # The session state may be restored from the database (X-Hadron-Client-Id): off the event loop.
        caller, mcp_session, state = await anyio.to_thread.run_sync(identify, ctx)
        session = ctx.session

        async def send(uri: str, meta: dict[str, Any]) -> None:
            params = types.ResourceUpdatedNotificationParams.model_validate({"uri": uri, "_meta": meta})
            await session.send_notification(types.ResourceUpdatedNotification(params=params))

        try:
            # Access is decided in a worker thread (it reads the database); the subscription is then
            # registered on this loop, which its notifications are sent from.
            target = await anyio.to_thread.run_sync(push.resolve, caller, params.uri)
            credential = ctx.request.headers.get("authorization") if ctx.request is not None else None
            push.subscribe(target, caller, state, mcp_session, send, credential)
        except TriptychError as exc:
            raise refusal(exc) from exc
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        _, mcp_session, _ = await anyio.to_thread.run_sync(identify, ctx)
        push.unsubscribe(mcp_session, params.uri)
        return types.EmptyResult()

    server.add_request_handler("resources/list", types.PaginatedRequestParams, list_resources)
    server.add_request_handler("resources/templates/list", types.PaginatedRequestParams, list_templates)
    server.add_request_handler("resources/read", types.ReadResourceRequestParams, read_resource)
    server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
