"""The `hermes-memory-metronix` plugin, run unchanged in its own environment by tests/clients/hermes_metronix_driver.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from harness import client_python

DRIVER = Path(__file__).parent / "clients" / "hermes_metronix_driver.py"


def drive_hermes(
    steps: list[tuple[str, str, dict[str, Any]]],
    client: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each step's outcome (``{"ok": value}`` or ``{"error": name, "status": code}``) and the plugin's
    warnings. Only ``env`` configures the plugin: the caller's ``METRONIX_*`` variables are not passed on."""
    plan: dict[str, Any] = {"steps": steps, **({"client": client} if client is not None else {})}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("METRONIX_", "PYTHONPATH"))}
    done = subprocess.run(
        [str(client_python("hermes-memory-metronix")), str(DRIVER), json.dumps(plan)],
        capture_output=True, text=True, timeout=120, env={**base, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return out["results"], out["warnings"]
