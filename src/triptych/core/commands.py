"""Commands of the ``triptych`` CLI whose code is imported only when they run.

Building the parser used to import every command's implementation, and with it each surface's services,
stores, pydantic models and engines: 1-2 s of CPU for ``triptych --help``, for every other command and
for every ``triptych serve`` start (docs/decisions/0310). The argument declarations stay in light modules;
each command names its function by module and name, and ``later`` imports it when the command runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
from collections.abc import Callable
from dataclasses import dataclass

Command = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Later:
    """The command ``module.name`` (a function of the parsed arguments returning the exit status),
    imported when it is called."""

    module: str
    name: str

    def resolve(self) -> Command:
        # As ``triptych serve`` builds its app (cli._app): no cyclic collection while the command's
        # modules import, and what they built frozen out of later passes.
        gc.disable()
        try:
            command: Command = getattr(importlib.import_module(self.module), self.name)
        finally:
            gc.freeze()
            gc.enable()
        return command

    def __call__(self, args: argparse.Namespace) -> int:
        return self.resolve()(args)


def later(module: str, name: str) -> Later:
    return Later(module, name)
