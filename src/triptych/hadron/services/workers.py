"""Workers: named castings of an agent installed in a team App. Cast, roster, read and amend.

Reading (roster, get) is the team plus the App's own key; writing (cast, update) is an org
CONTRIBUTOR+, a non-reader AppMember or the owner of a user-owned App, never an App key. A worker the
caller may not read is reported as ``[worker_not_found]``, exactly like an absent name. Names are
unique per App, case-insensitively and forever (a retired worker's name stays taken).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from triptych.hadron import write_keys
from triptych.hadron.access import AccessPolicy, require_identity
from triptych.hadron.domain.loc import is_id, split_app_member_urn, urn_type, worker_urn
from triptych.hadron.domain.mentions import slug as name_slug
from triptych.hadron.domain.model import App
from triptych.hadron.domain.team import Agent, Worker, boot_briefing
from triptych.hadron.errors import BadInput, Forbidden, NotFound, TeamRefusal
from triptych.hadron.identity import HadronCaller
from triptych.hadron.services.agents import AgentService
from triptych.hadron.services.selection import SelectionService, SessionState
from triptych.hadron.services.sessions import SessionService
from triptych.hadron.services.tenancy import TenancyAdmin
from triptych.hadron.store import TenancyStore, new_id, utcnow
from triptych.hadron.team_store import TeamStore

MAX_NAME = 64


@dataclass(frozen=True, slots=True)
class RosterLine:
    worker: Worker
    held_by: str | None  # handle
    held_by_you: bool
    live_session_id: str | None
    last_driven_at: str | None


class WorkerService:
    def __init__(
        self,
        tenancy: TenancyStore,
        team: TeamStore,
        access: AccessPolicy,
        selections: SelectionService,
        agents: AgentService,
        sessions: SessionService,
        clock: Callable[[], str] = utcnow,
    ) -> None:
        self.tenancy = tenancy
        self.team = team
        self.access = access
        self.selections = selections
        self.agents = agents
        self.sessions = sessions
        self.clock = clock

    # ── App context and resolution ────────────────────────────────────────

    def app_context(
        self, caller: HadronCaller, state: SessionState, app_ref: str | None, session_id: str | None
    ) -> App:
        """The App a call works in: ``app``, else the session's own App, else the active App."""
        require_identity(caller)
        session = self.sessions.touch(caller, session_id) if session_id else None
        if app_ref:
            return self.selections.resolve_app(caller, app_ref)[0]
        if session is not None:
            app = self.tenancy.app(session.app_id)
            if app is not None:
                return app
        return self.selections.active_app(caller, state)

    def resolve(
        self, caller: HadronCaller, state: SessionState, ref: str, app_ref: str | None, session_id: str | None
    ) -> Worker:
        """A worker by id, URN, or name (which needs App context); unreadable reads as not found."""
        require_identity(caller)
        ref = ref.strip()
        worker: Worker | None = None
        if is_id(ref):
            worker = self.team.worker(ref)
            if session_id:
                self.sessions.touch(caller, session_id)
        elif urn_type(ref) == "worker":
            parts = split_app_member_urn(ref, "worker")
            app = self.tenancy.app_by_urn(parts[0], parts[1]) if parts else None
            worker = self.team.worker_named(app.id, parts[2]) if app and parts else None
            if session_id:
                self.sessions.touch(caller, session_id)
        else:
            app = self.app_context(caller, state, app_ref, session_id)
            worker = self.team.worker_named(app.id, ref.lstrip("@"))
        if worker is None or not self._can_read(caller, worker.app_id):
            raise NotFound("worker", ref, hint="hadron_list_workers lists the App's staff")
        return worker

    def reload(self, worker: Worker) -> Worker:
        """The worker as stored now (a bind may just have taken its hold)."""
        return self.team.worker(worker.id) or worker

    def _can_read(self, caller: HadronCaller, app_id: str) -> bool:
        app = self.tenancy.app(app_id)
        return app is not None and self.access.team_reader(caller, app)

    def _require_writer(self, caller: HadronCaller, app: App) -> None:
        if not self.access.staff_writer(caller, app):
            who = "an App key" if caller.kind == "app" else "your role"
            raise Forbidden(
                f"{who} may not change the staff of {app.urn}: casting needs an org CONTRIBUTOR+, a non-reader "
                "AppMember or the owner of a user-owned App",
                details={"appId": app.id},
            )

    # ── cast, update ─────────────────────────────────────────────────────

    def cast(
        self, caller: HadronCaller, state: SessionState, name: str | None, role: str | None, agent_ref: str | None,
        app_ref: str | None, prompt_override: str | None,
    ) -> Worker:  # fmt: skip
        app = self.app_context(caller, state, app_ref, None)
        if not self.access.team_reader(caller, app):
            raise Forbidden(f"you are not on the team of {app.urn}", details={"appId": app.id})
        self._require_writer(caller, app)
        if name is None or not name.strip():
            raise TeamRefusal(
                "WORKER_NAME_REQUIRED",
                "a worker's name is required and permanent: pass name",
                details={"field": "name"},
            )
        name = " ".join(name.split())
        slug = name_slug(name)
        if len(name) > MAX_NAME or not slug:
            raise BadInput(
                f"a worker name has 1-{MAX_NAME} characters with a letter or digit", details={"field": "name"}
            )
        agent = self._agent_for(app, role, agent_ref)
        # Checked and inserted under the write lock: of two casts of one name at once (on one server or two
        # sharing a database), the second sees the first and is refused, never a constraint error.
        with self.team.atomic(write_keys.team(app.id)):  # a name is checked free, then taken
            taken = self.team.worker_named(app.id, name) or self.team.worker_named(app.id, slug)
            if taken is not None:
                raise TeamRefusal(
                    "WORKER_NAME_TAKEN",
                    f"the name {name!r} is taken in {app.urn} (by {taken.name}"
                    f"{', retired' if taken.retired else ''}); names are unique per App, case-insensitively and "
                    "forever",
                    details={"name": name, "workerId": taken.id},
                )
            worker = Worker(
                id=new_id(), app_id=app.id, agent_id=agent.id, name=name, slug=slug,
                role=(role or agent.persona_role or agent.slug).strip(), prompt_override=prompt_override or None,
                held_by=None, retired_at=None, created_at=self.clock(), urn=worker_urn(app.root, app.slug, slug),
            )  # fmt: skip
            self.team.add_worker(worker, caller.actor)
        return worker

    def _agent_for(self, app: App, role: str | None, agent_ref: str | None) -> Agent:
        if agent_ref:
            return self.agents.find(app, agent_ref)
        role_agents = [a for a in self.agents.agents(app) if not a.is_team_agent]
        if role:
            matches = [a for a in role_agents if (a.persona_role or "").lower() == role.strip().lower()]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise BadInput(
                    f"{len(matches)} installed agents carry the role {role!r}: pass agent",
                    details={"agents": [a.urn for a in matches]},
                )
            raise NotFound("agent", f"role {role}", hint=f"No agent of {app.urn} has personaRole {role!r}")
        if len(role_agents) == 1:
            return role_agents[0]
        raise BadInput(
            "pass role (an installed agent's personaRole) or agent (its URN or id)",
            details={"roles": sorted({a.persona_role or a.slug for a in role_agents})},
        )

    def update(
        self, caller: HadronCaller, state: SessionState, ref: str, prompt_override: str | None,
        app_ref: str | None, session_id: str | None,
    ) -> Worker:  # fmt: skip
        worker = self.resolve(caller, state, ref, app_ref, session_id)
        app = self.tenancy.app(worker.app_id)
        assert app is not None
        self._require_writer(caller, app)
        if worker.retired:
            raise TeamRefusal(
                "WORKER_RETIRED",
                f"{worker.name} is retired: an override is delivered at bind time and it takes no new bindings",
                details={"workerId": worker.id},
            )
        if prompt_override is not None:
            self.team.set_prompt_override(worker.id, prompt_override or None)
        updated = self.team.worker(worker.id)
        assert updated is not None
        return updated

    # ── reads ────────────────────────────────────────────────────────────

    def roster(
        self, caller: HadronCaller, state: SessionState, include_retired: bool, limit: int, offset: int,
        app_ref: str | None, session_id: str | None,
    ) -> tuple[App, list[RosterLine], int]:  # fmt: skip
        app = self.app_context(caller, state, app_ref, session_id)
        if not self.access.team_reader(caller, app):
            raise Forbidden(f"you are not on the team of {app.urn}", details={"appId": app.id})
        self.sessions.expire()
        workers, total = self.team.workers(app.id, include_retired, limit, offset)
        return app, [self.line(caller, w) for w in workers], total

    def line(self, caller: HadronCaller, worker: Worker) -> RosterLine:
        live = self.sessions.live_session(worker.id)
        you = caller.user is not None and worker.held_by == caller.user.id
        return RosterLine(
            worker, self.sessions.handle(worker.held_by), you, live.id if live else None,
            self.sessions.last_driven(worker.id),
        )  # fmt: skip

    def briefing(self, worker: Worker) -> str:
        agent = self.team.agent(worker.agent_id)
        app = self.tenancy.app(worker.app_id)
        assert agent is not None and app is not None
        return boot_briefing(worker, agent, app.name, self.team.last_handoff(worker.id))

    def view(self, caller: HadronCaller, worker: Worker, *, briefing: bool = True) -> dict[str, Any]:
        agent = self.team.agent(worker.agent_id)
        app = self.tenancy.app(worker.app_id)
        line = self.line(caller, worker)
        out: dict[str, Any] = {
            "id": worker.id,
            "urn": worker.urn,
            "name": worker.name,
            "slug": worker.slug,
            "role": worker.role,
            "agent": {"id": agent.id, "urn": agent.urn, "name": agent.name} if agent else None,
            "appUrn": app.urn if app else None,
            "retired": worker.retired,
            "promptOverride": worker.prompt_override,
            "heldBy": line.held_by,
            "heldByYou": line.held_by_you,
            "live": line.live_session_id is not None,
            "liveSessionId": line.live_session_id,
            "lastDrivenAt": line.last_driven_at,
            "neverDriven": line.last_driven_at is None,
        }
        if briefing:
            out["bootBriefing"] = self.briefing(worker)
        return out

    # ── operator actions (CLI) ───────────────────────────────────────────

    def admin_worker(self, app_ref: str, ref: str) -> Worker:
        app = TenancyAdmin(self.tenancy).app(app_ref)
        worker = self.team.worker(ref) or self.team.worker_named(app.id, ref)
        if worker is None or worker.app_id != app.id:
            raise NotFound("worker", ref)
        return worker

    def release(self, app_ref: str, ref: str) -> Worker:
        """Free a hold: the only thing that does (ending, idling or expiring a session never does)."""
        worker = self.admin_worker(app_ref, ref)
        self.team.set_holder(worker.id, None)
        return worker

    def retire(self, app_ref: str, ref: str) -> Worker:
        worker = self.admin_worker(app_ref, ref)
        self.team.retire(worker.id, self.clock())
        return worker
