"""The agent-memory contract's argument rules and limits, and what every memory job shares.

Split from ``memory.py`` (issue 29): recall (``memory_recall``), writes and lifecycle
(``memory_lifecycle``) and review (``memory_review``) check their arguments here, once, and run on one
``MemoryContext`` (the store, the model, the settings and the clock).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from triptych.core.auth import Principal
from triptych.core.embed import Embedder, ModelGuard
from triptych.metronix.access import resolve_workspace, valid_agent_id
from triptych.metronix.errors import InvalidParams
from triptych.metronix.memory_model import KINDS, SCOPES, STATUSES, MemoryRecord
from triptych.metronix.memory_store import MemoryStore

MAX_CONTENT = 100_000
MAX_TAGS = 50
MAX_TAG_CHARS = 100
NOTES_CAP = 1024
MAX_BATCH = 100  # records per memory_batch_store call
MAX_TOP_K = 50
MAX_BATCH_DELETE = 500  # ids per REST batch-delete call, as upstream
REVIEW_REASONS = ("possible_duplicate", "possible_contradiction", "low_confidence_decision")
# REST search shows everything an inspector may want except the two terminal statuses.
REST_EXCLUDED = ("archived", "superseded")
RECORD_HINT = "Check the record id; memory_list and memory_search return ids"
REVIEW_HINT = "The entry may have been resolved already; memory_review_list shows the pending ones"


@dataclass(frozen=True, slots=True)
class DoorDefaults:
    """What a caller gets for a filter it leaves out: the MCP tools and the REST inspector differ, as
    upstream (REST shows every status and lists up to 200 at a time)."""

    statuses: tuple[str, ...] | None  # None: every status
    max_list_limit: int
    search_excludes: tuple[str, ...]


MCP_DEFAULTS = DoorDefaults(statuses=("active",), max_list_limit=100, search_excludes=())
REST_DEFAULTS = DoorDefaults(statuses=None, max_list_limit=200, search_excludes=REST_EXCLUDED)


@dataclass(frozen=True, slots=True)
class MemorySettings:
    session_ttl: int = 14_400
    dense_weight: float = 0.6
    graph_weight: float = 0.3
    session_weight: float = 0.1
    reconciler_threshold: float = 0.85
    decision_threshold: float = 0.7
    contradiction_floor: float = 0.5  # neighbours less similar than this are not compared at all


def content_hash(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class MemoryContext:
    """What each memory job runs on. ``clock``: session TTLs, expiry and the session boost read the time
    from here. ``model_guard``: the embedding model is compared on the first call that embeds or searches."""

    store: MemoryStore
    embedder: Embedder
    settings: MemorySettings
    default_workspace: str
    clock: Callable[[], datetime]
    model_guard: ModelGuard

    def workspace(self, principal: Principal, requested: str | None) -> str:
        return resolve_workspace(principal, requested, self.default_workspace)

    def now_iso(self) -> str:
        return iso(self.clock())

    def live(self, workspace: str, record_id: str) -> MemoryRecord | None:
        """The record, unless it does not exist or its session TTL has passed (then it is gone)."""
        record = self.store.get(workspace, record_id)
        if record is None or (record.ttl_expires_at is not None and record.ttl_expires_at <= self.now_iso()):
            return None
        return record

    def ttl(self, scope: str) -> str | None:
        if scope != "session":
            return None
        return iso(self.clock() + timedelta(seconds=self.settings.session_ttl))


# -- argument rules ---------------------------------------------------------------------------------


def agent_arg(agent_id: str | None) -> str:
    valid = valid_agent_id(agent_id)
    if not agent_id:
        raise InvalidParams("agent_id is required", details={"field": "agent_id"})
    if valid is None or valid != agent_id:
        raise InvalidParams(
            f"agent_id {agent_id!r} is not valid: use 1-64 characters from A-Z a-z 0-9 . _ -",
            details={"field": "agent_id"},
        )
    return valid


def optional_agent_arg(agent_id: str | None) -> str | None:
    """None (no agent: the whole workspace) or a valid agent id."""
    return None if agent_id is None else agent_arg(agent_id)


def reachable(record: MemoryRecord | None, caller_agent: str | None) -> MemoryRecord | None:
    """The record, unless a connection that names its agent asks for another agent's partition (then it
    answers as if the record did not exist: partitions do not leak through ids)."""
    if record is None or caller_agent is None or record.scope == "global":
        return record
    return record if record.agent_id == caller_agent else None


def scope_arg(scope: str | None, session_id: str | None, required: bool = True) -> str | None:
    if scope is None and not required:
        return None
    if scope == "":
        raise InvalidParams(
            f"scope must be one of {', '.join(SCOPES)}, not empty", details={"field": "scope"}
        )
    scope = scope or "per_agent"
    if scope not in SCOPES:
        raise InvalidParams(
            f"scope must be one of {', '.join(SCOPES)}, got {scope!r}", details={"field": "scope"}
        )
    if required and scope == "session" and not session_id:
        raise InvalidParams("session_id is required when scope is 'session'", details={"field": "session_id"})
    return scope


def content_arg(content: str | None) -> str:
    text = (content or "").strip()
    if not text:
        raise InvalidParams("content must not be empty", details={"field": "content"})
    if len(text) > MAX_CONTENT:
        raise InvalidParams(f"content is longer than {MAX_CONTENT} characters", details={"field": "content"})
    return text


def tags_arg(tags: list[str] | None) -> list[str]:
    clean = list(dict.fromkeys(t.strip() for t in (tags or []) if t and t.strip()))
    if len(clean) > MAX_TAGS or any(len(t) > MAX_TAG_CHARS for t in clean):
        raise InvalidParams(
            f"at most {MAX_TAGS} tags of at most {MAX_TAG_CHARS} characters", details={"field": "tags"}
        )
    return clean


def kind_arg(kind: str | None) -> str | None:
    if kind is not None and kind not in KINDS:
        raise InvalidParams(
            f"kind must be one of {', '.join(KINDS)}, got {kind!r}", details={"field": "kind"}
        )
    return kind


def importance_arg(importance_score: float) -> float:
    if not 0.0 <= importance_score <= 1.0:
        raise InvalidParams(
            "importance_score must be between 0.0 and 1.0", details={"field": "importance_score"}
        )
    return importance_score


def statuses_arg(status: Sequence[str] | None, default: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if status is None:
        return default
    if "all" in status:
        if len(status) > 1:
            raise InvalidParams("'all' cannot be combined with other statuses", details={"field": "status"})
        return None
    unknown = [s for s in status if s not in STATUSES]
    if unknown or not status:
        raise InvalidParams(
            f"unknown status {unknown[0] if unknown else '(empty list)'!r}; valid: {', '.join(STATUSES)}, all",
            details={"field": "status"},
        )
    return tuple(dict.fromkeys(status))
