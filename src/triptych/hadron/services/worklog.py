"""The team worklog: external work milestones recorded against the session that did the work.

Recording passes two gates: team membership (may you touch this App's worklog at all; a pure App
key reads but never records) and attribution (the session must be one you are attributed to).
Ended sessions are accepted (late attribution is the point) but a record never counts as driving
one. Records are append-only; ``kind: pr`` also refreshes the session's displayed PR number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain import refs
from triptych.hadron.domain.model import App, NodeRecord
from triptych.hadron.domain.team import WorkItem
from triptych.hadron.errors import BadInput, Forbidden, TeamRefusal
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.services.sessions import SessionService
from triptych.hadron.store import GraphStore, TenancyStore, new_id, utcnow
from triptych.hadron.team_store import TeamStore

WORKLOG_LOC = "worklog"
MAX_LIMIT = 200


class WorklogService:
    def __init__(
        self,
        tenancy: TenancyStore,
        graph: GraphStore,
        team: TeamStore,
        access: AccessPolicy,
        selections: SelectionService,
        agents: AgentService,
        sessions: SessionService,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.graph = graph
        self.team = team
        self.access = access
        self.selections = selections
        self.agents = agents
        self.sessions = sessions
        self.clock = clock

    def _app(
        self, caller: HadronCaller, state: SessionState, app_ref: str | None, session_id: str | None
    ) -> App:
        require_identity(caller)
        if app_ref:
            return self.selections.resolve_app(caller, app_ref)[0]
        if caller.kind == "app" or state.app_id or session_id is None:
            return self.selections.active_app(caller, state)
        session = self.sessions.get(session_id)
        app = self.tenancy.app(session.app_id)
        if app is None or self.access.app_role(caller, app) is None:
            return self.selections.active_app(caller, state)
        return app

    def record(
        self, caller: HadronCaller, state: SessionState, session_id: str, tool: str, kind: str, ref: str,
        action: str, detail: dict[str, Any] | None, app_ref: str | None,
    ) -> WorkItem:  # fmt: skip
        app = self._app(caller, state, app_ref, session_id)
        if caller.kind == "app":
            raise Forbidden(
                "a pure App-key principal may read its own App's worklog but may not record: worker work has a "
                "human driver",
                details={"appId": app.id},
            )
        if not self.access.team_member(caller, app):
            raise Forbidden(f"you are not on the team of {app.urn}", details={"appId": app.id})
        tool, action = tool.strip(), action.strip()
        if not tool or not action:
            raise BadInput(
                "tool and action must not be empty", details={"field": "tool" if not tool else "action"}
            )
        if tool == refs.GITHUB:
            try:
                canonical = refs.normalize(ref, kind)
            except refs.WorkRefError as exc:
                raise TeamRefusal(
                    "WORK_REF_INVALID",
                    str(exc),
                    hint="Spell it owner/repo#N, owner/repo@sha, owner/repo:branch, owner/repo or a GitHub URL",
                    details={"ref": ref, "kind": kind},
                ) from exc
        else:
            canonical = ref.strip()
            if not canonical:
                raise TeamRefusal("WORK_REF_INVALID", "the ref is empty", details={"ref": ref, "kind": kind})
        session = self.sessions.get(session_id)
        if session.app_id != app.id:
            raise TeamRefusal(
                "SESSION_NOT_IN_APP",
                f"session {session.id} belongs to another App; a record is never attributed across Apps",
                details={"sessionId": session.id, "appId": app.id},
            )
        worker = self.team.worker(session.worker_id) if session.worker_id else None
        if worker is not None and worker.app_id != app.id:
            raise TeamRefusal(
                "SESSION_WORKER_NOT_IN_APP",
                f"the session's worker {worker.name} belongs to another App; a record never crosses the team boundary",
                details={"sessionId": session.id, "workerAppId": worker.app_id, "appId": app.id},
            )
        if caller.user is None or session.user_id != caller.user.id:
            raise Forbidden(
                "You cannot record work against a session you are not attributed to.",
                details={"sessionId": session.id},
            )
        if worker is not None and worker.retired:
            raise TeamRefusal(
                "WORKER_RETIRED",
                f"{worker.name} is retired: it takes no new records (its history stands)",
                details={"workerId": worker.id},
            )
        memory = self.agents.team_memory(app)
        now = self.clock()
        item = WorkItem(
            id=new_id(), app_id=app.id, session_id=session.id, user_id=session.user_id, worker_id=session.worker_id,
            tool=tool, kind=kind, ref=canonical, action=action, detail=detail, created_at=now,
        )  # fmt: skip
        # The team's worklog and the team memory, whose worklog node the first record creates.
        with self.team.atomic(write_keys.team(app.id), write_keys.memory(memory.id)):
            if self.graph.node_by_loc(memory.id, WORKLOG_LOC) is None:  # bootstrapped on the first record
                node = NodeRecord(
                    id=new_id(), memory_id=memory.id, loc=WORKLOG_LOC, name="worklog", node_type="worklog",
                    object_type=None, description="The team worklog", content=None, seq=None, tags=[],
                    properties={}, data={"scope": "app"}, llm_model=None, ai_agent=None, revision=1,
                    created_at=now, updated_at=now, created_by=caller.actor, updated_by=caller.actor,
                )  # fmt: skip
                self.graph.insert_node(node)
            self.team.add_item(item)
            if kind == "pr" and tool == refs.GITHUB:
                number = refs.pr_number(canonical)
                if number is not None:
                    self.team.set_pr_number(session.id, number)
            self.team.add_event(session.id, now, "work", canonical)
        if not session.ended:
            self.team.heartbeat(session.id, now)
        return item

    def items(
        self, caller: HadronCaller, state: SessionState, ref: str | None, session_id: str | None, tool: str | None,
        kind: str | None, limit: int, offset: int, app_ref: str | None,
    ) -> tuple[App, list[WorkItem], int]:  # fmt: skip
        app = self._app(caller, state, app_ref, None)
        if session_id:
            session = self.team.session(session_id.strip())
            if session is not None and self.sessions.owns(caller, session):
                self.sessions.touch(
                    caller, session_id
                )  # a heartbeat for your own session; a filter for others'
        if not self.access.team_reader(caller, app):
            raise Forbidden(f"you are not on the team of {app.urn}", details={"appId": app.id})
        forms = refs.lookup_forms(ref, tool) if ref is not None else None
        found, total = self.team.items(
            app.id,
            forms,
            session_id.strip() if session_id else None,
            tool,
            kind,
            min(limit, MAX_LIMIT),
            offset,
        )
        return app, found, total

    def view(self, item: WorkItem) -> dict[str, Any]:
        worker = self.team.worker(item.worker_id) if item.worker_id else None
        return {
            "id": item.id,
            "sessionId": item.session_id,
            "tool": item.tool,
            "kind": item.kind,
            "ref": item.ref,
            "action": item.action,
            "detail": item.detail,
            "recordedBy": worker.name if worker else self.sessions.handle(item.user_id),
            "worker": {"id": worker.id, "name": worker.name} if worker else None,
            "userHandle": self.sessions.handle(item.user_id),
            "createdAt": item.created_at,
        }
