"""``triptych metergraph report import FILE`` and ``triptych metergraph analysis cancel RUN_ID``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def _open(args: argparse.Namespace) -> Any:
    from triptych.core.config import load_settings
    from triptych.metergraph.service import Metergraph

    settings = load_settings(data_dir=getattr(args, "data_dir", None))
    return Metergraph.open(settings.data_dir, database_url=settings.database_url)


def cmd_report_import(args: argparse.Namespace) -> int:
    from triptych.metergraph.errors import MetergraphError

    try:
        raw = Path(args.file).read_bytes()
    except OSError as exc:
        print(f"triptych: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    mg = _open(args)
    try:
        result = mg.reports.import_artifact(args.workspace, raw, "cli_import")
    except MetergraphError as exc:
        print(f"triptych: {exc.message}", file=sys.stderr)
        return 2
    finally:
        mg.close()
    report = result["report"]
    verb = "imported" if result["created"] else "already imported (same bytes), nothing changed:"
    print(
        f"{verb} report {report['analysis_id']!r} into workspace {args.workspace!r}: outcome {report['outcome']}, "
        f"{sum(report['workloads'].values())} workload(s), {report['opportunities']} opportunity(ies), "
        f"{report['artifact']['bytes']} bytes, sha256 {report['artifact']['sha256']}",
        file=sys.stderr,
    )
    print(report["analysis_id"])
    return 0


def cmd_analysis_cancel(args: argparse.Namespace) -> int:
    mg = _open(args)
    try:
        asked = mg.analysis.cancel(args.workspace, args.run_id)
    finally:
        mg.close()
    if not asked:
        print(
            f"triptych: no queued or running analysis run {args.run_id} in {args.workspace!r}",
            file=sys.stderr,
        )
        return 1
    print(f"asked analysis run {args.run_id} to stop; it writes no report", file=sys.stderr)
    return 0


def register(sub: Any, data_dir: dict[str, Any]) -> None:
    report = sub.add_parser("report", help="report artifacts (analysis results)")
    report_sub = report.add_subparsers(dest="report_command", required=True)
    imp = report_sub.add_parser(
        "import", help="validate a report artifact (JSON, schema version 11) and store it in a workspace"
    )
    imp.add_argument("file", help="the artifact file, as downloaded from /v1/agent/reports/{id}/artifact")
    imp.add_argument("--workspace", required=True, help="the workspace that receives the report")
    imp.add_argument("--data-dir", **data_dir)
    imp.set_defaults(func=cmd_report_import)

    analysis = sub.add_parser("analysis", help="analysis runs")
    analysis_sub = analysis.add_subparsers(dest="analysis_command", required=True)
    cancel = analysis_sub.add_parser(
        "cancel", help="stop a queued or running analysis run (no report is written)"
    )
    cancel.add_argument("run_id")
    cancel.add_argument("--workspace", required=True)
    cancel.add_argument("--data-dir", **data_dir)
    cancel.set_defaults(func=cmd_analysis_cancel)
