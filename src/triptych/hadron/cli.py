"""``triptych hadron ...``: the admin commands that set up a world (organizations, users, apps,
memberships, memories, access grants, app keys, schemas) and print what they made.

``register(subparsers)`` adds the ``hadron`` command tree to the main CLI; ``python -m
triptych.hadron.cli ...`` runs the same tree on its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from triptych.core.config import load_settings
from triptych.core.datadir import HELP as DATA_DIR_HELP
from triptych.core.errors import TriptychError
from triptych.hadron.domain.model import ACCESS_LEVELS, MEMORY_CLASSES, ORG_ROLES
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


def register(subparsers: Any) -> None:
    """Add ``hadron`` (org, user, app, memory subcommands) to an argparse subparsers object."""
    hadron = subparsers.add_parser(
        "hadron", help="Hadron admin: organizations, users, apps, memories, access"
    )
    groups = hadron.add_subparsers(dest="hadron_command", required=True)
    data_dir: dict[str, Any] = {
        "type": Path,
        "help": DATA_DIR_HELP,
    }

    def command(parent: Any, name: str, help_text: str, action: Action) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(name, help=help_text)
        parser.add_argument("--data-dir", **data_dir)
        parser.set_defaults(func=_run(action))
        return parser

    org = groups.add_parser("org", help="organizations").add_subparsers(dest="org_command", required=True)
    p = command(org, "create", "create an organization rooted at a dotted domain", _org_create)
    p.add_argument("root", help="the organization's root, a dotted domain such as acme.com")
    p.add_argument("--name", help="display name")
    p = command(org, "member", "add a user to an organization (or change the role)", _org_member)
    p.add_argument("org", help="hrn:org:<root>, the root, or the id")
    p.add_argument("user", help="user handle")
    p.add_argument("--role", choices=ORG_ROLES, type=str.upper, required=True)

    user = groups.add_parser("user", help="users").add_subparsers(dest="user_command", required=True)
    p = command(user, "create", "create a user; the handle is the sub claim of their JWT", _user_create)
    p.add_argument("handle", help="lower-case handle without dots (the JWT subject)")
    p.add_argument("--name", help="display name")

    app = groups.add_parser("app", help="apps").add_subparsers(dest="app_command", required=True)
    p = command(app, "create", "create an app owned by an organization or a user", _app_create)
    p.add_argument("slug", help="lower-case slug")
    p.add_argument("--name", help="display name")
    owner = p.add_mutually_exclusive_group(required=True)
    owner.add_argument("--org", help="owning organization")
    owner.add_argument("--owner", help="owning user handle (a personal app)")
    p = command(app, "member", "add a user to an app (or change the role)", _app_member)
    p.add_argument("app", help="hrn:app:<root>:<slug> or id")
    p.add_argument("user", help="user handle")
    p.add_argument("--role", choices=ORG_ROLES, type=str.upper, required=True)
    p = command(app, "key", "mint an app key (printed once on stdout)", _app_key)
    p.add_argument("app", help="hrn:app:<root>:<slug> or id")
    p.add_argument("--label", help="a label for the key")
    p = command(app, "attach", "attach a memory to an app (the app's search rung)", _app_attach)
    p.add_argument("app")
    p.add_argument("memory")

    memory = groups.add_parser("memory", help="memories").add_subparsers(dest="memory_command", required=True)
    p = command(
        memory, "create", "create a memory owned by an organization, an app or a user", _memory_create
    )
    p.add_argument("slug", help="lower-case slug, unique under its owner's root")
    p.add_argument("--class", dest="memory_class", choices=MEMORY_CLASSES, required=True)
    owner = p.add_mutually_exclusive_group(required=True)
    owner.add_argument("--org", help="owning organization")
    owner.add_argument("--app", help="owning app")
    owner.add_argument("--user", help="owning user handle")
    p.add_argument("--name", help="display name")
    p.add_argument("--description", help="description")
    p.add_argument("--encrypted", action="store_true", help="mark the memory encrypted")
    p.add_argument(
        "--embedding",
        choices=("content", "none"),
        help="embed nodes on write for vector/hybrid search (default: content for knowledge, else none)",
    )
    p = command(memory, "embedding", "set how the memory's nodes are embedded on write", _memory_embedding)
    p.add_argument("memory", help="hrn:mem:<root>:<slug> or id")
    p.add_argument("policy", choices=("content", "none"))
    p = command(memory, "grant", "give a user or an app read-only or read-write access", _memory_grant)
    p.add_argument("memory", help="hrn:mem:<root>:<slug> or id")
    p.add_argument("--access", choices=ACCESS_LEVELS, required=True)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="user handle")
    who.add_argument("--app", help="app URN or id (its keys get the access)")
    p = memory.add_parser(
        "abstracts",
        help="write the memory's missing and stale node abstracts (LLM when TRIPTYCH_LLM_URL is set)",
    )
    p.add_argument("--data-dir", **data_dir)
    p.add_argument("memory", help="hrn:mem:<root>:<slug> or id")
    p.add_argument(
        "--force", action="store_true", help="rewrite every abstract, not only missing and stale ones"
    )
    p.set_defaults(func=_run(_memory_abstracts, AbstractsAdmin))

    def team_command(parent: Any, name: str, help_text: str, action: TeamAction) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(name, help=help_text)
        parser.add_argument("--data-dir", **data_dir)
        parser.set_defaults(func=_run_team(action))
        return parser

    agent = groups.add_parser("agent", help="agents installed in an app").add_subparsers(
        dest="agent_command", required=True
    )
    p = team_command(
        agent, "install", "install a role agent (or with --team the Team Agent) in an app", _agent_install
    )
    p.add_argument("app", help="hrn:app:<root>:<slug> or id")
    p.add_argument("slug", help="lower-case slug of the agent in the app")
    p.add_argument("--name", help="display name")
    p.add_argument("--persona-role", help="the role workers are cast into (role agents)")
    text = p.add_mutually_exclusive_group()
    text.add_argument("--system-prompt", help="the systemPrompt template ({{name}}, {{role}}, {{app}})")
    text.add_argument("--system-prompt-file", help="read the template from a file")
    p.add_argument("--team", action="store_true", help="the Team Agent: hosts the team chat and worklog")
    p = team_command(agent, "list", "list the agents installed in an app", _agent_list)
    p.add_argument("app")
    ai = groups.add_parser("ai-config", help="AI service configs").add_subparsers(
        dest="ai_command", required=True
    )
    p = team_command(ai, "create", "add an AI service config to an app", _ai_config_create)
    p.add_argument("app")
    p.add_argument("name")
    p.add_argument("--provider", required=True)
    p.add_argument("--model", required=True)
    worker = groups.add_parser("worker", help="workers").add_subparsers(dest="worker_command", required=True)
    p = team_command(
        worker, "release", "release a worker's hold (the only thing that frees one)", _worker_release
    )
    p.add_argument("app")
    p.add_argument("worker", help="the worker's name or id")
    p = team_command(
        worker, "retire", "retire a worker: no new bindings or records, the name stays taken", _worker_retire
    )
    p.add_argument("app")
    p.add_argument("worker", help="the worker's name or id")

    p = command(memory, "schema", "set (or clear) the memory's collections schema", _memory_schema)
    p.add_argument("memory")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", help='a JSON file {"collections": {...}} ("-" for stdin)')
    source.add_argument("--clear", action="store_true", help="remove the schema")

    from triptych.hadron import cli_storage  # Git sources and the key of encrypted memories (issue 18)

    cli_storage.register(groups, data_dir)

    p = groups.add_parser(
        "migrate", help="move the data directory's Hadron data (hadron.db) into PostgreSQL, or back"
    )
    way = p.add_mutually_exclusive_group(required=True)
    way.add_argument(
        "--to", help="into PostgreSQL: postgresql://user:password@host:5432/db (from --data-dir)"
    )
    way.add_argument(
        "--from",
        dest="source",
        help="back from PostgreSQL (postgresql://...) into --data-dir, whose hadron.db must hold no Hadron data",
    )
    p.add_argument("--data-dir", **data_dir)
    p.set_defaults(func=_migrate)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triptych")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
