"""The team chat and Channels: hadron_team_chat_post, hadron_team_chat_read, hadron_list_channels,
hadron_create_channel, hadron_channel_read, hadron_channel_post."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from triptych.hadron.domain.team import Message
from triptych.hadron.services.channels import Page
from triptych.hadron.tools.base import Ctx, DeclaredTool, HadronTool, Services, ToolArgs, ToolOutput

MAX_BODY = 65_536


class TeamChatPostArgs(ToolArgs):
    body: str = Field(
        max_length=MAX_BODY, description="The message; mention teammates as @worker-name / @handle"
    )
    replyToSeq: int | None = Field(None, ge=1, description="Reply to an earlier message (a replies-to edge)")
    session: str | None = Field(
        None, description="Your worker-bound session: the message is authored by its worker. Omitted: by you"
    )
    app: str | None = Field(None, description="App URN or id (defaults to the active App)")


class TeamChatReadArgs(ToolArgs):
    sinceSeq: int | None = Field(None, ge=0, description="Only messages with seq strictly greater")
    mentions: str | None = Field(
        None, description="Only messages mentioning this worker or user (on the roster)"
    )
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0)
    app: str | None = Field(None, description="App URN or id")
    session: str | None = Field(
        None, description="Your session: resolves the App when app is omitted; a heartbeat"
    )


class ListChannelsArgs(ToolArgs):
    app: str | None = Field(None, description="App URN or id (defaults to the active App)")
    memory: str | None = Field(None, description="Only the Channels hosted in this memory")


class CreateChannelArgs(ToolArgs):
    memory: str = Field(description="An app-class memory you may write")
    loc: str = Field(description="The Channel's address in that memory (its chat root)")
    name: str = Field(description="The Channel's name")


class ChannelReadArgs(ToolArgs):
    channel: str = Field(
        description="The Channel's id or address (the chat-root URN hadron_list_channels prints)"
    )
    sinceSeq: int | None = Field(None, ge=0, description="Only messages with seq strictly greater")
    beforeSeq: int | None = Field(None, ge=1, description="Only messages with seq strictly smaller")
    mentions: str | None = Field(None, description="Only messages mentioning this worker or user")
    limit: int = Field(50, ge=1, le=200)
    offset: int = Field(0, ge=0)
    session: str | None = Field(None, description="Your session: keeps it live")


class ChannelPostArgs(ToolArgs):
    channel: str = Field(description="The Channel's id or address")
    body: str = Field(max_length=MAX_BODY, description="The message")
    session: str | None = Field(None, description="Your worker-bound session (omitted: the post is by you)")
    replyToSeq: int | None = Field(None, ge=1, description="Reply to an earlier message")


def message_view(m: Message) -> dict[str, Any]:
    return {
        "seq": m.seq,
        "body": m.body,
        "author": m.author,
        "sessionId": m.session_id,
        "replyToSeq": m.reply_to_seq,
        "mentions": m.mentions,
        "createdAt": m.created_at,
    }


def _who(author: dict[str, Any]) -> str:
    if author.get("kind") == "worker":
        return f"{author['name']} (driven by {author.get('drivenBy') or 'an App key'})"
    return f"@{author.get('handle')}"


def page_output(page: Page | None, address: str | None) -> ToolOutput:
    if page is None:
        return ToolOutput("The team chat has no messages yet (it is created by the first post).",
                          {"messages": [], "total": 0, "lastSeq": 0, "channel": None})  # fmt: skip
    messages = [message_view(m) for m in page.messages]
    lines = [
        f"{address}: {len(messages)} of {page.total} message(s), oldest first (last seq {page.channel.last_seq})"
    ]
    for m in page.messages:
        reply = f" ↳{m.reply_to_seq}" if m.reply_to_seq else ""
        lines.append(f"[{m.seq}]{reply} {_who(m.author)} {m.created_at}: {m.body}")
    return ToolOutput(
        "\n".join(lines),
        {"channel": {"id": page.channel.id, "address": address, "name": page.channel.name},
         "messages": messages, "total": page.total, "lastSeq": page.channel.last_seq},
    )  # fmt: skip


def posted(address: str, channel_id: str, seq: int, author: dict[str, Any], found: list[dict[str, Any]],
           at: str, session: str | None) -> ToolOutput:  # fmt: skip
    text = f"Posted seq {seq} to {address} as {_who(author)}."
    if session is None:
        text += " (No session passed: the message is authored by you, not by a worker.)"
    if found:
        text += " Mentions: " + ", ".join(m.get("name") or "@" + str(m.get("handle")) for m in found)
    return ToolOutput(text, {"seq": seq, "channelId": channel_id, "address": address, "author": author,
                             "mentions": found, "createdAt": at})  # fmt: skip


def team_post(svc: Services, ctx: Ctx, args: TeamChatPostArgs) -> ToolOutput:
    channel, seq, author, found, at = svc.channels.post_team(
        ctx.caller, ctx.session, args.app, args.session, args.body, args.replyToSeq
    )
    return posted(svc.channels.address(channel), channel.id, seq, author, found, at, args.session)


def team_read(svc: Services, ctx: Ctx, args: TeamChatReadArgs) -> ToolOutput:
    page = svc.channels.read_team(
        ctx.caller,
        ctx.session,
        args.app,
        args.session,
        args.sinceSeq,
        args.mentions,
        args.limit,
        args.offset,
    )
    svc.channels.acknowledge(ctx.caller, args.session, page)
    return page_output(page, svc.channels.address(page.channel) if page else None)


def list_channels(svc: Services, ctx: Ctx, args: ListChannelsArgs) -> ToolOutput:
    found = svc.channels.list_channels(ctx.caller, ctx.session, args.app, args.memory)
    rows = [{"id": c.id, "address": svc.channels.address(c), "name": c.name, "memoryUrn": m.urn,
             "lastSeq": c.last_seq} for c, m in found]  # fmt: skip
    if not rows:
        return ToolOutput("No Channels you may read here.", {"channels": [], "count": 0})
    lines = [f"{len(rows)} Channel(s) (address — name — last seq — id):"]
    lines += [f"- {r['address']} — {r['name']} — {r['lastSeq']} — {r['id']}" for r in rows]
    return ToolOutput("\n".join(lines), {"channels": rows, "count": len(rows)})


def create_channel(svc: Services, ctx: Ctx, args: CreateChannelArgs) -> ToolOutput:
    memory, channel = svc.channels.create_channel(ctx.caller, args.memory, args.loc, args.name)
    address = svc.channels.address(channel)
    return ToolOutput(f"Created Channel {channel.name!r} at {address} (id {channel.id}).",
                      {"id": channel.id, "address": address, "name": channel.name, "memoryUrn": memory.urn})  # fmt: skip


def channel_read(svc: Services, ctx: Ctx, args: ChannelReadArgs) -> ToolOutput:
    if args.session:
        svc.channels.sessions.touch(ctx.caller, args.session)
    channel, memory = svc.channels.resolve(ctx.caller, args.channel)
    page = svc.channels.read(ctx.caller, channel, memory, args.sinceSeq, args.beforeSeq, args.mentions,
                         args.limit, args.offset)  # fmt: skip
    svc.channels.acknowledge(ctx.caller, args.session, page)
    return page_output(page, svc.channels.address(channel))


def channel_post(svc: Services, ctx: Ctx, args: ChannelPostArgs) -> ToolOutput:
    channel, memory = svc.channels.resolve(ctx.caller, args.channel)
    seq, author, found, at = svc.channels.post(
        ctx.caller, channel, memory, args.body, args.session, args.replyToSeq
    )
    return posted(svc.channels.address(channel), channel.id, seq, author, found, at, args.session)


REFUSALS = (
    "Refusals: SESSION_NOT_WORKER_BOUND, SESSION_ENDED, WORKER_RETIRED, CHANNEL_HOST_NOT_WRITABLE, FORBIDDEN. "
    "Omitting session is not refused: the message is then authored by you, not by the worker."
)


TOOLS: list[HadronTool] = [
    DeclaredTool(
        "hadron_team_chat_post",
        "Post to the team App's chat (chats:team in the Team Agent's shared app memory, created by the first "
        "post). Mentions (@worker-name, @handle, a multiword name by its slug) are extracted server-side. "
        "Returns the message's seq. " + REFUSALS,
        TeamChatPostArgs,
        team_post,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_team_chat_read",
        "Read the team chat, oldest first by seq, with the total count. Poll with sinceSeq (the last seq you "
        "saw). Passing session keeps it live.",
        TeamChatReadArgs,
        team_read,
    ),
    DeclaredTool(
        "hadron_list_channels",
        "The Channels whose host memory you may read (defaults to the active App's), each with its address "
        "(the chat-root URN) and last seq.",
        ListChannelsArgs,
        list_channels,
    ),
    DeclaredTool(
        "hadron_create_channel",
        "Create a named Channel with its chat root at loc, in an app-class memory you may write. Its address "
        "is then protected from generic node writes ([loc_protected]).",
        CreateChannelArgs,
        create_channel,
        read_only=False,
    ),
    DeclaredTool(
        "hadron_channel_read",
        "Read a Channel, oldest first by seq, with the total: sinceSeq / beforeSeq (alone: the page just before "
        "it), mentions. A Channel you may not read is [channel_not_found], like one that does not exist.",
        ChannelReadArgs,
        channel_read,
    ),
    DeclaredTool(
        "hadron_channel_post",
        "Post into a Channel (its host memory decides who may write). " + REFUSALS,
        ChannelPostArgs,
        channel_post,
        read_only=False,
    ),
]
