"""Agents installed in an App (role agents and the Team Agent) and AI service configs.

Installing is an operator action (the ``triptych hadron agent install`` CLI), so it takes no caller.
The Team Agent owns the App's shared app memory, where the team chat (``chats:team``) and the
worklog live; ``team_agent`` is the lookup every team-chat and worklog write starts from.
"""

from __future__ import annotations

from collections.abc import Callable

from triptych.hadron import write_keys
from triptych.hadron.domain import urn
from triptych.hadron.domain.loc import agent_urn, ai_config_urn, split_app_member_urn
from triptych.hadron.domain.model import App, Memory
from triptych.hadron.domain.team import Agent, AiServiceConfig
from triptych.hadron.errors import BadInput, NotFound, TeamRefusal, UrnAlreadyExists
from triptych.hadron.services.tenancy import TenancyAdmin
from triptych.hadron.store import TenancyStore, new_id, utcnow
from triptych.hadron.team_store import TeamStore

DEFAULT_ROLE_PROMPT = (
    "You are {{name}}, the {{role}} of {{app}}. Start each stint by reading the team chat "
    "(hadron_team_chat_read) and end it with hadron_end_session and a handoff for whoever is next."
)
DEFAULT_TEAM_PROMPT = "You are the Team Agent of {{app}}: you host its team chat and worklog."


class AgentService:
    def __init__(self, tenancy: TenancyStore, team: TeamStore, clock: Callable[[], str] = utcnow) -> None:
        self.tenancy = tenancy
        self.team = team
        self.clock = clock

    def install(
        self,
        app_ref: str,
        slug: str,
        *,
        name: str | None = None,
        persona_role: str | None = None,
        system_prompt: str | None = None,
        team: bool = False,
    ) -> tuple[Agent, Memory | None]:
        """Install an agent in an App; the Team Agent also gets the App's shared app memory."""
        admin = TenancyAdmin(self.tenancy)
        app = admin.app(app_ref)
        try:
            urn.validate_user_slug(slug)
        except urn.UrnError as exc:
            raise BadInput(f"invalid agent slug {slug!r}: {exc.reason}") from exc
        if self.team.agent_by_slug(app.id, slug) is not None:
            raise UrnAlreadyExists(f"agent {slug!r} is already installed in {app.urn}")
        if not team and not persona_role:
            raise BadInput("a role agent needs --persona-role (the role workers are cast into)")
        memory: Memory | None = None
        # The App's team, and its root when the team agent's memory is created under it.
        with self.team.atomic(write_keys.team(app.id), *([write_keys.root(app.root)] if team else [])):
            if team:
                memory_slug = (
                    f"{app.slug}-team"
                    if self.tenancy.memory_by_key(app.root, f"{app.slug}-team") is None
                    else f"{app.slug}-{slug}"
                )
                memory = admin.create_memory(
                    memory_slug,
                    "app",
                    app=app.urn,
                    name=f"{app.name} team",
                    description="Team chat and worklog",
                )
            agent = Agent(
                id=new_id(),
                app_id=app.id,
                slug=slug,
                name=name or slug,
                persona_role=persona_role,
                system_prompt=system_prompt or (DEFAULT_TEAM_PROMPT if team else DEFAULT_ROLE_PROMPT),
                is_team_agent=team,
                memory_id=memory.id if memory else None,
                urn=agent_urn(app.root, app.slug, slug),
            )
            self.team.add_agent(agent, self.clock())
        return agent, memory

    def add_ai_config(self, app_ref: str, name: str, provider: str, model: str) -> AiServiceConfig:
        app = TenancyAdmin(self.tenancy).app(app_ref)
        if not name.strip() or not provider.strip() or not model.strip():
            raise BadInput("an AI service config needs a name, a provider and a model")
        config = AiServiceConfig(
            new_id(), app.id, name.strip(), provider.strip(), model.strip(),
            ai_config_urn(app.root, app.slug, name.strip()),
        )  # fmt: skip
        self.team.add_ai_config(config, self.clock())
        return config

    def agents(self, app: App) -> list[Agent]:
        return self.team.agents([app.id])

    def find(self, app: App, ref: str) -> Agent:
        """An agent installed in ``app`` by URN, id or slug; ``[agent_not_found]`` otherwise."""
        ref = ref.strip()
        for agent in self.team.agents([app.id]):
            if ref in (agent.id, agent.urn, agent.slug):
                return agent
        raise NotFound("agent", ref, hint=f"The agent must be installed in {app.urn}")

    def by_ref(self, ref: str) -> Agent | None:
        """Any installed agent by URN or id (the caller's access is decided by the caller)."""
        ref = ref.strip()
        agent = self.team.agent(ref)
        if agent is not None:
            return agent
        parts = split_app_member_urn(ref, "agent")
        if parts is None:
            return None
        app = self.tenancy.app_by_urn(parts[0], parts[1])
        return self.team.agent_by_slug(app.id, parts[2]) if app else None

    def team_agent(self, app: App) -> Agent:
        """The App's Team Agent: ``TEAM_AGENT_NOT_FOUND`` without one, ``TEAM_AGENT_AMBIGUOUS`` with two."""
        found = [a for a in self.team.agents([app.id]) if a.is_team_agent]
        if not found:
            raise TeamRefusal(
                "TEAM_AGENT_NOT_FOUND",
                f"{app.urn} has no Team Agent to host its team chat and worklog",
                hint="An operator installs one: triptych hadron agent install <app> team --team",
                details={"appId": app.id},
            )
        if len(found) > 1:
            raise TeamRefusal(
                "TEAM_AGENT_AMBIGUOUS",
                f"{app.urn} has {len(found)} Team Agents; the chat's host cannot be identified",
                details={"appId": app.id, "agents": [a.urn for a in found]},
            )
        return found[0]

    def team_memory(self, app: App) -> Memory:
        agent = self.team_agent(app)
        memory = self.tenancy.memory(agent.memory_id or "")
        if memory is None:
            raise TeamRefusal("TEAM_AGENT_NOT_FOUND", f"the Team Agent of {app.urn} has no shared app memory")
        return memory
