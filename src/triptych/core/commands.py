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
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

Command = Callable[[argparse.Namespace], int]


@contextmanager
def uncollected_startup() -> Iterator[None]:
    """Python's cyclic collector off while a process imports and builds what it runs (``triptych serve`` its
    app, a command its modules): it ran full passes over a heap growing by a hundred thousand objects,
    0.2-0.3 s of a server start's CPU. What was built lives as long as the process, so it is frozen out of
    every later pass rather than collected (a collection costs ~0.2 s to free ~2 MB of import-time
    cycles); left unfrozen, the first passes after the import still walked all of it (0.15 s of an admin
    command)."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@dataclass(frozen=True)
class Later:
    """The command ``module.name`` (a function of the parsed arguments returning the exit status),
    imported when it is called."""

    module: str
    name: str

    def resolve(self) -> Command:
        module = sys.modules.get(self.module)
        if module is None:  # the first call in this process (tests also call commands in process)
            with uncollected_startup():
                module = importlib.import_module(self.module)
        command: Command = getattr(module, self.name)
        return command

    def __call__(self, args: argparse.Namespace) -> int:
        return self.resolve()(args)


def later(module: str, name: str) -> Later:
    return Later(module, name)
