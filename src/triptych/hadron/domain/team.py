"""Team records: agents installed in an App, workers cast from them, worker sessions, channels and
their messages, register entries and worklog items; and the pure rules over them (liveness, the
last-driven instant, the boot briefing)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

SessionType = Literal["DEVELOPER", "CHATBOT", "AUTOMATION", "EDGE"]
SESSION_TYPES: tuple[SessionType, ...] = ("DEVELOPER", "CHATBOT", "AUTOMATION", "EDGE")
# A session not driven for this long stops reading as live (it is not ended).
IDLE_WINDOW = timedelta(minutes=30)


@dataclass(frozen=True, slots=True)
class Agent:
    id: str
    app_id: str
    slug: str
    name: str
    persona_role: str | None
    system_prompt: str
    is_team_agent: bool
    memory_id: str | None  # the Team Agent's shared app memory (chat and worklog live there)
    urn: str


@dataclass(frozen=True, slots=True)
class AiServiceConfig:
    id: str
    app_id: str
    name: str
    provider: str
    model: str
    urn: str


@dataclass(frozen=True, slots=True)
class Worker:
    id: str
    app_id: str
    agent_id: str
    name: str
    slug: str
    role: str
    prompt_override: str | None
    held_by: str | None  # user id of the holder
    retired_at: str | None
    created_at: str
    urn: str

    @property
    def retired(self) -> bool:
        return self.retired_at is not None


@dataclass(frozen=True, slots=True)
class WorkSession:
    id: str
    app_id: str
    user_id: str | None  # null for a pure App-key caller
    worker_id: str | None
    description: str
    type: str
    repo: str | None
    branch: str | None
    pr_number: int | None
    language: str | None
    llm_model: str | None
    parent_session_id: str | None
    prev_session_id: str | None
    started_at: str
    last_active_at: str
    ended_at: str | None = None
    end_reason: str | None = None  # ended | expired | taken-over
    expires_at: str | None = None
    summary: str | None = None
    handoff: str | None = None
    error_count: int | None = None
    turn_count: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


@dataclass(frozen=True, slots=True)
class Channel:
    id: str
    memory_id: str
    loc: str
    name: str
    app_id: str | None  # the host memory's App (None for a memory no App owns)
    last_seq: int
    created_at: str


@dataclass(frozen=True, slots=True)
class Message:
    channel_id: str
    seq: int
    body: str
    author: dict[str, Any]
    session_id: str | None
    reply_to_seq: int | None
    mentions: list[dict[str, Any]]
    created_at: str


@dataclass(frozen=True, slots=True)
class RegisterEntry:
    id: str
    owner_app_id: str
    channel_id: str
    attendee: str | None  # worker id, "user:<id>", or None for every attendee in the owner's context
    role: str | None
    mention_only: bool
    created_at: str


@dataclass(frozen=True, slots=True)
class WorkItem:
    id: str
    app_id: str
    session_id: str
    user_id: str | None
    worker_id: str | None
    tool: str
    kind: str
    ref: str
    action: str
    detail: dict[str, Any] | None
    created_at: str


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def is_live(session: WorkSession, now: datetime) -> bool:
    """Open and driven within the idle window. Idle is not ended: it only stops reading as live."""
    return not session.ended and now - parse_time(session.last_active_at) <= IDLE_WINDOW


def driven_at(session: WorkSession, usage: list[str]) -> str:
    """When the session was last driven. Capped at its end (late writes are not driving); on an
    auto-expired session the cleanup overwrote the heartbeat, so its start and usage events count."""
    if session.end_reason == "expired":
        candidates = [session.started_at] + [
            u for u in usage if session.ended_at is None or u <= session.ended_at
        ]
        return max(candidates)
    if session.ended_at is not None:
        return min(session.last_active_at, session.ended_at)
    return session.last_active_at


def render_template(template: str, values: dict[str, str]) -> str:
    out = template
    for key, value in values.items():
        out = out.replace("{{" + key + "}}", value).replace("{{ " + key + " }}", value)
    return out


def boot_briefing(worker: Worker, agent: Agent, app_name: str, handoff: WorkSession | None) -> str:
    """The worker's boot briefing, rendered live: the role agent's template, the override, the last handoff."""
    values = {"name": worker.name, "role": worker.role, "app": app_name, "agent": agent.name}
    parts = [f"# {worker.name} ({worker.role})", render_template(agent.system_prompt, values).strip()]
    if worker.prompt_override:
        parts.append("## Prompt override\n" + worker.prompt_override.strip())
    if handoff is not None and handoff.handoff:
        parts.append(
            f"## Continuity\nHandoff from session {handoff.id} (ended {handoff.ended_at}):\n{handoff.handoff.strip()}"
        )
    else:
        parts.append("## Continuity\nNo handoff yet: this is the first stint.")
    return "\n\n".join(p for p in parts if p)
