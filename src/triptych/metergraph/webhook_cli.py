"""``triptych metergraph webhook add|list|remove|test|deliveries``: incident webhooks of a workspace."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

# webhooks.DELIVERY_STATUSES, spelled here: importing webhooks for one option's choices loads Metergraph's
# incident and HTTP machinery into every command (tests/test_cli_light.py keeps the two equal).
DELIVERY_STATUSES = ("pending", "delivered", "failed", "cancelled")


@contextmanager
def _webhooks(args: argparse.Namespace) -> Iterator[Any]:
    """The webhook service on the server's incident store: the data directory's incidents file, or the
    PostgreSQL database in server mode (no sender: the server sends)."""
    from triptych.core.config import load_settings
    from triptych.metergraph.control_stores import control_database, incident_store
    from triptych.metergraph.webhooks import WebhookService, load_webhook_settings

    settings = load_settings(data_dir=getattr(args, "data_dir", None))
    with control_database(settings.database_url) as pg:
        store = incident_store(settings.data_dir, pg)
        try:
            yield WebhookService(
                store.db, settings.data_dir, load_webhook_settings(), lambda: datetime.now(UTC)
            )
        finally:
            store.close()


def _guarded(command: Callable[[argparse.Namespace, Any], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from triptych.metergraph.errors import MetergraphError

        with _webhooks(args) as webhooks:
            try:
                return command(args, webhooks)
            except MetergraphError as exc:
                print(f"triptych: {exc.message}", file=sys.stderr)
                return 1 if exc.code == "not_found" else 2

    return run


def cmd_add(args: argparse.Namespace, webhooks: Any) -> int:
    endpoint, secret = webhooks.add(args.workspace, args.url, args.description)
    print(secret)
    print(
        f"added webhook {endpoint['id']} for workspace {args.workspace!r}: {args.url}\n"
        "the signing secret above is shown once (stored sealed); verify X-Metergraph-Signature with it",
        file=sys.stderr,
    )
    return 0


def cmd_list(args: argparse.Namespace, webhooks: Any) -> int:
    for endpoint in webhooks.endpoints(args.workspace):
        print(json.dumps(endpoint, sort_keys=True))
    return 0


def cmd_remove(args: argparse.Namespace, webhooks: Any) -> int:
    cancelled = webhooks.remove(args.endpoint_id)
    print(f"removed webhook {args.endpoint_id}; {cancelled} pending deliveries cancelled", file=sys.stderr)
    return 0


def cmd_test(args: argparse.Namespace, webhooks: Any) -> int:
    result = webhooks.test(args.endpoint_id)
    print(json.dumps(result, sort_keys=True))
    if result["error"] is not None:
        print(f"triptych: the test event was not accepted: {result['error']}", file=sys.stderr)
        return 1
    print(f"the receiver answered {result['status']} (delivery {result['delivery_id']})", file=sys.stderr)
    return 0


def cmd_deliveries(args: argparse.Namespace, webhooks: Any) -> int:
    for row in webhooks.deliveries(args.workspace, args.endpoint, args.status, args.limit):
        print(json.dumps(row, sort_keys=True))
    return 0


def register(sub: Any, data_dir: dict[str, Any]) -> None:
    """Adds ``webhook`` to ``triptych metergraph``."""
    hook = sub.add_parser("webhook", help="incident webhooks: endpoints that receive signed incident events")
    hook_sub = hook.add_subparsers(dest="webhook_command", required=True)
    add = hook_sub.add_parser("add", help="add an endpoint; prints its signing secret once on stdout")
    add.add_argument("url", help="https://... (or http:// on localhost, 127.0.0.1 or ::1)")
    add.add_argument("--workspace", required=True, help="the workspace whose incidents it receives")
    add.add_argument("--description")
    add.add_argument("--data-dir", **data_dir)
    add.set_defaults(func=_guarded(cmd_add))
    listing = hook_sub.add_parser("list", help="list endpoints (one JSON line each, never the secrets)")
    listing.add_argument("--workspace", help="only this workspace")
    listing.add_argument("--data-dir", **data_dir)
    listing.set_defaults(func=_guarded(cmd_list))
    remove = hook_sub.add_parser("remove", help="remove an endpoint; its pending deliveries are cancelled")
    remove.add_argument("endpoint_id")
    remove.add_argument("--data-dir", **data_dir)
    remove.set_defaults(func=_guarded(cmd_remove))
    test = hook_sub.add_parser("test", help="send a signed webhook.test event now and print the answer")
    test.add_argument("endpoint_id")
    test.add_argument("--data-dir", **data_dir)
    test.set_defaults(func=_guarded(cmd_test))
    deliveries = hook_sub.add_parser(
        "deliveries", help="recent deliveries, newest first: status, attempts, the receiver's last answer"
    )
    deliveries.add_argument("--workspace")
    deliveries.add_argument("--endpoint", help="only this endpoint id")
    deliveries.add_argument("--status", choices=DELIVERY_STATUSES)
    deliveries.add_argument("--limit", type=int, choices=range(1, 1001), default=50, metavar="1-1000")
    deliveries.add_argument("--data-dir", **data_dir)
    deliveries.set_defaults(func=_guarded(cmd_deliveries))
