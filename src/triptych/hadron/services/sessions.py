"""Worker sessions (the Hadron Session row, not the MCP session): start with an optional worker
binding, end with a handoff, whoami, and the heartbeat every team tool gives a session it is passed.

Binding checks the hold before the flag: a name held by somebody else refuses ``WORKER_HELD`` and
``force`` never reaches that gate; a live session on the worker refuses ``WORKER_TAKEN``, which
``force`` takes over (the displaced session ends as ``taken-over``). Only a release frees a hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.model import App
from triptych.hadron.domain.team import SESSION_TYPES, Worker, WorkSession, driven_at, is_live, parse_time
from triptych.hadron.errors import BadInput, Forbidden, SessionForbidden, TeamRefusal
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.store import TenancyStore, new_id, utcnow
from triptych.hadron.team_store import TeamStore


@dataclass(frozen=True, slots=True)
class SessionStart:
    description: str
    type: str = "DEVELOPER"
    repo: str | None = None
    branch: str | None = None
    pr_number: int | None = None
    language: str | None = None
    llm_model: str | None = None
    parent_session_id: str | None = None
    prev_session_id: str | None = None
    expires_at: str | None = None  # GraphQL startSession can set one; hadron_start_session never does


@dataclass(frozen=True, slots=True)
class SessionEnd:
    handoff: str | None = None
    summary: str | None = None
    error_count: int | None = None
    turn_count: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


class SessionService:
    def __init__(
        self,
        tenancy: TenancyStore,
        team: TeamStore,
        access: AccessPolicy,
        selections: SelectionService,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.team = team
        self.access = access
        self.selections = selections
        self.clock = clock

    def now(self) -> datetime:
        return parse_time(self.clock())

    # ── lookups and the heartbeat ────────────────────────────────────────

    def expire(self) -> None:
        """End the sessions past a hard expiresAt (none that hadron_start_session opened)."""
        self.team.expire_sessions(self.clock())

    def owns(self, caller: HadronCaller, session: WorkSession) -> bool:
        """The end gate: the attributed user, or a pure App key for its own App's key sessions."""
        if caller.kind == "app":
            return caller.app is not None and session.user_id is None and session.app_id == caller.app.id
        return caller.user is not None and session.user_id == caller.user.id

    def get(self, session_id: str) -> WorkSession:
        session = self.team.session(session_id.strip())
        if session is None:
            raise TeamRefusal(
                "SESSION_NOT_FOUND",
                f"no worker session {session_id!r}",
                hint="hadron_whoami lists your open sessions",
                details={"sessionId": session_id},
            )
        return session

    def touch(self, caller: HadronCaller, session_id: str) -> WorkSession:
        """A session passed to a team tool: yours, and now driven (a heartbeat unless it has ended)."""
        require_identity(caller)
        session = self.get(session_id)
        if not self.owns(caller, session):
            raise SessionForbidden(session.id)
        if session.ended_at is None:
            now = self.clock()
            self.team.heartbeat(session.id, now)
            session = replace(session, last_active_at=max(now, session.last_active_at))
        return session

    def live_session(self, worker_id: str) -> WorkSession | None:
        now = self.now()
        live = [s for s in self.team.worker_sessions(worker_id) if is_live(s, now)]
        return max(live, key=lambda s: s.last_active_at) if live else None

    def last_driven(self, worker_id: str) -> str | None:
        """When the worker was last driven, or None: never driven."""
        instants = [
            driven_at(s, self.team.events(s.id) if s.end_reason == "expired" else [])
            for s in self.team.worker_sessions(worker_id)
        ]
        return max(instants) if instants else None

    def handle(self, user_id: str | None) -> str | None:
        user = self.tenancy.user(user_id) if user_id else None
        return user.handle if user else None

    # ── start, end, whoami ───────────────────────────────────────────────

    def start(
        self, caller: HadronCaller, state: SessionState, app: App, fields: SessionStart, worker: Worker | None,
        force: bool,
    ) -> tuple[WorkSession, list[WorkSession]]:  # fmt: skip
        """Open a session in ``app``, bound to ``worker`` if given; returns it and any sessions it displaced."""
        if not self.access.team_reader(caller, app):
            raise Forbidden(f"you are not on the team of {app.urn}", details={"appId": app.id})
        if fields.type not in SESSION_TYPES:
            raise BadInput(f"type must be one of {', '.join(SESSION_TYPES)}", details={"field": "type"})
        if not fields.description.strip():
            raise BadInput("description must not be empty", details={"field": "description"})
        self.expire()
        user_id = caller.user.id if caller.kind == "user" and caller.user else None
        displaced: list[WorkSession] = []
        now = self.clock()
        with self.team.atomic(write_keys.team(app.id)):  # one live binding per worker: read, then written
            if worker is not None:
                displaced = self._bind_checks(user_id, worker, force)
                for old in displaced:
                    self.team.end_session(old.id, now, "taken-over", {})
                if user_id is not None and worker.held_by is None:
                    self.team.set_holder(worker.id, user_id)  # binding holds the name
            session = WorkSession(
                id=new_id(), app_id=app.id, user_id=user_id, worker_id=worker.id if worker else None,
                description=fields.description.strip(), type=fields.type, repo=fields.repo, branch=fields.branch,
                pr_number=fields.pr_number, language=fields.language, llm_model=fields.llm_model,
                parent_session_id=fields.parent_session_id, prev_session_id=fields.prev_session_id,
                started_at=now, last_active_at=now, expires_at=fields.expires_at,
            )  # fmt: skip
            self.team.add_session(session)
            self.team.add_event(session.id, now, "start", None)
        state.work_session_id = session.id  # nodes created in this MCP session are attributed to it
        return session, displaced

    def _bind_checks(self, user_id: str | None, worker: Worker, force: bool) -> list[WorkSession]:
        if worker.retired:
            raise TeamRefusal(
                "WORKER_RETIRED",
                f"{worker.name} is retired and takes no new bindings",
                details={"workerId": worker.id},
            )
        if worker.held_by is not None and worker.held_by != user_id:
            raise TeamRefusal(
                "WORKER_HELD",
                f"{worker.name} is held by {self.handle(worker.held_by) or 'another user'}; force does not reach a hold",
                hint="Cast your own worker with hadron_cast_worker, or ask the holder or an admin to release the name",
                details={"workerId": worker.id, "heldBy": self.handle(worker.held_by)},
            )
        now = self.now()
        live = [s for s in self.team.worker_sessions(worker.id) if is_live(s, now)]
        if live and not force:
            last = max(live, key=lambda s: s.last_active_at)
            raise TeamRefusal(
                "WORKER_TAKEN",
                f"{worker.name} is being driven by {self.handle(last.user_id) or 'an App key'} "
                f"(session {last.id}, last active {last.last_active_at})",
                hint="Retry with force: true only on the user's explicit override",
                details={
                    "workerId": worker.id,
                    "sessionId": last.id,
                    "drivenBy": self.handle(last.user_id),
                    "lastActiveAt": last.last_active_at,
                },
            )
        return live

    def end(self, caller: HadronCaller, session_id: str, fields: SessionEnd) -> WorkSession:
        require_identity(caller)
        session = self.get(session_id)
        if not self.owns(caller, session):
            raise SessionForbidden(session.id)
        if session.ended:
            raise TeamRefusal(
                "SESSION_ENDED", f"session {session.id} has already ended", details={"sessionId": session.id}
            )
        if fields.handoff is not None and session.worker_id is None:
            raise TeamRefusal(
                "SESSION_NOT_WORKER_BOUND",
                "a handoff belongs to a worker's continuity, and this session is bound to no worker",
                hint="The session stays open: end it without handoff, or start a session with workerRef",
                details={"sessionId": session.id},
            )
        values: dict[str, Any] = {
            "handoff": fields.handoff, "summary": fields.summary, "error_count": fields.error_count,
            "turn_count": fields.turn_count, "input_tokens": fields.input_tokens, "output_tokens": fields.output_tokens,
        }  # fmt: skip
        now = self.clock()
        with self.team.atomic(write_keys.team(session.app_id)):
            self.team.end_session(session.id, now, "ended", values)
            self.team.add_event(session.id, now, "end", None)
        ended = self.team.session(session.id)
        assert ended is not None
        return ended

    def whoami(self, caller: HadronCaller, limit: int, include_ended: bool) -> list[WorkSession]:
        require_identity(caller)
        self.expire()
        if caller.kind == "app" and caller.app is not None:
            return self.team.sessions_of(None, caller.app.id, include_ended, limit)
        if caller.user is None:
            return []
        return self.team.sessions_of(caller.user.id, None, include_ended, limit)

    def view(self, session: WorkSession) -> dict[str, Any]:
        worker = self.team.worker(session.worker_id) if session.worker_id else None
        app = self.tenancy.app(session.app_id)
        return {
            "id": session.id,
            "description": session.description,
            "type": session.type,
            "appId": session.app_id,
            "appUrn": app.urn if app else None,
            "worker": {"id": worker.id, "urn": worker.urn, "name": worker.name, "role": worker.role}
            if worker
            else None,
            "userHandle": self.handle(session.user_id),
            "repo": session.repo,
            "branch": session.branch,
            "prNumber": session.pr_number,
            "language": session.language,
            "llmModel": session.llm_model,
            "parentSessionId": session.parent_session_id,
            "prevSessionId": session.prev_session_id,
            "startedAt": session.started_at,
            "lastActiveAt": session.last_active_at,
            "live": is_live(session, self.now()),
            "endedAt": session.ended_at,
            "endReason": session.end_reason,
            "summary": session.summary,
            "metrics": {
                "errorCount": session.error_count,
                "turnCount": session.turn_count,
                "inputTokens": session.input_tokens,
                "outputTokens": session.output_tokens,
            },
        }


def age(instant: str, now: datetime | None = None) -> str:
    """'3d ago', '5m ago': how the roster shows when a worker was last driven."""
    delta = (now or datetime.now(UTC)) - parse_time(instant)
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now"
