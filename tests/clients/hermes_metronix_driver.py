"""Drives the `hermes-memory-metronix` plugin, unchanged, the way a Hermes agent does; run by the Python of
``.venv-client-hermes-memory-metronix`` (never by Triptych's), so Triptych is not importable here.

The plugin is imported as the package it is: its ``__init__`` imports Hermes' own ``agent.memory_provider``,
which ``hermes-agent`` from the registry provides in that environment, so no stand-in runs. What this script
adds is the agent's side only: it builds the plugin's objects and calls their methods in the order given.

argv[1] is a JSON object: ``client`` (keyword arguments of ``metronix.client.MetronixClient``, or absent)
and ``steps``, a list of ``[target, method, kwargs]`` where target is ``client``, ``provider`` (the
``MetronixMemoryProvider`` the plugin registers, configured from the ``METRONIX_*`` environment like in
Hermes) or ``provider._client`` (the client the provider built). Prints one JSON object: ``results``, one
``{"ok": value}`` or ``{"error": name, "status": http status or null}`` per step, and ``warnings``, what the
plugin passed to its warning callback.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import metronix
import requests
from metronix.client import MetronixClient


def main() -> None:
    plan = json.loads(sys.argv[1])
    warnings: list[str] = []
    targets: dict[str, Any] = {}
    if "client" in plan:
        targets["client"] = MetronixClient(**plan["client"])
    provider = metronix.MetronixMemoryProvider()
    targets["provider"] = provider
    results: list[dict[str, Any]] = []
    for target, method, kwargs in plan["steps"]:
        if method == "initialize":  # Hermes hands the plugin a callback; the test reads what it received
            kwargs = {**kwargs, "warning_callback": warnings.append}
        obj = provider._client if target == "provider._client" else targets[target]
        try:
            results.append({"ok": getattr(obj, method)(**kwargs)})
        except requests.HTTPError as error:
            status = error.response.status_code if error.response is not None else None
            results.append({"error": type(error).__name__, "status": status})
    json.dump({"results": results, "warnings": warnings}, sys.stdout, default=str)


if __name__ == "__main__":
    main()
