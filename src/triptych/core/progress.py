"""Progress bars on stderr for the CLI's long jobs: stdout keeps only what the command did."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class TableBars:
    """A ``core.transfer.Progress``: one bar per table, in turn. A table's bar closes when the next table
    starts, so a terminal shows one bar at a time (a copy of 32 tables once drew 32 bars over each other,
    with the summary inside one); ``close()`` closes the last. The counts are in the summary the command
    prints after, so a finished bar leaves no line behind."""

    def __init__(self) -> None:
        self._bar: Any = None
        self.tables = 0

    def __call__(self, table: str, total: int) -> Callable[[int], None]:
        from tqdm import tqdm  # imported on use: `triptych --help` stays quick

        self.close()
        self.tables += 1
        self._bar = tqdm(
            total=total,
            unit="row",
            desc=f"copying {table} (table {self.tables})",
            file=sys.stderr,
            leave=False,
        )
        update: Callable[[int], None] = self._bar.update
        return update

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
