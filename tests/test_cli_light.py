"""The CLI's parser is built without importing what the commands do (docs/decisions/0310): `triptych --help`
and every command's start, `serve` included, no longer pay for every surface's services, models and
engines. What a command runs is named (``core.commands.Later``) and imported when it runs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator

from triptych.cli import build_parser
from triptych.core.commands import Later

# Loaded by any command's work, never by declaring the arguments.
HEAVY = ("pydantic", "pydantic_settings", "mcp", "mcp_types", "numpy", "psycopg", "starlette", "httpx",
         "onnxruntime", "cryptography", "yaml", "metergraph_core", "uvicorn")  # fmt: skip


def commands(parser: argparse.ArgumentParser) -> Iterator[object]:
    yield parser.get_default("func")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from commands(sub)


def test_building_the_parser_imports_no_command_s_implementation() -> None:
    probe = (
        "import json, sys; from triptych.cli import build_parser; build_parser();"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       check=True, timeout=60).stdout)  # fmt: skip
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY]
    assert heavy == [], heavy
    # The surfaces contribute their argument declarations and constants, not their services or stores.
    ours = [m for m in loaded if m.startswith("triptych.")]
    assert not [m for m in ours if any(w in m for w in ("service", "store", "surface", "tools"))], ours


def test_every_command_named_for_later_exists() -> None:
    named = [func for func in commands(build_parser()) if isinstance(func, Later)]
    assert len(named) >= 20, len(named)  # the Hadron admin tree
    for command in named:
        assert callable(command.resolve()), f"{command.module}.{command.name}"


def test_the_constants_spelled_in_light_modules_match_their_sources() -> None:
    from triptych.hadron import cli as hadron_cli
    from triptych.hadron.sealing import ENV_KEY_FILE
    from triptych.metergraph import webhook_cli
    from triptych.metergraph.webhooks import DELIVERY_STATUSES

    assert hadron_cli.ENV_KEY_FILE == ENV_KEY_FILE
    assert webhook_cli.DELIVERY_STATUSES == DELIVERY_STATUSES


def test_the_team_admin_is_still_importable_from_the_hadron_cli() -> None:
    from triptych.hadron.cli import TeamAdmin
    from triptych.hadron.cli_commands import TeamAdmin as moved

    assert TeamAdmin is moved
