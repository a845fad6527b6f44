"""``triptych metergraph ...`` (keys, app tokens, content retention, route config, classification) and
``triptych metergraph-mcp`` (the stdio bridge). ``register(subparsers)`` adds both to the CLI.

Declaring the arguments imports nothing of Metergraph's services: each command imports what it runs when
it runs (docs/decisions/0310), so ``triptych --help`` and every other command stay light.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from triptych.core.datadir import HELP as DATA_DIR_HELP
from triptych.metergraph import report_cli, webhook_cli
from triptych.metergraph.bridge_help import BRIDGE_ENVIRONMENT
from triptych.metergraph.contract import ROLES


def _open(args: argparse.Namespace) -> Any:
    from triptych.core.config import load_settings
    from triptych.metergraph.service import Metergraph

    settings = load_settings(data_dir=getattr(args, "data_dir", None))
    return Metergraph.open(settings.data_dir, database_url=settings.database_url)


def cmd_key_create(args: argparse.Namespace) -> int:
    from triptych.metergraph.errors import MetergraphError

    mg = _open(args)
    try:
        key_id, token = mg.keys.create_agent_key(args.workspace, args.role, args.environment)
    except MetergraphError as exc:
        print(f"triptych: {exc.message}", file=sys.stderr)
        return 2
    finally:
        mg.close()
    print(token)
    envs = ", ".join(args.environment) if args.environment else "all environments"
    print(
        f"created agent key {key_id}: workspace {args.workspace!r}, role {args.role}, {envs}", file=sys.stderr
    )
    print("the key is shown once and stored hashed; keep it somewhere safe", file=sys.stderr)
    return 0


def cmd_app_token(args: argparse.Namespace) -> int:
    mg = _open(args)
    try:
        key_id, token = mg.keys.create_app_token(args.workspace)
    finally:
        mg.close()
    print(token)
    print(
        f"created app token {key_id} for workspace {args.workspace!r} (shown once, stored hashed)",
        file=sys.stderr,
    )
    return 0


def cmd_key_list(args: argparse.Namespace) -> int:
    mg = _open(args)
    try:
        keys = mg.metadata.list_keys(args.workspace)
    finally:
        mg.close()
    for key in keys:
        print(json.dumps(key, sort_keys=True))
    return 0


def cmd_key_revoke(args: argparse.Namespace) -> int:
    from triptych.metergraph.keys import _now

    mg = _open(args)
    try:
        revoked = mg.metadata.revoke_key(args.key_id, _now())
    finally:
        mg.close()
    print(f"{'revoked' if revoked else 'no active key'} {args.key_id}", file=sys.stderr)
    return 0 if revoked else 1


def cmd_retain_content(args: argparse.Namespace) -> int:
    from triptych.metergraph.keys import _now

    mg = _open(args)
    try:
        mg.metadata.set_retain_content(args.workspace, args.state == "on", _now())
    finally:
        mg.close()
    print(f"workspace {args.workspace!r}: prompt/response content retention {args.state}", file=sys.stderr)
    return 0


def cmd_route_set(args: argparse.Namespace) -> int:
    from triptych.metergraph.errors import MetergraphError
    from triptych.metergraph.keys import _now
    from triptych.metergraph.workspace import route_settings

    try:
        constraints, config = route_settings(json.loads(args.config) if args.config else {})
    except json.JSONDecodeError:
        print("triptych: --config must be a JSON object", file=sys.stderr)
        return 2
    except MetergraphError as exc:
        print(f"triptych: {exc.message}", file=sys.stderr)
        return 2
    mg = _open(args)
    try:
        mg.metadata.set_route(args.workspace, args.route, args.description, config, _now(), constraints)
    finally:
        mg.close()
    return 0


def cmd_classify(args: argparse.Namespace) -> int:
    from triptych.metergraph.keys import AgentPrincipal

    mg = _open(args)
    try:
        # The operator acts as a whole-workspace Debug key would through metergraph_start_classification.
        doc = mg.workloads.start_classification(
            AgentPrincipal(args.workspace, "debug", "cli", None), args.days
        )
    finally:
        mg.close()
    for w in doc["workloads"]:
        print(json.dumps(w, sort_keys=True))
    run = doc["run"]
    print(
        f"classified {run['progress']['calls']} calls of workspace {args.workspace!r} (last {args.days} days) "
        f"into {run['progress']['workloads']} workloads; run {run['run_id']}",
        file=sys.stderr,
    )
    return 0


def cmd_bridge(args: argparse.Namespace) -> int:
    from triptych.metergraph.bridge import main

    return main()


def register(subparsers: Any) -> None:
    """Adds ``metergraph`` and ``metergraph-mcp`` to the ``triptych`` command."""
    data_dir: dict[str, Any] = {
        "type": Path,
        "help": DATA_DIR_HELP,
    }
    mg = subparsers.add_parser(
        "metergraph", help="Metergraph keys, app tokens, content retention, routes, reports and analysis runs"
    )
    sub = mg.add_subparsers(dest="metergraph_command", required=True)

    key = sub.add_parser("key", help="agent keys (read access)")
    key_sub = key.add_subparsers(dest="key_command", required=True)
    create = key_sub.add_parser("create", help="mint an agent key; prints it once on stdout")
    create.add_argument("--workspace", required=True, help="the workspace the key reads")
    create.add_argument("--role", required=True, choices=ROLES, help="metadata, debug (agent:read) or replay")
    create.add_argument(
        "--environment", action="append", help="limit the key to this environment (repeat for several)"
    )
    create.add_argument("--data-dir", **data_dir)
    create.set_defaults(func=cmd_key_create)
    listing = key_sub.add_parser("list", help="list keys and app tokens (never the secrets)")
    listing.add_argument("--workspace", help="only this workspace")
    listing.add_argument("--data-dir", **data_dir)
    listing.set_defaults(func=cmd_key_list)
    revoke = key_sub.add_parser("revoke", help="revoke a key or app token by id")
    revoke.add_argument("key_id")
    revoke.add_argument("--data-dir", **data_dir)
    revoke.set_defaults(func=cmd_key_revoke)

    app_token = sub.add_parser("app-token", help="mint an ingest app token; prints it once on stdout")
    app_token.add_argument("--workspace", required=True)
    app_token.add_argument("--data-dir", **data_dir)
    app_token.set_defaults(func=cmd_app_token)

    retain = sub.add_parser("retain-content", help="opt a workspace in to (or out of) keeping prompt content")
    retain.add_argument("state", choices=("on", "off"))
    retain.add_argument("--workspace", required=True)
    retain.add_argument("--data-dir", **data_dir)
    retain.set_defaults(func=cmd_retain_content)

    route = sub.add_parser("route", help="route configuration served to SDKs at /v1/config")
    route_sub = route.add_subparsers(dest="route_command", required=True)
    route_set = route_sub.add_parser("set", help="create or replace a route's description and config")
    route_set.add_argument("route")
    route_set.add_argument("--workspace", required=True)
    route_set.add_argument("--description")
    route_set.add_argument(
        "--config",
        help='JSON object, e.g. \'{"model": "gpt-4o-mini", "constraints": {"max_cost_usd": 0.01}}\'; its '
        "constraints (an object) and evaluation_contract are what metergraph_list_routes returns",
    )
    route_set.add_argument("--data-dir", **data_dir)
    route_set.set_defaults(func=cmd_route_set)

    classify = sub.add_parser(
        "classify", help="group a workspace's calls into workloads and save them (prints one JSON line each)"
    )
    classify.add_argument("--workspace", required=True)
    classify.add_argument("--days", type=int, choices=range(1, 91), default=30, metavar="1-90",
                          help="the window classified: today and the previous days (default 30)")  # fmt: skip
    classify.add_argument("--data-dir", **data_dir)
    classify.set_defaults(func=cmd_classify)
    report_cli.register(sub, data_dir)
    webhook_cli.register(sub, data_dir)

    bridge = subparsers.add_parser(
        "metergraph-mcp",
        help="stdio MCP bridge to a Metergraph endpoint (METERGRAPH_URL, METERGRAPH_AGENT_TOKEN)",
        description="A stdio MCP server that forwards each message to a running server's /v1/agent/mcp.",
        epilog="environment:\n" + BRIDGE_ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bridge.set_defaults(func=cmd_bridge)
