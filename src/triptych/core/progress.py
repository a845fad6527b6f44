"""Progress bars on stderr for the CLI's long jobs: stdout keeps only what the command did."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class TableBars:
    """A ``core.transfer.Progress``: one bar per table a copy reaches; ``close()`` closes every bar."""

    def __init__(self) -> None:
        self._bars: list[Any] = []

    def __call__(self, table: str, total: int) -> Callable[[int], None]:
        from tqdm import tqdm  # imported on use: `triptych --help` stays quick

        bar = tqdm(total=total, unit="row", desc=f"copying {table}", file=sys.stderr)
        self._bars.append(bar)
        update: Callable[[int], None] = bar.update
        return update

    def close(self) -> None:
        for bar in self._bars:
            bar.close()
