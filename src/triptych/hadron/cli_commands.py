"""What ``triptych hadron ...`` does: the admin commands that set up a world (organizations, users, apps,
memberships, memories, access grants, app keys, schemas) and print what they made.

Their arguments are declared in ``hadron/cli.py``, which imports this module only when one of them runs
(docs/decisions/0310); each command is a module-level name below.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triptych.core.config import load_settings
from triptych.core.errors import TriptychError
from triptych.hadron.services.tenancy import TenancyAdmin

Action = Callable[[TenancyAdmin, argparse.Namespace], str]
TeamAction = Callable[["TeamAdmin", argparse.Namespace], str]


class TeamAdmin:
    """The operator's side of the team (issue 14): install agents, add AI service configs, release and
    retire workers. Built over the store alone, like ``TenancyAdmin``."""

    def __init__(self, stores: Any) -> None:
        from triptych.hadron.access import AccessPolicy
        from triptych.hadron.services.agents import AgentService
        from triptych.hadron.services.selection import SelectionService
        from triptych.hadron.services.sessions import SessionService
        from triptych.hadron.services.workers import WorkerService

        tenancy, team = stores.tenancy, stores.team
        access = AccessPolicy(tenancy)
        selections = SelectionService(tenancy, access)
        self.tenancy = TenancyAdmin(tenancy)
        self.agents = AgentService(tenancy, team)
        sessions = SessionService(tenancy, team, access, selections)
        self.workers = WorkerService(tenancy, team, access, selections, self.agents, sessions)


class AbstractsAdmin:
    """Writes missing or stale node abstracts of a memory (issue 18), with the server's settings: an
    LLM when ``TRIPTYCH_LLM_URL`` is set, else extractive."""

    def __init__(self, stores: Any) -> None:
        from triptych.hadron.services.abstracts import AbstractService, LlmSummarizer

        settings = load_settings()
        llm = None
        if settings.llm_url:
            llm = LlmSummarizer(settings.llm_url, settings.llm_model or "default", settings.llm_api_key, 20.0)
        self.tenancy = TenancyAdmin(stores.tenancy)
        self.graph = stores.graph
        self.abstracts = AbstractService(stores.abstracts, llm)


def _memory_abstracts(admin: AbstractsAdmin, a: argparse.Namespace) -> str:
    memory = admin.tenancy.memory(a.memory)
    if memory.encrypted:
        return f"{memory.urn} is encrypted: its nodes get no abstract (an abstract is clear text)"
    batch: list[Any] = []
    seen = written = 0

    def flush() -> None:
        nonlocal written
        written += admin.abstracts.refresh(memory, batch, force=a.force)
        batch.clear()
        print(f"\r{seen} node(s) read, {written} abstract(s) written", end="", file=sys.stderr, flush=True)

    for node in admin.graph.memory_nodes(memory.id):
        seen += 1
        batch.append(node)
        if len(batch) >= 200:
            flush()
    flush()
    print(file=sys.stderr)
    how = admin.abstracts.llm.method if admin.abstracts.llm else "extractive"
    return f"{memory.urn}: {written} abstract(s) written ({how}) over {seen} node(s)"


def _tenancy_admin(stores: Any) -> TenancyAdmin:
    return TenancyAdmin(stores.tenancy)


def _run(
    action: Callable[[Any, argparse.Namespace], str], build: Callable[[Any], Any] = _tenancy_admin
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        # Only the stores and the admin service: no server, no embedding model to import. In server
        # mode (TRIPTYCH_DATABASE_URL) the stores are the server's, in PostgreSQL.
        from triptych.hadron.engines import open_stores

        settings = load_settings(data_dir=getattr(args, "data_dir", None))
        try:
            stores = open_stores(settings.data_dir / "hadron.db", settings.database_url, None, None)
        except TriptychError as exc:
            print(f"triptych hadron: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        try:
            print(action(build(stores), args))
        except TriptychError as exc:
            print(f"triptych hadron: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        finally:
            stores.close()
        return 0

    return run


def _run_team(action: TeamAction) -> Callable[[argparse.Namespace], int]:
    return _run(action, TeamAdmin)


def _agent_install(admin: TeamAdmin, a: argparse.Namespace) -> str:
    prompt = Path(a.system_prompt_file).read_text() if a.system_prompt_file else a.system_prompt
    agent, memory = admin.agents.install(
        a.app, a.slug, name=a.name, persona_role=a.persona_role, system_prompt=prompt, team=a.team
    )
    kind = "Team Agent" if agent.is_team_agent else f"role agent (personaRole {agent.persona_role})"
    out = f"installed {kind} {agent.urn} ({agent.name}) id={agent.id}"
    if memory is not None:
        out += f"\n  shared app memory {memory.urn}: the team chat (chats:team) and the worklog live there"
    others = [g for g in admin.agents.team.agents([agent.app_id]) if g.is_team_agent and g.id != agent.id]
    if agent.is_team_agent and others:
        out += f"\n  warning: {len(others) + 1} Team Agents now: team chat and worklog refuse TEAM_AGENT_AMBIGUOUS"
    return out


def _agent_list(admin: TeamAdmin, a: argparse.Namespace) -> str:
    app = admin.tenancy.app(a.app)
    agents = admin.agents.agents(app)
    if not agents:
        return f"no agents installed in {app.urn}"
    return "\n".join(
        f"{g.urn} ({g.name}) id={g.id} "
        + ("team agent" if g.is_team_agent else f"personaRole={g.persona_role}")
        for g in agents
    )


def _ai_config_create(admin: TeamAdmin, a: argparse.Namespace) -> str:
    config = admin.agents.add_ai_config(a.app, a.name, a.provider, a.model)
    return f"created AI service config {config.urn} ({config.provider} {config.model}) id={config.id}"


def _worker_release(admin: TeamAdmin, a: argparse.Namespace) -> str:
    worker = admin.workers.release(a.app, a.worker)
    return f"released {worker.name} ({worker.urn}): the name is unheld; the next person to bind it holds it"


def _worker_retire(admin: TeamAdmin, a: argparse.Namespace) -> str:
    worker = admin.workers.retire(a.app, a.worker)
    return f"retired {worker.name} ({worker.urn}): it takes no new bindings or records; its name stays taken"


def _org_create(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    org = admin.create_org(a.root, a.name)
    return f"created organization {org.urn} ({org.name}) id={org.id}"


def _user_create(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    user = admin.create_user(a.handle, a.name)
    return f"created user {user.urn} ({user.name}) id={user.id}; its JWT subject is {user.handle!r}"


def _org_member(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    org, user, role = admin.add_org_member(a.org, a.user, a.role)
    return f"{user.urn} is {role} of {org.urn}"


def _app_create(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    app = admin.create_app(a.slug, a.name, a.org, a.owner)
    return f"created app {app.urn} ({app.name}) id={app.id}"


def _app_member(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    app, user, role = admin.add_app_member(a.app, a.user, a.role)
    return f"{user.urn} is {role} of {app.urn}"


def _app_key(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    app, raw = admin.create_app_key(a.app, a.label)
    print(f"created an app key for {app.urn}; it is shown once, store it now:", file=sys.stderr)
    return raw


def _app_attach(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    app, memory = admin.attach(a.app, a.memory)
    return f"attached {memory.urn} to {app.urn}"


def _memory_create(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    memory = admin.create_memory(
        a.slug,
        a.memory_class,
        org=a.org,
        app=a.app,
        user=a.user,
        name=a.name,
        description=a.description or "",
        encrypted=a.encrypted,
        embedding=a.embedding,
    )
    return (
        f"created {memory.memory_class} memory {memory.urn} ({memory.name}) id={memory.id} "
        f"embedding={memory.embedding_policy}"
    )


def _memory_embedding(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    memory = admin.set_embedding(a.memory, a.policy)
    return f"{memory.urn} embeds nodes on write: {a.policy} (applies to writes from now on)"


def _memory_grant(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    return "granted: " + admin.grant(a.memory, a.access, user=a.user, app=a.app)


def _memory_schema(admin: TenancyAdmin, a: argparse.Namespace) -> str:
    text = None if a.clear else Path(a.file).read_text() if a.file != "-" else sys.stdin.read()
    memory = admin.set_schema(a.memory, text)
    return f"{'cleared the schema of' if a.clear else 'set the schema of'} {memory.urn}"


def _migrate(args: argparse.Namespace) -> int:
    """``triptych hadron migrate --to URL`` or ``--from URL``: one transaction, a progress bar per table."""
    from triptych.core.pg import redacted
    from triptych.core.progress import TableBars
    from triptych.hadron.migrate import migrate_to_embedded, migrate_to_postgres

    settings = load_settings(data_dir=args.data_dir)
    progress = TableBars()

    try:
        if args.to:
            copied = migrate_to_postgres(settings.data_dir, args.to, progress)
        else:
            copied = migrate_to_embedded(args.source, settings.data_dir, progress)
    except TriptychError as exc:
        print(f"triptych hadron: {exc.message}. {exc.hint or ''}".rstrip(), file=sys.stderr)
        return 1
    finally:
        progress.close()
    print(copied.report())
    if args.to:
        following = (
            f"start the server with TRIPTYCH_DATABASE_URL={redacted(args.to)} and the same Hadron key "
            "(the data directory's hadron.db was only read)"
        )
    else:
        following = (
            f"start the server with --data-dir {settings.data_dir}, TRIPTYCH_DATABASE_URL unset and the same"
            f" Hadron key ({redacted(args.source)} was only read)"
        )
    print(f"next: {following}", file=sys.stderr)
    return 0


# The commands ``hadron/cli.py`` names: (parsed arguments) -> exit status.
org_create = _run(_org_create)
org_member = _run(_org_member)
user_create = _run(_user_create)
app_create = _run(_app_create)
app_member = _run(_app_member)
app_key = _run(_app_key)
app_attach = _run(_app_attach)
memory_create = _run(_memory_create)
memory_embedding = _run(_memory_embedding)
memory_grant = _run(_memory_grant)
memory_schema = _run(_memory_schema)
memory_abstracts = _run(_memory_abstracts, AbstractsAdmin)
agent_install = _run_team(_agent_install)
agent_list = _run_team(_agent_list)
ai_config_create = _run_team(_ai_config_create)
worker_release = _run_team(_worker_release)
worker_retire = _run_team(_worker_retire)
migrate = _migrate
