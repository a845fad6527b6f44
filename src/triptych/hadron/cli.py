"""``triptych hadron ...``: the admin commands that set up a world (organizations, users, apps,
memberships, memories, access grants, app keys, schemas, Git sources, the key of encrypted memories).

``register(subparsers)`` adds the ``hadron`` command tree to the main CLI; ``python -m
triptych.hadron.cli ...`` runs the same tree on its own. Only the arguments are declared here: what a
command does is in ``cli_commands.py`` and ``cli_storage.py``, imported when it runs (docs/decisions/0310).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from triptych.core.commands import later
from triptych.core.datadir import HELP as DATA_DIR_HELP
from triptych.hadron.domain.model import ACCESS_LEVELS, MEMORY_CLASSES, ORG_ROLES

_admin = partial(later, "triptych.hadron.cli_commands")
_storage = partial(later, "triptych.hadron.cli_storage")
# sealing.ENV_KEY_FILE, spelled here: importing sealing loads the database layer and cryptography for the
# help text of one command (tests/test_cli_light.py keeps the two equal).
ENV_KEY_FILE = "TRIPTYCH_HADRON_KEY_FILE"


def __getattr__(name: str) -> Any:
    # TeamAdmin and AbstractsAdmin were defined here before the commands moved (tests build a world with
    # TeamAdmin): still importable from this module, loaded on first use.
    if name in {"TeamAdmin", "AbstractsAdmin"}:
        from triptych.hadron import cli_commands

        return getattr(cli_commands, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

    def command(
        parent: Any, name: str, help_text: str, action: str, where: Any = _admin
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(name, help=help_text)
        parser.add_argument("--data-dir", **data_dir)
        parser.set_defaults(func=where(action))
        return parser

    org = groups.add_parser("org", help="organizations").add_subparsers(dest="org_command", required=True)
    p = command(org, "create", "create an organization rooted at a dotted domain", "org_create")
    p.add_argument("root", help="the organization's root, a dotted domain such as acme.com")
    p.add_argument("--name", help="display name")
    p = command(org, "member", "add a user to an organization (or change the role)", "org_member")
    p.add_argument("org", help="hrn:org:<root>, the root, or the id")
    p.add_argument("user", help="user handle")
    p.add_argument("--role", choices=ORG_ROLES, type=str.upper, required=True)

    user = groups.add_parser("user", help="users").add_subparsers(dest="user_command", required=True)
    p = command(user, "create", "create a user; the handle is the sub claim of their JWT", "user_create")
    p.add_argument("handle", help="lower-case handle without dots (the JWT subject)")
    p.add_argument("--name", help="display name")

    app = groups.add_parser("app", help="apps").add_subparsers(dest="app_command", required=True)
    p = command(app, "create", "create an app owned by an organization or a user", "app_create")
    p.add_argument("slug", help="lower-case slug")
    p.add_argument("--name", help="display name")
    owner = p.add_mutually_exclusive_group(required=True)
    owner.add_argument("--org", help="owning organization")
    owner.add_argument("--owner", help="owning user handle (a personal app)")
    p = command(app, "member", "add a user to an app (or change the role)", "app_member")
    p.add_argument("app", help="hrn:app:<root>:<slug> or id")
    p.add_argument("user", help="user handle")
    p.add_argument("--role", choices=ORG_ROLES, type=str.upper, required=True)
    p = command(app, "key", "mint an app key (printed once on stdout)", "app_key")
    p.add_argument("app", help="hrn:app:<root>:<slug> or id")
    p.add_argument("--label", help="a label for the key")
    p = command(app, "attach", "attach a memory to an app (the app's search rung)", "app_attach")
    p.add_argument("app")
    p.add_argument("memory")

    memory = groups.add_parser("memory", help="memories").add_subparsers(dest="memory_command", required=True)
    p = command(
        memory, "create", "create a memory owned by an organization, an app or a user", "memory_create"
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
    p = command(memory, "embedding", "set how the memory's nodes are embedded on write", "memory_embedding")
    p.add_argument("memory", help="hrn:mem:<root>:<slug> or id")
    p.add_argument("policy", choices=("content", "none"))
    p = command(memory, "grant", "give a user or an app read-only or read-write access", "memory_grant")
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
    p.set_defaults(func=_admin("memory_abstracts"))

    agent = groups.add_parser("agent", help="agents installed in an app").add_subparsers(
        dest="agent_command", required=True
    )
    p = command(
        agent, "install", "install a role agent (or with --team the Team Agent) in an app", "agent_install"
    )
    p.add_argument("app", help="hrn:app:<root>:<slug> or id")
    p.add_argument("slug", help="lower-case slug of the agent in the app")
    p.add_argument("--name", help="display name")
    p.add_argument("--persona-role", help="the role workers are cast into (role agents)")
    text = p.add_mutually_exclusive_group()
    text.add_argument("--system-prompt", help="the systemPrompt template ({{name}}, {{role}}, {{app}})")
    text.add_argument("--system-prompt-file", help="read the template from a file")
    p.add_argument("--team", action="store_true", help="the Team Agent: hosts the team chat and worklog")
    p = command(agent, "list", "list the agents installed in an app", "agent_list")
    p.add_argument("app")
    ai = groups.add_parser("ai-config", help="AI service configs").add_subparsers(
        dest="ai_command", required=True
    )
    p = command(ai, "create", "add an AI service config to an app", "ai_config_create")
    p.add_argument("app")
    p.add_argument("name")
    p.add_argument("--provider", required=True)
    p.add_argument("--model", required=True)
    worker = groups.add_parser("worker", help="workers").add_subparsers(dest="worker_command", required=True)
    p = command(
        worker, "release", "release a worker's hold (the only thing that frees one)", "worker_release"
    )
    p.add_argument("app")
    p.add_argument("worker", help="the worker's name or id")
    p = command(
        worker, "retire", "retire a worker: no new bindings or records, the name stays taken", "worker_retire"
    )
    p.add_argument("app")
    p.add_argument("worker", help="the worker's name or id")

    p = command(memory, "schema", "set (or clear) the memory's collections schema", "memory_schema")
    p.add_argument("memory")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", help='a JSON file {"collections": {...}} ("-" for stdin)')
    source.add_argument("--clear", action="store_true", help="remove the schema")

    # Git sources and the key of encrypted memories (issue 18): their commands are in cli_storage.py.
    source = groups.add_parser("source", help="Git sources of memories").add_subparsers(
        dest="source_command", required=True
    )
    p = command(
        source,
        "attach",
        "back a memory by a Git repository (any URL git can clone)",
        "source_attach",
        _storage,
    )
    p.add_argument("memory", help="hrn:mem:<root>:<slug> or id")
    p.add_argument("url", help="repository URL: https://, ssh, file:// or a local path")
    p.add_argument("--branch", help="the branch to sync (default: the repository's default branch)")
    p = command(
        source, "detach", "stop backing a memory by its repository (nodes stay)", "source_detach", _storage
    )
    p.add_argument("memory")
    command(source, "list", "list the memories' Git sources and their last sync", "source_list", _storage)
    p = command(source, "sync", "run one sync now (what hadron_sync_graph does)", "source_sync", _storage)
    p.add_argument("memory")

    key = groups.add_parser("key", help="the server key of encrypted memories").add_subparsers(
        dest="key_command", required=True
    )
    p = command(key, "new", "write a new random key to a file (never overwrites)", "key_new", _storage)
    p.add_argument("file")
    p = command(
        key,
        "rotate",
        f"re-encrypt every encrypted memory under a new key (the old one from {ENV_KEY_FILE})",
        "key_rotate",
        _storage,
    )
    p.add_argument(
        "--new-key-file", required=True, help="the new key (make one with `triptych hadron key new`)"
    )

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
    p.set_defaults(func=_admin("migrate"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triptych")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
